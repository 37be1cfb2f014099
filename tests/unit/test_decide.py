"""decide(): one reconcile's decision from a body and what is observed (pure), and the status
merge patch."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

import llmservice_operator.decide as decide_module
from llmservice_operator.api.status import AutoscalingStatus
from llmservice_operator.decide import decide
from llmservice_operator.observed import ObservedState
from llmservice_operator.reconcile import merge_patch
from llmservice_operator.scaling import ScalingOutcome
from llmservice_operator.sizing import load_catalog

from .calls import record_calls

ROOT = Path(__file__).parents[2]
NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
CATALOG = load_catalog()


def _body(example: str = "llama-3.1-8b.yaml") -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((ROOT / "examples" / example).read_text())
    body["metadata"].update({"uid": "u-1", "generation": 1})
    return body


def _observed(owned: dict[tuple[str, str], Any] | None = None) -> ObservedState:
    return ObservedState(owned=owned or {}, secrets={"hf-token": {"token"}})


def test_first_reconcile_creates_owned_objects_and_reports_sizing() -> None:
    decision = decide(_body(), _observed(), CATALOG, NOW, "http://prom:9090")
    kinds = sorted(o["kind"] for o in decision.apply)
    assert kinds == [
        "Deployment",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "PrometheusRule",
        "Service",
    ]
    for obj in decision.apply:
        [owner] = obj["metadata"]["ownerReferences"]
        assert owner["uid"] == "u-1" and owner["controller"] is True
    assert "replicas" not in decision.apply[0]["spec"]  # operator mode: one writer
    status = decision.status
    assert status["sizing"]["gpuType"] == "L4"
    assert status["sizing"]["gpusPerReplica"] == 2
    assert status["phase"] == "Progressing"
    assert status["revisions"]["stable"] in decision.apply[0]["metadata"]["name"]
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["Sized"]["status"] == "True" and "2x L4" in conds["Sized"]["message"]
    assert conds["InvalidSpec"]["status"] == "False"
    assert [e.reason for e in decision.events] == ["Sized"]


def test_missing_secret_is_invalid_spec_and_touches_nothing() -> None:
    body = _body()
    observed = ObservedState(owned={("Deployment", "x"): {}}, secrets={"hf-token": None})
    decision = decide(body, observed, CATALOG, NOW, "")
    assert decision.apply == [] and decision.delete == [] and decision.scale == {}
    assert decision.status["phase"] == "InvalidSpec"
    [cond] = [c for c in decision.status["conditions"] if c["type"] == "InvalidSpec"]
    assert "Secret 'hf-token' does not exist" in cond["message"]
    assert decision.events[0].type == "Warning"


def test_model_that_does_not_fit_names_what_to_change() -> None:
    body = _body()
    body["spec"]["model"]["id"] = "meta-llama/Llama-3.1-70B-Instruct"
    body["spec"]["resources"] = {"gpu": "L4", "minConcurrency": 64}
    body["spec"]["engine"]["maxModelLen"] = 131072
    decision = decide(body, _observed(), CATALOG, NOW, "")
    conds = {c["type"]: c for c in decision.status["conditions"]}
    assert (conds["Sized"]["status"], conds["Sized"]["reason"]) == ("False", "DoesNotFit")
    assert "L4" in conds["InvalidSpec"]["message"]
    assert decision.apply == []


def test_a_gpu_the_catalog_lacks_is_reported_as_not_fitting() -> None:
    body = _body()
    body["spec"]["resources"] = {"gpu": "B300-288GB"}
    conds = {c["type"]: c for c in decide(body, _observed(), CATALOG, NOW, "").status["conditions"]}
    assert (conds["Sized"]["status"], conds["Sized"]["reason"]) == ("False", "DoesNotFit")
    assert "unknown GPU 'B300-288GB'" in conds["Sized"]["message"]


def test_a_spec_error_that_is_not_about_fitting_leaves_sized_alone() -> None:
    body = _body()
    body["spec"]["engine"]["env"] = [{"name": "HF_TOKEN", "value": "x"}]  # set by the operator
    conds = {c["type"]: c for c in decide(body, _observed(), CATALOG, NOW, "").status["conditions"]}
    assert conds["InvalidSpec"]["status"] == "True"
    assert "HF_TOKEN is set by the operator" in conds["InvalidSpec"]["message"]
    assert "Sized" not in conds


def test_unknown_model_without_architecture_asks_for_the_override() -> None:
    body = _body()
    body["spec"]["model"]["id"] = "acme/secret-model"
    decision = decide(body, _observed(), CATALOG, NOW, "")
    [cond] = [c for c in decision.status["conditions"] if c["type"] == "InvalidSpec"]
    assert "spec.model.architecture" in cond["message"]


def test_second_reconcile_with_same_state_changes_nothing() -> None:
    body = _body()
    first = decide(body, _observed(), CATALOG, NOW, "")
    stored = copy.deepcopy(body)
    stored["status"] = merge_patch({}, first.status)
    again = decide(stored, _observed(), CATALOG, NOW, "")
    assert merge_patch(stored["status"], again.status) == {}
    assert again.events == []


def test_merge_patch_nulls_only_what_exists() -> None:
    current = {"a": 1, "b": {"c": 2, "d": 3}, "e": [1]}
    desired = {"a": 1, "b": {"c": 2, "d": None}, "e": [1, 2], "f": None}
    assert merge_patch(current, desired) == {"b": {"d": None}, "e": [1, 2]}
    assert merge_patch(current, {"a": 1, "b": {"c": 2, "d": 3}, "e": [1]}) == {}


def _revision(body: dict[str, Any]) -> str:
    decision = decide(body, _observed(), CATALOG, NOW, "")
    [deployment] = [o for o in decision.apply if o["kind"] == "Deployment"]
    name: str = deployment["metadata"]["name"]
    return name


def test_only_changes_to_the_serving_pods_make_a_new_revision() -> None:
    base = _revision(_body())
    in_place = _body()
    in_place["spec"]["scaling"] = {"minReplicas": 2, "maxReplicas": 8}
    in_place["spec"]["slo"] = {"ttftP99Ms": 900, "maxErrorRate": 0.02}
    in_place["spec"]["rollout"] = {"strategy": "blueGreen", "analysis": {"interval": "30s"}}
    assert _revision(in_place) == base

    for change in (
        {"model": {"id": "meta-llama/Llama-3.1-8B-Instruct", "revision": "f" * 40}},
        {
            "engine": {
                "maxModelLen": 16384,
                "env": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}],
            }
        },
        {"engine": {"maxModelLen": 8192}},  # resized: other flags, maybe other GPUs
    ):
        body = _body()
        for key, value in change.items():
            body["spec"][key] = {**body["spec"][key], **value}
        assert _revision(body) != base, change


def _scaled(total: int, reason: str) -> ScalingOutcome:
    return ScalingOutcome(total, AutoscalingStatus(desired_replicas=total, reason=reason), None)


def test_an_autoscaler_rescale_is_an_event_saying_why() -> None:
    """Like the HPA's SuccessfulRescale: the status moves on at the next evaluation, the event
    stays for `kubectl describe`. Holding the count, or the first evaluation, says nothing."""
    body = _body()
    body["status"] = {"autoscaling": {"desiredReplicas": 1, "reason": "holding 1: ..."}}
    up = "scale up 1 -> 3: 40 waiting over 1 ready replica (40.0 each, target 14)"
    decision = decide(body, _observed(), CATALOG, NOW, "http://prom:9090", scaling=_scaled(3, up))
    rescaled = [e for e in decision.events if e.reason == "Rescaled"]
    assert [(e.type, e.message) for e in rescaled] == [("Normal", up)]

    held = decide(body, _observed(), CATALOG, NOW, "http://prom:9090", scaling=_scaled(1, "hold"))
    assert not [e for e in held.events if e.reason == "Rescaled"]
    first = decide(_body(), _observed(), CATALOG, NOW, "http://prom:9090", scaling=_scaled(2, "x"))
    assert not [e for e in first.events if e.reason == "Rescaled"]


def test_a_gateway_route_without_the_gateway_api_is_degraded_not_silent() -> None:
    body = _body()
    body["spec"]["rollout"] = {"gatewayParentRef": {"name": "gw"}}
    observed = _observed()
    observed.missing_apis.add("HTTPRoute")
    decision = decide(body, observed, CATALOG, NOW, "")
    conds = {c["type"]: c for c in decision.status["conditions"]}
    assert (conds["Degraded"]["status"], conds["Degraded"]["reason"]) == (
        "True",
        "GatewayAPIMissing",
    )
    served = decide(body, _observed(), CATALOG, NOW, "")
    assert "HTTPRoute" in {o["kind"] for o in served.apply}


def test_no_prometheus_rule_is_rendered_where_its_crd_is_not_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rendered = record_calls(monkeypatch, decide_module, "prometheus_rule")
    observed = _observed()
    observed.missing_apis.add("PrometheusRule")
    without = decide(_body(), observed, CATALOG, NOW, "http://prom:9090")
    assert "PrometheusRule" not in {o["kind"] for o in without.apply} and not rendered
    served = decide(_body(), _observed(), CATALOG, NOW, "http://prom:9090")
    assert "PrometheusRule" in {o["kind"] for o in served.apply} and len(rendered) == 1
