"""Condition helpers with metav1.Condition semantics (pure).

lastTransitionTime moves only when status flips, as in Argo Rollouts' conditions.go, so a
reconcile that changes nothing produces an identical status (and no write).
"""

from __future__ import annotations

from datetime import datetime

from .api.status import Condition, ConditionStatus
from .api.timestamps import to_rfc3339

__all__ = ["find", "set_condition"]


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
