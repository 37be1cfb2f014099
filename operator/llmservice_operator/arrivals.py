"""A wave of new services: many LLMServices created at once (a GitOps sync, a migration).

While a wave passes, a new service's first status write, and the Events that come with it,
waits: its objects are applied at once, and its status is written once the wave has passed
(QUIET_S without a new service), or FIRST_STATUS_HOLD_MAX_S after, whichever comes first.

Why: an LLMService's status write costs the API server more than a Deployment's
server-side apply (the CRD's schema and CEL rules run over the whole object, and a first
status is 3.5 KiB of conditions, sizing, cost and revision history). In a wave of 1,000 the
first status writes were a sixth of the API server's CPU, and kubectl's own creates of the
next services waited behind them; each was overwritten within a minute anyway, as the
service's pods started.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["FIRST_STATUS_HOLD_MAX_S", "QUIET_S", "WAVE_SERVICES", "WAVE_WINDOW_S", "Wave"]

#: This many new services ...
WAVE_SERVICES = 50
#: ... within this many seconds are a wave.
WAVE_WINDOW_S = 10.0
#: A wave has passed when no new service came for this long.
QUIET_S = 5.0
#: The longest a new service's first status waits, wave or not.
FIRST_STATUS_HOLD_MAX_S = 60.0


@dataclass
class Wave:
    """Counts new services (on the event loop); says from any thread whether a wave passes."""

    clock: Callable[[], float] = time.monotonic
    arrivals: deque[float] = field(default_factory=deque)
    #: Until when (``clock``'s time) the current wave lasts if no other service comes.
    until: float = -math.inf

    def arrived(self) -> None:
        now = self.clock()
        self.arrivals.append(now)
        while self.arrivals[0] < now - WAVE_WINDOW_S:
            self.arrivals.popleft()
        if len(self.arrivals) >= WAVE_SERVICES or self.active():
            self.until = now + QUIET_S

    def active(self) -> bool:
        # One float read: safe from the reconcile threads without a lock.
        return self.clock() < self.until

    def remaining_s(self) -> float:
        return max(0.0, self.until - self.clock())
