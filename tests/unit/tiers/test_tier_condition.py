"""Where a user looks (kubectl llms get, status.conditions): the tiers' SLOs are not judged."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from llmservice_operator.api.tiers import TIER_SLOS_NOT_JUDGED
from llmservice_operator.decide import decide
from llmservice_operator.observed import ObservedState
from llmservice_operator.sizing import load_catalog

EXAMPLES = Path(__file__).parents[3] / "examples"
NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def _conditions(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    body["metadata"].update({"uid": "u-1", "generation": 1})
    observed = ObservedState(secrets={"hf-token": {"token"}})
    decision = decide(body, observed, load_catalog(), NOW, "")
    return {c["type"]: c for c in decision.status.get("conditions", [])}


def _example(name: str) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return body


def test_tiers_say_their_slos_are_not_judged_and_why() -> None:
    condition = _conditions(_example("llama-3.1-8b-tiers.yaml"))["TierSLOsJudged"]
    assert (condition["status"], condition["reason"]) == ("False", "NoPerPriorityMetrics")
    assert condition["message"] == TIER_SLOS_NOT_JUDGED
    assert "no priority label" in condition["message"]


def test_no_tiers_no_condition() -> None:
    assert "TierSLOsJudged" not in _conditions(_example("llama-3.1-8b.yaml"))


def test_removing_the_tiers_removes_the_condition() -> None:
    body = _example("llama-3.1-8b-tiers.yaml")
    first = _conditions(body)
    assert "TierSLOsJudged" in first
    body = _example("llama-3.1-8b-tiers.yaml")
    del body["spec"]["serving"]["tiers"]
    body["status"] = {"conditions": list(first.values())}
    assert "TierSLOsJudged" not in _conditions(body)
