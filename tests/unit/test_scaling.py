"""scaling.evaluate_scaling: one operator-mode evaluation, and when it flags ScalingDegraded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from llmservice_operator.api.spec import ScalingSpec
from llmservice_operator.api.timestamps import to_rfc3339
from llmservice_operator.autoscale import ReplicaSample
from llmservice_operator.scaling import evaluate_scaling, evaluation_due

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
SPEC = ScalingSpec(min_replicas=1, max_replicas=4, target_queue_depth=2)


def _pod(name: str, ready: bool) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_prometheus_down_holds_and_flags() -> None:
    out = evaluate_scaling(SPEC, 8, None, [_pod("a", True)], None, "connection refused", NOW)
    assert out.total == 1
    assert out.degraded_reason == "connection refused"
    assert out.status.degraded_reason == "connection refused"


def test_a_pod_not_scraped_yet_is_not_degraded() -> None:
    samples = {"a": ReplicaSample(waiting=0, running=1)}
    pods = [_pod("a", True), _pod("b", True)]
    out = evaluate_scaling(SPEC, 8, None, pods, samples, None, NOW)
    assert out.degraded_reason is None


def test_silence_from_every_ready_pod_is_degraded() -> None:
    out = evaluate_scaling(SPEC, 8, None, [_pod("a", True)], {}, None, NOW)
    assert out.degraded_reason is not None


def test_evaluation_interval() -> None:
    first = evaluate_scaling(SPEC, 8, None, [_pod("a", True)], {}, None, NOW)
    assert not evaluation_due(first.status, SPEC, NOW)
    later = NOW.replace(second=SPEC.evaluation_interval_seconds)
    assert evaluation_due(first.status, SPEC, later)


TO_ZERO = ScalingSpec(
    min_replicas=0,
    max_replicas=4,
    target_queue_depth=2,
    arrival_rate_query="sum(rate(gateway_requests_total[1m]))",
    scale_down={"stabilizationWindowSeconds": 60, "maxReplicasPerPeriod": 1},
)
IDLE = {"a": ReplicaSample(waiting=0, running=0, completion_rate=0.0)}


def _run(
    spec: ScalingSpec,
    pods: list[dict[str, Any]],
    samples: dict[str, ReplicaSample],
    seconds: int,
    arrival_rate: float | None,
    arrival_error: str | None = None,
) -> list[int]:
    """``evaluate_scaling`` every 15 s for ``seconds`` after NOW with the same inputs, one replica
    desired at the start: the totals."""
    one = spec.model_copy(update={"min_replicas": 1})
    previous = evaluate_scaling(
        one, 8, None, pods, samples, None, NOW, arrival_rate, arrival_error
    ).status
    totals = []
    for t in range(15, seconds + 1, 15):
        out = evaluate_scaling(
            spec,
            8,
            previous,
            pods,
            samples,
            None,
            NOW.replace(minute=t // 60, second=t % 60),
            arrival_rate,
            arrival_error,
        )
        previous, _ = out.status, totals.append(out.total)
    return totals


def test_idle_at_the_gateway_for_a_whole_window_scales_to_zero() -> None:
    totals = _run(TO_ZERO, [_pod("a", True)], IDLE, 90, arrival_rate=0.0)
    assert totals[-1] == 0
    assert 0 not in totals[: 60 // 15 - 1], "scaled to zero before a whole idle window"


def test_requests_at_the_gateway_wake_a_service_at_zero() -> None:
    status = evaluate_scaling(TO_ZERO, 8, None, [], {}, None, NOW, 0.0).status.model_copy(
        update={"desired_replicas": 0}
    )
    asleep = evaluate_scaling(TO_ZERO, 8, status, [], {}, None, NOW.replace(second=15), 0.0)
    assert asleep.total == 0 and asleep.degraded_reason is None
    woken = evaluate_scaling(TO_ZERO, 8, asleep.status, [], {}, None, NOW.replace(second=30), 0.2)
    assert woken.total == 1
    assert "activating 0 -> 1" in woken.status.reason


def test_an_unanswered_arrival_query_never_scales_down_or_to_zero() -> None:
    error = "arrivalRateQuery returned no series: sum(rate(gateway_requests_total[1m]))"
    totals = _run(TO_ZERO, [_pod("a", True)], IDLE, 300, arrival_rate=None, arrival_error=error)
    assert set(totals) == {1}
    out = evaluate_scaling(TO_ZERO, 8, None, [_pod("a", True)], IDLE, None, NOW, None, error)
    assert out.degraded_reason is not None and "no series" in out.degraded_reason
    busy = {"a": ReplicaSample(waiting=6, running=8, completion_rate=1.0)}
    up = evaluate_scaling(TO_ZERO, 8, None, [_pod("a", True)], busy, None, NOW, None, error)
    assert up.total > 1, "a queue still scales up without the arrival rate"


def test_a_pod_ready_for_less_than_a_minute_teaches_no_throughput() -> None:
    """The Ready condition's transition time says how young a pod's rate window is: a minute
    into a saturation, a pod Ready for 20 s teaches nothing (its one-minute rate reads part of
    a minute), one Ready for three minutes teaches the throughput."""
    busy = {"a": ReplicaSample(waiting=6, running=8, completion_rate=2.0)}
    later = NOW + timedelta(seconds=60)

    def pod(ready_since: datetime) -> dict[str, Any]:
        ready = {"type": "Ready", "status": "True", "lastTransitionTime": to_rfc3339(ready_since)}
        return {"metadata": {"name": "a"}, "status": {"phase": "Running", "conditions": [ready]}}

    young, old = later - timedelta(seconds=20), NOW - timedelta(seconds=120)
    for ready_since, learns in ((young, False), (old, True)):
        first = evaluate_scaling(SPEC, 8, None, [pod(ready_since)], busy, None, NOW)
        out = evaluate_scaling(SPEC, 8, first.status, [pod(ready_since)], busy, None, later)
        learned = [r for r in out.status.recommendations if "=@" in r]
        assert bool(learned) == learns, (ready_since, out.status.recommendations)


def test_replicas_that_just_turned_ready_unsampled_do_not_inherit_the_old_backlog() -> None:
    """CI, 7 December: two replicas turned Ready while the one serving held 3 waiting; the
    scrape had not reached them yet. Extrapolated over 3 replicas the backlog read 9 waiting
    (3 each, over the target of 2) and added a fourth at the moment capacity arrived. Unsampled
    replicas Ready for seconds hold nothing yet; ones Ready for minutes still count like the
    sampled ones."""
    old = NOW - timedelta(seconds=300)

    def pod(name: str, ready_since: datetime) -> dict[str, Any]:
        ready = {"type": "Ready", "status": "True", "lastTransitionTime": to_rfc3339(ready_since)}
        return {"metadata": {"name": name}, "status": {"phase": "Running", "conditions": [ready]}}

    busy = {"a": ReplicaSample(waiting=3, running=4, kv_cache_usage=0.05)}
    previous = evaluate_scaling(SPEC, 4, None, [pod("a", old)], busy, None, NOW).status
    previous = previous.model_copy(update={"desired_replicas": 3})
    later = NOW + timedelta(seconds=15)
    for since, total in ((later - timedelta(seconds=2), 3), (old, 4)):
        pods = [pod("a", old), pod("b", since), pod("c", since)]
        out = evaluate_scaling(SPEC, 4, previous, pods, busy, None, later)
        assert out.total == total, (since, out.status.recommendations)
