"""A person's controls and the safety nets: abort, retry, promote, promote --full, pause,
resume (also during a running analysis), skip-analysis; fast rollback within the rollback
window; background analysis; the analysis' error retry, initial delay, dry run, history and
frozen settings; blue-green's preview size, scale-down delays and load test.

Every tick also checks the harness' capacity invariants (harness.World.check_invariants).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from llmservice_operator.api.spec import RolloutSpec, SLOSpec
from llmservice_operator.rollout.analysis import ERROR_RATE, SAMPLE_COUNT, TTFT
from llmservice_operator.rollout.machine import (
    ABORT_ANNOTATION,
    BACKGROUND_PREFIX,
    PAUSE_ANNOTATION,
    PROMOTE_ANNOTATION,
    PROMOTE_FULL_ANNOTATION,
    RESUME_ANNOTATION,
    RETRY_ANNOTATION,
    SKIP_ANALYSIS_ANNOTATION,
    DeploymentObservation,
    RolloutDecision,
    build_plan,
)

from .harness import NEW, NEWER, OLD, Behaviour, World

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
#: stage index -> kind, for the canary above
STAGES = ["prepare", "setWeight", "analysis", "setWeight", "pause", "analysis", "promote"]
BLUE_GREEN: dict[str, Any] = {
    "strategy": "blueGreen",
    "steps": [{"analysis": {}}],
    "analysis": {"interval": "1m", "count": 2},
    "blueGreen": {"autoPromote": False},
}


def world(spec: dict[str, Any] = CANARY, **kw: Any) -> World:
    w = World(spec=RolloutSpec.model_validate(spec), **kw)
    w.settle_initial()
    return w


def reasons(decisions: list[RolloutDecision]) -> list[str]:
    return [e.reason for d in decisions for e in d.events]


def messages(decisions: list[RolloutDecision], reason: str) -> list[str]:
    return [e.message for d in decisions for e in d.events if e.reason == reason]


def done(d: RolloutDecision) -> bool:
    return d.revisions.candidate is None


def condition(d: RolloutDecision, type_: str) -> tuple[str, str]:
    found = next(c for c in d.conditions if c.type == type_)
    return found.status, found.reason


def at_step(index: int) -> Any:
    return lambda d: bool(d.rollout and d.revisions.candidate and d.rollout.step == index)


def annotate(w: World, key: str, value: str = "true") -> RolloutDecision:
    w.annotations[key] = value
    d = w.tick()
    assert key in d.consumed and key not in w.annotations  # acted on once, then removed
    return d


# -- abort -------------------------------------------------------------------------------------


@pytest.mark.parametrize("index", range(len(STAGES)))
def test_abort_at_every_canary_stage(index: int) -> None:
    w = world(total=20)  # 10% is 2 replicas: setWeight 10 waits for one more than prepare's
    w.revision = NEW
    if index == 0:
        w.behaviours[NEW] = Behaviour(ready=False)  # still in prepare
        w.tick()
    elif STAGES[index] == "promote":
        w.run_until(at_step(5))
        w.behaviours[NEW].ready = False  # the promotion waits for the candidate's pods
        w.run_until(at_step(index))
    else:
        w.run_until(at_step(index))
    before = w.decisions[-1]
    aborting = annotate(w, ABORT_ANNOTATION)
    assert "Aborted" in reasons([aborting])
    assert aborting.revisions.failed == NEW
    assert condition(aborting, "RolledBack") == ("True", "Aborted")
    if before.replicas[OLD] < 20:  # the stable gave up replicas: it comes back first
        assert aborting.replicas[OLD] == 20 and aborting.revisions.candidate == NEW
        # traffic stays where it was until the stable is Ready
        assert aborting.traffic.active_revision == before.traffic.active_revision
        assert condition(aborting, "Progressing") == ("True", "RollingBack")
    final = aborting if done(aborting) else w.run_until(done)
    assert final.traffic.active_revision == OLD and final.replicas[OLD] == 20
    assert final.revisions.stable == OLD and final.revisions.failed == NEW
    assert final.revisions.history[-1].outcome == "Aborted"
    assert condition(final, "Progressing") == ("False", "RolloutAborted")
    assert condition(final, "Degraded") == ("True", "Aborted")
    assert "kubectl llms -n ml retry chat" in next(
        c.message for c in final.conditions if c.type == "RolledBack"
    )
    # no traffic, but its replicas for abortScaleDownDelaySeconds (30), then 0: still there
    kept = final.replicas[NEW]
    assert kept == w.deployments[NEW].replicas
    assert final.rollout is not None and final.rollout.scale_down_at is not None
    scale_down_at = w.now - timedelta(seconds=10) + timedelta(seconds=30)
    assert final.rollout.scale_down_at == scale_down_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    while w.now < scale_down_at:
        assert w.tick().replicas[NEW] == kept
    later = w.tick()
    assert later.replicas == {OLD: 20, NEW: 0}
    assert later.traffic.active_revision == OLD and later.revisions.candidate is None
    assert "RolloutStarted" not in reasons(w.run(600))  # not tried again by itself


@pytest.mark.parametrize("index", range(4))
def test_abort_at_every_blue_green_stage(index: int) -> None:
    """prepare, the pre-promotion analysis, the switch awaiting promotion, post-promotion."""
    w = world(BLUE_GREEN)
    w.revision = NEW
    if index == 0:
        w.behaviours[NEW] = Behaviour(ready=False)
        w.tick()
    elif index == 3:
        w.run_until(at_step(2))
        annotate(w, PROMOTE_ANNOTATION)
        w.run_until(lambda d: d.traffic.active_revision == NEW)
    else:
        w.run_until(at_step(index))
    aborted = annotate(w, ABORT_ANNOTATION)
    # the old revision stays at full size in blue-green: traffic is back at once
    assert aborted.traffic.active_revision == OLD and aborted.revisions.candidate is None
    assert aborted.replicas[OLD] == 4
    assert "RolledBack" in reasons([aborted])


def test_abort_names_the_revision_it_is_meant_for() -> None:
    w = world()
    w.revision = NEW
    w.run_until(at_step(2))
    ignored = annotate(w, ABORT_ANNOTATION, NEWER)  # kubectl llms saw another rollout
    assert ignored.revisions.candidate == NEW and ignored.revisions.failed is None
    assert messages([ignored], "ControlIgnored") == [
        f"abort: it was meant for revision {NEWER}, but the rollout is now of {NEW}"
    ]
    assert annotate(w, ABORT_ANNOTATION, NEW).revisions.failed == NEW


def test_abort_without_a_rollout_is_refused_with_a_reason() -> None:
    w = world()
    d = annotate(w, ABORT_ANNOTATION)
    assert messages([d], "ControlIgnored") == ["abort: no rollout is in progress"]
    assert d.replicas == {OLD: 4}


# -- retry ---------------------------------------------------------------------------------------


def test_abort_mid_canary_then_retry_promotes_from_the_start() -> None:
    w = world()
    w.revision = NEW
    w.run_until(at_step(4))  # the pause at 50%
    annotate(w, ABORT_ANNOTATION)
    w.run_until(done)
    w.run(60)  # scaled to 0, kept
    assert w.deployments[NEW] == DeploymentObservation(0, 0)
    retried = annotate(w, RETRY_ANNOTATION)
    assert "Retried" in reasons([retried]) and "RolloutStarted" in reasons([retried])
    assert retried.revisions.candidate == NEW and retried.revisions.failed is None
    assert retried.rollout is not None and retried.rollout.step == 0
    assert retried.replicas[NEW] == 1  # prepare again: one replica behind the preview
    final = w.run_until(done)
    assert final.revisions.stable == NEW
    assert reasons(w.decisions).count("SmokeTestPassed") == 2  # the retry ran it again


def test_retry_of_a_rolled_back_revision_runs_it_again() -> None:
    w = world()
    w.behaviours[NEW] = Behaviour(ttft_ms=1500)
    w.revision = NEW
    w.run_until(done)
    assert w.decisions[-1].revisions.failed == NEW and NEW not in w.deployments
    w.behaviours[NEW].ttft_ms = 400  # e.g. the regression was Prometheus' fault
    annotate(w, RETRY_ANNOTATION)
    assert w.run_until(done).revisions.stable == NEW


def test_retry_with_nothing_to_retry_is_refused() -> None:
    w = world()
    d = annotate(w, RETRY_ANNOTATION)
    assert messages([d], "ControlIgnored") == [
        "retry: no aborted or rolled-back revision to run again"
    ]
    w.revision = NEW
    w.run_until(at_step(2))
    d = annotate(w, RETRY_ANNOTATION)
    assert messages([d], "ControlIgnored") == [f"retry: a rollout of {NEW} is in progress"]


# -- promote, promote --full, skip-analysis ------------------------------------------------------


def test_promote_full_from_step_1_skips_every_step_and_analysis() -> None:
    w = world({**CANARY, "backgroundAnalysis": {"startingStep": 0}})
    w.revision = NEW
    w.run_until(at_step(2))  # the first analysis, after setWeight 10 (step 1)
    queries_before = len(w.queries)
    promoting = annotate(w, PROMOTE_FULL_ANNOTATION)
    assert "PromotedFull" in reasons([promoting])
    assert promoting.rollout is not None and promoting.rollout.step == 6  # promote
    # the stable gives up a replica per Ready candidate replica only
    assert promoting.replicas == {OLD: 4 - w.deployments[NEW].ready, NEW: 4}
    final = w.run_until(done)
    assert final.revisions.stable == NEW and final.replicas == {NEW: 4}
    after = w.decisions[-(len(w.decisions) - w.decisions.index(promoting)) :]
    assert not {"AnalysisMeasurement", "RolloutPaused"} & set(reasons(after))
    assert len(w.queries) == queries_before  # no more analysis, not even in the background


def test_promote_full_during_prepare_still_smoke_tests() -> None:
    w = world()
    w.behaviours[NEW] = Behaviour(ready=False)
    w.revision = NEW
    w.tick()
    annotate(w, PROMOTE_FULL_ANNOTATION)
    w.behaviours[NEW].ready = True
    final = w.run_until(done)
    assert final.revisions.stable == NEW
    assert w.smoke_tests == 1 and not w.queries


def test_promote_ends_the_current_step_only() -> None:
    w = world({"steps": [{"setWeight": 25}, {"pause": {}}, {"analysis": {}}, {"pause": {}}]})
    w.revision = NEW
    w.run_until(lambda d: bool(d.rollout and d.rollout.paused))
    d = annotate(w, PROMOTE_ANNOTATION)
    assert "StepPromoted" in reasons([d]) and d.rollout is not None and d.rollout.step == 3
    assert d.rollout.analysis is not None and d.rollout.analysis.phase == "Running"
    d = annotate(w, PROMOTE_ANNOTATION)  # during the analysis: it ends unjudged
    assert d.rollout is not None and d.rollout.step == 4 and d.rollout.paused
    assert not w.queries
    assert annotate(w, PROMOTE_ANNOTATION).revisions.candidate == NEW  # the last pause ends
    assert w.run_until(done).revisions.stable == NEW


def test_promote_cannot_skip_prepare() -> None:
    w = world()
    w.behaviours[NEW] = Behaviour(ready=False)
    w.revision = NEW
    w.tick()
    d = annotate(w, PROMOTE_ANNOTATION)
    assert d.rollout is not None and d.rollout.step == 0
    assert messages([d], "ControlIgnored") == [
        "promote: step 0/6 (prepare) cannot be skipped: the candidate must be Ready and pass "
        "the smoke test before any traffic"
    ]


def test_skip_analysis_skips_every_analysis_of_this_rollout() -> None:
    w = world()
    w.revision = NEW
    w.run_until(at_step(2))
    d = annotate(w, SKIP_ANALYSIS_ANNOTATION)
    assert "AnalysisSkipped" in reasons([d])
    final = w.run_until(done)
    assert final.revisions.stable == NEW
    assert not w.queries
    assert "RolloutPaused" in reasons(w.decisions)  # the pause step still paused
    # the next rollout is judged again
    w.revision = NEWER
    w.run_until(done)
    assert w.queries


def test_skip_analysis_skips_blue_green_post_promotion() -> None:
    w = world({**BLUE_GREEN, "blueGreen": {"autoPromote": True}})
    w.revision = NEW
    w.run_until(at_step(1))
    annotate(w, SKIP_ANALYSIS_ANNOTATION)
    assert w.run_until(done).revisions.stable == NEW and not w.queries


# -- pause, resume --------------------------------------------------------------------------------


def test_a_persons_pause_holds_the_step_until_resumed() -> None:
    w = world()
    w.revision = NEW
    w.run_until(at_step(3))  # setWeight 50, scaling
    paused = annotate(w, PAUSE_ANNOTATION)
    assert paused.rollout is not None and paused.rollout.user_paused and paused.rollout.paused
    assert condition(paused, "Progressing") == ("True", "RolloutPaused")
    hour = w.run(3600)
    assert all(d.rollout and d.rollout.step == 3 for d in hour)
    assert hour[-1].replicas == {OLD: 2, NEW: 2}  # the step's own replicas still apply
    assert "WeightSet" not in reasons(hour)
    resumed = annotate(w, RESUME_ANNOTATION)
    assert "Resumed" in reasons([resumed]) and "WeightSet" in reasons([resumed])
    assert w.run_until(done).revisions.stable == NEW


def test_analysis_keeps_judging_during_a_persons_pause() -> None:
    w = world()
    w.revision = NEW
    w.run_until(at_step(2))
    annotate(w, PAUSE_ANNOTATION)
    w.behaviours[NEW].error_rate = 0.2
    final = w.run_until(done)
    assert final.revisions.failed == NEW
    assert condition(final, "RolledBack") == ("True", "AnalysisFailed")


def test_a_timed_pause_that_ran_out_while_held_moves_on_at_resume() -> None:
    w = world()
    w.revision = NEW
    w.run_until(at_step(4))
    annotate(w, PAUSE_ANNOTATION)
    w.run(300)  # the 1m pause step ran out meanwhile
    assert w.decisions[-1].rollout is not None and w.decisions[-1].rollout.step == 4
    resumed = annotate(w, RESUME_ANNOTATION)
    assert resumed.rollout is not None and resumed.rollout.step == 5  # the analysis


def test_resume_of_a_persons_pause_does_not_skip_the_steps_own_pause() -> None:
    w = world({"steps": [{"setWeight": 25}, {"pause": {}}]})
    w.revision = NEW
    w.run_until(lambda d: bool(d.rollout and d.rollout.pause_reason == "PauseStep"))
    annotate(w, PAUSE_ANNOTATION)
    d = annotate(w, RESUME_ANNOTATION)
    assert d.rollout is not None and d.rollout.pause_reason == "PauseStep"  # one pause lifted
    d = annotate(w, RESUME_ANNOTATION)
    assert d.rollout is not None and d.rollout.step == 3  # promote


def test_resume_during_a_running_analysis_lets_an_inconclusive_end_go_on() -> None:
    w = world()
    w.behaviours[NEW] = Behaviour(requests=0)  # no data: the analysis ends inconclusive
    w.revision = NEW
    w.run_until(at_step(2))
    d = annotate(w, RESUME_ANNOTATION)
    assert "ResumeDeferred" in reasons([d])
    assert d.rollout is not None and d.rollout.resume_after_analysis
    assert d.rollout.analysis is not None and d.rollout.analysis.phase == "Running"
    moved = w.run_until(at_step(3))
    assert "Resumed" in reasons([moved])  # accepted, not paused
    assert not any(
        d.rollout and d.rollout.pause_reason == "AnalysisInconclusive" for d in w.decisions
    )
    # the resume was for that analysis only: the next one pauses on no data
    paused = w.run_until(
        lambda d: bool(d.rollout and d.rollout.pause_reason == "AnalysisInconclusive")
    )
    assert paused.rollout is not None and paused.rollout.step == 5


def test_resume_during_an_analysis_that_passes_does_not_skip_the_next_pause() -> None:
    w = world({"steps": [{"setWeight": 25}, {"analysis": {}}, {"pause": {}}]})
    w.revision = NEW
    w.run_until(at_step(2))
    annotate(w, RESUME_ANNOTATION)
    paused = w.run_until(lambda d: bool(d.rollout and d.rollout.paused))
    assert paused.rollout is not None and paused.rollout.step == 3
    w.run(600)
    assert w.decisions[-1].revisions.candidate == NEW


def test_resume_with_nothing_paused_says_so() -> None:
    w = world()
    w.behaviours[NEW] = Behaviour(ready=False)
    w.revision = NEW
    w.tick()
    d = annotate(w, RESUME_ANNOTATION)
    assert messages([d], "ControlIgnored") == ["resume: nothing is paused"]


# -- fast rollback -----------------------------------------------------------------------------


def _served_then_replaced(spec: dict[str, Any]) -> World:
    """OLD stable, NEW promoted (OLD served as stable until then), now the spec goes back."""
    w = world(spec)
    w.revision = NEW
    w.run_until(done)
    assert w.decisions[-1].revisions.stable == NEW
    return w


@pytest.mark.parametrize("window", [{"revisions": 1}, {"duration": "1h"}])
def test_fast_rollback_within_the_window(window: dict[str, Any]) -> None:
    w = _served_then_replaced({**CANARY, "rollbackWindow": window})
    queries, smoke = len(w.queries), w.smoke_tests
    w.revision = OLD
    first = len(w.decisions)
    final = w.run_until(done)
    decisions = w.decisions[first:]
    assert final.revisions.stable == OLD
    fast = messages(decisions, "FastRollback")
    assert len(fast) == 1 and "smoke test only, its steps and analysis skipped" in fast[0]
    assert len(w.queries) == queries and w.smoke_tests == smoke + 1
    assert not {"WeightSet", "AnalysisStarted", "RolloutPaused"} & set(reasons(decisions))
    assert decisions[0].rollout is not None and decisions[0].rollout.fast_rollback
    assert {d.rollout.step for d in decisions if d.rollout and d.revisions.candidate} == {0, 1}
    log = {e.revision: e for e in final.revisions.log}
    assert [e.number for e in final.revisions.log] == [2, 3]  # OLD renumbered as the newest
    assert log[OLD].stable_until is None and log[NEW].stable_until is not None


def test_slow_rollback_outside_the_window() -> None:
    w = _served_then_replaced({**CANARY, "rollbackWindow": {"duration": "10m"}})
    w.run(3600)  # OLD stopped serving more than 10m ago
    w.revision = OLD
    first = len(w.decisions)
    w.run_until(done)
    decisions = w.decisions[first:]
    assert "FastRollback" not in reasons(decisions) and "AnalysisStarted" in reasons(decisions)


def test_a_revision_that_never_served_is_not_fast() -> None:
    w = world({**CANARY, "rollbackWindow": {"revisions": 3}})
    w.behaviours[NEW] = Behaviour(ttft_ms=1500)
    w.revision = NEW
    w.run_until(done)  # rolled back: it never served as stable
    w.revision = NEWER
    w.run_until(done)
    w.revision = NEW
    first = len(w.decisions)
    w.run(30)
    assert "FastRollback" not in reasons(w.decisions[first:])


def test_revisions_window_counts_stable_revisions_only() -> None:
    w = _served_then_replaced({**CANARY, "rollbackWindow": {"revisions": 1}})
    w.revision = NEWER  # OLD is now the 2nd most recent stable before NEWER
    w.run_until(done)
    w.revision = OLD
    first = len(w.decisions)
    w.run(30)
    assert "FastRollback" not in reasons(w.decisions[first:])


def test_fast_blue_green_rollback_switches_without_waiting_for_a_person() -> None:
    w = _served_then_replaced(
        {**BLUE_GREEN, "blueGreen": {"autoPromote": True}, "rollbackWindow": {"revisions": 1}}
    )
    w.run(60)  # the old revision's scale-down delay passed
    w.revision = OLD
    queries = len(w.queries)
    final = w.run_until(done)
    assert final.revisions.stable == OLD and len(w.queries) == queries
    assert [s.kind for s in build_plan(w.spec, fast=True)] == ["prepare", "switch"]


# -- background analysis -----------------------------------------------------------------------


BACKGROUND: dict[str, Any] = {
    "steps": [{"setWeight": 50}, {"pause": {}}, {"setWeight": 100}],
    "analysis": {"interval": "1m", "count": 2},
    "backgroundAnalysis": {"startingStep": 0},
}


def test_background_analysis_catches_a_degradation_during_a_pause() -> None:
    w = world(BACKGROUND)
    w.revision = NEW
    paused = w.run_until(lambda d: bool(d.rollout and d.rollout.paused))
    assert paused.rollout is not None and paused.rollout.background_analysis is not None
    w.run(300)  # judged every minute while paused: all fine
    run = w.decisions[-1].rollout.background_analysis  # type: ignore[union-attr]
    assert run is not None and run.phase == "Running" and run.successful >= 4
    w.behaviours[NEW].ttft_ms = 2000  # it degrades during the pause
    failed = w.run_until(lambda d: "AnalysisFailed" in reasons([d]), limit_seconds=70)
    assert messages([failed], "AnalysisFailed")[0].startswith(
        "step 2/4 (pause): background analysis: 1 failed measurement(s) > failureLimit 0"
    )
    final = w.run_until(done)
    assert final.revisions.failed == NEW and final.replicas == {OLD: 4}
    # every background query asked for under its own keys, judged on the candidate
    asked = [c.name for q in w.queries for c in q]
    assert asked and all(name.startswith(BACKGROUND_PREFIX) for name in asked)


def test_background_analysis_starts_at_its_step_and_stops_at_promotion() -> None:
    spec = {**BACKGROUND, "backgroundAnalysis": {"startingStep": 1}}
    w = world(spec)
    w.revision = NEW
    w.run_until(at_step(1))
    assert w.decisions[-1].rollout.background_analysis is None  # type: ignore[union-attr]
    w.run_until(at_step(2))
    started = w.decisions[-1]
    assert started.rollout is not None and started.rollout.background_analysis is not None
    w.annotations[RESUME_ANNOTATION] = "true"
    w.run_until(done)
    queried = len(w.queries)
    w.run(600)
    assert len(w.queries) == queried  # none after promotion


def test_inconclusive_background_analysis_pauses_and_resume_starts_it_afresh() -> None:
    w = world(BACKGROUND)
    w.behaviours[NEW] = Behaviour(requests=0)
    w.revision = NEW
    held = w.run_until(
        lambda d: bool(d.rollout and d.rollout.pause_reason == "BackgroundAnalysisInconclusive")
    )
    assert held.rollout is not None and held.rollout.step == 2
    w.run(600)
    assert w.decisions[-1].rollout.pause_reason == "BackgroundAnalysisInconclusive"  # type: ignore[union-attr]
    w.behaviours[NEW].requests = 600
    d = annotate(w, RESUME_ANNOTATION)
    run = d.rollout.background_analysis  # type: ignore[union-attr]
    assert run is not None and run.phase == "Running" and run.measurements_taken == 0
    assert d.rollout is not None and d.rollout.pause_reason == "PauseStep"  # the step's own


# -- the analysis: error retry, initial delay, dry run, history, frozen settings --------------------


def test_errors_are_retried_after_ten_seconds_not_an_interval() -> None:
    w = world({**CANARY, "analysis": {"interval": "1m", "count": 2, "consecutiveErrorLimit": 2}})
    w.tick_seconds = 1
    w.prometheus_down = True
    w.revision = NEW
    w.run_until(lambda d: bool(d.rollout and d.rollout.analysis))
    started = w.now
    final = w.run_until(done)
    assert final.revisions.failed == NEW
    # first measurement one interval in, then two retries 10 s apart
    assert timedelta(seconds=79) <= w.now - started <= timedelta(seconds=83)


def test_initial_delay_sets_the_first_measurement() -> None:
    w = world({**CANARY, "analysis": {"interval": "1m", "count": 1, "initialDelay": "15s"}})
    w.tick_seconds = 1
    w.revision = NEW
    started = w.run_until(lambda d: bool(d.rollout and d.rollout.analysis))
    run = started.rollout.analysis  # type: ignore[union-attr]
    assert run is not None
    assert run.next_measurement_at == (
        w.now - timedelta(seconds=1) + timedelta(seconds=15)
    ).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_dry_run_check_is_reported_and_never_acts() -> None:
    w = world({**CANARY, "analysis": {"interval": "1m", "count": 2, "dryRun": [TTFT]}})
    w.behaviours[NEW] = Behaviour(ttft_ms=1500)  # fails the SLO
    w.revision = NEW
    final = w.run_until(done)
    assert final.revisions.stable == NEW  # promoted: TTFT is only reported
    run = final.rollout.analysis  # type: ignore[union-attr]
    assert run is not None
    ttft = next(m for m in run.last if m.check == TTFT)
    assert (ttft.verdict, ttft.dry_run) == ("Failed", True)
    assert "ttftP99Ms Failed (dry run)" in messages(w.decisions, "AnalysisMeasurement")[0]


def test_each_check_keeps_its_last_ten_measurements() -> None:
    spec = {**CANARY, "steps": [{"setWeight": 50}, {"analysis": {"count": 12}}]}
    w = world(spec)
    w.revision = NEW
    w.run_until(
        lambda d: bool(d.rollout and d.rollout.analysis and d.rollout.analysis.phase != "Running")
    )
    run = w.decisions[-1].rollout.analysis  # type: ignore[union-attr]
    assert run is not None and run.measurements_taken == 12
    history = {h.check: h for h in run.checks}
    assert set(history) == {SAMPLE_COUNT, TTFT, ERROR_RATE}
    points = history[TTFT].measurements
    assert (
        len(points) == 10 and {p.value for p in points} == {400} and history[TTFT].threshold == 800
    )
    times = [p.time for p in points]
    assert times == sorted(times) and len(set(times)) == 10


def test_analysis_settings_are_frozen_per_rollout() -> None:
    w = world()
    w.revision = NEW
    w.run_until(at_step(2))
    # edited mid-rollout: five measurements per analysis, and a stricter SLO
    w.spec = RolloutSpec.model_validate({**CANARY, "analysis": {"interval": "1m", "count": 5}})
    w.slo = SLOSpec(ttft_p99_ms=100, max_error_rate=0.01)
    first = len(w.decisions)
    final = w.run_until(done)
    decisions = w.decisions[first:]
    assert final.revisions.stable == NEW  # judged by TTFT <= 800, as when it started
    assert reasons(w.decisions).count("AnalysisMeasurement") == 4  # 2 analyses x count 2
    assert len(messages(decisions, "AnalysisSettingsFrozen")) == 1
    assert final.rollout is not None and final.rollout.frozen is not None
    assert final.rollout.frozen.analysis.count == 2
    # the next rollout uses the edited settings: TTFT 400 > 100 now fails
    w.revision = NEWER
    assert w.run_until(done).revisions.failed == NEWER


# -- blue-green: preview size, delays, load test ---------------------------------------------------


def test_preview_replica_count_until_the_switch() -> None:
    w = world({**BLUE_GREEN, "blueGreen": {"autoPromote": False, "previewReplicaCount": 1}})
    w.revision = NEW
    waiting = w.run_until(
        lambda d: bool(d.rollout and d.rollout.pause_reason == "AwaitingPromotion")
    )
    assert all(d.replicas.get(NEW) in (None, 1) for d in w.decisions)
    w.run(600)
    assert w.decisions[-1].replicas == {OLD: 4, NEW: 1} == waiting.replicas  # no GPUs meanwhile
    approved = annotate(w, PROMOTE_ANNOTATION)
    assert approved.replicas == {OLD: 4, NEW: 4} and approved.traffic.active_revision == OLD
    switched = w.run_until(lambda d: d.traffic.active_revision == NEW)
    assert w.deployments[NEW].ready == 4  # switched only once Ready at full size
    assert switched.rollout is not None and switched.rollout.step == 3


def test_scale_down_delay_defaults_to_thirty_seconds() -> None:
    w = world({"strategy": "blueGreen"})
    w.revision = NEW
    promoted = w.run_until(done)
    assert promoted.replicas == {NEW: 4, OLD: 4}
    assert promoted.requeue_at == w.now - timedelta(seconds=10) + timedelta(seconds=30)
    w.run(30)
    assert w.decisions[-1].replicas == {NEW: 4}


def test_load_test_runs_from_the_smoke_test_to_the_switch() -> None:
    spec = {
        "strategy": "blueGreen",
        "steps": [{"analysis": {}}],
        "analysis": {"interval": "1m", "count": 2},
        "blueGreen": {"previewReplicaCount": 1, "loadTest": {"rate": 2}},
    }
    w = world(spec)
    w.revision = NEW
    w.run_until(done)
    by_step = [(d.rollout.step if d.rollout else None, d.load_test) for d in w.decisions[2:]]
    assert (0, None) in by_step and (1, NEW) in by_step
    assert all(load is None for step, load in by_step if step in (0, 3) or step is None)
    assert by_step[-1] == (3, None)  # promoted: no more load


# -- the revision log ------------------------------------------------------------------------


def test_revision_log_numbers_revisions_and_keeps_their_spec() -> None:
    w = World(spec=RolloutSpec.model_validate(CANARY))
    w.revision_spec = {"engine": {"maxModelLen": 4096}}
    w.settle_initial()
    w.revision = NEW
    w.revision_spec = {"engine": {"maxModelLen": 8192}}
    final = w.run_until(done)
    log = final.revisions.log
    assert [(e.number, e.revision, e.spec) for e in log] == [
        (1, OLD, {"engine": {"maxModelLen": 4096}}),
        (2, NEW, {"engine": {"maxModelLen": 8192}}),
    ]
    assert log[0].stable_since is not None and log[0].stable_until is not None
    assert log[1].stable_since == log[0].stable_until and log[1].stable_until is None
