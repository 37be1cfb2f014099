"""Multi-node replicas on the local cluster: LeaderWorkerSet groups on kwok H100 nodes.

The cluster side: the LWS controller (built from sigs.k8s.io/lws, its webhooks on loopback)
turns a LeaderWorkerSet into groups whose pods carry the group labels and ``LWS_*``
variables; the simulator runner starts one simulator per group, on the leader, and the
probe-less workers turn Ready once Running; the group counts as ready in the LWS status.

The operator's side: the chart-installed operator serves examples/llama-3.1-405b-multinode.yaml
(replica count by hand) as LeaderWorkerSet groups, each in one zone; a canary moves it a whole
group at a time; scaling goes 1 -> 2 -> 1 groups.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmservice_dev.localcluster import GPU_PRODUCT_LABEL, H100, ClusterInfo
from llmservice_dev.localcluster.nodes import ZONE_LABEL
from llmservice_operator.render.labels import REVISION

from .operator_fixtures import OperatorFactory

ROOT = Path(__file__).parents[2]

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
SERVICE_LABEL = "llmservice.dev/service"


def wait_for(what: str, check: Callable[[], Any], timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def get_json(kubectl: Kubectl, *args: str) -> Any:
    return json.loads(kubectl("get", *args, "-o", "json").stdout)


def group_of_two(name: str) -> dict[str, Any]:
    """A LeaderWorkerSet of 2-pod groups, one 8x H100 node per pod, shaped as the operator
    renders a multi-node replica: the leader serves vllm, the worker runs it --headless."""
    args = [
        "meta-llama/Llama-3.1-8B-Instruct", "--port", "8000", "--served-model-name", name,
        "--tensor-parallel-size", "8", "--pipeline-parallel-size", "2",
        "--distributed-executor-backend", "mp", "--nnodes", "2", "--node-rank", "0",
        "--master-addr", "$(LWS_LEADER_ADDRESS)", "--master-port", "29501",
    ]  # fmt: skip

    def template(role: str) -> dict[str, Any]:
        container: dict[str, Any] = {
            "name": "vllm",
            "image": "vllm/vllm-openai:v0.33.0",
            "command": ["vllm", "serve"],
            "args": args if role == "leader" else [*args, "--headless"],
            "resources": {"limits": {"nvidia.com/gpu": "8"}},
        }
        if role == "leader":
            container["ports"] = [{"name": "http", "containerPort": 8000}]
            container["readinessProbe"] = {
                "httpGet": {"path": "/v1/models", "port": "http"},
                "periodSeconds": 5,
            }
        return {
            "metadata": {"labels": {SERVICE_LABEL: name, "llmservice.dev/role": role}},
            "spec": {"nodeSelector": {GPU_PRODUCT_LABEL: H100}, "containers": [container]},
        }

    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": 2,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": template("leader"),
                "workerTemplate": template("worker"),
            },
        },
    }


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _runner_pods(cluster: ClusterInfo, namespace: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{cluster.simrunner_url}/pods", timeout=5) as response:
        pods: list[dict[str, Any]] = json.loads(response.read())
    return [p for p in pods if p["namespace"] == namespace]


@pytest.mark.cluster
@pytest.mark.serial  # whole H100 nodes, two of a zone: tests beside it hold GPUs on every node
def test_a_leaderworkerset_group_comes_up_with_one_simulator_on_its_leader(
    cluster: ClusterInfo, kubectl: Kubectl, namespace: str
) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(group_of_two("big")))

    def groups_ready(count: int) -> Callable[[], Any]:
        def check() -> Any:
            lws = get_json(kubectl, "-n", namespace, "leaderworkerset/big")
            pods = get_json(kubectl, "-n", namespace, "pods", "-l", f"{LWS_NAME}=big")["items"]
            status = lws.get("status") or {}
            ok = status.get("readyReplicas") == count and len(pods) == 2 * count
            return pods if ok and all(_ready(p) for p in pods) else None

        return check

    pods = wait_for("one ready group of two pods", groups_ready(1))
    by_index = {p["metadata"]["labels"][WORKER_INDEX]: p for p in pods}
    assert set(by_index) == {"0", "1"}  # the controller's pod webhook labelled both
    leader, worker = by_index["0"], by_index["1"]
    # One pod per 8x H100 node, two different nodes.
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert len(nodes) == 2 and all(n.startswith("gpu-h100-") for n in nodes)
    env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}
    assert env["LWS_LEADER_ADDRESS"] == f"{leader['metadata']['name']}.big.{namespace}"
    assert (env["LWS_GROUP_SIZE"], env["LWS_WORKER_INDEX"]) == ("2", "1")
    # One simulator for the group, on the leader, simulating its 16 GPUs; none on the worker.
    sims = _runner_pods(cluster, namespace)
    assert [s["name"] for s in sims] == [leader["metadata"]["name"]]
    assert sims[0]["ready"] and sims[0]["gpu"] == "H100-80GB"
    assert "--nnodes" not in sims[0]["argv"] and "--pipeline-parallel-size" in sims[0]["argv"]
    url = f"http://{leader['status']['podIP']}:8000/v1/models"
    with urllib.request.urlopen(url, timeout=5) as response:
        assert json.loads(response.read())["data"][0]["id"] == "big"

    # Scaling the LWS adds a whole group, with its own simulator; scaling back removes it.
    kubectl("-n", namespace, "scale", "leaderworkerset/big", "--replicas=2")
    pods = wait_for("two ready groups", groups_ready(2))
    assert {p["metadata"]["labels"][GROUP_INDEX] for p in pods} == {"0", "1"}
    assert len({p["spec"]["nodeName"] for p in pods}) == 4
    wait_for("a simulator per group", lambda: len(_runner_pods(cluster, namespace)) == 2)
    kubectl("-n", namespace, "scale", "leaderworkerset/big", "--replicas=1")
    wait_for("one group again", groups_ready(1))
    wait_for(
        "the second group's simulator gone", lambda: len(_runner_pods(cluster, namespace)) == 1
    )


# ------------------------------------------------------------------ the operator's side


def multinode_service(namespace: str) -> dict[str, Any]:
    """examples/llama-3.1-405b-multinode.yaml in the test's namespace: 2 nodes of 8 H100 a
    replica (one LWS group, one zone), the replica count by hand (``scaling.mode: manual``),
    and a canary that holds at 50% (one group of two) long enough to be seen."""
    service: dict[str, Any] = yaml.safe_load(
        (ROOT / "examples/llama-3.1-405b-multinode.yaml").read_text()
    )
    service["metadata"]["namespace"] = namespace
    spec = service["spec"]
    spec["scaling"] = {"mode": "manual", "minReplicas": 1, "maxReplicas": 3}
    spec["replicas"] = 1
    spec["slo"] = {"ttftP99Ms": 60000, "tpotP99Ms": 5000, "maxErrorRate": 0.5}
    spec["rollout"] = {
        "strategy": "canary",
        "steps": [{"setWeight": 50}, {"pause": {"duration": "20s"}}, {"setWeight": 100}],
        "progressDeadlineSeconds": 120,
    }
    return service


@pytest.mark.cluster
@pytest.mark.serial  # its two groups and a canary group take all six H100 nodes
def test_a_multinode_llmservice_is_available_canaries_group_by_group_and_scales(
    cluster: ClusterInfo, kubectl: Kubectl, namespace: str, operators: OperatorFactory
) -> None:
    operators.start(namespace, LLMSERVICE_PROMETHEUS_URL=cluster.prometheus_url)
    kubectl("-n", namespace, "create", "secret", "generic", "hf-token", "--from-literal=token=x")
    kubectl("apply", "-f", "-", input=yaml.safe_dump(multinode_service(namespace)))

    def service() -> dict[str, Any]:
        return get_json(kubectl, "-n", namespace, "llmservice/llama-405b")  # type: ignore[no-any-return]

    def groups() -> dict[str, tuple[int, int]]:
        """Revision -> (spec.replicas, status.readyReplicas) of its LeaderWorkerSet."""
        items = get_json(kubectl, "-n", namespace, "leaderworkersets")["items"]
        return {
            lws["metadata"]["labels"][REVISION]: (
                lws["spec"].get("replicas", 1),
                (lws.get("status") or {}).get("readyReplicas", 0),
            )
            for lws in items
        }

    def available() -> bool:
        return (service().get("status") or {}).get("phase") == "Available"

    wait_for(
        "Available with one group", lambda: available() and [*groups().values()] == [(1, 1)], 180
    )
    stable = service()["status"]["revisions"]["stable"]
    pods = get_json(kubectl, "-n", namespace, "pods", "-l", f"{LWS_NAME}")["items"]
    assert len(pods) == 2 and all(_ready(p) for p in pods)
    zones = {
        get_json(kubectl, "node", p["spec"]["nodeName"])["metadata"]["labels"][ZONE_LABEL]
        for p in pods
    }
    assert len(zones) == 1  # the exclusive-topology annotation: a group in one zone
    assert [s["name"] for s in _runner_pods(cluster, namespace)] == [
        p["metadata"]["name"] for p in pods if p["metadata"]["labels"][WORKER_INDEX] == "0"
    ]

    # Scaling 1 -> 2 groups.
    kubectl(
        "-n",
        namespace,
        "patch",
        "llmservice/llama-405b",
        "--type=merge",
        "-p",
        '{"spec":{"replicas":2}}',
    )
    wait_for("two ready groups", lambda: groups() == {stable: (2, 2)}, 120)

    # A canary moves it group by group: at 50%, one group of the candidate, one of the stable.
    env = {"spec": {"engine": {"env": [{"name": "LLMSERVICE_ROLLOUT_TEST", "value": "v2"}]}}}
    kubectl(
        "-n", namespace, "patch", "llmservice/llama-405b", "--type=merge", "-p", json.dumps(env)
    )

    def at_half() -> Any:
        status = service().get("status") or {}
        candidate = (status.get("revisions") or {}).get("candidate")
        weight = (status.get("rollout") or {}).get("weight")
        seen = groups()
        if candidate and weight == 50 and seen.get(candidate) == (1, 1):
            return candidate, seen
        return None

    candidate, seen = wait_for("the canary at 50%: one candidate group Ready", at_half, 180)
    assert seen[stable][0] in (1, 2), seen  # the stable keeps whole groups
    wait_for(
        "the candidate promoted to two groups, the old revision's LWS removed",
        lambda: (
            service()["status"]["revisions"].get("stable") == candidate
            and groups() == {candidate: (2, 2)}
        ),
        180,
    )

    # Scaling 2 -> 1 group.
    kubectl(
        "-n",
        namespace,
        "patch",
        "llmservice/llama-405b",
        "--type=merge",
        "-p",
        '{"spec":{"replicas":1}}',
    )
    wait_for("one group again", lambda: groups() == {candidate: (1, 1)} and available(), 120)
    wait_for("one simulator again", lambda: len(_runner_pods(cluster, namespace)) == 1, 60)
