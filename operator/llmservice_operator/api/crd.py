"""Generate the CustomResourceDefinition from the pydantic models.

pydantic emits JSON Schema with `$ref`, `anyOf: [X, null]`, numeric `exclusiveMinimum` and
`const`; Kubernetes wants a *structural* schema: everything inlined, `nullable: true`,
boolean `exclusiveMinimum`, `enum`. This module is that translation and nothing else.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from .resource import GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION
from .spec import LLMServiceSpec
from .status import LLMServiceStatus

__all__ = ["crd_manifest", "crd_yaml", "structural_schema"]

_DROP_KEYS = {"title", "examples"}


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_resolve(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = copy.deepcopy(defs[node["$ref"].split("/")[-1]])
        extra = {k: v for k, v in node.items() if k != "$ref"}
        target.update(extra)
        return _resolve(target, defs)
    return {k: _resolve(v, defs) for k, v in node.items() if k != "$defs"}


def _structural(node: Any) -> Any:
    """Rewrite one resolved JSON-schema node into Kubernetes' structural dialect."""
    if isinstance(node, list):
        return [_structural(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {k: v for k, v in node.items() if k not in _DROP_KEYS}
    any_of = node.pop("anyOf", None)
    if any_of is not None:
        non_null = [s for s in any_of if s.get("type") != "null"]
        if len(non_null) != 1:
            raise ValueError(f"cannot express a union of {len(non_null)} types structurally")
        merged = dict(non_null[0])
        merged.update(node)
        if len(non_null) != len(any_of):
            merged["nullable"] = True
        node = {k: v for k, v in merged.items() if k not in _DROP_KEYS}
        if node.get("default", "") is None:
            del node["default"]
    if "const" in node:
        node["enum"] = [node.pop("const")]
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if bound in node and not isinstance(node[bound], bool):
            node[plain] = node.pop(bound)
            node[bound] = True
    if isinstance(node.get("default"), dict | list) and node.get("type") == "object":
        # Object defaults would freeze today's nested defaults into every stored object.
        del node["default"]
    if node.get("default") == [] or node.get("default") == {}:
        del node["default"]
    if node.get("x-kubernetes-preserve-unknown-fields"):
        node.pop("additionalProperties", None)
        node["type"] = "object"
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: _structural(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _structural(value)
        else:
            out[key] = value
    if out.get("additionalProperties") is False:
        del out["additionalProperties"]
    return out


def structural_schema(model: type[LLMServiceSpec] | type[LLMServiceStatus]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    resolved = _resolve(raw, raw.get("$defs", {}))
    result: dict[str, Any] = _structural(resolved)
    return result


def crd_manifest() -> dict[str, Any]:
    spec_schema = structural_schema(LLMServiceSpec)
    status_schema = structural_schema(LLMServiceStatus)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": SHORT_NAMES,
                "categories": ["all", "llm"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": [
                        {"name": "Model", "type": "string", "jsonPath": ".spec.model.id"},
                        {"name": "GPU", "type": "string", "jsonPath": ".status.sizing.gpuType"},
                        {
                            "name": "GPUs/Replica",
                            "type": "integer",
                            "jsonPath": ".status.sizing.gpusPerReplica",
                        },
                        {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas"},
                        {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
                        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                        # -o wide: status.cost (docs/capacity-and-cost.md)
                        {
                            "name": "GPU-Hours/24h",
                            "type": "number",
                            "jsonPath": ".status.cost.gpuHours24h",
                            "priority": 1,
                        },
                        {
                            "name": "Cost/30d",
                            "type": "number",
                            "jsonPath": ".status.cost.cost30d",
                            "priority": 1,
                        },
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "LLMService serves one model with vLLM: sized, "
                            "rolled out and autoscaled by llmservice-operator.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


def crd_yaml() -> str:
    header = "# Generated by `make crds` from operator/llmservice_operator/api. Do not edit.\n"
    return header + yaml.safe_dump(crd_manifest(), sort_keys=False, width=100)
