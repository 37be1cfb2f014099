"""adapters/background.py: each kind of job runs in a lane of its own, so pods that answer
slowly (a tenant's) never hold up the autoscaler's Prometheus queries, and the reconciler puts
each job in its lane."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Hashable
from datetime import timedelta
from typing import Any, TypeVar

from llmservice_operator.adapters.background import LANES, BackgroundIO, Lane
from llmservice_operator.reconcile import Reconciler
from llmservice_operator.sizing import load_catalog

from .test_reconcile import T0, FakeKube, _body, passing_smoke

T = TypeVar("T")
WAITER = ("ml", "chat")


def test_the_autoscalers_queries_complete_while_the_tenants_lanes_are_blocked() -> None:
    """Every pod thread on a slow scrape, every thread for tenants' PromQL on a slow
    arrivalRateQuery, and more waiting: the batch every service waits for still runs."""
    release = threading.Event()
    answered = threading.Event()
    notified: list[tuple[str, str]] = []
    started = threading.Semaphore(0)

    def notify(key: tuple[str, str]) -> None:
        notified.append(key)
        if key == WAITER:
            answered.set()

    def slow() -> bool:
        started.release()
        return release.wait(30)

    background = BackgroundIO(notify, lanes={"pods": 2, "queries": 1, "prometheus": 1})
    try:
        for i in range(6):  # more slow scrapes than the pod lane has threads: 2 run, 4 queue
            background.take(("ml", f"s{i}"), "scrape", slow, "pods")
        for i in range(3):  # tenants' slow arrivalRateQuery: 1 runs, 2 queue
            background.latest(("arrivals", f"q{i}"), slow, 15.0, ("ml", f"a{i}"), "queries")
        for _ in range(3):
            assert started.acquire(timeout=5)
        assert not started.acquire(timeout=0.2)  # both lanes full
        batch = ("samples", "0.10.1")
        assert background.latest(batch, lambda: "batch", 15.0, WAITER, "prometheus") is None
        assert answered.wait(5), "the autoscaler's batch waited behind a tenant's jobs"
        assert background.latest(batch, lambda: "again", 15.0, WAITER, "prometheus") == "batch"
        assert notified == [WAITER]  # every tenant's job still blocked
    finally:
        release.set()
        background.shutdown()


def test_every_lane_has_threads_of_its_own() -> None:
    background = BackgroundIO()
    try:
        pools = background._pools
        assert set(pools) == set(LANES)
        assert len({id(pool) for pool in pools.values()}) == len(LANES)
        assert {lane: pool._max_workers for lane, pool in pools.items()} == LANES
    finally:
        background.shutdown()


class RecordingIO(BackgroundIO):
    """Runs each job at once, recording which lane each kind of job was put in. A pod scrape
    is not run (the fake pods' addresses are nobody's): it finds no samples."""

    def __init__(self) -> None:
        super().__init__(inline=True)
        self.lanes: dict[str, set[Lane]] = {}

    def _record(self, job: Hashable, lane: Lane) -> None:
        kind = job[0] if isinstance(job, tuple) else job
        self.lanes.setdefault(str(kind), set()).add(lane)

    def take(
        self, key: tuple[str, str], job: Hashable, run: Callable[[], T], lane: Lane
    ) -> tuple[bool, T | None]:
        self._record(job, lane)
        if job == "scrape":
            return True, ({}, None)  # type: ignore[return-value]
        return super().take(key, job, run, lane)

    def latest(
        self, job: Hashable, run: Callable[[], T], max_age_s: float, waiter: Any, lane: Lane
    ) -> T | None:
        self._record(job, lane)
        return super().latest(job, run, max_age_s, waiter, lane)


class NoSeries:
    def query(self, promql: str) -> Any:
        return []

    def measure(self, checks: Any) -> dict[str, Any]:
        return {}


def _reconciles(io: RecordingIO, body: dict[str, Any], count: int, change_at: int = -1) -> None:
    """``count`` reconciles of ``body``, 40 s apart (every one evaluates the autoscaler); the
    engine's env changes before number ``change_at`` (a rollout)."""
    kube = FakeKube(body)
    clock = [T0]
    reconciler = Reconciler(kube, load_catalog(), "http://p:9090", prometheus=NoSeries(),
                            smoke=passing_smoke, background=io,
                            clock=lambda: clock[0])  # fmt: skip
    for step in range(count):
        if step == change_at:
            kube.body["spec"]["engine"]["env"] = [{"name": "NEW", "value": "1"}]
            kube.body["metadata"]["generation"] += 1
        reconciler.reconcile(copy.deepcopy(kube.body))
        clock[0] += timedelta(seconds=40)


def test_the_reconciler_puts_each_job_in_its_lane() -> None:
    io = RecordingIO()
    for source in ("prometheus", "pods"):
        body = _body()
        body["spec"]["scaling"] = {"mode": "operator", "minReplicas": 1, "maxReplicas": 2,
                                   "metricsSource": source,
                                   "arrivalRateQuery": "sum(rate(x[1m]))"}  # fmt: skip
        del body["spec"]["replicas"]
        _reconciles(io, body, 3)
    _reconciles(io, _body(), 4, change_at=1)  # a candidate: smoke-tested, then analysed
    assert io.lanes == {
        "samples": {"prometheus"},
        "arrivals": {"queries"},
        "scrape": {"pods"},
        "smoke": {"smoke"},
        "measure": {"queries"},
    }
