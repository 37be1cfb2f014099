"""Shared pydantic base for every API model: camelCase on the wire, strict about unknown keys."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints
from pydantic.alias_generators import to_camel

__all__ = [
    "DURATION_PATTERN",
    "DURATION_RULES",
    "MAX_DURATION",
    "MAX_DURATION_HOURS",
    "ApiModel",
    "Duration",
    "cel",
    "parse_duration_seconds",
]

#: Go-style durations as Argo Rollouts and Kubernetes users write them: "30s", "5m", "1h30m".
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
#: Characters of a duration ("1h30m15s500ms" is 13).
MAX_DURATION = 32
#: The longest duration a spec may give, a (leap) year: beyond, datetime arithmetic overflows
#: ("99999999999999999999999999999h" matches the pattern).
MAX_DURATION_HOURS = 8784
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration_seconds(text: str) -> float:
    """Parse "1m30s" into 90.0; raises ValueError for anything else."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"{text!r} is not a duration such as 30s, 5m or 1h30m")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(text))


def _at_most_a_year(text: str) -> str:
    if parse_duration_seconds(text) > MAX_DURATION_HOURS * 3600:
        raise ValueError(f"{text!r:.40} is longer than {MAX_DURATION_HOURS}h (a year)")
    return text


#: A duration field's type; its Field carries json_schema_extra=DURATION_RULES (the same bound
#: for the API server).
Duration = Annotated[
    str,
    StringConstraints(pattern=DURATION_PATTERN, max_length=MAX_DURATION),
    AfterValidator(_at_most_a_year),
]


def cel(rule: str, message: str, field_path: str | None = None) -> dict[str, Any]:
    """One `x-kubernetes-validations` entry (a CEL rule the API server enforces)."""
    entry: dict[str, Any] = {"rule": rule, "message": message}
    if field_path is not None:
        entry["fieldPath"] = field_path
    return entry


DURATION_RULES: dict[str, Any] = {
    "x-kubernetes-validations": [
        cel(
            f"duration(self) <= duration('{MAX_DURATION_HOURS}h')",
            f"a duration must be at most {MAX_DURATION_HOURS}h (a year)",
        )
    ]
}


class ApiModel(BaseModel):
    """camelCase aliases, unknown keys rejected, immutable once parsed."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """The object as it is written to Kubernetes: aliases, no unset optionals."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")
