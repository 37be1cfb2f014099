"""spec.serving.inferencePool against the real API server: the Inference Extension's CRDs
(v1.0.0, from its Go module: hack/fetch-crds.sh) accept the pool the operator renders, and
the operator makes the pool, its endpoint picker, the picker's RBAC and the route to the pool."""

from __future__ import annotations

from typing import Any

from .operator_fixtures import ROOT, OperatorFactory, wait_for
from .test_operator import _apply, _example, _secrets
from .test_scalers import third_party_crds  # noqa: F401  (InferencePool and HTTPRoute CRDs)


def test_inference_pool_objects_are_accepted_as_rendered(
    namespace: str,
    kubectl: Any,
    kubectl_json: Any,
    operators: OperatorFactory,
    third_party_crds: None,  # noqa: F811
) -> None:
    operators.start(namespace)
    _secrets(kubectl, namespace)
    doc = _example(ROOT / "examples" / "llama-3.1-8b.yaml", namespace)
    doc["spec"]["rollout"] = {"gatewayParentRef": {"name": "inference-gateway"}}
    doc["spec"]["serving"] = {"inferencePool": {"endpointPicker": {"scorers": ["queue-scorer"]}}}
    _apply(kubectl, doc)
    pool = wait_for(
        "InferencePool created",
        lambda: kubectl_json("-n", namespace, "inferencepool", "llama-8b"),
        90,
    )
    [serving] = wait_for(
        "the serving Deployment",
        lambda: [
            d
            for d in kubectl_json("-n", namespace, "deployments")["items"]
            if "llmservice.dev/revision" in d["metadata"]["labels"]
        ],
        60,
    )
    revision = serving["metadata"]["labels"]["llmservice.dev/revision"]
    assert pool["spec"]["selector"]["matchLabels"]["llmservice.dev/revision"] == revision
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    ref = pool["spec"]["endpointPickerRef"]
    assert (ref["name"], ref["port"], ref["failureMode"]) == (
        "llama-8b-epp", {"number": 9002}, "FailClose"
    )  # fmt: skip
    assert ref.get("kind", "Service") == "Service"
    picker = wait_for(
        "the endpoint picker",
        lambda: kubectl_json("-n", namespace, "deployment", "llama-8b-epp"),
        60,
    )
    args = picker["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--pool-name") + 1] == "llama-8b"
    assert args[args.index("--pool-namespace") + 1] == namespace
    assert "queue-scorer" in args[args.index("--config-text") + 1]
    assert picker["spec"]["template"]["spec"]["serviceAccountName"] == "llama-8b-epp"
    service = kubectl_json("-n", namespace, "service", "llama-8b-epp")
    assert {p["port"] for p in service["spec"]["ports"]} == {9002, 9090}
    for kind in ("serviceaccount", "role", "rolebinding"):
        assert kubectl_json("-n", namespace, kind, "llama-8b-epp")["metadata"]["name"]
    route = wait_for(
        "HTTPRoute created",
        lambda: kubectl_json("-n", namespace, "httproute", "llama-8b"),
        60,
    )
    [rule] = route["spec"]["rules"]
    assert rule["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "llama-8b",
         "weight": 100}
    ]  # fmt: skip
    assert rule["timeouts"]["request"] == rule["timeouts"]["backendRequest"]
    services = kubectl_json("-n", namespace, "llmservice", "llama-8b")
    degraded = [c for c in services["status"]["conditions"] if c["type"] == "Degraded"]
    assert degraded and degraded[0]["reason"] != "InferencePoolAPIMissing"
