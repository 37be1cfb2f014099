"""Network I/O a reconcile needs, run off the reconcile workers.

Smoke tests (up to their timeout), analysis queries, pod scrapes and the autoscaler's
Prometheus queries run here, on threads of their own, each bounded by its own timeout. A
reconcile asks for a result; when it is not there yet the job starts (once), the reconcile
returns at once, and the service is reconciled again when the job is done (``notify``). So a
worker never waits on the network for longer than one API call, and one slow model load or dead
pod does not stall other services.

Each job runs in its *lane*, a pool of threads of its own (:data:`LANES`), so one kind of job
never waits behind another: pods that answer slowly (a tenant's) fill the ``pods`` or
``smoke`` lane at worst, slow PromQL of a tenant's the ``queries`` lane, while the
autoscaler's own Prometheus queries go on in theirs.

Two kinds of result:
- :meth:`BackgroundIO.take`: one service's own job (a smoke test, a measurement); its result
  is used once.
- :meth:`BackgroundIO.latest`: a result shared by every service (the autoscaler's batched
  Prometheus queries), reused while younger than ``max_age_s``; every service that asked while
  it was being fetched is notified.

``inline=True`` runs each job at once on the caller's thread (unit tests, tools).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

__all__ = ["LANES", "BackgroundIO", "Lane"]

log = logging.getLogger(__name__)

Key = tuple[str, str]
T = TypeVar("T")

Lane = Literal["prometheus", "queries", "pods", "smoke"]
#: Threads per lane (started as jobs come, up to this many). What a tenant writes (its PromQL)
#: or runs (its pods) is never in the lane of what every service waits for.
LANES: dict[Lane, int] = {
    # The autoscaler's batch, shared by every service: one job per vLLM version in use (four
    # queries, each at most 12 s).
    "prometheus": 2,
    # The tenants' PromQL: each distinct arrivalRateQuery, each rollout's analysis measurement
    # (a query per check), each query at most 12 s.
    "queries": 3,
    # Pod scrapes: one job per service (metricsSource: pods), each at most 10 s. Eight, as the
    # single pool had.
    "pods": 8,
    # Smoke tests: one per candidate, up to 3 requests of its spec's timeoutSeconds (at most an
    # hour): apart from the scrapes, which they would otherwise keep waiting that long.
    "smoke": 4,
}


@dataclass
class _Shared:
    value: Any = None
    finished: float = float("-inf")
    running: bool = False
    waiters: set[Key] = field(default_factory=set)


class BackgroundIO:
    def __init__(
        self,
        notify: Callable[[Key], None] = lambda _key: None,
        *,
        lanes: dict[Lane, int] | None = None,  # threads per lane, instead of LANES'.
        inline: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._notify = notify
        self._inline = inline
        self._clock = clock
        self._lock = threading.Lock()
        self._done: dict[tuple[Key, Hashable], Any] = {}
        self._running: set[tuple[Key, Hashable]] = set()
        self._shared: dict[Hashable, _Shared] = {}
        sizes: dict[Lane, int] = {} if inline else {**LANES, **(lanes or {})}
        self._pools = {
            lane: ThreadPoolExecutor(workers, f"background-{lane}")
            for lane, workers in sizes.items()
        }

    def set_notify(self, notify: Callable[[Key], None]) -> None:
        self._notify = notify

    def take(
        self, key: Key, job: Hashable, run: Callable[[], T], lane: Lane
    ) -> tuple[bool, T | None]:
        """(True, result) when ``job`` of ``key`` is done (the result is handed over once);
        else (False, None), and the job runs in ``lane`` if it is not running yet."""
        slot = (key, job)
        with self._lock:
            if slot in self._done:
                return True, self._done.pop(slot)
            if slot in self._running:
                return False, None
            self._running.add(slot)
        if self._inline:
            value = run()
            with self._lock:
                self._running.discard(slot)
            return True, value
        self._pools[lane].submit(run).add_done_callback(lambda f: self._finish(slot, f))
        return False, None

    def pending(self, key: Key) -> bool:
        """A job of ``key`` is running or done and not yet taken."""
        with self._lock:
            return any(k == key for k, _ in self._running) or any(k == key for k, _ in self._done)

    def _finish(self, slot: tuple[Key, Hashable], future: Future[Any]) -> None:
        try:
            value = future.result()
        except Exception as err:  # noqa: BLE001 - handed to the reconcile as its result
            log.warning("background job %s of %s/%s failed: %s", slot[1], *slot[0], err)
            value = err
        with self._lock:
            self._running.discard(slot)
            self._done[slot] = value
        self._notify(slot[0])

    def latest(
        self, job: Hashable, run: Callable[[], T], max_age_s: float, waiter: Key, lane: Lane
    ) -> T | None:
        """The shared result of ``job`` when it is younger than ``max_age_s``; else None, the
        job starts in ``lane`` if it is not running, and ``waiter`` is notified when it is
        done."""
        with self._lock:
            shared = self._shared.setdefault(job, _Shared())
            if self._clock() - shared.finished <= max_age_s:
                return shared.value  # type: ignore[no-any-return]
            shared.waiters.add(waiter)
            if shared.running:
                return None
            shared.running = True
        if self._inline:
            self._finish_shared(job, run())
            return self.latest(job, run, max_age_s, waiter, lane)

        def fetch() -> None:
            try:
                value: Any = run()
            except Exception as err:  # noqa: BLE001 - a failed fetch is an answer too
                log.warning("background job %s failed: %s", job, err)
                value = err
            self._finish_shared(job, value)

        self._pools[lane].submit(fetch)
        return None

    def _finish_shared(self, job: Hashable, value: Any) -> None:
        with self._lock:
            shared = self._shared[job]
            shared.value, shared.finished, shared.running = value, self._clock(), False
            waiters, shared.waiters = shared.waiters, set()
        for waiter in waiters:
            self._notify(waiter)

    def shutdown(self) -> None:
        for pool in self._pools.values():
            pool.shutdown(wait=False, cancel_futures=True)
