"""The API models: defaults, cross-field rules, and errors that name the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from llmservice_operator.api import SpecError, parse_duration_seconds, parse_llmservice, parse_spec

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))


def minimal_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": {"id": "meta-llama/Llama-3.1-8B-Instruct"},
        "engine": {"maxModelLen": 8192},
    }
    spec.update(overrides)
    return spec


def test_minimal_spec_gets_documented_defaults() -> None:
    spec = parse_spec(minimal_spec())
    assert spec.engine.vllm_version == "0.33.0"
    assert spec.engine.gpu_memory_utilization == 0.92
    assert spec.resources.gpu == "auto"
    assert spec.scaling.mode == "operator"
    assert (spec.scaling.min_replicas, spec.scaling.max_replicas) == (1, 1)
    assert spec.scaling.scale_down.stabilization_window_seconds == 300
    assert spec.rollout.strategy == "canary"
    assert spec.rollout.analysis.on_no_data == "inconclusive"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_parses(path: Path) -> None:
    service = parse_llmservice(yaml.safe_load(path.read_text()))
    assert service.metadata.name


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"scaling": {"minReplicas": 5, "maxReplicas": 2}}, "spec.scaling", "must not exceed"),
        (
            {"rollout": {"steps": [{"setWeight": 50}, {"setWeight": 10}]}},
            "spec.rollout",
            "never decrease",
        ),
        ({"rollout": {"steps": [{"setWeight": 150}]}}, "spec.rollout.steps[0].setWeight", "100"),
        (
            {"rollout": {"steps": [{"setWeight": 10, "pause": {}}]}},
            "spec.rollout.steps[0]",
            "exactly one",
        ),
        (
            {"rollout": {"strategy": "blueGreen", "steps": [{"setWeight": 10}]}},
            "spec.rollout",
            "remove the setWeight",
        ),
        (
            {"resources": {"gpu": "B200", "allowedGPUs": ["L4"]}},
            "spec.resources",
            "allowedGPUs",
        ),
        ({"slo": {"ttftP99Ms": -1}}, "spec.slo.ttftP99Ms", "greater than 0"),
        ({"scaling": {"mode": "hpa", "minReplicas": 0}}, "spec.scaling", "scale to zero"),
        (
            {"scaling": {"mode": "operator", "minReplicas": 0, "maxReplicas": 2}},
            "spec.scaling",
            "needs scaling.arrivalRateQuery",
        ),
        (
            {"scaling": {"mode": "keda", "minReplicas": 0, "maxReplicas": 2}},
            "spec.scaling",
            "needs scaling.arrivalRateQuery",
        ),
        ({"rollout": {"analysis": {"interval": "soon"}}}, "spec.rollout.analysis.interval", ""),
        ({"unknownSection": {}}, "spec.unknownSection", "Extra inputs"),
        (
            {"engine": {"maxModelLen": 8192, "env": [{"name": "A"}, {"name": "A", "value": "1"}]}},
            "spec.engine",
            "A given more than once",
        ),
        (
            {"resources": {"tolerations": [{"operator": "Equal", "value": "x"}]}},
            "spec.resources.tolerations[0]",
            "operator Equal needs a key",
        ),
        (
            {"resources": {"tolerations": [{"operator": "Exists", "value": "x"}]}},
            "spec.resources.tolerations[0]",
            "takes no value",
        ),
        ({"resources": {"cpu": "lots"}}, "spec.resources.cpu", "pattern"),
        ({"resources": {"memory": "-64Gi"}}, "spec.resources.memory", "pattern"),
        (
            {"resources": {"nodeSelector": {"team": "ml team"}}},
            "spec.resources.nodeSelector.team",
            "",
        ),
        (
            {"resources": {"nodeSelector": {"bad key": "ml"}}},
            "spec.resources.nodeSelector",
            "label key",
        ),
        (
            {"serving": {"networkPolicy": {"allowFrom": [{"podSelector": {"-x": "y"}}]}}},
            "spec.serving.networkPolicy.allowFrom[0].podSelector",
            "label key",
        ),
    ],
)
def test_invalid_specs_name_the_field(overrides: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(minimal_spec(**overrides))
    assert caught.value.field == field
    assert words in caught.value.message


@pytest.mark.parametrize("quantity", ["8", "500m", "64Gi", "32G", "1.5", "1e3", "+2"])
def test_resource_quantities_kubernetes_takes(quantity: str) -> None:
    spec = parse_spec(minimal_spec(resources={"cpu": quantity, "memory": quantity}))
    assert spec.resources.cpu == quantity


def test_label_keys_with_a_prefix_and_empty_values_are_labels() -> None:
    labels = {"app.kubernetes.io/name": "ml", "team": "", "a_b.c-d": "x.Y_z-1"}
    spec = parse_spec(minimal_spec(resources={"nodeSelector": labels}))
    assert spec.resources.node_selector == labels


def test_scale_to_zero_with_an_arrival_rate_query_is_valid() -> None:
    query = 'sum(rate(gateway_requests_total{route="chat"}[1m]))'
    spec = parse_spec(
        minimal_spec(scaling={"minReplicas": 0, "maxReplicas": 2, "arrivalRateQuery": query})
    )
    assert spec.scaling.min_replicas == 0
    assert spec.to_wire()["scaling"]["arrivalRateQuery"] == query


def test_model_source_pvc_needs_claim() -> None:
    with pytest.raises(SpecError, match="claimName"):
        parse_spec(minimal_spec(model={"id": "x/y", "source": {"type": "pvc"}}))


def test_wire_form_is_camel_case_and_round_trips() -> None:
    spec = parse_spec(minimal_spec(resources={"allowedGPUs": ["L4"], "minConcurrency": 3}))
    wire = spec.to_wire()
    assert wire["resources"]["allowedGPUs"] == ["L4"]
    assert wire["engine"]["maxModelLen"] == 8192
    assert parse_spec(wire) == spec


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30.0), ("5m", 300.0), ("1h30m", 5400.0), ("250ms", 0.25)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration_seconds(text) == seconds


def test_duration_rejects_words() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration_seconds("five minutes")
