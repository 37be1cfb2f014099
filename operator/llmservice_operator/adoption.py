"""The reconcile's look at who holds each name it is about to apply (adoption refused).

The decisions are ownership.py's (pure); this asks the adapter about the names it cannot
answer from what it observed, and as seldom as it can: an object in the service's observed
objects is its own (its uid), and a name found free or ours is not asked again until the
watch cache shows the object (``Claimed``). So a service at rest asks nothing, and a new
object name costs one GET, once.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from .decide import Decision
from .observed import ObservedState
from .ownership import NameConflict, name_conflict, refuse

__all__ = ["Claimed", "Lookup", "check_names"]

#: (uid, kind, name): names found free or the service's own, not in the watch cache yet.
Claimed = frozenset[tuple[str, str, str]]
#: (apiVersion, kind, namespace, name) -> the object of that name, None when there is none.
Lookup = Callable[[str, str, str, str], dict[str, Any] | None]


def check_names(
    lookup: Lookup,
    body: dict[str, Any],
    decision: Decision,
    observed: ObservedState,
    claimed: Claimed,
    now: datetime,
) -> tuple[Decision, Claimed]:
    """The decision (its writes held where a name is another's: ownership.refuse), and the
    names to remember as claimed."""
    meta = body["metadata"]
    uid = str(meta.get("uid") or "")
    conflicts: list[NameConflict] = []
    found_free: set[tuple[str, str, str]] = set()
    for obj in decision.apply:
        kind, name = obj["kind"], obj["metadata"]["name"]
        if kind in observed.missing_apis or (kind, name) in observed.owned:
            continue
        if (uid, kind, name) in claimed:
            continue
        namespace = obj["metadata"].get("namespace") or meta["namespace"]
        conflict = name_conflict(obj, lookup(obj["apiVersion"], kind, namespace, name), uid)
        if conflict is None:
            found_free.add((uid, kind, name))
        else:
            conflicts.append(conflict)
    wanted = {(uid, o["kind"], o["metadata"]["name"]) for o in decision.apply}
    # A free name is claimed only once it is applied: held, it may be taken meanwhile.
    kept = claimed | found_free if not conflicts else claimed
    remembered = frozenset(c for c in kept if c in wanted and c[1:] not in observed.owned)
    if not conflicts:
        return decision, remembered
    previous = (body.get("status") or {}).get("conditions") or []
    return refuse(decision, conflicts, observed, previous, now), remembered
