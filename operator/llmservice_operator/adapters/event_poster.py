"""A reconcile's Events, posted on a thread of their own so that no worker waits for them.

client-go's recorders work the same way: ``Eventf`` stamps the Event and hands it to the
broadcaster's goroutine, whose queue holds 1,000 and drops what does not fit. Here one thread
posts them in the order they were handed over. A new service has three Events (Sized,
Available, and a warning while its metrics are missing), so posting them on the worker made a
thousand services applied at once wait for about 3,000 requests to a busy API server. An Event
the API server refuses, or one that does not fit in the queue, is logged and dropped: Events are
a record for people, never state the operator reads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from ..events import Event

__all__ = ["MAX_PENDING", "EventPoster", "PostEvent"]

log = logging.getLogger(__name__)

#: (the object, type, reason, message, when it happened): KubeAdapter.post_event.
PostEvent = Callable[[dict[str, Any], str, str, str, datetime], None]
#: Events handed over and not posted yet, at most (client-go's maxQueuedEvents).
MAX_PENDING = 1000


class EventPoster:
    def __init__(
        self,
        post: PostEvent,
        *,
        inline: bool = False,
        max_pending: int = MAX_PENDING,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._post = post
        self._clock = clock
        self._pool = None if inline else ThreadPoolExecutor(1, "events")
        self._max_pending = max_pending
        self._pending = 0
        self._dropped = 0
        self._lock = threading.Lock()

    def post(self, obj: dict[str, Any], events: Sequence[Event]) -> None:
        """Post ``events`` about ``obj`` soon, in order, stamped now; returns at once
        (``inline``: posts them now)."""
        meta = obj.get("metadata") or {}
        # Only what an Event names: the queue must not keep whole objects alive.
        ref = {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "metadata": {k: meta.get(k) for k in ("name", "namespace", "uid")},
        }
        at = self._clock()
        for event in events:
            if self._pool is None:
                self._post_one(ref, event, at)
                continue
            with self._lock:
                full = self._pending >= self._max_pending
                if full:
                    self._dropped += 1
                else:
                    self._pending += 1
            if full:
                if self._dropped % 100 == 1:
                    log.warning("%d Events wait to be posted: %s dropped (%d so far)",
                                self._max_pending, event.reason, self._dropped)  # fmt: skip
                continue
            self._pool.submit(self._post_queued, ref, event, at)

    def _post_queued(self, ref: dict[str, Any], event: Event, at: datetime) -> None:
        try:
            self._post_one(ref, event, at)
        finally:
            with self._lock:
                self._pending -= 1

    def _post_one(self, ref: dict[str, Any], event: Event, at: datetime) -> None:
        try:
            self._post(ref, event.type, event.reason, event.message, at)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as err:
            meta = ref["metadata"]
            log.warning("%s/%s: Event %s not posted: %s", meta.get("namespace"), meta.get("name"),
                        event.reason, err)  # fmt: skip

    def shutdown(self) -> None:
        """Post what was handed over, then stop."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
