"""What a service's GPUs cost: ``status.cost`` integrated from the replicas its Deployments
run (pure).

**What is counted.** Each revision's Deployment's ``status.replicas`` (its pods that exist and
are not terminating: what ``status.replicas`` of the LLMService adds up) times the GPUs its pod
template asks for (``nvidia.com/gpu`` or ``amd.com/gpu``), priced by the catalog GPU its node
affinity (or nodeSelector) selects, else the service's sized type (a type without a
``price_per_gpu_hour`` counts GPU-hours, not cost). So the count changes exactly when the
service's own ``status.replicas`` does, and folding it in costs no status write of its own.

**How.** The count is piecewise constant between observations: :func:`account` folds the time
since ``accountedUntil`` at the count held then into hourly and daily (UTC) buckets and the
all-time totals, and starts the next piece with the count seen now. It does so only when the
count (or its price) changed, or an hour after the last fold: between those the status is the
same object, so it is not written (a reconcile at rest writes nothing; a service at rest writes
its cost once an hour, :func:`cost_due`). The rolling windows are the buckets of the last 24
hours and 30 days as of ``accountedUntil``, the oldest bucket counted in proportion to the part
of it inside the window.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .api.capacity import COST_DAYS, COST_HOURS, CostBucket, CostStatus
from .api.timestamps import from_rfc3339, to_rfc3339, utc
from .sizing import GpuCatalog, GpuType

__all__ = [
    "REFRESH",
    "GpuUsage",
    "account",
    "cost_due",
    "cost_from_status",
    "pod_gpus",
    "service_cost",
    "usage_from_deployments",
]

#: A service whose GPU count does not change folds its cost this often.
REFRESH = timedelta(hours=1)
_HOUR = timedelta(hours=1)
_DAY = timedelta(days=1)
#: Decimals kept in the status: stable numbers, so that an unchanged status compares equal.
_DECIMALS = 6


@dataclass(frozen=True)
class GpuUsage:
    """The GPUs a service's pods hold at one moment, and what they cost per hour."""

    gpus: int = 0
    cost_per_hour: float = 0.0
    unpriced: tuple[str, ...] = ()
    """GPU types held that have no price in the catalog."""


def _quantity(value: Any) -> int:
    try:
        return max(0, int(str(value)))
    except ValueError:
        return 0


def pod_gpus(pod: Mapping[str, Any], resource_names: Iterable[str]) -> int:
    """GPUs a pod's (or pod template's) containers ask for (limits, else requests), of any of
    ``resource_names``."""
    names = set(resource_names)
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        total += sum(_quantity(v) for k, v in asked.items() if k in names)
    return total


def _selected_labels(pod: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, value) pairs the pod requires of its node: nodeSelector and required affinity."""
    spec = pod.get("spec") or {}
    pairs = [(str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items()]
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for expression in term.get("matchExpressions") or []:
            if expression.get("operator") == "In":
                key = str(expression.get("key", ""))
                pairs += [(key, str(v)) for v in expression.get("values") or []]
    return pairs


def _gpu_type(
    pod: Mapping[str, Any], catalog: GpuCatalog, default: GpuType | None
) -> GpuType | None:
    for key, value in _selected_labels(pod):
        for gpu in catalog.gpus:
            if gpu.node_label_key == key and gpu.node_label == value:
                return gpu
    return default


def usage_from_deployments(
    deployments: Iterable[Mapping[str, Any]], catalog: GpuCatalog, default_gpu_type: str | None
) -> GpuUsage:
    """The GPUs the ``deployments``' replicas hold now and their price per hour (see the module
    docstring)."""
    default = catalog.find(default_gpu_type) if default_gpu_type else None
    resource_names = {gpu.resource_name for gpu in catalog.gpus}
    gpus, rate, unpriced = 0, 0.0, set()
    for deployment in deployments:
        replicas = _quantity((deployment.get("status") or {}).get("replicas") or 0)
        template = (deployment.get("spec") or {}).get("template") or {}
        count = replicas * pod_gpus(template, resource_names)
        if count == 0:
            continue
        gpus += count
        gpu = _gpu_type(template, catalog, default)
        if gpu is None or gpu.price_per_gpu_hour is None:
            unpriced.add(gpu.name if gpu is not None else "unknown")
        else:
            rate += count * gpu.price_per_gpu_hour
    return GpuUsage(gpus, round(rate, _DECIMALS), tuple(sorted(unpriced)))


def _floor_hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _floor_day(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def _hours(span: timedelta) -> float:
    return span.total_seconds() / 3600.0


def _add(
    buckets: dict[datetime, list[float]], start: datetime, gpu_hours: float, cost: float
) -> None:
    entry = buckets.setdefault(start, [0.0, 0.0])
    entry[0] += gpu_hours
    entry[1] += cost


def _fold(
    hourly: dict[datetime, list[float]],
    daily: dict[datetime, list[float]],
    begin: datetime,
    end: datetime,
    gpus: int,
    cost_per_hour: float,
) -> None:
    """Add ``gpus`` held from ``begin`` to ``end`` to the buckets, split at hour boundaries
    (only the part recent enough to be kept)."""
    moment = max(begin, end - timedelta(days=COST_DAYS + 1))
    while moment < end:
        piece_end = min(_floor_hour(moment) + _HOUR, end)
        hours = _hours(piece_end - moment)
        for buckets, start in ((hourly, _floor_hour(moment)), (daily, _floor_day(moment))):
            _add(buckets, start, gpus * hours, cost_per_hour * hours)
        moment = piece_end


def _window(
    buckets: dict[datetime, list[float]],
    current: datetime,
    width: timedelta,
    count: int,
    now: datetime,
) -> tuple[float, float]:
    """(GPU-hours, cost) in the rolling window of ``(count - 1) x width`` that ends at ``now``,
    from the ``count`` buckets up to ``current`` (the one ``now`` is in): the oldest counts for
    the share of it inside the window (as if its GPUs were held evenly through it)."""
    oldest = current - (count - 1) * width
    share = 1.0 - (now - current) / width
    gpu_hours = cost = 0.0
    for start, (g, c) in buckets.items():
        weight = share if start == oldest else 1.0 if start > oldest else 0.0
        gpu_hours += g * weight
        cost += c * weight
    return gpu_hours, cost


def _as_buckets(buckets: Iterable[CostBucket]) -> dict[datetime, list[float]]:
    return {from_rfc3339(b.start): [b.gpu_hours, b.cost] for b in buckets}


def _kept(buckets: dict[datetime, list[float]], oldest: datetime) -> list[CostBucket]:
    return [
        CostBucket(start=to_rfc3339(start), gpu_hours=round(g, _DECIMALS), cost=round(c, _DECIMALS))
        for start, (g, c) in sorted(buckets.items())
        if start >= oldest
    ]


def account(current: CostStatus | None, usage: GpuUsage, now: datetime) -> CostStatus:
    """``status.cost`` after observing ``usage`` at ``now``: ``current`` itself (the same
    object) while the usage is the one held and the last fold is under an hour old; else the
    time since ``accountedUntil`` folded in at the usage held then."""
    now = utc(now).replace(microsecond=0)
    unpriced = list(usage.unpriced)
    if current is None:
        stamp = to_rfc3339(now)
        return CostStatus(
            gpus=usage.gpus,
            cost_per_hour=usage.cost_per_hour,
            unpriced=unpriced,
            since=stamp,
            accounted_until=stamp,
        )
    until = from_rfc3339(current.accounted_until)
    held = (current.gpus, current.cost_per_hour, current.unpriced)
    same = held == (usage.gpus, usage.cost_per_hour, unpriced)
    if same and now < until + REFRESH:
        return current
    if now <= until:  # a clock behind the last fold: nothing to integrate, take the new count
        return current.model_copy(
            update={"gpus": usage.gpus, "cost_per_hour": usage.cost_per_hour, "unpriced": unpriced}
        )
    hourly, daily = _as_buckets(current.hourly), _as_buckets(current.daily)
    _fold(hourly, daily, until, now, current.gpus, current.cost_per_hour)
    elapsed = _hours(now - until)
    hour, day = _floor_hour(now), _floor_day(now)
    hourly_kept = _kept(hourly, hour - (COST_HOURS - 1) * _HOUR)
    daily_kept = _kept(daily, day - (COST_DAYS - 1) * _DAY)
    gpu_hours_24h, cost_24h = _window(_as_buckets(hourly_kept), hour, _HOUR, COST_HOURS, now)
    gpu_hours_30d, cost_30d = _window(_as_buckets(daily_kept), day, _DAY, COST_DAYS, now)
    return current.model_copy(
        update={
            "gpu_hours_24h": round(gpu_hours_24h, _DECIMALS),
            "cost_24h": round(cost_24h, _DECIMALS),
            "gpu_hours_30d": round(gpu_hours_30d, _DECIMALS),
            "cost_30d": round(cost_30d, _DECIMALS),
            "gpu_hours_total": round(current.gpu_hours_total + current.gpus * elapsed, _DECIMALS),
            "cost_total": round(current.cost_total + current.cost_per_hour * elapsed, _DECIMALS),
            "gpus": usage.gpus,
            "cost_per_hour": usage.cost_per_hour,
            "unpriced": unpriced,
            "accounted_until": to_rfc3339(now),
            "hourly": hourly_kept,
            "daily": daily_kept,
        }
    )


def cost_due(cost: CostStatus) -> datetime:
    """When :func:`account` folds next if nothing changes (the service's requeue)."""
    return from_rfc3339(cost.accounted_until) + REFRESH


def cost_from_status(status: Mapping[str, Any] | None) -> CostStatus | None:
    """``status.cost`` as the object holds it; None when absent or unreadable (accounting then
    starts again)."""
    raw = (status or {}).get("cost")
    if not isinstance(raw, Mapping):
        return None
    try:
        return CostStatus.model_validate(raw)
    except ValueError:
        return None


def service_cost(
    body: Mapping[str, Any],
    deployments: Iterable[Mapping[str, Any]],
    catalog: GpuCatalog,
    gpu_type: str | None,
    now: datetime,
) -> CostStatus:
    """The LLMService ``body``'s ``status.cost`` after observing its revisions' ``deployments``
    at ``now``; ``gpu_type``: the sized type, for pods whose node affinity names none."""
    status = body.get("status")
    current = cost_from_status(status if isinstance(status, Mapping) else None)
    if gpu_type is None and isinstance(status, Mapping):
        gpu_type = (status.get("sizing") or {}).get("gpuType")
    return account(current, usage_from_deployments(deployments, catalog, gpu_type), now)
