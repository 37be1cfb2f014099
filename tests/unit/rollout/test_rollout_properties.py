"""Property: no sequence of a person's commands, spec changes and time ever leaves the Ready
replicas that receive client traffic below what the load needs (the stable's full share),
and every sequence ends settled.

Hypothesis draws a plan (canary by replica ratio, canary through a Gateway, blue-green with a
preview size and a manual switch), a load, which revisions are bad (slow, never Ready), and
a sequence of: ticks of the clock, control annotations (pause, resume, promote, promote
--full, skip-analysis, abort, retry) and spec changes to another revision. After every tick,
the Ready replicas of the revisions the traffic goes to must hold the load; at the end, with
a person resuming whatever waits for one, the service settles on one stable revision with
no rollout in progress and no Deployment but the stable's (and an aborted one at 0).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmservice_operator.api.spec import RolloutSpec
from llmservice_operator.rollout.machine import (
    CONTROL_ANNOTATIONS,
    RESUME_ANNOTATION,
    DeploymentObservation,
    RolloutDecision,
    Traffic,
    build_plan,
)

from .harness import NEW, NEWER, OLD, Behaviour, World

PLANS: dict[str, dict[str, Any]] = {
    "canary": {
        "steps": [
            {"setWeight": 20},
            {"analysis": {}},
            {"setWeight": 50},
            {"pause": {}},
            {"analysis": {}},
        ],
        "analysis": {"interval": "30s", "count": 2},
        "backgroundAnalysis": {"startingStep": 1},
        "rollbackWindow": {"revisions": 2},
        "progressDeadlineSeconds": 300,
    },
    "gateway": {
        "steps": [{"setWeight": 30}, {"pause": {"duration": "1m"}}, {"analysis": {}}],
        "analysis": {"interval": "30s", "count": 1},
        "gatewayParentRef": {"name": "public"},
        "progressDeadlineSeconds": 300,
    },
    "blueGreen": {
        "strategy": "blueGreen",
        "steps": [{"analysis": {}}, {"pause": {"duration": "30s"}}],
        "analysis": {"interval": "30s", "count": 1},
        "blueGreen": {"autoPromote": False, "previewReplicaCount": 1, "scaleDownDelaySeconds": 60},
        "rollbackWindow": {"duration": "1h"},
        "progressDeadlineSeconds": 300,
    },
}

#: Mostly the clock and a person's commands; now and then the spec moves on (or back).
actions = st.one_of(
    st.tuples(st.just("tick"), st.integers(min_value=1, max_value=8)),
    st.tuples(st.just("tick"), st.integers(min_value=1, max_value=8)),
    st.tuples(st.just("control"), st.sampled_from(CONTROL_ANNOTATIONS)),
    st.tuples(st.just("control"), st.sampled_from(CONTROL_ANNOTATIONS)),
    st.tuples(st.just("spec"), st.sampled_from([OLD, NEW, NEWER])),
)


def serving_ready(traffic: Traffic, deployments: dict[str, DeploymentObservation]) -> int:
    """Ready replicas behind the traffic as it is set now."""
    if traffic.route_weights is not None:
        active, preview = traffic.route_weights
        total = deployments.get(traffic.active_revision or "", DeploymentObservation(0, 0)).ready
        total = total if active > 0 else 0
        if preview > 0 and traffic.preview_revision is not None:
            total += deployments.get(traffic.preview_revision, DeploymentObservation(0, 0)).ready
        return total
    if traffic.active_revision is None:  # the Service selects every revision
        return sum(o.ready for o in deployments.values())
    return deployments.get(traffic.active_revision, DeploymentObservation(0, 0)).ready


STAGES = {plan: len(build_plan(RolloutSpec.model_validate(spec))) for plan, spec in PLANS.items()}


@pytest.mark.parametrize(
    ("plan", "index", "control"),
    [
        (plan, index, control)
        for plan in sorted(PLANS)
        for index in range(STAGES[plan])
        for control in CONTROL_ANNOTATIONS
    ],
)
def test_each_command_at_each_stage_keeps_capacity(plan: str, index: int, control: str) -> None:
    """Every control at every stage of every plan (5 replicas, a slow candidate that the
    analysis fails, so that each stage is reached and each command has something to do)."""
    w = World(spec=RolloutSpec.model_validate(PLANS[plan]), total=5)
    w.settle_initial()
    w.revision = NEW
    for _ in range(200):
        decision = tick_checked(w)
        rollout = decision.rollout
        if decision.revisions.candidate is None or (rollout is not None and rollout.step >= index):
            break
        if rollout is not None and rollout.paused:
            w.annotations[RESUME_ANNOTATION] = "true"
    w.behaviours[NEW].ttft_ms = 2000
    w.annotations[control] = "true"
    for _ in range(100):
        decision = tick_checked(w)
        if decision.revisions.candidate is None:
            break
        if decision.rollout is not None and decision.rollout.paused:
            w.annotations[RESUME_ANNOTATION] = "true"
    assert w.decisions[-1].revisions.candidate is None
    for _ in range(10):
        tick_checked(w)


def tick_checked(w: World) -> RolloutDecision:
    decision = w.tick()
    serving = serving_ready(decision.traffic, w.deployments)
    assert serving >= w.total, (
        f"{serving} Ready replicas serve, the load needs {w.total}: {decision.traffic}, "
        f"{w.deployments}, {w.status.get('rollout', {}).get('message')}"
    )
    return decision


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=st.sampled_from(sorted(PLANS)),
    total=st.sampled_from([1, 3, 5]),
    slow=st.sets(st.sampled_from([NEW, NEWER])),
    stuck=st.sets(st.sampled_from([NEWER])),
    sequence=st.lists(actions, min_size=1, max_size=30),
)
def test_no_command_sequence_leaves_less_capacity_than_the_load_needs(
    plan: str, total: int, slow: set[str], stuck: set[str], sequence: list[tuple[str, Any]]
) -> None:
    w = World(spec=RolloutSpec.model_validate(PLANS[plan]), total=total)
    for revision in slow:
        w.behaviours[revision] = Behaviour(ttft_ms=2000)
    for revision in stuck:
        w.behaviours.setdefault(revision, Behaviour()).ready = False
    w.settle_initial()
    assert w.deployments == {OLD: DeploymentObservation(total, total)}
    w.revision = NEW  # a rollout starts
    for kind, value in sequence:
        if kind == "tick":
            for _ in range(value):
                tick_checked(w)
        elif kind == "control":
            w.annotations[value] = "true"
            tick_checked(w)
            assert value not in w.annotations  # every control is consumed at once
        else:
            w.revision = value
            tick_checked(w)

    # A person resumes whatever waits for one; the service settles.
    for _ in range(40):
        decision = tick_checked(w)
        if decision.revisions.candidate is None:
            break
        for _ in range(6):
            tick_checked(w)
        w.annotations[RESUME_ANNOTATION] = "true"
    w.run(600)
    final = w.decisions[-1]
    revisions = final.revisions
    assert revisions.candidate is None, w.status
    assert revisions.stable is not None
    assert revisions.stable == w.revision or revisions.failed == w.revision
    leftover = set(w.deployments) - {revisions.stable}
    assert all(w.deployments[r].replicas == 0 for r in leftover), w.deployments
    assert leftover <= {revisions.failed}
    assert final.traffic.active_revision == revisions.stable
