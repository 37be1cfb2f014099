"""The step machine: worked examples, walked through a simulated world (see harness.py).

Every tick of every scenario also checks the capacity invariants (harness.check_invariants):
the stable is never asked below what the load needs minus the Ready candidate pods that serve,
and a candidate is removed only once the stable is Ready at full size.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from llmservice_operator.api.spec import RolloutSpec, SLOSpec
from llmservice_operator.api.status import RevisionsStatus
from llmservice_operator.rollout.analysis import ERROR_RATE, TTFT
from llmservice_operator.rollout.machine import (
    DeploymentObservation,
    RolloutDecision,
    RolloutInput,
    build_plan,
    canary_replicas,
    stable_replicas,
    step,
)
from llmservice_operator.rollout.smoke_verdict import SmokeResult

from .harness import NEW, NEWER, OLD, SERVICE, T0, Behaviour, World

CANARY: dict[str, Any] = {
    "steps": [
        {"setWeight": 10},
        {"analysis": {}},
        {"setWeight": 50},
        {"pause": {"duration": "1m"}},
        {"analysis": {}},
    ],
    "analysis": {"interval": "1m", "count": 2},
}
BLUE_GREEN: dict[str, Any] = {
    "strategy": "blueGreen",
    "steps": [{"analysis": {}}],
    "analysis": {"interval": "1m", "count": 2},
    "blueGreen": {"scaleDownDelaySeconds": 300},
}


def world(spec: dict[str, Any] = CANARY, **kw: Any) -> World:
    w = World(spec=RolloutSpec.model_validate(spec), **kw)
    w.settle_initial()
    return w


def reasons(decisions: list[RolloutDecision]) -> list[str]:
    return [e.reason for d in decisions for e in d.events]


def done(d: RolloutDecision) -> bool:
    return d.revisions.candidate is None


def condition(d: RolloutDecision, type_: str) -> tuple[str, str]:
    found = next(c for c in d.conditions if c.type == type_)
    return found.status, found.reason


def start(w: World, revision: str = NEW) -> list[RolloutDecision]:
    w.revision = revision
    first = len(w.decisions)
    w.run_until(done)
    return w.decisions[first:]


# -- the calculator ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "weight", "candidate"),
    [(10, 10, 1), (10, 25, 3), (3, 10, 1), (1, 50, 1), (4, 100, 4), (4, 0, 1), (10, 99, 10)],
)
def test_canary_replicas(total: int, weight: int, candidate: int) -> None:
    assert canary_replicas(total, weight) == candidate


@pytest.mark.parametrize(
    ("total", "weight", "ready", "stable"),
    [
        (10, 10, 0, 10),
        (10, 10, 1, 9),
        (3, 10, 1, 3),
        (1, 10, 1, 1),
        (4, 50, 1, 3),
        (4, 50, 2, 2),
        (4, 50, 5, 2),  # extra Ready candidate pods do not count beyond its share
        (4, 100, 3, 1),
        (4, 100, 4, 0),
        (4, 0, 1, 4),
    ],
)
def test_stable_replicas(total: int, weight: int, ready: int, stable: int) -> None:
    assert stable_replicas(total, weight, ready) == stable


def test_plans() -> None:
    canary = build_plan(RolloutSpec.model_validate(CANARY))
    assert [s.describe() for s in canary] == [
        "prepare", "setWeight 10", "analysis", "setWeight 50", "pause 60s", "analysis", "promote",
    ]  # fmt: skip
    assert [s.spec_index for s in canary] == [None, 0, 1, 2, 3, 4, None]
    blue_green = build_plan(RolloutSpec.model_validate(BLUE_GREEN))
    assert [s.kind for s in blue_green] == ["prepare", "analysis", "switch", "postPromotion"]
    assert [s.kind for s in build_plan(RolloutSpec())] == ["prepare", "promote"]


# -- first revision, steady state ------------------------------------------------------------


def test_first_revision_is_adopted_without_a_rollout() -> None:
    w = World(spec=RolloutSpec.model_validate(CANARY))
    d = w.tick()
    assert d.revisions.stable == OLD and d.revisions.candidate is None
    assert d.rollout is None
    assert d.replicas == {OLD: 4}
    assert d.traffic.active_revision == OLD and d.traffic.preview_revision is None
    assert condition(d, "Progressing") == ("False", "RolloutComplete")
    assert d.events == ()


def test_steady_state_follows_the_load_and_removes_strays() -> None:
    w = world(total=2)
    w.deployments["0123456789"] = DeploymentObservation(1, 1)
    w.total = 0  # scale to zero is allowed when nothing rolls out
    d = w.tick()
    assert d.replicas == {OLD: 0}


# -- canary ------------------------------------------------------------------------------------


def test_good_canary_walks_every_step_and_is_promoted() -> None:
    w = world()
    decisions = start(w)
    final = decisions[-1]
    assert final.revisions.stable == NEW and final.revisions.candidate is None
    assert final.replicas == {NEW: 4}  # the old revision is removed
    assert final.traffic.active_revision == NEW
    assert [h.outcome for h in final.revisions.history] == ["Superseded", "Promoted"]
    assert condition(final, "Progressing") == ("False", "RolloutComplete")
    assert final.rollout is not None and final.rollout.weight == 100
    assert final.rollout.promoted_at is not None

    steps = sorted({d.rollout.step for d in decisions if d.rollout and d.revisions.candidate})
    assert steps == [0, 2, 3, 4, 5, 6]  # 1 (setWeight 10) completes within the tick of 0
    order = list(dict.fromkeys(reasons(decisions)))
    assert order == [
        "RolloutStarted", "SmokeTestPassed", "WeightSet", "AnalysisStarted",
        "AnalysisMeasurement", "AnalysisSuccessful", "RolloutPaused", "Promoted",
    ]  # fmt: skip
    assert reasons(decisions).count("AnalysisMeasurement") == 4  # 2 analyses x count 2
    assert w.smoke_tests == 1

    # no traffic before the smoke test passed, and the share only grows
    smoke_at = next(i for i, d in enumerate(decisions) if "SmokeTestPassed" in reasons([d]))
    assert all(d.traffic.active_revision == OLD for d in decisions[:smoke_at])
    shares = [d.traffic.canary_weight for d in decisions if d.revisions.candidate]
    assert shares == sorted(shares)
    assert 50 in shares and 20 in shares  # 10% of 4 replicas is 1 of 5 Ready (see stable_replicas)
    weight_set = [e.message for d in decisions for e in d.events if e.reason == "WeightSet"]
    assert weight_set[0].endswith(f"10% of traffic on revision {NEW} (20% now, by Ready replicas)")
    # the stable keeps capacity until the candidate is Ready, then scales down: 2 of 5 for now
    assert weight_set[1].endswith(f"50% of traffic on revision {NEW} (40% now, by Ready replicas)")

    # every measurement queried the candidate's revision
    assert w.queries and all(NEW in c.query for q in w.queries for c in q if c.name == TTFT)

    w.tick()
    assert set(w.deployments) == {NEW}


def test_ttft_regression_rolls_back_and_is_not_retried() -> None:
    w = world()
    w.behaviours[NEW] = Behaviour(ttft_ms=1500)
    decisions = start(w)
    final = decisions[-1]
    assert final.revisions.stable == OLD and final.revisions.failed == NEW
    assert final.replicas == {OLD: 4} and final.traffic.active_revision == OLD
    assert "AnalysisFailed" in reasons(decisions) and "RolledBack" in reasons(decisions)
    assert condition(final, "RolledBack") == ("True", "AnalysisFailed")
    assert condition(final, "Degraded") == ("True", "RolledBack")
    assert condition(final, "Progressing") == ("False", "RolloutAborted")
    record = final.revisions.history[-1]
    assert (record.revision, record.outcome) == (NEW, "RolledBack")
    assert record.reason.startswith("AnalysisFailed: 1 failed measurement(s) > failureLimit 0")
    # status shows why: the check, its query, value, threshold and verdict
    assert final.rollout is not None and final.rollout.analysis is not None
    ttft = next(m for m in final.rollout.analysis.last if m.check == TTFT)
    assert (ttft.value, ttft.threshold, ttft.verdict) == (1500, 800, "Failed")
    assert 'revision="b41e070000"' in ttft.query
    failed_event = next(e for d in decisions for e in d.events if e.reason == "AnalysisFailed")
    assert failed_event.type == "Warning" and "ttftP99Ms" in failed_event.message

    later = w.run(3600)
    assert all(d.revisions.candidate is None for d in later)
    assert NEW not in w.deployments
    assert "RolloutStarted" not in reasons(later)
    assert condition(later[-1], "RolledBack") == ("True", "AnalysisFailed")

    # a new spec is a new rollout; the failure is forgotten
    w.behaviours[NEWER] = Behaviour()
    again = start(w, NEWER)
    assert again[0].revisions.failed is None
    assert again[-1].revisions.stable == NEWER
    assert condition(again[-1], "RolledBack") == ("False", "NoRollback")


def test_error_rate_rolls_back() -> None:
    w = world()
    w.behaviours[NEW] = Behaviour(error_rate=0.05)
    final = start(w)[-1]
    assert final.revisions.failed == NEW
    assert final.rollout is not None and final.rollout.analysis is not None
    verdicts = {m.check: m.verdict for m in final.rollout.analysis.last}
    assert verdicts[ERROR_RATE] == "Failed" and verdicts[TTFT] == "Successful"


def test_rollback_scales_the_stable_up_before_moving_traffic() -> None:
    w = world()
    w.revision = NEW
    w.run_until(lambda d: bool(d.rollout and d.rollout.step == 5))  # second analysis, at 50%
    assert w.deployments[OLD] == DeploymentObservation(2, 2)
    w.behaviours[NEW].ttft_ms = 2000  # the candidate degrades under more traffic
    failing = w.run_until(lambda d: "AnalysisFailed" in reasons([d]))
    # first: the stable goes back to full size while the split stays as it is
    assert failing.replicas == {OLD: 4, NEW: 2}
    assert failing.traffic.active_revision is None and failing.traffic.canary_weight == 50
    assert condition(failing, "Progressing") == ("True", "RollingBack")
    assert failing.rollout is not None and failing.rollout.pause_reason == "RollingBack"
    # while the stable's new pods load, nothing else changes
    assert w.deployments[OLD] == DeploymentObservation(4, 2)
    held = w.tick()
    assert held.replicas == {OLD: 4, NEW: 2} and held.traffic.active_revision is None
    # once it is Ready at 4: traffic moves back and the candidate is removed (in that order)
    assert w.deployments[OLD] == DeploymentObservation(4, 4)
    final = w.tick()
    assert final.replicas == {OLD: 4} and final.traffic.active_revision == OLD
    assert "RolledBack" in reasons([final])


def test_candidate_that_never_gets_ready_hits_the_progress_deadline() -> None:
    w = world({**CANARY, "progressDeadlineSeconds": 120})
    w.behaviours[NEW] = Behaviour(ready=False)
    began = w.now
    decisions = start(w)
    assert decisions[-1].revisions.failed == NEW
    event = next(e for d in decisions for e in d.events if e.reason == "ProgressDeadlineExceeded")
    assert "0/1 Ready replicas 120s after step 0/6 (prepare) began" in event.message
    assert w.now - began <= timedelta(seconds=150)
    assert all(d.traffic.active_revision == OLD for d in decisions)  # never took traffic
    waiting = decisions[1]
    assert waiting.requeue_at == began + timedelta(seconds=120)


def test_no_data_pauses_instead_of_promoting() -> None:
    w = world()
    w.behaviours[NEW] = Behaviour(requests=0)
    w.revision = NEW
    paused = w.run_until(lambda d: bool(d.rollout and d.rollout.paused))
    assert paused.rollout is not None
    assert paused.rollout.pause_reason == "AnalysisInconclusive"
    assert paused.rollout.analysis is not None and paused.rollout.analysis.phase == "Inconclusive"
    assert {m.verdict for m in paused.rollout.analysis.last} == {"NoData"}
    assert condition(paused, "Progressing") == ("True", "RolloutPaused")
    hour = w.run(3600)
    assert all(d.revisions.candidate == NEW and d.rollout and d.rollout.paused for d in hour)
    assert all(d.replicas == paused.replicas for d in hour)
    assert "RolloutPaused" not in reasons(hour)  # said once, not every reconcile
    assert hour[-1].requeue_at is None

    # a person accepts it: the rollout goes on to the next step
    w.annotations["llmservice.dev/resume"] = "true"
    resumed = w.tick()
    assert "Resumed" in reasons([resumed])
    assert resumed.consumed == ("llmservice.dev/resume",)
    assert "llmservice.dev/resume" not in w.annotations
    assert resumed.rollout is not None and resumed.rollout.step == 3


def test_prometheus_errors_past_the_limit_roll_back() -> None:
    w = world()
    w.prometheus_down = True
    decisions = start(w)
    final = decisions[-1]
    assert final.revisions.failed == NEW
    assert "AnalysisError" in reasons(decisions) and "AnalysisFailed" not in reasons(decisions)
    run = final.rollout.analysis if final.rollout else None
    assert run is not None
    assert (run.phase, run.errors, run.failed, run.measurements_taken) == ("Error", 5, 0, 0)
    assert {m.verdict for m in run.last} == {"Error"}
    assert "connection refused" in run.last[0].message
    assert condition(final, "RolledBack") == ("True", "AnalysisError")


def test_a_prometheus_blip_is_not_a_failure() -> None:
    w = world()
    w.prometheus_down = True
    w.revision = NEW
    w.run_until(lambda d: bool(d.rollout and d.rollout.analysis and d.rollout.analysis.errors == 3))
    w.prometheus_down = False
    final = w.run_until(done)
    assert final.revisions.stable == NEW


def test_restart_mid_analysis_resumes_without_starting_over() -> None:
    w = world()
    w.revision = NEW
    w.run_until(
        lambda d: bool(d.rollout and d.rollout.analysis and d.rollout.analysis.measurements_taken)
    )
    before = w.rollout_status()
    assert before is not None and before.analysis is not None
    # "restart": a new operator sees only the stored status and the cluster
    restarted = World(
        spec=w.spec, now=w.now, revision=NEW, deployments=dict(w.deployments),
        status=dict(w.status), behaviours=w.behaviours,
    )  # fmt: skip
    first = restarted.tick()
    assert first.rollout is not None and first.rollout.analysis is not None
    assert first.rollout.step == before.step
    assert first.rollout.analysis.started_at == before.analysis.started_at
    assert first.rollout.analysis.measurements_taken == 1
    assert "AnalysisStarted" not in reasons([first]) and first.events == ()
    assert first.replicas == w.decisions[-1].replicas  # no double shift
    final = restarted.run_until(done)
    assert final.revisions.stable == NEW
    assert reasons(restarted.decisions).count("AnalysisMeasurement") == 3  # 1 before + 1 + 2


def test_the_same_input_gives_the_same_decision() -> None:
    w = world()
    w.revision = NEW
    w.run_until(lambda d: bool(d.rollout and d.rollout.step == 3))  # setWeight 50, scaling
    rollout_input = w.input()
    a, b = step(rollout_input), step(rollout_input)
    assert a == b
    assert a.replicas == {OLD: 3, NEW: 2}


def test_spec_change_mid_rollout_abandons_the_candidate_first() -> None:
    w = world()
    w.revision = NEW
    w.run_until(lambda d: bool(d.rollout and d.rollout.step == 4))  # 50%, stable at 2
    w.revision = NEWER
    abandoning = w.tick()
    assert "RolloutSuperseded" in reasons([abandoning])
    assert abandoning.replicas == {OLD: 4, NEW: 2}  # stable back up first, split unchanged
    assert abandoning.rollout is not None and abandoning.rollout.pause_reason == "Abandoning"
    assert condition(abandoning, "Progressing") == ("True", "Abandoning")
    final = w.run_until(lambda d: d.revisions.candidate == NEWER)
    assert NEW not in final.replicas
    assert [(h.revision, h.outcome) for h in final.revisions.history][-1] == (NEW, "Superseded")
    assert final.revisions.failed is None
    assert "CandidateRemoved" in reasons(w.decisions) and "RolloutStarted" in reasons([final])
    assert w.run_until(done).revisions.stable == NEWER


def test_spec_reverted_to_the_stable_mid_rollout() -> None:
    w = world()
    w.revision = NEW
    w.run_until(lambda d: bool(d.rollout and d.rollout.step == 2))
    w.revision = OLD
    final = w.run_until(done)
    assert final.revisions.stable == OLD and final.revisions.failed is None
    assert final.replicas == {OLD: 4}
    assert condition(final, "Progressing") == ("False", "RolloutComplete")


def test_pause_until_resumed_by_a_status_patch() -> None:
    w = world({"steps": [{"setWeight": 25}, {"pause": {}}]})
    w.revision = NEW
    paused = w.run_until(lambda d: bool(d.rollout and d.rollout.paused))
    assert paused.rollout is not None and paused.rollout.pause_reason == "PauseStep"
    assert "llmservice.dev/resume" in paused.rollout.message
    assert len(w.run(600)) == 60 and w.decisions[-1].revisions.candidate == NEW
    # kubectl patch llmservice chat --subresource=status -p '{"status":{"rollout":{"paused":false}}}'
    w.status["rollout"]["paused"] = False
    resumed = w.tick()
    assert "Resumed" in reasons([resumed])
    assert w.run_until(done).revisions.stable == NEW


def test_smoke_test_failure_rolls_back_before_any_traffic() -> None:
    w = world()
    w.behaviours[NEW] = Behaviour(smoke=SmokeResult(False, False, "short: empty output"))
    decisions = start(w)
    assert decisions[-1].revisions.failed == NEW
    assert condition(decisions[-1], "RolledBack") == ("True", "SmokeTestFailed")
    assert all(d.traffic.active_revision == OLD for d in decisions)
    assert not w.queries


def test_smoke_test_is_retried_while_the_model_loads() -> None:
    w = world()
    w.behaviours[NEW] = Behaviour(smoke=SmokeResult(False, True, "short: HTTP 503"))
    w.revision = NEW
    w.run(60)
    waiting = w.decisions[-1]
    assert waiting.revisions.candidate == NEW and waiting.revisions.failed is None
    assert waiting.rollout is not None and "retrying" in waiting.rollout.message
    assert waiting.requeue_at == w.now - timedelta(seconds=10) + timedelta(seconds=10)
    w.behaviours[NEW].smoke = SmokeResult(True, False, "ok")
    assert w.run_until(done).revisions.stable == NEW
    assert w.smoke_tests >= 5


def test_smoke_test_can_be_switched_off() -> None:
    w = world({**CANARY, "smokeTest": {"enabled": False}})
    start(w)
    assert w.smoke_tests == 0


def test_gateway_canary_moves_route_weights_and_keeps_the_stable_whole() -> None:
    w = world({**CANARY, "gatewayParentRef": {"name": "public"}})
    decisions = start(w)
    during = [d for d in decisions if d.revisions.candidate]
    assert all(d.replicas[OLD] == 4 for d in during)
    assert all(d.traffic.active_revision == OLD for d in during)
    assert all(d.traffic.preview_revision == NEW for d in during)
    weights = list(dict.fromkeys(d.traffic.route_weights for d in during))
    # 10% of 4 is 1 pod; 50% is 2 pods, the weight following as they get Ready (1 of 2: 25%)
    assert weights == [(100, 0), (90, 10), (75, 25), (50, 50)]
    final = decisions[-1]
    assert final.traffic.route_weights == (100, 0) and final.traffic.active_revision == NEW
    assert final.traffic.preview_revision is None


def test_gateway_weight_follows_ready_candidate_pods() -> None:
    w = world({**CANARY, "gatewayParentRef": {"name": "public"}}, total=10)
    w.revision = NEW
    w.run_until(lambda d: bool(d.rollout and d.rollout.step == 3))  # setWeight 50: 5 pods
    scaling = w.decisions[-1]
    assert scaling.traffic.route_weights == (90, 10)  # 1 of 5 Ready: 10%, not 50% yet


# -- blue-green ---------------------------------------------------------------------------------


def test_blue_green_switches_in_one_step_and_keeps_the_old_revision() -> None:
    w = world(BLUE_GREEN)
    decisions = start(w)
    during = [d for d in decisions if d.revisions.candidate]
    assert all(d.replicas == {OLD: 4, NEW: 4} for d in during)
    assert all(d.traffic.preview_revision == NEW for d in during)
    actives = [d.traffic.active_revision for d in decisions]
    switch = actives.index(NEW)
    assert set(actives[:switch]) == {OLD} and set(actives[switch:]) == {NEW}  # one step
    assert "ActiveSwitched" in reasons(decisions[switch : switch + 1])
    assert not any(d.traffic.active_revision is None for d in decisions)
    promoted = decisions[-1]
    assert promoted.revisions.stable == NEW
    assert promoted.replicas == {NEW: 4, OLD: 4}  # kept for scaleDownDelaySeconds
    assert promoted.traffic.active_revision == NEW
    assert promoted.requeue_at == w.now - timedelta(seconds=10) + timedelta(seconds=300)
    kept = w.run(290)
    assert all(OLD in d.replicas for d in kept)
    w.run(20)
    assert w.decisions[-1].replicas == {NEW: 4}
    assert set(w.deployments) == {NEW}


def test_blue_green_post_promotion_failure_switches_back_at_once() -> None:
    w = world(BLUE_GREEN)
    w.revision = NEW
    switched = w.run_until(lambda d: d.traffic.active_revision == NEW)
    assert switched.rollout is not None and switched.rollout.step == 3
    w.behaviours[NEW].error_rate = 0.2
    decisions: list[RolloutDecision] = []
    while not decisions or decisions[-1].revisions.candidate:
        decisions.append(w.tick())
    back = decisions[-1]
    assert "AnalysisFailed" in reasons([back]) and "RolledBack" in reasons([back])
    assert back.traffic.active_revision == OLD and back.replicas == {OLD: 4}
    assert all(d.traffic.active_revision == NEW for d in decisions[:-1])
    assert back.revisions.failed == NEW


def test_blue_green_waits_for_a_person_without_auto_promote() -> None:
    w = world({**BLUE_GREEN, "blueGreen": {"autoPromote": False}})
    w.revision = NEW
    waiting = w.run_until(lambda d: bool(d.rollout and d.rollout.paused))
    assert waiting.rollout is not None and waiting.rollout.pause_reason == "AwaitingPromotion"
    assert waiting.traffic.active_revision == OLD
    w.run(300)
    assert w.decisions[-1].traffic.active_revision == OLD
    w.annotations["llmservice.dev/resume"] = ""
    assert w.tick().traffic.active_revision == NEW


def test_blue_green_post_promotion_is_skipped_with_nothing_to_judge() -> None:
    w = world({"strategy": "blueGreen"}, slo=SLOSpec())
    decisions = start(w)
    assert "PostPromotionAnalysisSkipped" in reasons(decisions)
    assert decisions[-1].revisions.stable == NEW
    assert not w.queries


# -- odd situations ---------------------------------------------------------------------------


def test_stable_deployment_gone_means_no_rollout() -> None:
    d = step(
        RolloutInput(
            spec=RolloutSpec.model_validate(CANARY),
            slo=SLOSpec(),
            service=SERVICE,
            revision=NEW,
            total_replicas=2,
            deployments={},
            status=None,
            revisions=RevisionsStatus(stable=OLD),
            now=T0,
        )
    )
    assert d.revisions.stable == NEW and d.revisions.candidate is None
    assert d.replicas == {NEW: 2}
    assert [e.reason for e in d.events] == ["StableRevisionMissing"]


def test_requeue_times() -> None:
    w = world()
    w.revision = NEW
    analysing = w.run_until(lambda d: bool(d.rollout and d.rollout.analysis))
    assert analysing.rollout is not None and analysing.rollout.analysis is not None
    assert analysing.requeue_at is not None
    assert analysing.requeue_at.strftime("%Y-%m-%dT%H:%M:%SZ") == (
        analysing.rollout.analysis.next_measurement_at
    )
    pausing = w.run_until(lambda d: bool(d.rollout and d.rollout.paused))
    assert pausing.requeue_at == w.now - timedelta(seconds=10) + timedelta(minutes=1)


def test_scaled_to_zero_the_stable_stays_at_zero() -> None:
    w = world(total=0)
    w.revision = NEW
    decisions = w.run(60)
    assert all(d.replicas[OLD] == 0 for d in decisions)
    assert decisions[-1].replicas[NEW] == 1  # one candidate pod, to smoke-test and judge
