"""docs/gitops.md's Argo CD health check, run by a real Lua interpreter on statuses the
operator writes (conditions.settle), one per state a user meets."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from llmservice_operator.conditions import settle

from ..integration.health_check import evaluate

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _service(conditions: dict[str, tuple[str, str]], generation: int = 3,
             observed: int | None = 3, error: str | None = None) -> dict[str, Any]:  # fmt: skip
    status: dict[str, Any] = {
        "observedGeneration": observed,
        "conditions": [
            {"type": t, "status": s, "reason": r, "message": f"{t} {r}",
             "lastTransitionTime": "2026-12-01T00:00:00Z"}
            for t, (s, r) in conditions.items()
        ],
    }  # fmt: skip
    return {"metadata": {"name": "chat", "generation": generation},
            "status": settle(status, error, generation, NOW)}  # fmt: skip


SERVING = {"Available": ("True", "MinimumReplicasReady"), "Progressing": ("False", "RolloutComplete"),
           "Degraded": ("False", "AsExpected"), "InvalidSpec": ("False", "Valid")}  # fmt: skip


@pytest.mark.parametrize(
    ("case", "obj", "health"),
    [
        ("serving", _service(SERVING), "Healthy"),
        ("new generation", _service(SERVING, generation=4, observed=3), "Progressing"),
        ("starting", _service({**SERVING, "Available": ("False", "ReplicasNotReady")}),
         "Progressing"),
        ("rolling out", _service({**SERVING, "Progressing": ("True", "RolloutInProgress")}),
         "Progressing"),
        ("paused", _service({**SERVING, "Progressing": ("True", "RolloutPaused")}), "Suspended"),
        ("rolling back", _service({**SERVING, "Progressing": ("True", "RollingBack"),
                                   "Degraded": ("True", "RollingBack")}), "Progressing"),
        ("rolled back", _service({**SERVING, "Degraded": ("True", "RolledBack")}), "Degraded"),
        ("invalid", _service({**SERVING, "InvalidSpec": ("True", "InvalidSpec")}), "Degraded"),
        ("refused", _service(SERVING, error="exceeded quota"), "Degraded"),
        ("never reconciled", {"metadata": {"name": "chat", "generation": 1}}, "Progressing"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)  # fmt: skip
def test_health_follows_ready_and_says_what_a_person_must_look_at(
    case: str, obj: dict[str, Any], health: str
) -> None:
    [(got, message)] = evaluate([obj])
    assert got == health, (case, message)
    ready = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}.get("Ready")
    assert (got == "Healthy") == (ready is not None and ready["status"] == "True")
