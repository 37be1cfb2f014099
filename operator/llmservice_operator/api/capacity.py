"""Status of scheduled capacity (``status.autoscaling.schedule``) and of what the service's GPUs
cost (``status.cost``); docs/capacity-and-cost.md."""

from __future__ import annotations

from pydantic import Field

from .base import ApiModel
from .text import Name, Time

__all__ = ["COST_DAYS", "COST_HOURS", "CostBucket", "CostStatus", "ScheduleStatus"]

#: Hourly buckets kept in ``status.cost.hourly``: the last 24 hours and the one before them
#: (counted in proportion for the rolling 24-hour window).
COST_HOURS = 25
#: Daily (UTC) buckets kept in ``status.cost.daily``: 30 days and the one before them.
COST_DAYS = 31


class ScheduleStatus(ApiModel):
    """The bounds spec.scaling.schedules set now."""

    window: Name | None = Field(
        default=None,
        description="The open window whose minReplicas is the floor; absent: none is open.",
    )
    open: list[Name] = Field(
        default_factory=list, max_length=16, description="Every window open now."
    )
    min_replicas: int = Field(description="The floor in force.")
    max_replicas: int = Field(description="The cap in force.")
    next_change_time: Time | None = Field(
        default=None, description="When a window opens or closes next (the service is requeued)."
    )


class CostBucket(ApiModel):
    """GPU-hours and their cost in one UTC hour or day."""

    start: Time
    gpu_hours: float = Field(ge=0)
    cost: float = Field(ge=0)


class CostStatus(ApiModel):
    """GPU-hours the service's replicas held and their cost at the GPU catalog's list prices,
    as of accountedUntil: integrated from the replicas the operator saw its Deployments run,
    refreshed when that count changes and at least hourly."""

    gpu_hours_24h: float = Field(
        default=0.0, ge=0, alias="gpuHours24h", description="The last 24 hours."
    )
    cost_24h: float = Field(default=0.0, ge=0, alias="cost24h")
    gpu_hours_30d: float = Field(
        default=0.0, ge=0, alias="gpuHours30d", description="The last 30 days."
    )
    cost_30d: float = Field(default=0.0, ge=0, alias="cost30d")
    gpu_hours_total: float = Field(
        default=0.0, ge=0, description="Since accounting began (llmservice_gpu_hours_total)."
    )
    cost_total: float = Field(default=0.0, ge=0, description="Likewise (llmservice_cost_total).")
    gpus: int = Field(default=0, ge=0, description="GPUs held at accountedUntil.")
    cost_per_hour: float = Field(
        default=0.0, ge=0, description="What those GPUs cost per hour (list prices)."
    )
    unpriced: list[Name] = Field(
        default_factory=list,
        max_length=16,
        description="GPU types held without a price in the catalog (counted in GPU-hours, "
        "not in cost).",
    )
    since: Time = Field(description="When accounting began.")
    accounted_until: Time = Field(description="Integrated up to this time.")
    hourly: list[CostBucket] = Field(default_factory=list, max_length=COST_HOURS)
    daily: list[CostBucket] = Field(default_factory=list, max_length=COST_DAYS)
