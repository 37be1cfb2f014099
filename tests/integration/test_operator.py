"""The operator against a real API server, controllers, scheduler and kwok GPU nodes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from .operator_fixtures import ROOT, OperatorFactory, wait_for
from .watching import writes_within

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


#: The real CPU engine's example is applied unchanged, and checked like the others, by
#: test_real_engine's first test (its engine start-up is the suite's dearest wait).
REAL_ENGINE_EXAMPLE = "tiny-llama-cpu"


def _example_param(path: Path) -> Any:
    """An example as a test parameter: a multi-node group is in the serial group
    (docs/testing.md): it takes whole H100 nodes of one zone, which the H100 services of tests
    beside it would hold. The others run side by side."""
    marks = [pytest.mark.serial] if "topologyKey:" in path.read_text() else []
    return pytest.param(path, id=path.stem, marks=marks)


def _example(path: Path, namespace: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    doc["metadata"]["namespace"] = namespace
    return doc


def _apply(kubectl: Any, obj: dict[str, Any], check: bool = True) -> Any:
    return kubectl("apply", "-f", "-", input=json.dumps(obj), check=check)


def _secrets(kubectl: Any, namespace: str) -> None:
    for name, key in (("hf-token", "token"), ("llama-70b-api-key", "key")):
        kubectl("-n", namespace, "create", "secret", "generic", name, f"--from-literal={key}=x")


def _llms(kubectl_json: Any, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = kubectl_json("-n", namespace, "llmservice", name)
    return result


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return dict(cond)
    return None


def _deployments(kubectl_json: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kubectl_json(
        "-n", namespace, "deployments", "-l", f"llmservice.dev/service={name}"
    )["items"]
    return items


def _workload(
    kubectl_json: Any, namespace: str, name: str
) -> tuple[dict[str, Any], dict[str, Any], int]:
    """The service's one workload (a Deployment, or a LeaderWorkerSet when a replica spans
    nodes), its serving pod's spec (the LWS's leader) and the pods in one replica."""
    deployments = _deployments(kubectl_json, namespace, name)
    if deployments:
        [dep] = deployments
        return dep, dep["spec"]["template"]["spec"], 1
    [lws] = kubectl_json(
        "-n", namespace, "leaderworkersets", "-l", f"llmservice.dev/service={name}"
    )["items"]
    template = lws["spec"]["leaderWorkerTemplate"]
    return lws, template["leaderTemplate"]["spec"], int(template["size"])


def _available(kubectl_json: Any, namespace: str, name: str) -> dict[str, Any] | None:
    obj = _llms(kubectl_json, namespace, name)
    status = obj.get("status") or {}
    cond = _condition(obj, "Available")
    if status.get("phase") == "Available" and cond and cond["status"] == "True":
        return obj
    return None


@pytest.mark.parametrize(
    "example", [_example_param(p) for p in EXAMPLES if p.stem != REAL_ENGINE_EXAMPLE]
)
def test_example_becomes_available(
    example: Path, namespace: str, kubectl: Any, kubectl_json: Any, operators: OperatorFactory
) -> None:
    operators.start(namespace)
    _secrets(kubectl, namespace)
    doc = _example(example, namespace)
    _apply(kubectl, doc)
    assert_example_available(kubectl, kubectl_json, doc, 180)


def assert_example_available(
    kubectl: Any, kubectl_json: Any, doc: dict[str, Any], timeout: float
) -> None:
    """The applied example ``doc`` becomes Available within ``timeout`` seconds, sized as its
    status says, and `kubectl get llms` shows it."""
    namespace, name = doc["metadata"]["namespace"], doc["metadata"]["name"]
    obj = wait_for(f"{name} Available", lambda: _available(kubectl_json, namespace, name), timeout)
    sizing = obj["status"]["sizing"]
    workload, pod_spec, pods_per_replica = _workload(kubectl_json, namespace, name)
    container = pod_spec["containers"][0]
    gpus = container["resources"]["limits"]["nvidia.com/gpu"]
    assert int(gpus) * pods_per_replica == sizing["gpusPerReplica"]
    args = container["args"]
    assert args[args.index("--tensor-parallel-size") + 1] == str(sizing["tensorParallelSize"])
    assert workload["status"]["readyReplicas"] == obj["status"]["readyReplicas"] >= 1
    assert _condition(obj, "Sized")["status"] == "True"  # type: ignore[index]
    table = kubectl("-n", namespace, "get", "llms", name).stdout
    assert doc["spec"]["model"]["id"] in table and "Available" in table
    assert sizing["gpuType"] in table


#: The autoscaler's default evaluation interval: a quiet watch longer than it spans one.
EVALUATION_S = 15


def test_spec_change_delete_and_drift(
    namespace: str,
    kubectl: Any,
    kubectl_json: Any,
    kube_api_client: Any,
    operators: OperatorFactory,
) -> None:
    operators.start(namespace)
    _secrets(kubectl, namespace)
    doc = _example(ROOT / "examples" / "llama-3.1-8b.yaml", namespace)
    _apply(kubectl, doc)
    wait_for("available", lambda: _available(kubectl_json, namespace, "llama-8b"), 120)
    [first] = _deployments(kubectl_json, namespace, "llama-8b")

    # Drift: a hand edit of the args is restored; a deleted Service is recreated.
    dep_name = first["metadata"]["name"]
    kubectl(
        "-n",
        namespace,
        "patch",
        "deployment",
        dep_name,
        "--type=json",
        "-p",
        json.dumps(
            [{"op": "replace", "path": "/spec/template/spec/containers/0/args/0", "value": "evil"}]
        ),
    )
    kubectl("-n", namespace, "delete", "service", "llama-8b")

    def restored() -> bool:
        [dep] = _deployments(kubectl_json, namespace, "llama-8b")
        args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        svc = kubectl("-n", namespace, "get", "service", "llama-8b", check=False)
        return args[0] == "meta-llama/Llama-3.1-8B-Instruct" and svc.returncode == 0

    wait_for("drift restored", restored, 60)
    wait_for("available again", lambda: _available(kubectl_json, namespace, "llama-8b"), 60)

    # A reconcile that changes nothing writes nothing: not to the LLMService (the autoscaler
    # evaluates every 15 s, and keeps its history in the status only when it changes), not to
    # the Deployment. At rest once the autoscaler has judged the Ready replica (Prometheus does
    # not answer here: it holds and says so); watched from the versions read then, over more
    # than one evaluation.
    def judged() -> dict[str, Any] | None:
        obj = _llms(kubectl_json, namespace, "llama-8b")
        cond = _condition(obj, "ScalingDegraded")
        return obj if cond and cond["reason"] == "MetricsUnavailable" else None

    service = wait_for("the autoscaler's verdict on the Ready replica", judged, 60)
    [dep] = _deployments(kubectl_json, namespace, "llama-8b")
    writes = writes_within(kube_api_client, [service, dep], EVALUATION_S + 5)
    assert not writes, "\n".join(writes)

    # A spec change that alters the pods is a new revision; the old one goes once it is ready.
    doc["spec"]["engine"]["maxNumSeqs"] = 32
    _apply(kubectl, doc)

    def replaced() -> bool:
        deps = _deployments(kubectl_json, namespace, "llama-8b")
        obj = _llms(kubectl_json, namespace, "llama-8b")
        return (
            len(deps) == 1
            and deps[0]["metadata"]["name"] != dep_name
            and "32" in deps[0]["spec"]["template"]["spec"]["containers"][0]["args"]
            and obj["status"]["revisions"]["stable"] in deps[0]["metadata"]["name"]
        )

    wait_for("new revision replaced the old", replaced, 120)

    # Delete: owner references let the garbage collector remove everything.
    kubectl("-n", namespace, "delete", "llmservice", "llama-8b", "--wait=true", timeout=60)

    def collected() -> bool:
        left = kubectl_json("-n", namespace, "deployments,services,pdb,networkpolicies")["items"]
        return not [o for o in left if "llmservice.dev/service" in o["metadata"].get("labels", {})]

    wait_for("garbage collected", collected, 60)


def test_cel_rules_reject_with_message(namespace: str, kubectl: Any, crd_installed: None) -> None:
    doc = _example(ROOT / "examples" / "llama-3.1-8b.yaml", namespace)
    doc["spec"]["scaling"] = {"minReplicas": 5, "maxReplicas": 2}
    result = _apply(kubectl, doc, check=False)
    assert result.returncode != 0
    assert "scaling.minReplicas must not exceed scaling.maxReplicas" in result.stderr
    doc["spec"]["scaling"] = {"minReplicas": 1, "maxReplicas": 2}
    doc["spec"]["rollout"] = {"steps": [{"setWeight": 50}, {"setWeight": 10}]}
    result = _apply(kubectl, doc, check=False)
    assert "never decrease" in result.stderr
    del doc["spec"]["rollout"]
    doc["spec"]["scaling"] = {"minReplicas": 0, "maxReplicas": 2}
    result = _apply(kubectl, doc, check=False)
    assert result.returncode != 0
    assert "needs scaling.arrivalRateQuery" in result.stderr


def test_invalid_spec_reported_and_serving_kept(
    namespace: str, kubectl: Any, kubectl_json: Any, operators: OperatorFactory
) -> None:
    operators.start(namespace)
    _secrets(kubectl, namespace)
    # Missing Secret: InvalidSpec, a Warning event, no workload.
    doc = _example(ROOT / "examples" / "llama-3.1-8b.yaml", namespace)
    doc["spec"]["engine"]["hfTokenSecretRef"] = {"name": "nope"}
    _apply(kubectl, doc)

    def invalid() -> dict[str, Any] | None:
        cond = _condition(_llms(kubectl_json, namespace, "llama-8b"), "InvalidSpec")
        return cond if cond and cond["status"] == "True" else None

    cond = wait_for("InvalidSpec", invalid, 60)
    assert "Secret 'nope' does not exist" in cond["message"]
    assert _deployments(kubectl_json, namespace, "llama-8b") == []
    events = kubectl_json("-n", namespace, "events")["items"]
    assert any(e["type"] == "Warning" and e["reason"] == "InvalidSpec" for e in events)

    # Fix it: serving starts. Then ask for what cannot fit: reported, nothing deleted.
    doc["spec"]["engine"]["hfTokenSecretRef"] = {"name": "hf-token"}
    _apply(kubectl, doc)
    wait_for("available", lambda: _available(kubectl_json, namespace, "llama-8b"), 120)
    [serving] = _deployments(kubectl_json, namespace, "llama-8b")
    doc["spec"]["model"]["id"] = "meta-llama/Llama-3.1-70B-Instruct"
    doc["spec"]["resources"] = {"gpu": "L4", "minConcurrency": 64}
    doc["spec"]["engine"]["maxModelLen"] = 131072
    _apply(kubectl, doc)
    cond = wait_for("InvalidSpec (does not fit)", invalid, 60)
    assert "L4" in cond["message"]
    [still] = _deployments(kubectl_json, namespace, "llama-8b")
    assert still["metadata"]["uid"] == serving["metadata"]["uid"]


def test_unschedulable_gpu_surfaces_as_condition(
    namespace: str, kubectl: Any, kubectl_json: Any, operators: OperatorFactory
) -> None:
    operators.start(namespace)
    _secrets(kubectl, namespace)
    doc = _example(ROOT / "examples" / "llama-3.1-8b.yaml", namespace)
    doc["spec"]["resources"] = {"gpu": "A100-80GB"}  # no such nodes in the local cluster
    _apply(kubectl, doc)

    def degraded() -> dict[str, Any] | None:
        cond = _condition(_llms(kubectl_json, namespace, "llama-8b"), "Degraded")
        return cond if cond and cond["reason"] == "Unschedulable" else None

    cond = wait_for("Degraded/Unschedulable", degraded, 90)
    assert "nvidia.com/gpu" in cond["message"] or "affinity" in cond["message"]


def test_chart_lints_and_the_api_server_accepts_it(cluster: Any, kubectl: Any) -> None:
    import subprocess

    chart = str(ROOT / "charts" / "llmservice-operator")
    lint = subprocess.run([str(cluster.helm), "lint", chart], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    rendered = subprocess.run(
        [
            str(cluster.helm),
            "template",
            "llmservice",
            chart,
            "--namespace",
            "default",
            "--include-crds",
            "--kube-version",
            "1.37.2",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result = kubectl("apply", "--dry-run=server", "-f", "-", input=rendered)
    assert "clusterrole.rbac.authorization.k8s.io/llmservice" in result.stdout
    assert "deployment.apps/llmservice" in result.stdout
