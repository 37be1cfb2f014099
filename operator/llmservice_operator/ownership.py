"""Adoption refused: whose an object of a wanted name is, and what a conflict does (pure).

An object is this service's when its ownerReferences hold the service's uid; a name, a label
or an owner reference by name alone is not enough (anyone may label an object, and a service
deleted and made again under the same name has a new uid). Server-side apply would take over
any object of the name, so the reconcile asks who holds each name it has not seen as its own
(adapters/kube.py ``KubeAdapter.existing``: its watch cache, else one GET) and, on a conflict,
holds the service's writes (``refuse``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from .api.status import Condition
from .conditions import find, set_condition
from .decide import Decision
from .events import Event
from .observed import WORKLOAD_KINDS, ObservedState

__all__ = [
    "NAME_CONFLICT_RETRY_S",
    "NameConflict",
    "name_conflict",
    "only_ours",
    "owned_by",
    "refuse",
]

#: How soon a refused service looks again: a foreign object's removal sends us no event (it
#: carries none of our labels, so no watch of ours sees it).
NAME_CONFLICT_RETRY_S = 30.0


@dataclass(frozen=True)
class NameConflict:
    kind: str
    name: str
    owner: str
    """Who holds it: ``Kind/name``, or ``no owner``."""

    def describe(self) -> str:
        return f"{self.kind}/{self.name} (owned by {self.owner})"


def owned_by(obj: dict[str, Any], uid: str) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, dict) and r.get("uid") == uid for r in refs)


def only_ours(observed: ObservedState, uid: str) -> ObservedState:
    """``observed`` without the objects that carry the service's label but not its uid: never
    counted, scaled or pruned as its own."""
    owned = {k: o for k, o in observed.owned.items() if owned_by(o, uid)}
    if len(owned) == len(observed.owned):
        return observed
    return replace(observed, owned=owned)


def name_conflict(
    desired: dict[str, Any], existing: dict[str, Any] | None, uid: str
) -> NameConflict | None:
    """The conflict applying ``desired`` would be, given the object of its name (None: free)."""
    if existing is None or owned_by(existing, uid):
        return None
    return NameConflict(desired["kind"], desired["metadata"]["name"], _owner(existing))


def _owner(obj: dict[str, Any]) -> str:
    refs = [r for r in (obj.get("metadata") or {}).get("ownerReferences") or [] if r]
    if not refs:
        return "no owner"
    ref = next((r for r in refs if r.get("controller")), refs[0])
    return f"{ref.get('kind')}/{ref.get('name')} (uid {ref.get('uid')})"


def refuse(
    decision: Decision,
    conflicts: list[NameConflict],
    observed: ObservedState,
    previous: list[dict[str, Any]],
    now: datetime,
) -> Decision:
    """The decision with its writes held: Degraded ``NameConflict`` naming each object, a
    Warning Event when it turns so, another look in NAME_CONFLICT_RETRY_S.

    Nothing is applied or pruned, not even the objects whose names are free: half a service
    would spend GPUs that cannot be reached under its name, and its HTTPRoute and
    InferencePool name their backends, so they would send traffic to the foreign object.
    Only the replicas of workloads it already owns are still written (the autoscaler keeps a
    running service served; those objects are its own). ``previous``: the conditions the
    service shows now (its transition time and the Event follow them)."""
    message = "not applied, the name is taken: " + "; ".join(c.describe() for c in conflicts)
    message += "; rename or remove it (looked at again every 30 s)"
    conditions = [Condition.model_validate(c) for c in decision.status.get("conditions") or []]
    superseded = find(conditions, "Degraded")
    before = find([Condition.model_validate(c) for c in previous], "Degraded")
    kept = [c for c in conditions if c.type != "Degraded"] + ([before] if before else [])
    generation = superseded.observed_generation if superseded is not None else None
    conditions = set_condition(kept, "Degraded", "True", "NameConflict", message, now, generation)
    events = [e for e in decision.events if not _says(e, superseded)]
    if before is None or before.status != "True" or before.reason != "NameConflict":
        events.append(Event("Warning", "NameConflict", message))
    workloads = {n for (k, n) in observed.owned if k in WORKLOAD_KINDS}
    retry = now + timedelta(seconds=NAME_CONFLICT_RETRY_S)
    return replace(
        decision,
        apply=[],
        delete=[],
        scale={n: r for n, r in decision.scale.items() if n in workloads},
        status={
            **decision.status,
            "phase": "Degraded",
            "conditions": [c.model_dump(by_alias=True, mode="json") for c in conditions],
        },
        events=events,
        requeue_at=min(decision.requeue_at or retry, retry),
    )


def _says(event: Event, superseded: Condition | None) -> bool:
    """Whether ``event`` is the Warning of the Degraded condition the conflict replaces."""
    if superseded is None or superseded.status != "True":
        return False
    return (event.type, event.reason, event.message) == (
        "Warning",
        superseded.reason,
        superseded.message,
    )
