"""Where one reconcile's time went: wall seconds per step, and the seconds its thread ran.

A slow reconcile is logged with these (handlers.SLOW_RECONCILE_S): a step that took long
with little time on the CPU waited on the API server, or on the GIL while other threads ran.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

__all__ = ["Laps"]


@dataclass
class Laps:
    """Started at creation, on the thread that runs the steps (``thread_time`` is per thread)."""

    steps: list[tuple[str, float]] = field(default_factory=list)
    cpu_seconds: float = 0.0
    _last: float = field(default_factory=time.monotonic)
    _cpu_started: float = field(default_factory=time.thread_time)

    def lap(self, step: str) -> None:
        """``step`` ended now."""
        moment = time.monotonic()
        self.steps.append((step, moment - self._last))
        self._last = moment

    def stop(self) -> None:
        """The last step ended: count the thread's CPU seconds (a system call, about 2 us on
        the development VM, so once per reconcile rather than per step)."""
        self.cpu_seconds = time.thread_time() - self._cpu_started

    def __str__(self) -> str:
        spent = ", ".join(f"{step} {seconds:.2f}s" for step, seconds in self.steps)
        return f"{spent}; {self.cpu_seconds:.2f}s on the CPU"
