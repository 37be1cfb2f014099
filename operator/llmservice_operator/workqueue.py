"""The operator's work queue: each key at most once, the most urgent first.

A thousand services applied at once would otherwise wait behind the reconciles their own
first Deployments cause (pods turning Ready, status to write): a service whose spec has not
been acted on yet (``metadata.generation`` ahead of ``status.observedGeneration``) goes first.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from typing import Any

__all__ = ["SPEC_CHANGED", "ROUTINE", "WorkQueue", "priority_of"]

Key = tuple[str, str]

#: A spec not acted on yet: the user waits for it.
SPEC_CHANGED = 0
#: Everything else: an owned object or pod changed, a due time, the resync.
ROUTINE = 1


def priority_of(body: dict[str, Any] | None) -> int:
    if body is None:
        return ROUTINE
    generation = (body.get("metadata") or {}).get("generation")
    observed = (body.get("status") or {}).get("observedGeneration")
    return SPEC_CHANGED if generation is not None and generation != observed else ROUTINE


class WorkQueue:
    """Keys waiting for a worker. A key put again while it waits keeps its place, unless it
    is now more urgent: then it moves up (its old entry is dropped when reached)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: asyncio.PriorityQueue[tuple[int, int, Key]] = asyncio.PriorityQueue()
        self._waiting: dict[Key, int] = {}
        #: When each waiting key was first put (moving up keeps it): its time in the queue.
        self._since: dict[Key, float] = {}
        self._clock = clock
        self._order = itertools.count()

    def __contains__(self, key: object) -> bool:
        return key in self._waiting

    def __len__(self) -> int:
        return len(self._waiting)

    def put(self, key: Key, priority: int = ROUTINE) -> None:
        waiting = self._waiting.get(key)
        if waiting is not None and waiting <= priority:
            return
        self._waiting[key] = priority
        self._since.setdefault(key, self._clock())
        self._entries.put_nowait((priority, next(self._order), key))

    async def get(self) -> Key:
        key, _ = await self.get_timed()
        return key

    async def get_timed(self) -> tuple[Key, float]:
        """The next key and the seconds it waited since it was put."""
        while True:
            _, _, key = await self._entries.get()
            waited = self._take(key)
            if waited is not None:
                return key, waited

    def get_nowait(self) -> Key:
        """The next key; raises asyncio.QueueEmpty when none waits."""
        while True:
            _, _, key = self._entries.get_nowait()
            if self._take(key) is not None:
                return key

    def _take(self, key: Key) -> float | None:
        """Seconds ``key`` waited, or None for an entry left behind when its key moved up: that
        key was taken through the more urgent entry, which sorts first (if the key is waiting
        again, serving it now is fine)."""
        if self._waiting.pop(key, None) is None:
            return None
        return self._clock() - self._since.pop(key)
