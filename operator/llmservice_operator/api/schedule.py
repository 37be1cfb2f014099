"""`spec.scaling.schedules`: windows of scheduled capacity (docs/capacity-and-cost.md).

A window is a pair of cron expressions in a time zone: it opens at each time ``start`` names and
closes at the next time ``end`` names. While it is open its ``minReplicas`` (and its
``maxReplicas``, when given) replace ``spec.scaling``'s bounds. When it is open, and when it
changes, is computed in ``autoscale/schedule.py``; this module only says what may be written.

The API server judges what it can alone (the field count of a cron expression, the shape of a
zone name, minReplicas against maxReplicas) through the schema and CEL; whether the cron fields
are in range and the zone exists in the IANA database is judged here, by pydantic, and a spec
that fails it is ``InvalidSpec``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from pydantic import ConfigDict, Field, field_validator, model_validator

from .base import ApiModel, cel

__all__ = [
    "CRON_PATTERN",
    "MAX_SCHEDULES",
    "ScheduleWindow",
    "TIME_ZONE_PATTERN",
    "check_schedules",
    "cron_error",
    "schedule_rules",
    "time_zone_error",
]

#: Five fields separated by blanks (minute hour day-of-month month day-of-week), the syntax of
#: a Kubernetes CronJob's schedule without its @-macros.
CRON_PATTERN = r"^\S+( +\S+){4}$"
#: An IANA zone name as the API server can judge it ("Europe/Berlin", "UTC", "Etc/GMT+2").
TIME_ZONE_PATTERN = r"^[A-Za-z][-+_A-Za-z0-9]*(/[-+_A-Za-z0-9]+)*$"
#: At most this many windows per service.
MAX_SCHEDULES = 16

_K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
#: Any moment: cronsim checks an expression when it is constructed.
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def cron_error(expression: str) -> str | None:
    """Why ``expression`` is not a five-field cron expression cronsim evaluates, else None."""
    if len(expression.split()) != 5:
        return "needs five fields (minute hour day-of-month month day-of-week)"
    try:
        CronSim(expression, _EPOCH)
    except CronSimError as err:
        return str(err)
    return None


def time_zone_error(name: str) -> str | None:
    """Why ``name`` is not an IANA time zone this machine knows, else None."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder, e.g. "Europe"
        return f"{name!r} is not an IANA time zone (such as UTC, Europe/Berlin, America/New_York)"
    return None


class ScheduleWindow(ApiModel):
    """A window of scheduled capacity: from each start until the next end, in timeZone; its
    bounds replace scaling.minReplicas and maxReplicas while it is open."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
                    "scaling.schedules: a window's minReplicas must not exceed its maxReplicas",
                ),
                cel(
                    "self.start != self.end",
                    "scaling.schedules: a window's start and end must differ",
                ),
            ]
        }
    )

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=_K8S_NAME,
        description="Names the window in status.autoscaling.schedule and the autoscaler's reason.",
    )
    start: str = Field(
        min_length=9,
        max_length=200,
        pattern=CRON_PATTERN,
        description=(
            "Cron expression (minute hour day-of-month month day-of-week, in timeZone) of the "
            "times the window opens, e.g. '0 8 * * 1-5'."
        ),
    )
    end: str = Field(
        min_length=9,
        max_length=200,
        pattern=CRON_PATTERN,
        description=(
            "Cron expression of the times it closes, e.g. '0 20 * * 1-5'. The window is open "
            "when the last start is later than the last end (an end at the same minute wins)."
        ),
    )
    time_zone: str = Field(
        default="UTC",
        min_length=1,
        max_length=64,
        pattern=TIME_ZONE_PATTERN,
        description="IANA time zone of start and end (daylight saving time is followed).",
    )
    min_replicas: int = Field(
        ge=0, le=1000, description="The floor while open; 0 needs scaling.arrivalRateQuery."
    )
    max_replicas: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="The cap while open; scaling.maxReplicas when unset.",
    )

    @field_validator("start", "end")
    @classmethod
    def _cron(cls, value: str) -> str:
        problem = cron_error(value)
        if problem is not None:
            raise ValueError(f"{value!r} is not a cron expression: {problem}")
        return value

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        problem = time_zone_error(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _bounds(self) -> ScheduleWindow:
        if self.max_replicas is not None and self.min_replicas > self.max_replicas:
            raise ValueError(
                "scaling.schedules: a window's minReplicas must not exceed its maxReplicas"
            )
        if self.start == self.end:
            raise ValueError("scaling.schedules: a window's start and end must differ")
        return self


SCHEDULES_NEED_OPERATOR_MODE = (
    "scaling.schedules need scaling.mode operator (with KEDA, use its cron scaler)"
)
SCHEDULE_ZERO_NEEDS_ARRIVALS = (
    "scaling.schedules: a window with minReplicas 0 needs scaling.arrivalRateQuery (only "
    "requests counted ahead of the replicas can wake a service scaled to zero)"
)
SCHEDULE_MIN_OVER_MAX = (
    "scaling.schedules: a window without maxReplicas must not have a minReplicas above "
    "scaling.maxReplicas"
)


def schedule_rules() -> list[dict[str, Any]]:
    """The CEL rules on ``spec.scaling`` that tie its windows to its other fields."""
    return [
        cel(
            "!has(self.schedules) || size(self.schedules) == 0 || !has(self.mode) "
            "|| self.mode == 'operator'",
            SCHEDULES_NEED_OPERATOR_MODE,
        ),
        cel(
            "!has(self.schedules) || has(self.arrivalRateQuery) "
            "|| self.schedules.all(w, w.minReplicas > 0)",
            SCHEDULE_ZERO_NEEDS_ARRIVALS,
        ),
        cel(
            "!has(self.schedules) || self.schedules.all(w, has(w.maxReplicas) "
            "|| w.minReplicas <= (has(self.maxReplicas) ? self.maxReplicas : 1))",
            SCHEDULE_MIN_OVER_MAX,
        ),
    ]


def check_schedules(
    windows: Sequence[ScheduleWindow],
    mode: str,
    max_replicas: int,
    arrival_rate_query: str | None,
) -> None:
    """The same rules as :func:`schedule_rules` (and unique names), for pydantic: ValueError."""
    if not windows:
        return
    if mode != "operator":
        raise ValueError(SCHEDULES_NEED_OPERATOR_MODE)
    if arrival_rate_query is None and any(w.min_replicas == 0 for w in windows):
        raise ValueError(SCHEDULE_ZERO_NEEDS_ARRIVALS)
    if any(w.max_replicas is None and w.min_replicas > max_replicas for w in windows):
        raise ValueError(SCHEDULE_MIN_OVER_MAX)
    names = [w.name for w in windows]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"scaling.schedules: {', '.join(twice)} named more than once")
