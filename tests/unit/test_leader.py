"""Leader election with client-go's semantics (adapters/leader.py), on a fake clock and a fake
Lease API: expiry timed from observed changes, a renew deadline shorter than the lease, every
failure a failed renewal, request timeouts, jittered tries, and a clean release."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import urllib3
from kubernetes import client

from llmservice_operator.adapters.leader import LeaseElector
from llmservice_operator.lease_timing import LeaseTiming, jittered

NAME, NAMESPACE = "llmservice-operator", "ops"
TIMING = LeaseTiming(15.0, 10.0, 2.0)
EPOCH = datetime(2025, 1, 1, tzinfo=UTC)


class Clock:
    """A monotonic clock that moves only when told (``sleep``)."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def _copy(lease: client.V1Lease) -> client.V1Lease:
    spec = lease.spec
    return client.V1Lease(
        metadata=client.V1ObjectMeta(
            name=lease.metadata.name,
            namespace=lease.metadata.namespace,
            resource_version=lease.metadata.resource_version,
        ),
        spec=client.V1LeaseSpec(
            holder_identity=spec.holder_identity,
            acquire_time=spec.acquire_time,
            renew_time=spec.renew_time,
            lease_duration_seconds=spec.lease_duration_seconds,
            lease_transitions=spec.lease_transitions,
        ),
    )


class FakeLeaseApi:
    """One Lease, with the API server's compare-and-swap on resourceVersion. ``failing``: the
    exception every call raises meanwhile (a connection error, an API error)."""

    def __init__(self) -> None:
        self.lease: client.V1Lease | None = None
        self.version = 0
        self.failing: Exception | None = None
        self.calls: list[tuple[str, dict[str, Any]]] = []
        #: How long each call takes, on ``caller``'s clock.
        self.latency = 0.0
        self.caller: Clock | None = None

    def _call(self, method: str, kwargs: dict[str, Any]) -> None:
        self.calls.append((method, kwargs))
        if self.caller is not None:
            self.caller.sleep(self.latency)
        if self.failing is not None:
            raise self.failing

    def _store(self, body: client.V1Lease) -> client.V1Lease:
        self.version += 1
        self.lease = _copy(body)
        self.lease.metadata.resource_version = str(self.version)
        return _copy(self.lease)

    def read_namespaced_lease(self, name: str, namespace: str, **kwargs: Any) -> client.V1Lease:
        self._call("read", kwargs)
        if self.lease is None:
            raise client.ApiException(status=404, reason="Not Found")
        return _copy(self.lease)

    def create_namespaced_lease(
        self, namespace: str, body: client.V1Lease, **kwargs: Any
    ) -> client.V1Lease:
        self._call("create", kwargs)
        if self.lease is not None:
            raise client.ApiException(status=409, reason="AlreadyExists")
        return self._store(body)

    def replace_namespaced_lease(
        self, name: str, namespace: str, body: client.V1Lease, **kwargs: Any
    ) -> client.V1Lease:
        self._call("replace", kwargs)
        assert self.lease is not None
        if body.metadata.resource_version != self.lease.metadata.resource_version:
            raise client.ApiException(status=409, reason="Conflict")
        return self._store(body)

    @property
    def holder(self) -> str | None:
        return self.lease.spec.holder_identity if self.lease else None


class Replica:
    """An elector on its own clock; ``skew``: how far its wall clock is off."""

    def __init__(
        self,
        api: FakeLeaseApi,
        identity: str,
        clock: Clock | None = None,
        skew: timedelta = timedelta(0),
        uniform: float = 0.0,
    ) -> None:
        self.clock = clock or Clock()
        self.lost_at: list[float] = []
        self.elector = LeaseElector(
            api,
            NAME,
            NAMESPACE,
            identity,
            TIMING,
            clock=self.clock,
            wall=lambda: EPOCH + skew + timedelta(seconds=self.clock.t),
            on_lost=lambda: self.lost_at.append(self.clock.t),
            uniform=lambda: uniform,
            sleep=self.clock.sleep,
        )

    def leading(self) -> bool:
        return self.elector.is_leading(self.clock.t)


CONNECTION_ERRORS = [
    urllib3.exceptions.MaxRetryError(None, "/apis/coordination.k8s.io", "connection refused"),
    urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104, "reset")),
    TimeoutError("timed out"),
    client.ApiException(status=503, reason="Service Unavailable"),
]


@pytest.mark.parametrize("error", CONNECTION_ERRORS, ids=lambda e: type(e).__name__)
def test_a_failed_renewal_of_any_kind_is_counted_and_the_leader_stops_at_its_deadline(
    error: Exception,
) -> None:
    api = FakeLeaseApi()
    leader = Replica(api, "a")
    assert leader.elector.try_acquire_or_renew()
    api.failing = error  # the API server restarts: every call fails from now on
    leader.elector.renew_loop()  # tries at 2, 4, ... s (no jitter drawn); returns once lost
    assert leader.lost_at == [TIMING.renew_deadline_s]
    assert not leader.leading()
    # A standby that saw the last renewal (at 0) may take the Lease only at 15 s: 5 s later.
    assert leader.lost_at[0] <= TIMING.lease_duration_s - 5


def test_a_renewal_that_fails_and_then_succeeds_before_the_deadline_keeps_leading() -> None:
    api = FakeLeaseApi()
    leader = Replica(api, "a")
    assert leader.elector.try_acquire_or_renew()
    api.failing = CONNECTION_ERRORS[0]
    for _ in range(4):  # 2, 4, 6, 8 s: failed
        leader.clock.sleep(2)
        assert not leader.elector.try_acquire_or_renew()
    assert leader.leading()
    api.failing = None
    leader.clock.sleep(1)  # 9 s: renewed, leading until 19 s
    assert leader.elector.try_acquire_or_renew()
    leader.clock.sleep(9.9)
    assert leader.leading()
    assert leader.lost_at == []


def test_the_deadline_is_timed_from_when_the_renewal_was_sent_not_answered() -> None:
    """A standby may see the renewal as soon as it was sent (the server wrote it then)."""
    api = FakeLeaseApi()
    leader = Replica(api, "a")
    api.caller, api.latency = leader.clock, 3.0
    assert leader.elector.try_acquire_or_renew()  # sent at 3 (after the read), answered at 6
    assert leader.clock.t == 6.0
    leader.clock.t = 12.9
    assert leader.leading()
    leader.clock.t = 13.0
    assert not leader.leading()


def test_the_watchdog_ends_leadership_at_the_deadline_while_a_renewal_hangs() -> None:
    api = FakeLeaseApi()
    leader = Replica(api, "a")
    leader.clock.t = 100.0
    assert leader.elector.try_acquire_or_renew()
    leader.elector.watch_loop()  # nothing renews (the renewing thread is stuck in a call)
    assert leader.lost_at == [100.0 + TIMING.renew_deadline_s]
    assert not leader.leading()


def test_a_watchdog_that_sees_renewals_sleeps_until_the_new_deadline() -> None:
    api = FakeLeaseApi()
    leader = Replica(api, "a")
    assert leader.elector.try_acquire_or_renew()
    renewals = 2

    def sleep(seconds: float) -> None:  # the renewing thread renews halfway through each sleep
        nonlocal renewals
        start = leader.clock.t
        if renewals:
            renewals -= 1
            leader.clock.t = start + seconds / 2
            assert leader.elector.try_acquire_or_renew()
        leader.clock.t = start + seconds

    leader.elector._sleep = sleep
    leader.elector.watch_loop()  # renewed at 5 (woke at 10), at 12.5 (woke at 15), then not
    assert leader.lost_at == [12.5 + TIMING.renew_deadline_s]


@pytest.mark.parametrize(
    "skew", [timedelta(hours=-1), timedelta(hours=1), timedelta(0)], ids=["past", "future", "none"]
)
def test_a_standby_times_expiry_from_when_it_saw_the_record_change(skew: timedelta) -> None:
    """The holder's renewTime, an hour behind or ahead of the standby's clock, is not read:
    the standby waits a whole lease from the last change it saw."""
    api = FakeLeaseApi()
    leader = Replica(api, "a", skew=skew)
    standby = Replica(api, "b")
    assert leader.elector.try_acquire_or_renew()
    assert not standby.elector.try_acquire_or_renew()  # seen at 0: expires at 15
    standby.clock.t = 10.0
    leader.clock.t = 10.0
    assert leader.elector.try_acquire_or_renew()  # a change: the wait starts again
    assert not standby.elector.try_acquire_or_renew()  # seen at 10: expires at 25
    standby.clock.t = 24.9
    assert not standby.elector.try_acquire_or_renew()
    assert api.holder == "a"
    standby.clock.t = 25.0
    assert standby.elector.try_acquire_or_renew()
    assert api.holder == "b"
    assert api.lease is not None and api.lease.spec.lease_transitions == 1


def test_a_standby_started_late_waits_a_whole_lease_whatever_renew_time_says() -> None:
    api = FakeLeaseApi()
    dead = Replica(api, "a", skew=timedelta(days=-30))  # renewed "a month ago", then died
    assert dead.elector.try_acquire_or_renew()
    standby = Replica(api, "b", clock=Clock(1000.0))
    assert not standby.elector.try_acquire_or_renew()
    standby.clock.t = 1014.0
    assert not standby.elector.try_acquire_or_renew()
    standby.clock.t = 1015.0
    assert standby.elector.try_acquire_or_renew()


def test_the_leader_stops_acting_before_any_standby_can_take_the_lease() -> None:
    """One shared clock (rates equal); the standby polls every second and sees the leader's
    last renewal the instant it is sent: the soonest it could take the Lease."""
    api = FakeLeaseApi()
    clock = Clock()
    leader = Replica(api, "a", clock=clock)
    standby = Replica(api, "b", clock=clock)
    assert leader.elector.try_acquire_or_renew()
    clock.t = 4.0
    assert leader.elector.try_acquire_or_renew()  # the last renewal that took
    assert not standby.elector.try_acquire_or_renew()  # seen at 4.0
    last_leading = taken = None
    while taken is None:
        clock.sleep(0.25)
        if leader.leading():
            last_leading = clock.t
        if standby.elector.try_acquire_or_renew():
            taken = clock.t
    assert last_leading is not None
    assert taken == 4.0 + TIMING.lease_duration_s
    assert taken - last_leading >= TIMING.lease_duration_s - TIMING.renew_deadline_s


def test_a_leader_that_finds_another_holder_stops_at_once() -> None:
    api = FakeLeaseApi()
    leader = Replica(api, "a")
    assert leader.elector.try_acquire_or_renew()
    assert api.lease is not None
    api.lease.spec.holder_identity = "b"  # an operator by hand, or a split brain elsewhere
    api.version += 1
    api.lease.metadata.resource_version = str(api.version)
    leader.clock.t = 2.0
    assert not leader.elector.try_acquire_or_renew()
    assert leader.lost_at == [2.0]
    assert not leader.leading()
    assert api.holder == "b"


def test_every_lease_call_has_a_request_timeout_shorter_than_the_deadline() -> None:
    api = FakeLeaseApi()
    leader = Replica(api, "a")
    standby = Replica(api, "b")
    assert leader.elector.try_acquire_or_renew()  # read (404), create
    leader.clock.t = 2.0
    assert leader.elector.try_acquire_or_renew()  # replace (the last write, unchanged)
    assert not standby.elector.try_acquire_or_renew()  # read
    assert leader.elector.release()  # read, replace
    assert standby.elector.try_acquire_or_renew()  # read, replace
    assert {method for method, _ in api.calls} == {"read", "create", "replace"}
    for method, kwargs in api.calls:
        assert 0 < kwargs.get("_request_timeout", 0) < TIMING.renew_deadline_s, method


def test_a_renewal_is_one_call_while_nothing_else_wrote_the_lease() -> None:
    api = FakeLeaseApi()
    leader = Replica(api, "a")
    assert leader.elector.try_acquire_or_renew()
    api.calls.clear()
    leader.clock.t = 2.0
    assert leader.elector.try_acquire_or_renew()
    assert [method for method, _ in api.calls] == ["replace"]


def test_tries_are_a_jittered_retry_period_apart() -> None:
    assert jittered(2.0, 1.2, 0.0) == 2.0
    assert jittered(2.0, 1.2, 0.5) == pytest.approx(3.2)
    api = FakeLeaseApi()
    holder = Replica(api, "a")
    assert holder.elector.try_acquire_or_renew()
    standby = Replica(api, "b", uniform=0.5)
    standby.elector.acquire()  # 2 x (1 + 1.2 x 0.5) = 3.2 s apart: the 5th try is at 16 s
    assert standby.clock.t == pytest.approx(5 * 3.2)
    leader = Replica(FakeLeaseApi(), "c", uniform=0.999)
    assert leader.elector.try_acquire_or_renew()
    leader.elector._api.failing = CONNECTION_ERRORS[0]  # type: ignore[attr-defined]
    leader.elector.renew_loop()  # tries 2 x 1.2 s apart at most: one before the deadline
    assert leader.lost_at and leader.lost_at[0] < TIMING.renew_deadline_s + 2 * 1.2


def test_a_clean_release_hands_the_lease_to_a_standby_at_its_next_try() -> None:
    api = FakeLeaseApi()
    leader = Replica(api, "a")
    standby = Replica(api, "b")
    assert leader.elector.try_acquire_or_renew()
    assert not standby.elector.try_acquire_or_renew()
    assert leader.elector.release()
    assert not leader.leading()  # it stopped acting first
    assert api.lease is not None and api.lease.spec.holder_identity is None
    assert api.lease.spec.lease_duration_seconds == 1
    standby.clock.t = 2.0  # its next try, 13 s before the lease would have expired
    assert standby.elector.try_acquire_or_renew()
    assert api.holder == "b"
    assert leader.lost_at == []  # a release is no loss: the process is stopping anyway


def test_a_release_leaves_a_lease_held_by_another_alone() -> None:
    api = FakeLeaseApi()
    holder = Replica(api, "b")
    assert holder.elector.try_acquire_or_renew()
    other = Replica(api, "a")
    assert not other.elector.release()
    assert api.holder == "b"
    api.failing = CONNECTION_ERRORS[1]
    assert not holder.elector.release()  # logged, not raised: the process is stopping


def test_the_threads_exit_the_process_at_the_deadline_on_the_real_clock() -> None:
    """keep_renewing's two threads, for real (a 3 s lease, 0.5 s deadline, 0.1 s period)."""
    api = FakeLeaseApi()
    lost = threading.Event()
    elector = LeaseElector(api, NAME, NAMESPACE, "a", LeaseTiming(3.0, 0.5, 0.1), on_lost=lost.set)
    elector.acquire()
    started = time.monotonic()
    api.failing = CONNECTION_ERRORS[1]
    threads = elector.keep_renewing()
    assert lost.wait(5.0)
    took = time.monotonic() - started
    assert 0.4 <= took < 1.5
    assert not elector.leading()
    for thread in threads:
        thread.join(2.0)
        assert not thread.is_alive()
