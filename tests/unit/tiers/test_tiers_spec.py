"""spec.engine.schedulingPolicy and spec.serving.tiers: parsing, refusals, the CRD's rules."""

from __future__ import annotations

from typing import Any

import pytest

from llmservice_operator.api import SpecError, parse_spec
from llmservice_operator.api.crd import crd_manifest
from llmservice_operator.api.tiers import TIERS_NEED_PRIORITY_POLICY


def _spec(policy: str | None = "priority", tiers: list[dict[str, Any]] | None = None) -> Any:
    engine: dict[str, Any] = {"maxModelLen": 8192}
    if policy is not None:
        engine["schedulingPolicy"] = policy
    spec: dict[str, Any] = {"model": {"id": "meta-llama/Llama-3.1-8B-Instruct"}, "engine": engine}
    if tiers is not None:
        spec["serving"] = {"tiers": tiers}
    return spec


ONLINE = {"name": "online", "priority": 0, "slo": {"ttftP99Ms": 800}}
BATCH = {"name": "batch", "priority": 10}


def test_policy_defaults_to_fcfs_and_tiers_to_none() -> None:
    spec = parse_spec(_spec(policy=None))
    assert spec.engine.scheduling_policy == "fcfs"
    assert spec.serving.tiers == []


def test_tiers_parse_with_vllm_priorities_and_slos() -> None:
    spec = parse_spec(_spec(tiers=[ONLINE, BATCH]))
    online, batch = spec.serving.tiers
    assert (online.name, online.priority, batch.name, batch.priority) == ("online", 0, "batch", 10)
    assert online.slo is not None and online.slo.ttft_p99_ms == 800
    assert batch.slo is None


def test_tiers_without_priority_scheduling_are_refused() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(_spec(policy="fcfs", tiers=[ONLINE, BATCH]))
    assert TIERS_NEED_PRIORITY_POLICY in str(caught.value)


def test_a_tier_name_twice_is_refused() -> None:
    with pytest.raises(SpecError, match="online given more than once"):
        parse_spec(_spec(tiers=[ONLINE, {"name": "online", "priority": 5}]))


@pytest.mark.parametrize(
    "tier",
    [
        {"name": "Online", "priority": 0},
        {"name": "online", "priority": 2_000_000},
        {"name": "online"},
        {"name": "online", "priority": 0, "slo": {"ttftP99Ms": 0}},
        {"name": "online", "priority": 0, "weight": 3},
    ],
)
def test_bad_tiers_are_refused(tier: dict[str, Any]) -> None:
    with pytest.raises(SpecError):
        parse_spec(_spec(tiers=[tier]))


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(SpecError, match="schedulingPolicy"):
        parse_spec(_spec(policy="lifo"))


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec: dict[str, Any] = schema["properties"]["spec"]
    return spec


def test_the_crd_keys_tiers_by_name_and_carries_the_policy_rule() -> None:
    spec = _schema()
    tiers = spec["properties"]["serving"]["properties"]["tiers"]
    assert tiers["x-kubernetes-list-type"] == "map"
    assert tiers["x-kubernetes-list-map-keys"] == ["name"]
    assert tiers["maxItems"] == 16
    [rule] = [
        r for r in spec["x-kubernetes-validations"] if r["message"] == TIERS_NEED_PRIORITY_POLICY
    ]
    assert "self.engine.schedulingPolicy == 'priority'" in rule["rule"]
    assert spec["properties"]["engine"]["properties"]["schedulingPolicy"]["enum"] == [
        "fcfs",
        "priority",
    ]
