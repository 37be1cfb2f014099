"""Golden files: the full rendered output of each example (UPDATE_GOLDEN=1 rewrites them),
and every rendered object validates against the upstream Kubernetes OpenAPI schemas."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from llmservice_operator.commands.plan import plan_documents

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
GOLDEN = ROOT / "tests" / "golden"
K8S_SCHEMA_VERSION = "1.37.0"  # matches the pinned local control plane


def _rendered(example: Path) -> list[dict[str, Any]]:
    [plan] = plan_documents(example, None, "http://prometheus.monitoring.svc:9090")
    return plan.objects


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_rendered_output_matches_golden(example: Path) -> None:
    text = yaml.safe_dump_all(_rendered(example), sort_keys=False, width=100)
    golden = GOLDEN / f"{example.stem}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden file for {example.name}: run `make golden`"
    assert text == golden.read_text(), f"{golden.name} differs: review, then `make golden`"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_rendered_objects_validate_against_kubernetes_schemas(example: Path) -> None:
    for obj in _rendered(example):
        if obj["apiVersion"].startswith("keda.sh/"):
            continue  # not a Kubernetes type; the real API server checks it with KEDA's CRD
        kubernetes_validate.validate(obj, K8S_SCHEMA_VERSION, strict=True)


def test_each_example_renders_a_workload_and_a_service() -> None:
    for example in EXAMPLES:
        kinds = [o["kind"] for o in _rendered(example)]
        assert kinds.count("Deployment") == 1, example.name
        assert "Service" in kinds and "PodDisruptionBudget" in kinds, example.name
