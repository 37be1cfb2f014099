"""spec.scaling.schedules in the operator-mode autoscaler (scaling.evaluate_scaling): the open
window's floor and cap, evaluated at the window's edge, named in the status and the reason; a
window that ends during a rollout; the spec's validation; the reconcile's requeue at the next
change. A fixed clock throughout."""

from __future__ import annotations

import copy
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from llmservice_operator.api import SpecError, parse_spec
from llmservice_operator.api.crd import crd_manifest
from llmservice_operator.api.spec import RolloutSpec, ScalingSpec
from llmservice_operator.api.status import AutoscalingStatus
from llmservice_operator.autoscale import ReplicaSample
from llmservice_operator.decide import decide
from llmservice_operator.reconcile import Reconciler
from llmservice_operator.scaling import evaluate_scaling, evaluation_due
from llmservice_operator.sizing import load_catalog

from .rollout.harness import NEW, World
from .test_decide import _body as decide_body
from .test_decide import _observed as decide_observed
from .test_reconcile import FakeKube, QueueingPrometheus
from .test_reconcile import _body as reconcile_body

#: Monday 2026-01-12, 07:59:50 CET (06:59:50 UTC): ten seconds before the office opens.
BEFORE_OPENING = datetime(2026, 1, 12, 6, 59, 50, tzinfo=UTC)
OPENING = datetime(2026, 1, 12, 7, 0, 0, tzinfo=UTC)
CLOSING = datetime(2026, 1, 12, 19, 0, 0, tzinfo=UTC)  # 20:00 CET
OFFICE = {
    "name": "office",
    "start": "0 8 * * 1-5",
    "end": "0 20 * * 1-5",
    "timeZone": "Europe/Berlin",
    "minReplicas": 4,
}
SPEC = ScalingSpec.model_validate(
    {
        "minReplicas": 1,
        "maxReplicas": 8,
        "targetQueueDepth": 2,
        "evaluationIntervalSeconds": 15,
        "schedules": [OFFICE],
    }
)


def _pods(names: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "metadata": {"name": name},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }
        for name in names
    ]


def _quiet(names: list[str]) -> dict[str, ReplicaSample]:
    """Replicas with nothing waiting and a little running (no completion rates measured)."""
    return {name: ReplicaSample(waiting=0, running=1, kv_cache_usage=0.05) for name in names}


def test_the_window_opens_at_its_start_with_its_floor_named() -> None:
    names = ["a"]
    before = evaluate_scaling(SPEC, 8, None, _pods(names), _quiet(names), None, BEFORE_OPENING)
    assert before.total == 1
    assert before.status.schedule is not None and before.status.schedule.window is None
    assert before.status.schedule.next_change_time == "2026-01-12T07:00:00Z"
    # Ten seconds later, inside the evaluation interval: the window's edge makes it due.
    assert not evaluation_due(before.status, SPEC, OPENING - timedelta(seconds=1))
    assert evaluation_due(before.status, SPEC, OPENING)
    opened = evaluate_scaling(SPEC, 8, before.status, _pods(names), _quiet(names), None, OPENING)
    assert opened.total == 4, "the floor applies at once, not through the scale-up rate limit"
    assert opened.status.schedule is not None
    assert (opened.status.schedule.window, opened.status.schedule.min_replicas) == ("office", 4)
    assert opened.status.schedule.next_change_time == "2026-01-12T19:00:00Z"
    assert "minReplicas 4 of schedule office" in opened.status.reason
    assert not evaluation_due(opened.status, SPEC, OPENING + timedelta(seconds=5))


def test_a_windows_cap_holds_the_load_back_and_says_so() -> None:
    capped = SPEC.model_copy(
        update={
            "schedules": [
                SPEC.schedules[0].model_copy(update={"min_replicas": 1, "max_replicas": 2})
            ]
        }
    )
    names = ["a", "b"]
    busy = {n: ReplicaSample(waiting=30, running=8, kv_cache_usage=0.9) for n in names}
    out = evaluate_scaling(capped, 8, None, _pods(names), busy, None, OPENING)
    assert out.total == 2
    assert "maxReplicas 2 of schedule office" in out.status.reason
    night = evaluate_scaling(capped, 8, None, _pods(names), busy, None, CLOSING)
    assert night.total > 2, "outside the window the spec's maxReplicas 8 applies"


def test_a_window_ending_during_a_rollout_shrinks_the_total_it_shares_gradually() -> None:
    """The office closes at 20:00 while a canary waits at 50%: the rollout is not disturbed (same
    candidate, step and weight), the scale-down stabilization window (300 s) holds the window's
    4 replicas for five minutes, then one replica a minute goes, and the rollout shares each
    new total between its revisions without ever leaving the load unserved."""
    spec = SPEC.model_copy(update={"evaluation_interval_seconds": 10})
    rollout = RolloutSpec.model_validate({"steps": [{"setWeight": 50}, {"pause": {}}]})
    start = CLOSING - timedelta(minutes=10)
    world = World(spec=rollout, total=4, now=start)
    world.settle_initial()
    world.revision = NEW
    paused = world.run_until(lambda d: d.rollout is not None and d.rollout.paused)
    assert paused.rollout is not None
    status: AutoscalingStatus | None = None
    seen: list[tuple[datetime, int, int, int, bool]] = []
    while world.now < CLOSING + timedelta(minutes=12):
        names = [f"{rev}-{i}" for rev, obs in world.deployments.items() for i in range(obs.ready)]
        moment = world.now
        out = evaluate_scaling(spec, 8, status, _pods(names), _quiet(names), None, moment)
        status = out.status
        world.total = out.total
        decision = world.tick()  # checks the capacity invariants too
        assert decision.revisions.candidate == NEW, "the rollout was not disturbed"
        assert decision.rollout is not None
        assert decision.rollout.step == paused.rollout.step and decision.rollout.paused
        open_ = status.schedule is not None and status.schedule.window == "office"
        seen.append((moment, out.total, *decision.replicas.values(), open_))
    before = [s for s in seen if s[0] < CLOSING]
    assert {s[1] for s in before} == {4} and all(s[4] for s in before)
    after = [s for s in seen if s[0] >= CLOSING]
    assert not any(s[4] for s in after), "the status names no open window after 20:00"
    assert status is not None and status.schedule is not None
    assert status.schedule.next_change_time == "2026-01-13T07:00:00Z"  # Tuesday 08:00 CET
    held = [s[1] for s in after if s[0] < CLOSING + timedelta(seconds=290)]
    assert set(held) == {4}, "the stabilization window holds the window's replicas"
    totals = [s[1] for s in after]
    assert totals[-1] == 1
    assert all(b - a in (0, -1) for a, b in itertools.pairwise(totals)), totals
    for _now, total, stable, candidate, _open in after:
        assert stable + candidate >= total and candidate == -(-total // 2), (total, stable)


# -- validation ------------------------------------------------------------------------------

BASE: dict[str, Any] = {
    "model": {"id": "meta-llama/Llama-3.1-8B-Instruct"},
    "engine": {"maxModelLen": 4096},
    "scaling": {"minReplicas": 1, "maxReplicas": 8, "schedules": [OFFICE]},
}


def _with(**window: Any) -> dict[str, Any]:
    spec = copy.deepcopy(BASE)
    spec["scaling"]["schedules"] = [{**OFFICE, **window}]
    return spec


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (_with(start="0 25 * * 1-5"), "not a cron expression: Bad hour"),
        (_with(end="0 20 * * 1-5 2026"), "String should match pattern"),
        (_with(timeZone="Mars/Olympus_Mons"), "not an IANA time zone"),
        (_with(timeZone="Europe"), "not an IANA time zone"),
        (_with(minReplicas=5, maxReplicas=3), "minReplicas must not exceed its maxReplicas"),
        (_with(minReplicas=9), "must not have a minReplicas above scaling.maxReplicas"),
        (_with(minReplicas=0), "needs scaling.arrivalRateQuery"),
        (_with(end="0 8 * * 1-5"), "start and end must differ"),
    ],
)
def test_invalid_windows_are_refused_with_a_reason(spec: dict[str, Any], words: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(spec)
    assert words in str(err.value)
    assert "spec.scaling" in str(err.value)


def test_windows_need_operator_mode_and_unique_names() -> None:
    spec = copy.deepcopy(BASE)
    spec["scaling"]["mode"] = "hpa"
    with pytest.raises(SpecError, match=r"need scaling\.mode operator"):
        parse_spec(spec)
    spec = copy.deepcopy(BASE)
    spec["scaling"]["schedules"] = [OFFICE, OFFICE]
    with pytest.raises(SpecError, match="office named more than once"):
        parse_spec(spec)


def test_a_window_of_zero_with_an_arrival_rate_query_and_its_own_cap_is_valid() -> None:
    spec = _with(minReplicas=0, maxReplicas=2)
    spec["scaling"]["arrivalRateQuery"] = "sum(rate(gateway_requests_total[1m]))"
    [window] = parse_spec(spec).scaling.schedules
    assert (window.min_replicas, window.max_replicas, window.time_zone) == (0, 2, "Europe/Berlin")


def test_the_crd_judges_what_it_can_alone() -> None:
    schema = crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    scaling = schema["properties"]["spec"]["properties"]["scaling"]
    messages = " | ".join(r["message"] for r in scaling["x-kubernetes-validations"])
    assert "schedules need scaling.mode operator" in messages
    assert "needs scaling.arrivalRateQuery" in messages
    assert "without maxReplicas must not have a minReplicas above" in messages
    schedules = scaling["properties"]["schedules"]
    assert schedules["x-kubernetes-list-map-keys"] == ["name"]  # unique names
    window = schedules["items"]
    rules = " | ".join(r["rule"] for r in window["x-kubernetes-validations"])
    assert "self.minReplicas <= self.maxReplicas" in rules
    assert window["properties"]["start"]["pattern"] == window["properties"]["end"]["pattern"]
    assert window["properties"]["timeZone"]["default"] == "UTC"


# -- the reconcile ---------------------------------------------------------------------------


def test_the_reconcile_requeues_at_the_windows_edge_and_scales_there() -> None:
    clock = [OPENING - timedelta(seconds=40)]
    body = reconcile_body()
    body["spec"]["scaling"] = {
        "mode": "operator",
        "minReplicas": 1,
        "maxReplicas": 6,
        "evaluationIntervalSeconds": 60,
        "schedules": [OFFICE],
    }
    del body["spec"]["replicas"]
    kube = FakeKube(body)
    reconciler = Reconciler(
        kube, load_catalog(), "http://p:9090", prometheus=QueueingPrometheus(kube),
        clock=lambda: clock[0],
    )  # fmt: skip
    result = reconciler.reconcile(copy.deepcopy(kube.body))
    for _ in range(2):
        result = reconciler.reconcile(copy.deepcopy(kube.body))
    assert result.requeue_at == OPENING, "requeued for the window's start, before the interval"
    [(_name, deployment)] = kube.deployments.items()
    assert deployment["spec"]["replicas"] == 1
    clock[0] = OPENING
    reconciler.reconcile(copy.deepcopy(kube.body))
    [(_name, deployment)] = kube.deployments.items()
    assert deployment["spec"]["replicas"] == 4
    schedule = kube.body["status"]["autoscaling"]["schedule"]
    assert (schedule["window"], schedule["nextChangeTime"]) == ("office", "2026-01-12T19:00:00Z")


def test_a_windows_higher_cap_comes_down_at_its_end_with_the_reason() -> None:
    peak = SPEC.model_copy(
        update={
            "schedules": [
                SPEC.schedules[0].model_copy(update={"min_replicas": 10, "max_replicas": 12})
            ]
        }
    )
    names = [f"r{i}" for i in range(10)]
    day = evaluate_scaling(peak, 8, None, _pods(names), _quiet(names), None, OPENING)
    assert day.total == 10
    evening = evaluate_scaling(peak, 8, day.status, _pods(names), _quiet(names), None, CLOSING)
    assert evening.total == 8
    assert evening.status.reason.startswith("scale down 10 -> ")
    assert evening.status.reason.endswith("held within maxReplicas 8"), "the cap at once"


def test_a_zone_only_the_operator_can_judge_is_an_invalid_spec_condition() -> None:
    body = decide_body()
    body["spec"]["scaling"] = {
        "minReplicas": 1,
        "maxReplicas": 4,
        "schedules": [{**OFFICE, "timeZone": "Europe/Atlantis"}],
    }
    decision = decide(body, decide_observed(), load_catalog(), OPENING, "http://prom:9090")
    assert decision.apply == [] and decision.status["phase"] == "InvalidSpec"
    [condition] = [c for c in decision.status["conditions"] if c["type"] == "InvalidSpec"]
    assert condition["status"] == "True"
    assert condition["message"].startswith("spec.scaling.schedules[0].timeZone: ")
    assert "'Europe/Atlantis' is not an IANA time zone" in condition["message"]
