"""spec.serving.tiers render InferenceObjectives on the stable InferencePool (GIE v1.0.0)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from llmservice_operator.commands.plan import plan_documents
from llmservice_operator.render.objects import RenderInput
from llmservice_operator.render.pool_names import inference_pool_name
from llmservice_operator.render.tiers import (
    OBJECTIVE_HEADER,
    inference_objective_name,
    inference_objectives,
)

EXAMPLE = Path(__file__).parents[3] / "examples" / "llama-3.1-8b-tiers.yaml"


def _render(tmp_path: Path, pool: bool = True, tiers: bool = True) -> list[dict[str, Any]]:
    doc = yaml.safe_load(EXAMPLE.read_text())
    if pool:
        doc["spec"]["serving"]["inferencePool"] = {}
        doc["spec"].setdefault("rollout", {})["gatewayParentRef"] = {"name": "inference-gateway"}
    if not tiers:
        del doc["spec"]["serving"]["tiers"]
    path = tmp_path / "service.yaml"
    path.write_text(yaml.safe_dump(doc))
    [plan] = plan_documents(path, None, "http://prometheus:9090")
    return inference_objectives(RenderInput(plan.service, plan.shape))


def test_one_objective_per_tier_on_the_stable_pool(tmp_path: Path) -> None:
    online, batch = _render(tmp_path)
    for objective in (online, batch):
        assert objective["apiVersion"] == "inference.networking.x-k8s.io/v1alpha2"
        assert objective["kind"] == "InferenceObjective"
        assert objective["metadata"]["namespace"] == "default"
        assert objective["spec"]["poolRef"] == {
            "group": "inference.networking.k8s.io",
            "kind": "InferencePool",
            "name": inference_pool_name("llama-8b-tiers"),
        }
    assert online["metadata"]["name"] == inference_objective_name("llama-8b-tiers", "online")
    assert online["metadata"]["name"] == "llama-8b-tiers-online"
    assert batch["metadata"]["name"] == "llama-8b-tiers-batch"
    assert OBJECTIVE_HEADER == "x-gateway-inference-objective"


def test_the_extensions_priority_is_vllms_negated(tmp_path: Path) -> None:
    """vLLM: lower first (online 0, batch 10). GIE: higher first, below 0 sheddable."""
    online, batch = _render(tmp_path)
    assert online["spec"]["priority"] == 0  # never shed
    assert batch["spec"]["priority"] == -10  # shed first when the pool is saturated
    assert batch["metadata"]["annotations"]["llmservice.dev/vllm-priority"] == "10"
    assert online["spec"]["priority"] > batch["spec"]["priority"]


def test_no_objectives_without_a_pool_or_without_tiers(tmp_path: Path) -> None:
    assert _render(tmp_path, pool=False) == []
    assert _render(tmp_path, tiers=False) == []


def _service(missing: set[str] | None = None) -> list[dict[str, Any]]:
    from datetime import UTC, datetime

    from llmservice_operator.decide import decide
    from llmservice_operator.observed import ObservedState
    from llmservice_operator.sizing import load_catalog

    body: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"].update({"uid": "u-1", "generation": 1})
    body["spec"]["serving"]["inferencePool"] = {}
    body["spec"]["rollout"] = {"gatewayParentRef": {"name": "gw", "namespace": "gateways"}}
    observed = ObservedState(secrets={"hf-token": {"token"}}, missing_apis=missing or set())
    now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
    decision = decide(body, observed, load_catalog(), now, "")
    return [o for o in decision.apply if o["kind"] == "InferenceObjective"]


def test_the_operator_applies_the_objectives_owned_by_the_service() -> None:
    online, batch = _service()
    assert [online["metadata"]["name"], batch["metadata"]["name"]] == [
        "llama-8b-tiers-online",
        "llama-8b-tiers-batch",
    ]
    assert online["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert online["spec"]["poolRef"]["name"] == "llama-8b-tiers"


def test_no_objectives_where_the_extension_is_not_served() -> None:
    assert _service(missing={"InferenceObjective"}) == []
    assert _service(missing={"InferencePool"}) == []
