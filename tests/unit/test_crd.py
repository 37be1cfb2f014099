"""The generated CRD is current, structural, and carries the CEL rules and columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from llmservice_operator.api.crd import crd_manifest, crd_yaml

ROOT = Path(__file__).parents[2]


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        found.append((path, node))
        for key, value in node.items():
            found.extend(_walk(value, f"{path}.{key}"))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.extend(_walk(value, f"{path}[{i}]"))
    return found


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_committed_crd_is_not_stale() -> None:
    committed = (ROOT / "crds" / "llmservice.yaml").read_text()
    assert committed == crd_yaml(), "crds/llmservice.yaml is stale: run `make crds`"


def test_chart_carries_the_same_crd() -> None:
    chart_copy = ROOT / "charts" / "llmservice-operator" / "crds" / "llmservice.yaml"
    assert chart_copy.read_text() == crd_yaml(), "chart CRD is stale: run `make crds`"


def test_schema_is_structural() -> None:
    for path, node in _walk(_schema()):
        for forbidden in ("$ref", "$defs", "anyOf", "oneOf", "allOf", "const", "title"):
            assert forbidden not in node, f"{forbidden} at {path}"
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            if bound in node:
                assert isinstance(node[bound], bool), f"{bound} must be boolean at {path}"
        if path.endswith(".properties") or path.endswith("x-kubernetes-validations"):
            continue
        if "properties" in node or "items" in node:
            assert "type" in node, f"missing type at {path}"


def test_cel_rules_present_with_messages() -> None:
    rules = [
        rule
        for _path, node in _walk(_schema())
        for rule in node.get("x-kubernetes-validations", [])
    ]
    messages = " | ".join(r["message"] for r in rules)
    assert "minReplicas must not exceed" in messages
    assert "never decrease" in messages
    assert "exactly one of setWeight" in messages
    assert "needs scaling.arrivalRateQuery" in messages
    assert all(r["rule"] and r["message"] for r in rules)


def test_subresources_and_printer_columns() -> None:
    version = crd_manifest()["spec"]["versions"][0]
    assert version["subresources"]["scale"]["labelSelectorPath"] == ".status.selector"
    columns = {c["name"] for c in version["additionalPrinterColumns"]}
    assert {"Model", "GPUs/Replica", "Replicas", "Ready", "Phase", "Age"} <= columns


def test_conditions_are_a_map_keyed_by_type() -> None:
    conditions = _schema()["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


def test_crd_yaml_loads() -> None:
    assert yaml.safe_load(crd_yaml())["kind"] == "CustomResourceDefinition"
