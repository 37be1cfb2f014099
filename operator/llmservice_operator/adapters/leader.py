"""Leader election on a coordination.k8s.io Lease, with client-go's semantics: of N operator
replicas one acts, and two never act at once (durations: lease_timing.py).

- **Expiry from what this process saw.** A standby never compares the holder's ``renewTime``
  with its own clock (skew between nodes would take a live leader's Lease). It notes when it
  last *observed the record change* (a monotonic clock) and takes the Lease only after seeing
  no change for the record's ``leaseDurationSeconds``.
- **The leader stops first.** The leader acts only until ``renewDeadline`` after it *sent* its
  last successful renewal. Every standby saw that renewal at or after it was sent, and waits
  ``leaseDuration > renewDeadline`` from then: none takes the Lease while the leader acts.
  The difference covers clock-rate drift and a reconcile in flight.
- **Every failure counts.** Any exception of a Lease call (an API error, a refused or reset
  connection, a timeout) is logged and is a failed try; every call has a request timeout.
- **Fencing.** ``is_leading(now)`` is true only while that deadline is ahead. The work queue
  asks before each reconcile, and the reconcile's writes ask again (adapters/fence.py).
- **Losing the Lease ends the process.** A watchdog thread, apart from the renewing one (so a
  call stuck past its timeout cannot hold it up), calls ``on_lost`` at the deadline; the
  renewing thread does too when a try fails past it, or finds another holder.

A leader that stops cleanly ``release()``s the Lease, so a standby takes over at its next try.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from kubernetes import client

from ..lease_timing import ACQUIRE_JITTER, RENEW_JITTER, LeaseTiming, jittered

__all__ = ["LeaseApi", "LeaseElector"]

log = logging.getLogger(__name__)

#: Tries of a release that meets a conflict (a renewal in flight bumped the resourceVersion).
RELEASE_TRIES = 3


class LeaseApi(Protocol):
    """The Lease calls the elector makes (``kubernetes.client.CoordinationV1Api``'s)."""

    def read_namespaced_lease(self, name: str, namespace: str, **kwargs: Any) -> Any: ...
    def create_namespaced_lease(self, namespace: str, body: Any, **kwargs: Any) -> Any: ...
    def replace_namespaced_lease(
        self, name: str, namespace: str, body: Any, **kwargs: Any
    ) -> Any: ...


@dataclass(frozen=True)
class _Record:
    """What a Lease says; any change of it restarts a standby's wait."""

    holder: str
    acquired: datetime | None
    renewed: datetime | None
    duration_s: int | None
    transitions: int

    @classmethod
    def of(cls, spec: Any) -> _Record:
        if spec is None:
            return cls("", None, None, None, 0)
        return cls(
            spec.holder_identity or "",
            spec.acquire_time,
            spec.renew_time,
            spec.lease_duration_seconds,
            spec.lease_transitions or 0,
        )


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _exit() -> None:
    os._exit(1)


def _why(err: BaseException) -> str:
    if isinstance(err, client.ApiException):
        return f"{err.status} {err.reason}"
    return f"{type(err).__name__}: {err}"


def _conflict(err: Exception) -> bool:
    return isinstance(err, client.ApiException) and err.status == 409


class LeaseElector:
    def __init__(
        self,
        api: LeaseApi,
        name: str,
        namespace: str,
        identity: str,
        timing: LeaseTiming | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = _utc_now,
        on_lost: Callable[[], None] = _exit,
        uniform: Callable[[], float] = random.random,
        sleep: Callable[[float], object] | None = None,
    ) -> None:
        """``clock`` times expiry and the deadline (monotonic); ``wall`` only stamps the
        record for people to read; ``on_lost`` runs once when the Lease is lost (default: the
        process exits 1); ``sleep`` waits between tries (default: until ``release()``)."""
        self._api = api
        self._name = name
        self._namespace = namespace
        self.identity = identity
        self._timing = timing or LeaseTiming()
        self._clock = clock
        self._wall = wall
        self._on_lost = on_lost
        self._uniform = uniform
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._lock = threading.Lock()
        self._observed: _Record | None = None
        self._observed_at = 0.0
        #: When (``clock``) the last successful write of ours was sent; None: never led.
        self._renewed_at: float | None = None
        #: No longer acting, for good: the Lease was lost or released.
        self._done = False
        #: The Lease as our last write left it: the next renewal replaces it in one call.
        self._last: Any = None
        self._threads: list[threading.Thread] = []

    @property
    def _where(self) -> str:
        return f"{self._namespace}/{self._name}"

    @property
    def _timeout(self) -> float:
        return self._timing.request_timeout_s

    # ------------------------------------------------------------------ the fence
    def is_leading(self, now: float) -> bool:
        """True only while ``now`` (``clock``) is before the deadline: ``renewDeadline`` after
        the last successful renewal was sent; never again once lost or released."""
        with self._lock:
            return (
                not self._done
                and self._renewed_at is not None
                and now < self._renewed_at + self._timing.renew_deadline_s
            )

    def leading(self) -> bool:
        """``is_leading`` now."""
        return self.is_leading(self._clock())

    # ------------------------------------------------------------------ one try
    def try_acquire_or_renew(self) -> bool:
        """One try to take or keep the Lease; True when this process holds it now. Whatever
        fails (an API error, a connection error, a timeout) is logged, and is a False."""
        try:
            return self._try()
        except Exception as err:  # noqa: BLE001 - every failure of a Lease call is a failed try
            self._last = None
            log.warning("lease %s: try failed: %s", self._where, _why(err))
            return False

    def _try(self) -> bool:
        if self._last is not None and self.leading():
            try:
                return self._replace(self._last, _Record.of(self._last.spec))
            except client.ApiException as err:
                self._last = None
                if not _conflict(err):
                    raise
                # Changed since our last write: read it (below).
        try:
            lease = self._api.read_namespaced_lease(
                self._name, self._namespace, _request_timeout=self._timeout
            )
        except client.ApiException as err:
            if err.status != 404:
                raise
            return self._create()
        record = _Record.of(lease.spec)
        now = self._observe(record)
        if record.holder not in ("", self.identity):
            if self._renewed_at is not None:  # we led, and someone else holds it now
                self._lose(f"held by {record.holder}")
                return False
            if not self._expired(now):
                return False
        try:
            return self._replace(lease, record)
        except client.ApiException as err:
            if _conflict(err):
                return False  # another replica wrote first
            raise

    def _observe(self, record: _Record) -> float:
        """Note ``record``; a change restarts the wait. Now, by ``clock``."""
        now = self._clock()
        with self._lock:
            if record != self._observed:
                self._observed = record
                self._observed_at = now
        return now

    def _expired(self, now: float) -> bool:
        """No change observed for the record's lease duration (ours if it says none)."""
        with self._lock:
            record, seen = self._observed, self._observed_at
        duration = (record.duration_s if record else None) or self._timing.written_duration_s
        return now >= seen + max(1, duration)

    def _replace(self, lease: Any, record: _Record | None) -> bool:
        """Write ``lease`` as held by us now (``resourceVersion`` makes it a compare-and-swap).
        Raises what the API server answers."""
        stamp = self._wall()
        spec = lease.spec or client.V1LeaseSpec()
        lease.spec = spec
        if record is None or record.holder != self.identity:
            spec.acquire_time = stamp
            spec.lease_transitions = (record.transitions + 1) if record else 0
        spec.holder_identity = self.identity
        spec.renew_time = stamp
        spec.lease_duration_seconds = self._timing.written_duration_s
        sent = self._clock()
        written = self._api.replace_namespaced_lease(
            self._name, self._namespace, lease, _request_timeout=self._timeout
        )
        self._wrote(written, sent)
        return True

    def _create(self) -> bool:
        stamp = self._wall()
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=self._name, namespace=self._namespace),
            spec=client.V1LeaseSpec(
                holder_identity=self.identity,
                lease_duration_seconds=self._timing.written_duration_s,
                acquire_time=stamp,
                renew_time=stamp,
                lease_transitions=0,
            ),
        )
        sent = self._clock()
        try:
            written = self._api.create_namespaced_lease(
                self._namespace, body, _request_timeout=self._timeout
            )
        except client.ApiException as err:
            if _conflict(err):
                return False  # another replica created it first
            raise
        self._wrote(written, sent)
        return True

    def _wrote(self, written: Any, sent: float) -> None:
        """Our write took: we lead until ``renewDeadline`` after it was ``sent``."""
        with self._lock:
            if self._done:
                return
            self._renewed_at = sent if self._renewed_at is None else max(self._renewed_at, sent)
            self._observed = _Record.of(written.spec)
            self._observed_at = self._clock()
        self._last = written

    # ------------------------------------------------------------------ the loops
    def acquire(self, on_try: Callable[[], None] = lambda: None) -> None:
        """Block until this process holds the Lease; ``on_try`` runs after every try (the
        standby's heartbeat)."""
        announced = False
        while not self.try_acquire_or_renew():
            on_try()
            if not announced:
                log.info("standing by: lease %s held by another replica", self._where)
                announced = True
            self._sleep(jittered(self._timing.retry_period_s, ACQUIRE_JITTER, self._uniform()))
        on_try()
        log.info("acquired lease %s as %s", self._where, self.identity)

    def keep_renewing(self) -> list[threading.Thread]:
        """Start renewing every ``retryPeriod``, and the watchdog that ends leadership at the
        deadline whatever the renewing thread is doing."""
        self._threads = [
            threading.Thread(target=self.renew_loop, name="lease-renewal", daemon=True),
            threading.Thread(target=self.watch_loop, name="lease-watchdog", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return self._threads

    def _stopping(self) -> bool:
        with self._lock:
            return self._done or self._stop.is_set()

    def renew_loop(self) -> None:
        """Renew until the Lease is lost or released; a try that fails past the deadline
        loses it."""
        while not self._stopping():
            self._sleep(jittered(self._timing.retry_period_s, RENEW_JITTER, self._uniform()))
            if self._stopping():
                return
            if not self.try_acquire_or_renew() and not self.leading():
                self._lose(f"not renewed for {self._timing.renew_deadline_s:g}s")

    def watch_loop(self) -> None:
        """Lose the Lease once the deadline passes without a renewal."""
        while not self._stopping():
            with self._lock:
                renewed_at = self._renewed_at
            if renewed_at is None:
                self._lose("never acquired")
                return
            left = renewed_at + self._timing.renew_deadline_s - self._clock()
            if left <= 0:
                self._lose(f"not renewed for {self._timing.renew_deadline_s:g}s")
                return
            self._sleep(left)

    def _lose(self, why: str) -> None:
        """Stop acting (the fence closes first), then ``on_lost`` (the process exits)."""
        with self._lock:
            if self._done:
                return
            self._done = True
        self._stop.set()
        log.error("lost lease %s (%s): no longer acting; exiting", self._where, why)
        self._on_lost()

    # ------------------------------------------------------------------ a clean stop
    def release(self) -> bool:
        """Stop acting and give the Lease up if we hold it (a clean stop), so that a standby
        takes it at its next try; True when it was ours."""
        with self._lock:
            self._done = True
        self._stop.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=2 * self._timeout)  # a renewal in flight lands first
        for _ in range(RELEASE_TRIES):
            try:
                return self._release_once()
            except Exception as err:  # noqa: BLE001 - a failed release only delays a standby
                if _conflict(err):
                    continue
                log.warning("could not release lease %s: %s", self._where, _why(err))
                return False
        log.warning("could not release lease %s: it kept changing", self._where)
        return False

    def _release_once(self) -> bool:
        lease = self._api.read_namespaced_lease(
            self._name, self._namespace, _request_timeout=self._timeout
        )
        spec = lease.spec
        if spec is None or spec.holder_identity != self.identity:
            return False
        stamp = self._wall()
        spec.holder_identity = None
        spec.lease_duration_seconds = 1
        spec.renew_time = stamp
        spec.acquire_time = stamp
        self._api.replace_namespaced_lease(
            self._name, self._namespace, lease, _request_timeout=self._timeout
        )
        log.info("released lease %s", self._where)
        return True
