"""Golden files: what the operator applies for each example (UPDATE_GOLDEN=1 rewrites them),
and every applied object validates against the upstream Kubernetes OpenAPI schemas.

The objects come from ``decide()``, the reconcile's own decision, with its ownerReferences and
labels, in two states: at rest (the first reconcile) and in the middle of a rollout (a new
model revision just started: the candidate's Deployment and the preview Service; with a
Gateway API parent, at its first weight: the HTTPRoute's backends). ``llmservice plan`` prints the objects at
rest; a test keeps the two equal.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from llmservice_operator.api import parse_llmservice
from llmservice_operator.commands.plan import plan_documents
from llmservice_operator.decide import Decision, decide
from llmservice_operator.observed import WORKLOAD_KINDS, ObservedState
from llmservice_operator.reconcile import merge_patch
from llmservice_operator.render.labels import REVISION
from llmservice_operator.rollout import SmokeResult
from llmservice_operator.sizing import load_catalog

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
GOLDEN = ROOT / "tests" / "golden"
K8S_SCHEMA_VERSION = "1.37.0"  # matches the pinned local control plane
PROMETHEUS_URL = "http://prometheus.monitoring.svc:9090"
CATALOG = load_catalog()
NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
NEW_MODEL_REVISION = "f" * 40


def _body(example: Path) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(example.read_text())
    body["metadata"].update({"uid": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "generation": 1})
    return body


def _with_gateway(body: dict[str, Any]) -> dict[str, Any]:
    body["spec"]["rollout"]["gatewayParentRef"] = {"name": "inference", "namespace": "gateways"}
    return body


def _secrets(body: dict[str, Any]) -> dict[str, set[str] | None]:
    """Every Secret the spec points at, holding the key it names."""
    spec = parse_llmservice(body).spec
    refs = [spec.engine.hf_token_secret_ref, spec.serving.api_key_secret_ref]
    return {ref.name: {ref.key} for ref in refs if ref is not None}


class _Cluster:
    """The owned objects as the API server would hold them, every Deployment Ready at its size."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.owned: dict[tuple[str, str], dict[str, Any]] = {}

    def observed(self) -> ObservedState:
        return ObservedState(owned=copy.deepcopy(self.owned), secrets=_secrets(self.body))

    def reconcile(self, now: datetime) -> Decision:
        decision = decide(self.body, self.observed(), CATALOG, now, PROMETHEUS_URL)
        if decision.smoke is not None:
            smoke = SmokeResult(passed=True, retryable=False, message="2 of 2 answered")
            decision = decide(self.body, self.observed(), CATALOG, now, PROMETHEUS_URL, smoke=smoke)
        for obj in decision.apply:
            self.owned[(obj["kind"], obj["metadata"]["name"])] = copy.deepcopy(obj)
        for _api_version, kind, name in decision.delete:
            del self.owned[(kind, name)]
        for (kind, name), obj in self.owned.items():
            if kind in WORKLOAD_KINDS:  # a LeaderWorkerSet's replicas: Ready groups
                replicas = decision.scale.get(name, obj["spec"].get("replicas", 0))
                obj["spec"]["replicas"] = replicas
                obj["status"] = {"replicas": replicas, "readyReplicas": replicas}
        self.body["status"] = merge_patch({}, decision.status)
        return decision


def at_rest(body: dict[str, Any]) -> list[dict[str, Any]]:
    return _Cluster(body).reconcile(NOW).apply


def _changed_model_revision(body: dict[str, Any]) -> _Cluster:
    """The cluster at rest, then the spec asking for a new model revision."""
    cluster = _Cluster(body)
    cluster.reconcile(NOW)
    body["spec"]["model"]["revision"] = NEW_MODEL_REVISION
    body["metadata"]["generation"] = 2
    return cluster


def rollout_started(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The first reconcile after the change: the candidate starts behind the preview Service."""
    return _changed_model_revision(body).reconcile(NOW + timedelta(seconds=10)).apply


def first_weight(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The candidate Ready and smoke-tested, at the first setWeight step."""
    cluster = _changed_model_revision(body)
    for tick in range(1, 6):
        decision = cluster.reconcile(NOW + timedelta(seconds=10 * tick))
        if body["status"].get("rollout", {}).get("weight", 0) > 0:
            return decision.apply
    raise AssertionError(f"the rollout never set a weight: {body['status']}")


#: golden file stem -> (example, its spec as the test changes it, the state)
CASES: dict[
    str,
    tuple[
        Path,
        Callable[[dict[str, Any]], dict[str, Any]],
        Callable[[dict[str, Any]], list[dict[str, Any]]],
    ],
] = {}
for _example in EXAMPLES:
    CASES[_example.stem] = (_example, lambda body: body, at_rest)
    CASES[f"{_example.stem}.rollout"] = (_example, lambda body: body, rollout_started)
CASES["llama-3.1-70b-canary.gateway.weighted"] = (
    ROOT / "examples" / "llama-3.1-70b-canary.yaml",
    _with_gateway,
    first_weight,
)


def _with_inference_pool(body: dict[str, Any]) -> dict[str, Any]:
    body["spec"]["serving"]["inferencePool"] = {}
    return _with_gateway(body)


# spec.serving.inferencePool: at rest (the stable's pool and picker) and at the first weight
# (the candidate's pool and picker too, the route's backends the two pools).
CASES["llama-3.1-70b-canary.inference-pool"] = (
    ROOT / "examples" / "llama-3.1-70b-canary.yaml",
    _with_inference_pool,
    at_rest,
)
CASES["llama-3.1-70b-canary.inference-pool.weighted"] = (
    ROOT / "examples" / "llama-3.1-70b-canary.yaml",
    _with_inference_pool,
    first_weight,
)


def _applied(case: str) -> list[dict[str, Any]]:
    example, spec_change, state = CASES[case]
    return state(spec_change(_body(example)))


def assert_matches_golden(golden: Path, objects: list[dict[str, Any]]) -> None:
    """``objects`` as YAML equal ``golden`` (written instead with UPDATE_GOLDEN=1)."""
    text = yaml.safe_dump_all(objects, sort_keys=False, width=100)
    if os.environ.get("UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden.name}: run `make golden`"
    assert text == golden.read_text(), f"{golden.name} differs: review, then `make golden`"


@pytest.mark.parametrize("case", CASES)
def test_applied_objects_match_golden(case: str) -> None:
    assert_matches_golden(GOLDEN / f"{case}.yaml", _applied(case))


@pytest.mark.parametrize("case", CASES)
def test_applied_objects_validate_against_kubernetes_schemas(case: str) -> None:
    for obj in _applied(case):
        if obj["apiVersion"].startswith(
            (
                "keda.sh/",
                "gateway.networking.k8s.io/",
                "monitoring.coreos.com/",
                "inference.networking.k8s.io/",
                "leaderworkerset.x-k8s.io/",
            )
        ):
            continue  # CRDs, not built-in types: the API server checks them with their CRDs
        kubernetes_validate.validate(obj, K8S_SCHEMA_VERSION, strict=True)


def test_the_rollout_goldens_hold_the_candidate_and_the_preview() -> None:
    for example in EXAMPLES:
        at_rest_names = {o["metadata"]["name"] for o in _applied(example.stem)}
        started = _applied(f"{example.stem}.rollout")
        [candidate] = [o for o in started if o["kind"] in WORKLOAD_KINDS]
        assert candidate["metadata"]["name"] not in at_rest_names, example.name
        service = parse_llmservice(_body(example)).metadata.name
        assert f"{service}-preview" in {o["metadata"]["name"] for o in started}, example.name
    [route] = [
        o for o in _applied("llama-3.1-70b-canary.gateway.weighted") if o["kind"] == "HTTPRoute"
    ]
    weights = [b["weight"] for rule in route["spec"]["rules"] for b in rule["backendRefs"]]
    assert sorted(weights) == [10, 90]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_plan_prints_what_the_operator_applies_at_rest(example: Path) -> None:
    """The same objects, but for what only a running operator knows: the owner's uid, and the
    revision its Service selects (plan's Service selects the service's pods of any revision)."""
    [plan] = plan_documents(example, None, PROMETHEUS_URL)
    applied = at_rest(_body(example))
    for obj in applied:
        del obj["metadata"]["ownerReferences"]
        if obj["kind"] == "Service":
            del obj["spec"]["selector"][REVISION]
    assert plan.objects == applied


def test_each_example_applies_one_workload_and_a_service() -> None:
    for example in EXAMPLES:
        kinds = [o["kind"] for o in at_rest(_body(example))]
        assert sum(kinds.count(kind) for kind in WORKLOAD_KINDS) == 1, example.name
        assert "Service" in kinds and "PodDisruptionBudget" in kinds, example.name
