"""The local control plane behaves like a real cluster with GPU nodes."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmservice_dev.kubeget import for_kubeconfig
from llmservice_dev.localcluster import (
    DEFAULT_NODES,
    GPU_PRODUCT_LABEL,
    H100,
    ClusterInfo,
    pinned_versions,
)
from llmservice_dev.localcluster.binaries import parse_env_file
from llmservice_dev.localcluster.cluster import _kwok_config
from llmservice_dev.localcluster.nodes import node_manifest, pod_cidr
from llmservice_dev.localcluster.realnode import REAL_NODE_LABEL, REAL_NODE_NAME

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
LOOPBACK_PODS = ipaddress.IPv4Network("127.1.0.0/16")


def wait_for(
    what: str, check: Callable[[], Any], timeout: float = 60, interval: float = 0.5
) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def apply(kubectl: Kubectl, namespace: str, *objs: dict[str, Any]) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(objs))


def get_json(kubectl: Kubectl, *args: str) -> Any:
    return json.loads(kubectl("get", *args, "-o", "json").stdout)


def gpu_deployment(name: str, replicas: int, product: str, gpus: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {GPU_PRODUCT_LABEL: product},
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm/vllm-openai:latest",
                            "ports": [{"containerPort": 8000, "name": "http"}],
                            "resources": {
                                "requests": {"cpu": "1", "memory": "1Gi"},
                                "limits": {"nvidia.com/gpu": str(gpus)},
                            },
                        }
                    ],
                },
            },
        },
    }


# --------------------------------------------------------------- no cluster needed


def test_versions_env_is_parsed() -> None:
    assert parse_env_file("# c\nA=1\nexport B='x y'\n\nC = \"z\"\n") == {
        "A": "1",
        "B": "x y",
        "C": "z",
    }
    v = pinned_versions()
    assert v.k8s.startswith("v1.")
    assert v.etcd.startswith("v3.6.")
    assert v.helm.startswith("v3.")
    assert v.lws.startswith("v0.")


def test_fake_nodes_have_gpus_and_loopback_pod_cidrs() -> None:
    products = [n.gpu_product for n in DEFAULT_NODES]
    assert products.count(H100) == 6
    assert products.count("NVIDIA-L4") == 2
    cidrs = [pod_cidr(i) for i in range(len(DEFAULT_NODES))]
    assert len(set(cidrs)) == len(cidrs)
    for i, spec in enumerate(DEFAULT_NODES):
        node = node_manifest(spec, i)
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(spec.gpus)
        assert ipaddress.IPv4Network(node["spec"]["podCIDR"]).subnet_of(LOOPBACK_PODS)


def test_kwok_config_includes_stages(tmp_path: Path) -> None:
    (tmp_path / "pod-ready.yaml").write_text("apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\n")
    docs = list(yaml.safe_load_all(_kwok_config(tmp_path)))
    assert [d["kind"] for d in docs] == ["KwokConfiguration", "Stage"]


# --------------------------------------------------------------- real cluster


@pytest.mark.cluster
def test_version_is_pinned(cluster: ClusterInfo, kubectl: Kubectl) -> None:
    out = json.loads(kubectl("version", "-o", "json").stdout)
    pinned = pinned_versions().k8s
    assert out["serverVersion"]["gitVersion"] == pinned
    assert out["clientVersion"]["gitVersion"] == pinned
    assert cluster.k8s_version == pinned


@pytest.mark.cluster
def test_helm_works(cluster: ClusterInfo) -> None:
    result = subprocess.run(
        [str(cluster.helm), "version", "--short"],
        capture_output=True,
        text=True,
        check=True,
        env=cluster.env(),
    )
    assert result.stdout.strip().startswith(pinned_versions().helm)
    listed = subprocess.run(
        [str(cluster.helm), "list", "--all-namespaces"],
        capture_output=True,
        text=True,
        check=False,
        env=cluster.env(),
    )
    assert listed.returncode == 0, listed.stderr


@pytest.mark.cluster
def test_gpu_nodes_are_ready(kubectl: Kubectl) -> None:
    nodes = get_json(kubectl, "nodes")["items"]
    by_name = {n["metadata"]["name"]: n for n in nodes}
    for spec in DEFAULT_NODES:
        node = by_name[spec.name]
        assert node["metadata"]["labels"][GPU_PRODUCT_LABEL] == spec.gpu_product
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(spec.gpus)
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready
        assert ready[0]["status"] == "True"


@pytest.mark.cluster
def test_gpu_deployment_becomes_ready_on_h100_nodes(
    cluster: ClusterInfo, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, gpu_deployment("llm", 3, H100))

    def ready() -> bool:
        status = get_json(kubectl, "-n", namespace, "deployment/llm").get("status", {})
        return bool(status.get("readyReplicas") == 3 and status.get("replicas") == 3)

    wait_for("3 ready replicas", ready)
    rs = get_json(kubectl, "-n", namespace, "replicasets", "-l", "app=llm")["items"]
    assert len(rs) == 1
    assert rs[0]["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    h100 = {n.name for n in DEFAULT_NODES if n.gpu_product == H100}
    pods = get_json(kubectl, "-n", namespace, "pods", "-l", "app=llm")["items"]
    assert len(pods) == 3
    for pod in pods:
        assert pod["spec"]["nodeName"] in h100
        assert pod["status"]["phase"] == "Running"
        # kwok hands out pod IPs from the node's loopback podCIDR (bindable locally).
        assert ipaddress.ip_address(pod["status"]["podIP"]) in LOOPBACK_PODS
    ips = {p["status"]["podIP"] for p in pods}
    assert len(ips) == 3
    assert_kubeget_prints_what_kubectl_prints(cluster, namespace)


def assert_kubeget_prints_what_kubectl_prints(cluster: ClusterInfo, namespace: str) -> None:
    """The tests' in-process ``get -o json`` (kubeget.py) against the kubectl it stands in
    for: the same JSON for an object, a list by label, a cluster-scoped list and a field
    selector, the same exit and message for a missing name."""
    client = for_kubeconfig(cluster.kubeconfig)
    queries = [
        ("-n", namespace, "get", "deployment/llm", "-o", "json"),
        ("-n", namespace, "get", "deploy", "llm", "-o", "json"),
        ("get", "-n", namespace, "replicasets.apps", "-l", "app=llm", "-o", "json"),
        ("get", "nodes", "-o", "json"),
        ("get", "pods", "-A", f"--field-selector=metadata.namespace={namespace}", "-o", "json"),
        ("-n", namespace, "get", "configmap", "missing", "-o", "json"),
    ]
    for args in queries:
        answer = client.get(*args)
        assert answer is not None, args
        real = subprocess.run(
            [str(cluster.kubectl), f"--kubeconfig={cluster.kubeconfig}", *args],
            capture_output=True,
            text=True,
            check=False,
        )
        assert answer.returncode == real.returncode, (args, answer.stderr, real.stderr)
        if real.returncode == 0:
            ours, theirs = json.loads(answer.stdout), json.loads(real.stdout)
            # Nodes and pods change between the two reads (heartbeats, status): compare the
            # objects' identities and specs; the deployment is settled and compared whole.
            if "items" in theirs and args[-3] in ("nodes", "-A"):
                assert [(i["kind"], i["metadata"]["uid"], i["spec"]) for i in ours["items"]] == [
                    (i["kind"], i["metadata"]["uid"], i["spec"]) for i in theirs["items"]
                ], args
                ours["items"] = theirs["items"] = []
            assert ours == theirs, args
        else:
            assert answer.stderr.strip() == real.stderr.strip(), args


@pytest.mark.cluster
def test_loopback_pod_ips_are_not_published_as_endpoints(kubectl: Kubectl, namespace: str) -> None:
    """Known limitation: the API server rejects loopback addresses in EndpointSlices (and
    Endpoints), so Services over kwok pods have no endpoints. Reach pods by their IPs."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "llm"},
        "spec": {"selector": {"app": "llm"}, "ports": [{"port": 8000, "targetPort": "http"}]},
    }
    apply(kubectl, namespace, gpu_deployment("llm", 1, H100), service)

    def rejected() -> list[Any]:
        events = get_json(kubectl, "-n", namespace, "events")["items"]
        return [e for e in events if e.get("reason") == "FailedToUpdateEndpointSlices"]

    events = wait_for("FailedToUpdateEndpointSlices", rejected)
    assert "loopback" in events[0]["message"]


@pytest.mark.cluster
@pytest.mark.serial  # it fills the H100 nodes: a test beside it would find none free
def test_gpu_capacity_is_enforced(kubectl: Kubectl, namespace: str) -> None:
    # 6 H100 nodes x 8 GPUs: seven 8-GPU replicas cannot all fit (other tests may hold some).
    apply(kubectl, namespace, gpu_deployment("big", 7, H100, gpus=8))

    def pending_unschedulable() -> bool:
        pods = get_json(kubectl, "-n", namespace, "pods", "-l", "app=big")["items"]
        return any(
            c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
            for p in pods
            for c in p.get("status", {}).get("conditions") or []
        )

    wait_for("an unschedulable 8-GPU replica", pending_unschedulable)
    status = get_json(kubectl, "-n", namespace, "deployment/big").get("status", {})
    assert status.get("readyReplicas", 0) <= 6


@pytest.mark.cluster
def test_pod_for_missing_gpu_product_stays_pending(kubectl: Kubectl, namespace: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nowhere"},
        "spec": {
            "nodeSelector": {GPU_PRODUCT_LABEL: "NVIDIA-B200"},
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm/vllm-openai:latest",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }
    apply(kubectl, namespace, pod)

    def unschedulable() -> dict[str, Any] | None:
        status = get_json(kubectl, "-n", namespace, "pod/nowhere").get("status", {})
        for cond in status.get("conditions") or []:
            if cond["type"] == "PodScheduled" and cond["status"] == "False":
                return dict(cond)
        return None

    cond = wait_for("PodScheduled=False", unschedulable)
    assert cond["reason"] == "Unschedulable"
    events = wait_for(
        "a FailedScheduling event",
        lambda: [
            e
            for e in get_json(kubectl, "-n", namespace, "events")["items"]
            if e.get("reason") == "FailedScheduling"
        ],
    )
    assert "node(s) didn't match" in events[0]["message"]
    time.sleep(2)
    status = get_json(kubectl, "-n", namespace, "pod/nowhere")["status"]
    assert status["phase"] == "Pending"
    assert "nodeName" not in get_json(kubectl, "-n", namespace, "pod/nowhere")["spec"]


@pytest.mark.cluster
def test_garbage_collector_deletes_owned_objects(kubectl: Kubectl, namespace: str) -> None:
    apply(
        kubectl,
        namespace,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}},
    )
    uid = get_json(kubectl, "-n", namespace, "configmap/owner")["metadata"]["uid"]
    owned = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "owned",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}
            ],
        },
        "data": {"k": "v"},
    }
    apply(kubectl, namespace, owned)
    kubectl("delete", "-n", namespace, "configmap/owner")

    def gone() -> bool:
        result = kubectl("get", "-n", namespace, "configmap/owned", check=False)
        return result.returncode != 0 and "NotFound" in result.stderr

    wait_for("the owned ConfigMap to be collected", gone)


@pytest.mark.cluster
def test_cluster_is_reused(cluster: ClusterInfo) -> None:
    from llmservice_dev.localcluster import LocalCluster

    local = LocalCluster(cluster.state_dir)
    assert local.is_up()
    started = time.monotonic()
    again = local.up()
    assert time.monotonic() - started < 5
    assert again.server == cluster.server
    assert again.token == cluster.token


def _real_node_pod(name: str, image: str, *, tolerate: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "hostNetwork": True,
        "nodeSelector": {REAL_NODE_LABEL: "true"},
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
        "containers": [
            {
                "name": "main",
                "image": image,
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "echo hello from the real node; sleep 3600"],
                "securityContext": {
                    "readOnlyRootFilesystem": True,
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
        "terminationGracePeriodSeconds": 1,
    }
    if tolerate:
        spec["tolerations"] = [{"key": REAL_NODE_LABEL, "operator": "Exists"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@pytest.mark.cluster
def test_real_node_runs_pods_with_logs_and_exec(
    cluster: ClusterInfo, kubectl: Kubectl, namespace: str, operator_image: str
) -> None:
    """A real kubelet node: Ready at the loopback address, tainted so only tolerating pods land
    there, running a locally built image; `kubectl logs` and `kubectl exec` reach it through the
    API server (its kubelet client certificate), and the kubelet refuses anonymous callers."""
    [node] = [
        n for n in get_json(kubectl, "nodes")["items"] if n["metadata"]["name"] == REAL_NODE_NAME
    ]
    assert node["status"]["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"}]
    assert {"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"} in node["spec"][
        "taints"
    ]
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    pods = [
        _real_node_pod("tolerates", operator_image, tolerate=True),
        _real_node_pod("does-not", operator_image, tolerate=False),
    ]
    kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps({"kind": "List",
            "apiVersion": "v1", "items": pods}))  # fmt: skip
    kubectl("-n", namespace, "wait", "--for=condition=Ready", "pod/tolerates", "--timeout=60s")
    logs = wait_for(
        "the container's log",
        lambda: kubectl("-n", namespace, "logs", "tolerates", check=False).stdout,
    )
    assert "hello from the real node" in logs
    whoami = kubectl("-n", namespace, "exec", "tolerates", "--", "id", "-u").stdout
    assert whoami.strip() == "10001"
    pending = get_json(kubectl, "-n", namespace, "pod", "does-not")
    assert pending["status"]["phase"] == "Pending"
    assert "untolerated taint" in json.dumps(pending["status"].get("conditions"))
    port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    anonymous = subprocess.run(
        ["curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", f"https://127.0.0.1:{port}/pods"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert anonymous.stdout == "401"
