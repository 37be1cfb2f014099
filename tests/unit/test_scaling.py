"""scaling.evaluate: one operator-mode evaluation, and when it flags ScalingDegraded."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from llmservice_operator.api.spec import ScalingSpec
from llmservice_operator.autoscale import ReplicaSample
from llmservice_operator.scaling import evaluate, evaluation_due

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
    out = evaluate(SPEC, 8, None, [_pod("a", True)], None, "connection refused", NOW)
    assert out.total == 1
    assert out.degraded_reason == "connection refused"
    assert out.status.degraded_reason == "connection refused"


def test_a_pod_not_scraped_yet_is_not_degraded() -> None:
    samples = {"a": ReplicaSample(waiting=0, running=1)}
    pods = [_pod("a", True), _pod("b", True)]
    out = evaluate(SPEC, 8, None, pods, samples, None, NOW)
    assert out.degraded_reason is None


def test_silence_from_every_ready_pod_is_degraded() -> None:
    out = evaluate(SPEC, 8, None, [_pod("a", True)], {}, None, NOW)
    assert out.degraded_reason is not None


def test_evaluation_interval() -> None:
    first = evaluate(SPEC, 8, None, [_pod("a", True)], {}, None, NOW)
    assert not evaluation_due(first.status, SPEC, NOW)
    later = NOW.replace(second=SPEC.evaluation_interval_seconds)
    assert evaluation_due(first.status, SPEC, later)
