"""spec.serving.inferencePool: the pools, their endpoint pickers, the route's backends and its
timeouts (render/inference_pool.py, render/timeouts.py, through decide())."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmservice_operator.api import parse_llmservice
from llmservice_operator.decide import decide
from llmservice_operator.observed import ObservedState
from llmservice_operator.render.inference_pool import PICKER_LABEL
from llmservice_operator.render.labels import REVISION, selector_labels
from llmservice_operator.render.pool_names import inference_pool_name
from llmservice_operator.render.timeouts import gateway_duration, route_timeout_seconds
from llmservice_operator.sizing import load_catalog

from .test_golden import _applied

ROOT = Path(__file__).parents[2]
NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
CATALOG = load_catalog()


def _body(pool: dict[str, Any] | None = None, gateway: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "llama-3.1-8b.yaml").read_text())
    body["metadata"].update({"uid": "u-1", "generation": 1})
    body["spec"]["serving"] = {"inferencePool": pool or {}}
    if gateway:
        body["spec"]["rollout"] = {"gatewayParentRef": {"name": "gw", "namespace": "gateways"}}
    return body


def _observed() -> ObservedState:
    return ObservedState(secrets={"hf-token": {"token"}})


def _by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def _args(deployment: dict[str, Any]) -> dict[str, str]:
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    flags: dict[str, str] = {}
    for i, arg in enumerate(args):
        if arg.startswith("--") and "=" in arg:
            flags[arg.split("=", 1)[0]] = arg.split("=", 1)[1]
        elif arg.startswith("--"):
            flags[arg] = args[i + 1]
    return flags


def test_at_rest_one_pool_selects_the_stable_revision_and_has_its_picker() -> None:
    decision = decide(_body(), _observed(), CATALOG, NOW, "")
    [pool] = _by_kind(decision.apply, "InferencePool")
    [serving] = [
        d for d in _by_kind(decision.apply, "Deployment") if REVISION in d["metadata"]["labels"]
    ]
    revision = serving["metadata"]["labels"][REVISION]
    assert pool["metadata"]["name"] == inference_pool_name("llama-8b") == "llama-8b"
    assert pool["spec"]["selector"]["matchLabels"] == {
        **selector_labels("llama-8b"),
        REVISION: revision,
    }
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    assert pool["spec"]["endpointPickerRef"] == {
        "name": "llama-8b-epp", "port": {"number": 9002}, "failureMode": "FailClose"
    }  # fmt: skip
    [picker] = [d for d in _by_kind(decision.apply, "Deployment") if d is not serving]
    assert picker["metadata"]["name"] == "llama-8b-epp"
    assert {s["metadata"]["name"] for s in _by_kind(decision.apply, "Service")} == {
        "llama-8b", "llama-8b-epp"
    }  # fmt: skip
    [route] = _by_kind(decision.apply, "HTTPRoute")
    assert route["spec"]["rules"][0]["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "llama-8b",
         "weight": 100}
    ]  # fmt: skip
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        [obj] = _by_kind(decision.apply, kind)
        assert obj["metadata"]["name"] == "llama-8b-epp"
        assert obj["metadata"]["ownerReferences"][0]["uid"] == "u-1"


def test_the_picker_is_not_in_the_pool_nor_counted_as_a_revision() -> None:
    """Its pods carry none of the serving pods' selector labels, its Deployment no revision."""
    decision = decide(_body(), _observed(), CATALOG, NOW, "")
    [picker] = [
        d for d in _by_kind(decision.apply, "Deployment") if d["metadata"]["name"].endswith("-epp")
    ]
    pod_labels = picker["spec"]["template"]["metadata"]["labels"]
    [pool] = _by_kind(decision.apply, "InferencePool")
    selector = pool["spec"]["selector"]["matchLabels"]
    assert not all(pod_labels.get(k) == v for k, v in selector.items())
    assert "llmservice.dev/service" not in pod_labels  # not watched as a serving pod
    assert REVISION not in picker["metadata"]["labels"]
    assert picker["spec"]["selector"]["matchLabels"] == {PICKER_LABEL: "llama-8b"}
    spec = picker["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "llama-8b-epp"
    assert spec["containers"][0]["readinessProbe"]["grpc"] == {
        "port": 9003, "service": "inference-extension"
    }  # fmt: skip


def test_picker_flags_are_the_pinned_releases_with_vllms_metric_names() -> None:
    decision = decide(_body(), _observed(), CATALOG, NOW, "")
    [picker] = [
        d for d in _by_kind(decision.apply, "Deployment") if d["metadata"]["name"].endswith("-epp")
    ]
    flags = _args(picker)
    assert flags["--pool-name"] == "llama-8b" and flags["--pool-namespace"] == "default"
    assert flags["--pool-group"] == "inference.networking.k8s.io"
    assert flags["--grpc-port"] == "9002" and flags["--grpc-health-port"] == "9003"
    # vLLM 0.33 serves kv_cache_usage_perc; the picker's default gpu_cache_usage_perc is gone.
    assert flags["--kv-cache-usage-percentage-metric"] == "vllm:kv_cache_usage_perc"
    assert flags["--total-queued-requests-metric"] == "vllm:num_requests_waiting"
    assert flags["--lora-info-metric"] == ""
    assert flags["--secure-serving"] == "true"
    config = yaml.safe_load(flags["--config-text"])
    assert config["kind"] == "EndpointPickerConfig"
    assert [p["type"] for p in config["plugins"]] == [
        "queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer"
    ]  # fmt: skip


def test_picker_settings_from_the_spec() -> None:
    pool = {"endpointPicker": {"scorers": ["queue-scorer"], "replicas": 2,
                               "failureMode": "FailOpen", "secureServing": False,
                               "image": "example.com/epp:dev"}}  # fmt: skip
    decision = decide(_body(pool), _observed(), CATALOG, NOW, "")
    [picker] = [
        d for d in _by_kind(decision.apply, "Deployment") if d["metadata"]["name"].endswith("-epp")
    ]
    assert picker["spec"]["replicas"] == 2
    assert picker["spec"]["template"]["spec"]["containers"][0]["image"] == "example.com/epp:dev"
    flags = _args(picker)
    assert flags["--secure-serving"] == "false"
    profile = yaml.safe_load(flags["--config-text"])["schedulingProfiles"][0]
    assert profile["plugins"] == [{"pluginRef": "queue-scorer"}]
    [pool_obj] = _by_kind(decision.apply, "InferencePool")
    assert pool_obj["spec"]["endpointPickerRef"]["failureMode"] == "FailOpen"


def test_a_canary_splits_between_the_revisions_pools() -> None:
    """At the first weight: a pool (and picker) per revision, the route's weights on them."""
    applied = _applied("llama-3.1-70b-canary.inference-pool.weighted")
    pools = {p["metadata"]["name"]: p for p in _by_kind(applied, "InferencePool")}
    assert set(pools) == {"llama-70b", "llama-70b-preview"}
    revisions = {n: p["spec"]["selector"]["matchLabels"][REVISION] for n, p in pools.items()}
    assert revisions["llama-70b"] != revisions["llama-70b-preview"]
    pickers = {d["metadata"]["name"]: _args(d)["--pool-name"] for d in _by_kind(applied, "Deployment")
               if d["metadata"]["name"].endswith("-epp")}  # fmt: skip
    assert pickers == {"llama-70b-epp": "llama-70b", "llama-70b-preview-epp": "llama-70b-preview"}
    assert (
        pools["llama-70b-preview"]["spec"]["endpointPickerRef"]["name"] == "llama-70b-preview-epp"
    )
    [route] = _by_kind(applied, "HTTPRoute")
    backends = {b["name"]: b["weight"] for b in route["spec"]["rules"][0]["backendRefs"]}
    assert backends == {"llama-70b": 90, "llama-70b-preview": 10}
    assert all(b["kind"] == "InferencePool" for b in route["spec"]["rules"][0]["backendRefs"])


def test_at_rest_there_is_no_candidate_pool() -> None:
    applied = _applied("llama-3.1-70b-canary.inference-pool")
    assert [p["metadata"]["name"] for p in _by_kind(applied, "InferencePool")] == ["llama-70b"]


def test_a_pool_without_a_gateway_parent_is_invalid_spec_naming_the_fix() -> None:
    decision = decide(_body(gateway=False), _observed(), CATALOG, NOW, "")
    conds = {c["type"]: c for c in decision.status["conditions"]}
    assert conds["InvalidSpec"]["status"] == "True"
    assert "spec.serving.inferencePool" in conds["InvalidSpec"]["message"]
    assert "gatewayParentRef" in conds["InvalidSpec"]["message"]
    assert not decision.apply


def test_without_the_extensions_crd_degraded_and_no_picker() -> None:
    observed = _observed()
    observed.missing_apis.add("InferencePool")
    decision = decide(_body(), observed, CATALOG, NOW, "")
    conds = {c["type"]: c for c in decision.status["conditions"]}
    assert (conds["Degraded"]["status"], conds["Degraded"]["reason"]) == (
        "True", "InferencePoolAPIMissing"
    )  # fmt: skip
    names = {o["metadata"]["name"] for o in decision.apply}
    assert "llama-8b-epp" not in names
    served = decide(_body(), _observed(), CATALOG, NOW, "")
    assert "InferencePool" in {o["kind"] for o in served.apply}


def test_route_timeouts_cover_the_longest_generation() -> None:
    body = _body()
    body["spec"]["slo"] = {"ttftP99Ms": 800, "tpotP99Ms": 60}
    spec = parse_llmservice(body).spec
    # 16384 tokens x 60 ms + 0.8 s = 983.84 s, rounded up, plus the 60 s margin.
    assert route_timeout_seconds(spec) == 984 + 60
    decision = decide(body, _observed(), CATALOG, NOW, "")
    [route] = _by_kind(decision.apply, "HTTPRoute")
    assert route["spec"]["rules"][0]["timeouts"] == {
        "request": "17m24s",
        "backendRequest": "17m24s",
    }


def test_route_timeouts_without_an_slo_use_the_documented_bounds() -> None:
    spec = parse_llmservice(_body()).spec
    assert spec.slo.tpot_p99_ms is None
    # 16384 x 100 ms + 30 s = 1668.4 s -> 1669 + 60.
    assert route_timeout_seconds(spec) == 1729


def test_route_timeout_is_never_shorter_than_the_drain() -> None:
    body = _body()
    body["spec"]["engine"]["maxModelLen"] = 128
    body["spec"]["slo"] = {"ttftP99Ms": 100, "tpotP99Ms": 10}
    body["spec"]["serving"]["drainSeconds"] = 3600
    assert route_timeout_seconds(parse_llmservice(body).spec) == 3660


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59, "59s"), (60, "1m"), (983, "16m23s"), (3600, "1h"), (3660, "1h1m"),
     (1_048_636, "291h17m16s")],
)  # fmt: skip
def test_gateway_durations_fit_the_gateway_api_pattern(seconds: int, text: str) -> None:
    assert gateway_duration(seconds) == text
    assert re.fullmatch(r"^([0-9]{1,5}(h|m|s|ms)){1,4}$", text)
