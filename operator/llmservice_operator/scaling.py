"""One autoscaling evaluation for a service, in operator mode (pure).

The reconcile gathers samples (adapters/scaling_metrics.py) and calls :func:`evaluate_scaling`;
the answer is the total replica count for the rollout machine to share between revisions, and
the `status.autoscaling` to write. Evaluations happen every `evaluationIntervalSeconds`; between
them the last desired count stands.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, cast

from .api.spec import ScalingSpec
from .api.status import AutoscalingStatus
from .api.timestamps import from_rfc3339, to_rfc3339
from .autoscale import (
    CapacityPrior,
    PolicyConfig,
    ReplicaSample,
    ScalingInputs,
    decide_replicas,
    history_from_status,
)
from .autoscale.policy import JUST_READY_SECONDS
from .autoscale.schedule import scheduled_bounds
from .service_plan import ServicePlan
from .sizing import (
    GpuCatalog,
    GpuType,
    KvCacheDtype,
    ModelArchitecture,
    Quantization,
    SizingError,
    performance_model,
)

__all__ = [
    "ScalingOutcome",
    "capacity_prior_for",
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
    """An interval since the last evaluation, or a schedule window opened or closed since."""
    if status is None or status.last_evaluation_time is None:
        return True
    if spec.schedules and scheduled_bounds(spec, now).to_status() != status.schedule:
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


def capacity_prior_for(plan: ServicePlan, catalog: GpuCatalog) -> CapacityPrior | None:
    """The sizing's estimate of a full replica's capacity in tokens (``autoscale.capacity``),
    times ``spec.scaling.capacityPriorScale``; None when the scale is 0 or the plan's GPU or
    model cannot be modelled. Computed once per distinct plan (a thousand services evaluate
    every 15 s)."""
    sizing, service = plan.sizing, plan.service
    scale = service.spec.scaling.capacity_prior_scale
    gpu = catalog.find(sizing.gpu_type)
    if scale <= 0 or gpu is None or not sizing.fits or sizing.kv_pool_tokens <= 0:
        return None
    try:
        architecture = plan.architecture
    except ValueError:  # a SpecError: the plan was made from this spec, so not expected
        return None
    return _prior(
        architecture,
        gpu,
        sizing.tensor_parallel_size,
        sizing.dtype,
        sizing.quantization,
        sizing.kv_cache_dtype,
        sizing.max_num_seqs,
        sizing.kv_pool_tokens,
        scale,
    )


@functools.lru_cache(maxsize=256)
def _prior(
    architecture: ModelArchitecture,
    gpu: GpuType,
    tensor_parallel_size: int,
    dtype: str,
    quantization: str,
    kv_cache_dtype: str,
    max_num_seqs: int,
    kv_pool_tokens: int,
    scale: float,
) -> CapacityPrior | None:
    try:
        perf = performance_model(
            architecture,
            gpu,
            tensor_parallel_size,
            dtype=dtype,
            quantization=cast("Quantization", quantization),
            kv_cache_dtype=cast("KvCacheDtype", kv_cache_dtype),
        )
        prior = CapacityPrior(
            perf, max_num_seqs=max_num_seqs, kv_pool_tokens=kv_pool_tokens, time_scale=scale
        )
        prior.at()  # the roofline answers for this model and GPU
        return prior
    except (SizingError, ValueError):
        return None


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
    *,
    plan: ServicePlan | None = None,
    catalog: GpuCatalog | None = None,
) -> ScalingOutcome:
    """Decide the total replicas from the Ready pods' samples (None: metrics unavailable) and,
    when ``spec.arrivalRateQuery`` is set, the requests/s it measured (None with
    ``arrival_error``: unknown, so never idle). With the service's ``plan`` and the GPU
    ``catalog`` the policy plans on the sizing's prior of a replica's capacity until it has
    seen one full, and keeps what it learns per GPU type. An open ``spec.scaling.schedules``
    window's bounds replace the spec's (``autoscale.schedule``)."""
    bounds = scheduled_bounds(spec, now)
    # The count set now, within every bound the spec can set (a window's edge is a change the
    # decision makes and explains, not one it finds already made).
    windows = spec.schedules
    lowest = min([spec.min_replicas, *(w.min_replicas for w in windows)])
    highest = max([spec.max_replicas, *(w.max_replicas or 0 for w in windows)])
    spec = spec.model_copy(
        update={"min_replicas": bounds.min_replicas, "max_replicas": bounds.max_replicas}
    )
    ready, loading = pod_counts(pods)
    current = previous.desired_replicas if previous is not None else spec.min_replicas
    current = max(lowest, min(highest, current))
    ages = {p["metadata"]["name"]: ready_seconds(p, now) for p in pods}
    per_pod = None
    just_ready = 0
    if samples is not None:
        per_pod = [replace(samples[n], ready_seconds=ages.get(n)) for n in ready if n in samples]
        just_ready = sum(
            1
            for n in ready
            if n not in samples and (age := ages.get(n)) is not None and age < JUST_READY_SECONDS
        )
    inputs = ScalingInputs(
        now=now.timestamp(),
        ready=len(ready),
        loading=loading,
        current=current,
        samples=per_pod,
        just_ready=just_ready,
        history=history_from_status(previous),
        arrival_rate=arrival_rate,
        arrival_rate_missing=arrival_error is not None,
    )
    prior = capacity_prior_for(plan, catalog) if plan is not None and catalog is not None else None
    config = PolicyConfig.from_spec(
        spec,
        max_num_seqs,
        gpu_type=plan.sizing.gpu_type if plan is not None else "",
        capacity_prior=prior,
        min_from=bounds.window,
        max_from=bounds.cap_window,
    )
    decision = decide_replicas(config, inputs)
    reason = None
    # Pods Ready but not scraped yet (just started) are normal: only a source that failed, or
    # silence from every Ready replica, is worth a condition.
    if decision.degraded and (samples is None or (ready and not per_pod)):
        reason = metrics_error or "no metrics from any Ready replica"
    elif decision.degraded and arrival_error is not None:
        reason = f"{arrival_error}; never scaling down (or waking from zero) without it"
    status = decision.to_status().model_copy(
        update={
            "last_evaluation_time": to_rfc3339(now),
            "degraded_reason": reason,
            "schedule": bounds.to_status(),
        }
    )
    return ScalingOutcome(decision.desired_replicas, status, reason)
