"""The rendered NetworkPolicy lets in the service's own namespace, the peers the spec names,
Prometheus, and the operator (its smoke tests and pod scrapes come from its namespace)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from llmservice_operator.api import parse_llmservice
from llmservice_operator.render.objects import network_policy
from llmservice_operator.service_plan import plan_service
from llmservice_operator.sizing import builtin_catalog

EXAMPLE = Path(__file__).parents[2] / "examples" / "llama-3.1-8b.yaml"


def _peers(operator_namespace: str | None, namespace: str = "ml") -> list[dict[str, Any]]:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["namespace"] = namespace
    plan = plan_service(
        parse_llmservice(doc), builtin_catalog(), operator_namespace=operator_namespace
    )
    policy = network_policy(plan.render_input)
    assert policy is not None
    peers: list[dict[str, Any]] = policy["spec"]["ingress"][0]["from"]
    return peers


def test_the_operators_namespace_is_let_in() -> None:
    operator = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}}}
    assert operator in _peers("ops")
    assert operator not in _peers(None)  # `llmservice plan` does not know where it runs
    assert len(_peers("ml")) == len(_peers(None))  # in the service's own namespace already
