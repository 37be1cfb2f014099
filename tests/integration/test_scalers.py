"""hpa / keda modes and Gateway API routing render objects the real API server accepts
(KEDA's and Gateway API's CRDs come from their Go modules, see hack/fetch-crds.sh)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from llmservice_dev.localcluster import ClusterInfo

from .operator_fixtures import ROOT, OperatorFactory, wait_for
from .test_operator import _apply, _example, _secrets

KEDA_CRD = "scaledobjects.keda.sh"
ARRIVALS = 'sum(rate(envoy_cluster_upstream_rq_total{envoy_cluster_name=~".*mixtral.*"}[1m]))'


def install_third_party_crds(cluster: ClusterInfo, kubectl: Any) -> None:
    out = (
        subprocess.run(
            ["bash", str(ROOT / "hack" / "fetch-crds.sh")],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    for crd in sorted(Path(out).glob("*.yaml")):
        kubectl("apply", "--server-side", "-f", str(crd))
    for name in (
        KEDA_CRD,
        "httproutes.gateway.networking.k8s.io",
        "inferencepools.inference.networking.k8s.io",
    ):
        cluster.wait_crd_established(name)


@pytest.fixture(scope="session")
def third_party_crds(cluster: ClusterInfo, kubectl: Any) -> None:
    install_third_party_crds(cluster, kubectl)


def _replicas_managers(dep: dict[str, Any]) -> set[str]:
    managers = set()
    for entry in dep["metadata"].get("managedFields") or []:
        if "f:replicas" in json.dumps(entry.get("fieldsV1", {}).get("f:spec", {})):
            managers.add(entry["manager"])
    return managers


@pytest.mark.parametrize(
    ("mode", "kind"), [("hpa", "horizontalpodautoscaler"), ("keda", "scaledobject")]
)
def test_scaler_modes_render_accepted_objects_and_leave_replicas_alone(
    mode: str,
    kind: str,
    namespace: str,
    kubectl: Any,
    kubectl_json: Any,
    operators: OperatorFactory,
    third_party_crds: None,
) -> None:
    operators.start(namespace)
    doc = _example(ROOT / "examples" / "mixtral-8x7b-fp8.yaml", namespace)
    doc["spec"]["scaling"]["mode"] = mode
    if mode == "keda":  # scale to zero, woken by the requests counted at the gateway
        doc["spec"]["scaling"].update(minReplicas=0, arrivalRateQuery=ARRIVALS)
    _apply(kubectl, doc)
    scaler = wait_for(f"{kind} created", lambda: kubectl_json("-n", namespace, kind, "mixtral"), 60)
    [dep] = wait_for(
        "deployment",
        lambda: kubectl_json("-n", namespace, "deployments", "--show-managed-fields")["items"],
        60,
    )
    target = scaler["spec"]["scaleTargetRef"]["name"]
    assert target == dep["metadata"]["name"]
    assert "llmservice-operator" not in _replicas_managers(dep)
    assert "llmservice-autoscaler" not in _replicas_managers(dep)
    if mode == "hpa":
        metric = scaler["spec"]["metrics"][0]["pods"]["metric"]["name"]
        assert metric == "vllm:num_requests_waiting"
        assert scaler["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 600
    else:
        queue, activation = scaler["spec"]["triggers"]
        assert queue["type"] == activation["type"] == "prometheus"
        assert "vllm:num_requests_waiting" in queue["metadata"]["query"]
        assert scaler["spec"]["minReplicaCount"] == 0
        assert activation["metadata"]["query"] == ARRIVALS
        assert activation["metadata"]["activationThreshold"] == "0"


def test_gateway_parent_renders_an_accepted_httproute(
    namespace: str,
    kubectl: Any,
    kubectl_json: Any,
    operators: OperatorFactory,
    third_party_crds: None,
) -> None:
    operators.start(namespace)
    _secrets(kubectl, namespace)
    doc = _example(ROOT / "examples" / "llama-3.1-8b.yaml", namespace)
    doc["spec"]["rollout"] = {"gatewayParentRef": {"name": "inference-gateway"}}
    _apply(kubectl, doc)
    route = wait_for(
        "HTTPRoute created", lambda: kubectl_json("-n", namespace, "httproute", "llama-8b"), 60
    )
    assert route["spec"]["parentRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference-gateway"}
    ]
    [rule] = route["spec"]["rules"]
    assert rule["backendRefs"][0]["name"] == "llama-8b"
    assert rule["backendRefs"][0]["weight"] == 100


def _degraded(kubectl_json: Any, namespace: str, name: str) -> dict[str, Any]:
    obj = kubectl_json("-n", namespace, "llmservice", name)
    [cond] = [c for c in obj["status"]["conditions"] if c["type"] == "Degraded"]
    return dict(cond)


def _keda_service(kubectl: Any, kubectl_json: Any, namespace: str) -> None:
    """mixtral in keda mode (scale to zero, woken at the gateway), its ScaledObject made."""
    doc = _example(ROOT / "examples" / "mixtral-8x7b-fp8.yaml", namespace)
    doc["spec"]["scaling"].update(mode="keda", minReplicas=0, arrivalRateQuery=ARRIVALS)
    _apply(kubectl, doc)
    wait_for("the ScaledObject", lambda: kubectl_json("-n", namespace, "scaledobject", "mixtral"))
    wait_for("the Service", lambda: kubectl_json("-n", namespace, "service", "mixtral"), 60)


def _degraded_is(
    kubectl_json: Any, namespace: str, reason: str
) -> Callable[[], dict[str, Any] | None]:
    """For wait_for: the service's Degraded condition once its reason is ``reason``."""

    def check() -> dict[str, Any] | None:
        cond = _degraded(kubectl_json, namespace, "mixtral")
        return cond if cond["reason"] == reason else None

    return check


@pytest.mark.serial  # it deletes KEDA's CRD, which the tests beside it would miss
def test_an_api_removed_after_discovery_is_treated_as_missing(
    cluster: ClusterInfo,
    namespace: str,
    kubectl: Any,
    kubectl_json: Any,
    operators: OperatorFactory,
    third_party_crds: None,
) -> None:
    """KEDA uninstalled under a running operator: its ScaledObject list turns 404, and the
    operator must go on reconciling (here: recreate a deleted Service) instead of failing every
    reconcile, and say on the keda service that its scaler API is missing (Degraded,
    ScalerAPIMissing). A restarted operator, which finds the kind missing from its start, does
    the same: were it to take the API for served, it would apply the ScaledObject, fail, and
    write Degraded AsExpected."""
    operator = operators.start(namespace)
    _keda_service(kubectl, kubectl_json, namespace)
    wait_for("Degraded AsExpected", _degraded_is(kubectl_json, namespace, "AsExpected"), 60)

    def recreated() -> bool:
        result = kubectl("-n", namespace, "get", "service", "mixtral", check=False)
        return bool(result.returncode == 0)

    try:
        kubectl("delete", "crd", KEDA_CRD, "--wait=true", timeout=60)
        missing = wait_for(
            "Degraded ScalerAPIMissing", _degraded_is(kubectl_json, namespace, "ScalerAPIMissing")
        )
        assert missing["status"] == "True"
        assert "needs the ScaledObject API" in missing["message"], missing
        kubectl("-n", namespace, "delete", "service", "mixtral")
        wait_for("the Service recreated by the running operator", recreated, 60)

        operator.stop()
        operators.start(namespace)
        kubectl("-n", namespace, "delete", "service", "mixtral")
        wait_for("the Service recreated by a restarted operator", recreated, 60)
        again = _degraded(kubectl_json, namespace, "mixtral")
        assert (again["status"], again["reason"]) == ("True", "ScalerAPIMissing"), again
    finally:
        install_third_party_crds(cluster, kubectl)


@pytest.mark.serial  # it deletes KEDA's CRD, which the tests beside it would miss
def test_a_reinstalled_scaler_api_is_noticed_without_a_restart(
    cluster: ClusterInfo,
    namespace: str,
    kubectl: Any,
    kubectl_json: Any,
    operators: OperatorFactory,
    third_party_crds: None,
) -> None:
    """KEDA installed again under the operator that saw it go: the kind is looked for again
    every 30 s, so within a minute or so the ScaledObject is made again and Degraded clears."""
    operators.start(namespace)
    _keda_service(kubectl, kubectl_json, namespace)
    wait_for("Degraded AsExpected", _degraded_is(kubectl_json, namespace, "AsExpected"), 60)
    try:
        kubectl("delete", "crd", KEDA_CRD, "--wait=true", timeout=60)
        wait_for(
            "Degraded ScalerAPIMissing", _degraded_is(kubectl_json, namespace, "ScalerAPIMissing")
        )
    finally:
        install_third_party_crds(cluster, kubectl)
    # Nothing else happens to the service meanwhile: only the re-discovery can wake it.
    wait_for("Degraded AsExpected again", _degraded_is(kubectl_json, namespace, "AsExpected"), 90)
    wait_for(
        "the ScaledObject again", lambda: kubectl_json("-n", namespace, "scaledobject", "mixtral")
    )
