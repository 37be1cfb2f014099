"""Bounded input (issue 38, finding 1): every number in the spec has a schema maximum, every
string a maxLength, every list a maxItems, every map a maxProperties; spec.model.architecture
declares the numbers sizing reads with the same bounds sizing enforces. The API server refuses
the rest, and pydantic refuses it the same way, naming the field, for `llmservice plan`."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmservice_operator.api import SpecError, parse_llmservice
from llmservice_operator.api.architecture import MAX_ARCHITECTURE_BYTES, ArchitectureOverride
from llmservice_operator.api.crd import crd_manifest
from llmservice_operator.api.k8s_values import PEER_LABELS
from llmservice_operator.api.spec import MAX_ENV_TOTAL, MAX_EXTRA_ARGS_TOTAL
from llmservice_operator.sizing.limits import (
    ARCHITECTURE_INTEGERS,
    MAX_ARCHITECTURE_KEYS,
    MAX_LAYERS,
    VISION_INTEGERS,
)

ROOT = Path(__file__).parents[2]
EXAMPLE = yaml.safe_load((ROOT / "examples" / "llama-3.1-8b.yaml").read_text())


def _schema(part: str) -> dict[str, Any]:
    root = crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema: dict[str, Any] = root["properties"][part]
    return schema


def _nodes(node: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    found = [(path, node)]
    for key, sub in (node.get("properties") or {}).items():
        found += _nodes(sub, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        found += _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        found += _nodes(node["additionalProperties"], f"{path}{{}}")
    return found


def unbounded(node: dict[str, Any], path: str, *, numbers: bool = True) -> list[str]:
    """Every node under ``node`` whose size (or value) the schema leaves open."""
    problems = []
    for where, sub in _nodes(node, path):
        kind = sub.get("type")
        if numbers and kind in ("integer", "number") and "maximum" not in sub:
            problems.append(f"{where}: a number without a maximum")
        if kind == "string" and "maxLength" not in sub and "enum" not in sub:
            problems.append(f"{where}: a string without maxLength")
        if kind == "array" and "maxItems" not in sub:
            problems.append(f"{where}: a list without maxItems")
        open_keys = "additionalProperties" in sub or sub.get("x-kubernetes-preserve-unknown-fields")
        if kind == "object" and open_keys and "maxProperties" not in sub:
            problems.append(f"{where}: a map without maxProperties")
    return problems


def test_every_number_string_list_and_map_of_the_spec_is_bounded() -> None:
    assert unbounded(_schema("spec"), "spec") == []


def test_the_architecture_declares_what_sizing_reads_with_its_bounds() -> None:
    architecture = _schema("spec")["properties"]["model"]["properties"]["architecture"]
    assert architecture["x-kubernetes-preserve-unknown-fields"] is True
    assert architecture["maxProperties"] == MAX_ARCHITECTURE_KEYS
    for part, table in [
        (architecture, ARCHITECTURE_INTEGERS),
        (architecture["properties"]["text_config"], ARCHITECTURE_INTEGERS),
        (architecture["properties"]["vision_config"], VISION_INTEGERS),
    ]:
        for key, (minimum, maximum) in table.items():
            declared = part["properties"][key]
            assert declared["type"] == "integer" and declared["nullable"] is True, key
            assert (declared["minimum"], declared["maximum"]) == (minimum, maximum), key
    factor = architecture["properties"]["rope_scaling"]["properties"]["factor"]
    assert factor["maximum"] == 1024 and factor["exclusiveMinimum"] is True


def _body(**spec: Any) -> dict[str, Any]:
    body = copy.deepcopy(EXAMPLE)
    for path, value in spec.items():
        node = body["spec"]
        *parents, last = path.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return body


def _refused(body: dict[str, Any]) -> SpecError:
    with pytest.raises(SpecError) as refused:
        parse_llmservice(body)
    return refused.value


@pytest.mark.parametrize(
    ("architecture", "field", "words"),
    [
        (
            {"num_hidden_layers": 1_000_000_000},
            "num_hidden_layers",
            f"less than or equal to {MAX_LAYERS}",
        ),
        ({"num_hidden_layers": 1e308}, "num_hidden_layers", "at most its bound, got 1e+308"),
        ({"num_hidden_layers": float("inf")}, "num_hidden_layers", "finite number"),
        ({"num_hidden_layers": "32"}, "num_hidden_layers", "must be a number"),
        ({"num_hidden_layers": True}, "num_hidden_layers", "must be a number"),
        ({"num_hidden_layers": 32.5}, "num_hidden_layers", "fractional part"),
        ({"vocab_size": 10**400}, "vocab_size", "less than or equal to 4194304"),
        ({"text_config": {"hidden_size": 10**6}}, "text_config.hidden_size", "262144"),
        ({"vision_config": {"image_size": 10**6}}, "vision_config.image_size", "65536"),
        ({"rope_scaling": {"rope_type": "linear", "factor": 1e308}}, "rope_scaling.factor", "1024"),
    ],
)
def test_architecture_numbers_past_their_bound_are_refused_naming_the_key(
    architecture: dict[str, Any], field: str, words: str
) -> None:
    err = _refused(_body(model__architecture=architecture))
    assert err.field == f"spec.model.architecture.{field}"
    assert words in err.message


def test_an_architecture_keeps_unknown_keys_and_is_bounded_in_size() -> None:
    keys = {"model_type": "llama", "num_hidden_layers": 32.0, "head_dim": None, "x": {"y": [1]}}
    spec = parse_llmservice(_body(model__architecture=keys)).spec
    assert spec.model.architecture is not None
    assert spec.model.architecture.config() == {**keys, "num_hidden_layers": 32}
    many = {f"key_{i}": i for i in range(MAX_ARCHITECTURE_KEYS + 1)}
    err = _refused(_body(model__architecture=many))
    assert err.field == "spec.model.architecture" and "at most 256 keys" in err.message
    big = {"notes": "x" * MAX_ARCHITECTURE_BYTES}
    err = _refused(_body(model__architecture=big))
    assert err.field == "spec.model.architecture" and "bytes of JSON, at most 32,768" in err.message
    fine = ArchitectureOverride.model_validate({"notes": "x" * (MAX_ARCHITECTURE_BYTES - 20)})
    assert fine.config()["notes"]


def test_engine_env_and_flags_are_bounded_together() -> None:
    env = [{"name": f"V{i}", "value": "x" * 16_384} for i in range(MAX_ENV_TOTAL // 16_384)]
    parse_llmservice(_body(engine__env=env))
    env.append({"name": "ONE_MORE", "value": "x"})
    err = _refused(_body(engine__env=env))
    assert err.field == "spec.engine" and "values must be at most 32,768 characters" in err.message
    err = _refused(_body(engine__env=[{"name": "A", "value": "x" * 16_385}]))
    assert err.field == "spec.engine.env[0].value"
    args = ["--chat-template=" + "x" * 8176, "--b=" + "y" * (MAX_EXTRA_ARGS_TOTAL - 8192 - 4)]
    parse_llmservice(_body(engine__extraArgs=args))
    err = _refused(_body(engine__extraArgs=[*args, "--z"]))
    assert "flags must be at most 16,384 characters" in err.message
    rules = _schema("spec")["properties"]["engine"]["x-kubernetes-validations"]
    assert {r["message"] for r in rules} >= {
        "engine.env: the values must be at most 32,768 characters together",
        "engine.extraArgs: the flags must be at most 16,384 characters together",
    }


def test_durations_are_at_most_a_year() -> None:
    nines = "9" * 29 + "h"  # matches the pattern; as a timedelta it overflows
    err = _refused(_body(rollout__analysis={"interval": nines}))
    assert err.field == "spec.rollout.analysis.interval" and "longer than 8784h" in err.message
    err = _refused(_body(rollout__steps=[{"pause": {"duration": "8785h"}}]))
    assert err.field == "spec.rollout.steps[0].pause.duration"
    parse_llmservice(_body(rollout__steps=[{"pause": {"duration": "8784h"}}]))
    window = _schema("spec")["properties"]["rollout"]["properties"]["analysis"]["properties"]
    for name in ("interval", "window", "initialDelay", "errorRetryInterval"):
        [rule] = window[name]["x-kubernetes-validations"]
        assert rule["rule"] == "duration(self) <= duration('8784h')"
        assert window[name]["maxLength"] == 32 and window[name]["pattern"]


def test_network_policy_peers_are_bounded() -> None:
    labels = {f"l{i}": "v" for i in range(PEER_LABELS + 1)}
    err = _refused(_body(serving__networkPolicy={"allowFrom": [{"podSelector": labels}]}))
    assert err.field == "spec.serving.networkPolicy.allowFrom[0].podSelector"
    assert f"at most {PEER_LABELS} labels" in err.message
    peers = [{"podSelector": {"app": "x"}}] * 17
    err = _refused(_body(serving__networkPolicy={"allowFrom": peers}))
    assert err.field == "spec.serving.networkPolicy.allowFrom"
