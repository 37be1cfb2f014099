"""The operator's work queue: each key at most once, the most urgent first.

A thousand services applied at once would otherwise wait behind the reconciles their own
first Deployments cause (pods turning Ready, status to write): a service whose spec has not
been acted on yet (``metadata.generation`` ahead of ``status.observedGeneration``) goes first.
"""

from __future__ import annotations

import asyncio
import itertools
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

    def __init__(self) -> None:
        self._entries: asyncio.PriorityQueue[tuple[int, int, Key]] = asyncio.PriorityQueue()
        self._waiting: dict[Key, int] = {}
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
        self._entries.put_nowait((priority, next(self._order), key))

    async def get(self) -> Key:
        while True:
            _, _, key = await self._entries.get()
            if self._take(key):
                return key

    def get_nowait(self) -> Key:
        """The next key; raises asyncio.QueueEmpty when none waits."""
        while True:
            _, _, key = self._entries.get_nowait()
            if self._take(key):
                return key

    def _take(self, key: Key) -> bool:
        # An entry left behind when its key moved up: that key was taken through the more
        # urgent entry, which sorts first; if the key is waiting again, serving it now is fine.
        return self._waiting.pop(key, None) is not None
