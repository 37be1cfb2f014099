"""The fence (adapters/fence.py, handlers.py): a replica whose Lease has lapsed writes
nothing, whether its reconcile starts after the deadline or was running when it passed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from llmservice_operator.adapters.fence import FencedKube, NotLeading
from llmservice_operator.adapters.metrics import OperatorMetrics
from llmservice_operator.handlers import OperatorState, _process
from llmservice_operator.reconcile import ReconcileResult
from llmservice_operator.settings import OperatorSettings

from .test_leader import FakeLeaseApi, Replica


class RecordingKube:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return {}

        return call


def test_the_fence_refuses_every_write_after_the_deadline_and_lets_reads_through() -> None:
    api = FakeLeaseApi()
    leader = Replica(api, "a")
    assert leader.elector.try_acquire_or_renew()
    kube = RecordingKube()
    fenced = FencedKube(kube, leader.elector.leading)  # type: ignore[arg-type]
    writes = [
        lambda: fenced.apply({}),
        lambda: fenced.delete("v1", "Service", "ml", "chat"),
        lambda: fenced.scale_deployment("ml", "chat", 2),
        lambda: fenced.patch_status("ml", "chat", {}),
        lambda: fenced.remove_annotation("ml", "chat", "k"),
        lambda: fenced.post_event({}, "Normal", "R", "m"),
    ]
    leader.clock.t = 9.9
    for write in writes:
        write()
    assert len(kube.calls) == len(writes)
    leader.clock.t = 10.0  # the deadline: not renewed since 0
    for write in writes:
        with pytest.raises(NotLeading):
            write()
    fenced.observe("ml", "chat", [])
    fenced.read_secret_value("ml", "s", "k")
    assert kube.calls[len(writes) :] == ["observe", "read_secret_value"]


class CountingReconciler:
    def __init__(self) -> None:
        self.calls = 0

    def reconcile(self, body: dict[str, Any]) -> ReconcileResult:
        self.calls += 1
        return ReconcileResult([], False, 0, 0, None)


def test_a_reconcile_that_starts_after_the_deadline_does_not_run() -> None:
    api = FakeLeaseApi()
    leader = Replica(api, "a")
    assert leader.elector.try_acquire_or_renew()
    state = OperatorState(
        settings=OperatorSettings(),
        metrics=OperatorMetrics.create(),
        leading=leader.elector.leading,
    )
    reconciler = CountingReconciler()
    state.reconciler = reconciler  # type: ignore[assignment]
    state.kube = RecordingKube()  # type: ignore[assignment]
    key = ("ml", "chat")
    state.bodies[key] = {"metadata": {"namespace": "ml", "name": "chat"}}
    leader.clock.t = 9.0
    asyncio.run(_process(state, key))
    assert reconciler.calls == 1
    leader.clock.t = 10.0
    asyncio.run(_process(state, key))
    assert reconciler.calls == 1
