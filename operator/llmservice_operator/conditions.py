"""Condition helpers with metav1.Condition semantics (pure).

lastTransitionTime moves only when status flips, as in Argo Rollouts' conditions.go, so a
reconcile that changes nothing produces an identical status (and no write).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .api.status import Condition, ConditionStatus
from .api.timestamps import to_rfc3339

__all__ = ["find", "set_condition", "settle"]


def find(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    now: datetime,
    generation: int | None = None,
) -> list[Condition]:
    """Return a new list with `type_` set; other conditions keep their order and values."""
    previous = find(conditions, type_)
    transition = (
        previous.last_transition_time
        if previous is not None and previous.status == status
        else to_rfc3339(now)
    )
    updated = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=transition,
        observed_generation=generation,
    )
    if previous is None:
        return [*conditions, updated]
    return [updated if c.type == type_ else c for c in conditions]


def settle(
    status: dict[str, Any], error: str | None, generation: int | None, now: datetime
) -> dict[str, Any]:
    """The status as a reconcile writes it: `ReconcileError` says whether the API server
    refused what it applied (its message) and clears on the next success, and `Ready` sums
    everything up as kstatus, Argo CD and Flux read it: True only when the current generation
    is observed, the service is Available, and nothing progresses, degrades or fails."""
    conditions = [Condition.model_validate(c) for c in status.get("conditions") or []]
    if error is None:
        conditions = set_condition(
            conditions, "ReconcileError", "False", "ReconcileSucceeded", "", now, generation
        )
    else:
        conditions = set_condition(
            conditions, "ReconcileError", "True", "ApplyFailed", error, now, generation
        )
    ready, reason, message = _readiness(conditions, status, generation)
    conditions = set_condition(
        conditions, "Ready", "True" if ready else "False", reason, message, now, generation
    )
    return {**status, "conditions": [c.model_dump(by_alias=True, mode="json") for c in conditions]}


def _readiness(
    conditions: list[Condition], status: dict[str, Any], generation: int | None
) -> tuple[bool, str, str]:
    def true(type_: str) -> Condition | None:
        condition = find(conditions, type_)
        return condition if condition is not None and condition.status == "True" else None

    if (blocked := true("InvalidSpec")) is not None:
        return False, "InvalidSpec", blocked.message
    if (failed := true("ReconcileError")) is not None:
        return False, "ReconcileError", failed.message
    if generation is not None and status.get("observedGeneration") != generation:
        return False, "Reconciling", f"generation {generation} is not observed yet"
    available = find(conditions, "Available")
    if available is None or available.status != "True":
        why = available.message if available is not None else "no replica is Ready yet"
        return False, "NotAvailable", why
    if (progressing := true("Progressing")) is not None:
        return False, progressing.reason, progressing.message
    if (degraded := true("Degraded")) is not None:
        return False, degraded.reason, degraded.message
    return True, "Ready", f"generation {generation} serves with every replica it wants"
