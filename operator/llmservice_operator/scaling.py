"""One autoscaling evaluation for a service, in operator mode (pure).

The reconcile gathers samples (adapters/scaling_metrics.py) and calls :func:`evaluate_scaling`;
the answer is the total replica count for the rollout machine to share between revisions, and
the `status.autoscaling` to write. Evaluations happen every `evaluationIntervalSeconds`; between
them the last desired count stands.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from .api.spec import ScalingSpec
from .api.status import AutoscalingStatus
from .api.timestamps import from_rfc3339, to_rfc3339
from .autoscale import (
    PolicyConfig,
    ReplicaSample,
    ScalingInputs,
    decide_replicas,
    history_from_status,
)

__all__ = [
    "ScalingOutcome",
    "evaluate_scaling",
    "evaluation_due",
    "pod_counts",
    "pod_is_ready",
    "ready_seconds",
]


@dataclass(frozen=True)
class ScalingOutcome:
    total: int
    status: AutoscalingStatus
    degraded_reason: str | None


def evaluation_due(status: AutoscalingStatus | None, spec: ScalingSpec, now: datetime) -> bool:
    if status is None or status.last_evaluation_time is None:
        return True
    last = from_rfc3339(status.last_evaluation_time).timestamp()
    return now.timestamp() - last >= spec.evaluation_interval_seconds


def _ready_condition(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's Ready condition when it is True, else None."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready" and c.get("status") == "True":
            return dict(c)
    return None


def pod_is_ready(pod: dict[str, Any]) -> bool:
    """The pod's Ready condition is True."""
    return _ready_condition(pod) is not None


def ready_seconds(pod: dict[str, Any], now: datetime) -> float | None:
    """How long the pod has been Ready (its Ready condition's last transition); None unknown."""
    ready = _ready_condition(pod)
    if ready is None or not ready.get("lastTransitionTime"):
        return None
    since = from_rfc3339(str(ready["lastTransitionTime"])).timestamp()
    return max(0.0, now.timestamp() - since)


def pod_counts(pods: list[dict[str, Any]]) -> tuple[list[str], int]:
    """(names of Ready pods, pods started but not Ready), terminating pods excluded."""
    ready: list[str] = []
    loading = 0
    for pod in pods:
        if pod.get("metadata", {}).get("deletionTimestamp"):
            continue
        if pod_is_ready(pod):
            ready.append(pod["metadata"]["name"])
        elif (pod.get("status") or {}).get("phase") in ("Pending", "Running"):
            loading += 1
    return ready, loading


def evaluate_scaling(
    spec: ScalingSpec,
    max_num_seqs: int,
    previous: AutoscalingStatus | None,
    pods: list[dict[str, Any]],
    samples: dict[str, ReplicaSample] | None,
    metrics_error: str | None,
    now: datetime,
    arrival_rate: float | None = None,
    arrival_error: str | None = None,
) -> ScalingOutcome:
    """Decide the total replicas from the Ready pods' samples (None: metrics unavailable) and,
    when ``spec.arrivalRateQuery`` is set, the requests/s it measured (None with
    ``arrival_error``: unknown, so never idle)."""
    ready, loading = pod_counts(pods)
    current = previous.desired_replicas if previous is not None else spec.min_replicas
    current = max(spec.min_replicas, min(spec.max_replicas, current))
    ages = {p["metadata"]["name"]: ready_seconds(p, now) for p in pods}
    per_pod = None
    if samples is not None:
        per_pod = [replace(samples[n], ready_seconds=ages.get(n)) for n in ready if n in samples]
    inputs = ScalingInputs(
        now=now.timestamp(),
        ready=len(ready),
        loading=loading,
        current=current,
        samples=per_pod,
        history=history_from_status(previous),
        arrival_rate=arrival_rate,
        arrival_rate_missing=arrival_error is not None,
    )
    decision = decide_replicas(PolicyConfig.from_spec(spec, max_num_seqs), inputs)
    reason = None
    # Pods Ready but not scraped yet (just started) are normal: only a source that failed, or
    # silence from every Ready replica, is worth a condition.
    if decision.degraded and (samples is None or (ready and not per_pod)):
        reason = metrics_error or "no metrics from any Ready replica"
    elif decision.degraded and arrival_error is not None:
        reason = f"{arrival_error}; never scaling down (or waking from zero) without it"
    status = decision.to_status().model_copy(
        update={"last_evaluation_time": to_rfc3339(now), "degraded_reason": reason}
    )
    return ScalingOutcome(decision.desired_replicas, status, reason)
