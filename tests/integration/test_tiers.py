"""spec.serving.tiers against the real API server: its CEL rule and list-map key refuse what
pydantic refuses, and the operator makes one InferenceObjective per tier that the Inference
Extension's own CRD (v1.0.0, hack/fetch-crds.sh) accepts, with TierSLOsJudged in the status."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmservice_operator.api.tiers import TIER_SLOS_NOT_JUDGED, TIERS_NEED_PRIORITY_POLICY

from .operator_fixtures import ROOT, OperatorFactory, wait_for
from .test_operator import _apply, _example, _secrets
from .test_scalers import third_party_crds  # noqa: F401  (InferencePool, InferenceObjective CRDs)

EXAMPLE = ROOT / "examples" / "llama-3.1-8b-tiers.yaml"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"engine": {"schedulingPolicy": "fcfs"}}, TIERS_NEED_PRIORITY_POLICY),
        (
            {"serving": {"tiers": [{"name": "a", "priority": 0}, {"name": "a", "priority": 1}]}},
            "Duplicate value",
        ),
    ],
)
def test_the_api_server_refuses_what_pydantic_refuses(
    kubectl: Any,
    namespace: str,
    crd_installed: None,
    change: dict[str, Any],
    message: str,
) -> None:
    doc = _example(EXAMPLE, namespace)
    kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(doc))  # the example passes
    for key, value in change.items():
        doc["spec"][key].update(value)
    result = kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(doc), check=False)
    assert result.returncode != 0 and message in result.stderr, result.stderr


def test_tiers_become_inference_objectives_on_the_pool(
    namespace: str,
    kubectl: Any,
    kubectl_json: Any,
    operators: OperatorFactory,
    third_party_crds: None,  # noqa: F811
) -> None:
    operators.start(namespace)
    _secrets(kubectl, namespace)
    doc = _example(EXAMPLE, namespace)
    doc["spec"]["rollout"] = {"gatewayParentRef": {"name": "inference-gateway"}}
    doc["spec"]["serving"]["inferencePool"] = {}
    _apply(kubectl, doc)
    objectives = wait_for(
        "two InferenceObjectives",
        lambda: (
            items
            if len(items := kubectl_json("-n", namespace, "inferenceobjectives")["items"]) == 2
            else None
        ),
        90,
    )
    by_name = {o["metadata"]["name"]: o for o in objectives}
    assert set(by_name) == {"llama-8b-tiers-online", "llama-8b-tiers-batch"}
    assert by_name["llama-8b-tiers-online"]["spec"]["priority"] == 0
    assert by_name["llama-8b-tiers-batch"]["spec"]["priority"] == -10
    for objective in objectives:
        assert objective["spec"]["poolRef"]["name"] == "llama-8b-tiers"
        assert objective["metadata"]["ownerReferences"][0]["kind"] == "LLMService"
    kubectl_json("-n", namespace, "inferencepool", "llama-8b-tiers")  # the pool they point to

    def judged() -> dict[str, Any] | None:
        service = kubectl_json("-n", namespace, "llmservice", "llama-8b-tiers")
        for condition in (service.get("status") or {}).get("conditions") or []:
            if condition["type"] == "TierSLOsJudged":
                return dict(condition)
        return None

    condition = wait_for("TierSLOsJudged", judged, 60)
    assert (condition["status"], condition["reason"]) == ("False", "NoPerPriorityMetrics")
    assert condition["message"] == TIER_SLOS_NOT_JUDGED
