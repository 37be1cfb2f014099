"""Multi-node replicas render as one LeaderWorkerSet per revision (render/multinode.py).

Llama-3.1-405B bf16 on H100: 2 nodes of 8 per replica at 8k context, 4 nodes at 128k for 16
sequences. The leader and the workers share the pod template (security context, /dev/shm,
GPUs, volumes); only the leader serves HTTP, so only it has HTTP probes and is selected by
the Service.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from llmservice_operator.api import SpecError, parse_llmservice
from llmservice_operator.api.k8s_values import LABEL_KEY_PATTERN
from llmservice_operator.render.labels import REVISION, ROLE, selector_labels
from llmservice_operator.render.multinode import (
    EXCLUSIVE_TOPOLOGY_ANNOTATION,
    NODE_RANK_ENV,
    WORKER_INDEX_LABEL,
)
from llmservice_operator.service_plan import ServicePlan, plan_service
from llmservice_operator.sizing import load_catalog

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "llama-3.1-405b-multinode.yaml"
CATALOG = load_catalog()


def _body(nodes: int, **resources: Any) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    if nodes == 4:
        body["spec"]["engine"]["maxModelLen"] = 131072
        body["spec"]["resources"]["minConcurrency"] = 16
    body["spec"]["resources"].update(resources)
    return body


def _plan(nodes: int, **resources: Any) -> ServicePlan:
    return plan_service(parse_llmservice(_body(nodes, **resources)), CATALOG)


def _kind(plan: ServicePlan, kind: str) -> dict[str, Any]:
    [obj] = [o for o in plan.objects if o["kind"] == kind]
    return obj


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("nodes", [2, 4])
def test_a_multinode_replica_is_one_leaderworkerset_group_of_one_pod_per_node(nodes: int) -> None:
    plan = _plan(nodes)
    kinds = [o["kind"] for o in plan.objects]
    assert "Deployment" not in kinds
    lws = _kind(plan, "LeaderWorkerSet")
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert lws["metadata"]["name"] == f"llama-405b-{plan.revision}"
    assert lws["metadata"]["labels"][REVISION] == plan.revision
    assert lws["metadata"]["annotations"]["llmservice.dev/gpu"] == f"{8 * nodes}x H100-80GB"
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == nodes
    assert template["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert lws["spec"]["startupPolicy"] == "LeaderCreated"  # the leader waits for its workers
    assert "replicas" not in lws["spec"]  # the operator's autoscaler writes it (groups)
    for role in ("leaderTemplate", "workerTemplate"):
        container = template[role]["spec"]["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"  # one node's GPUs
        assert template[role]["metadata"]["labels"][REVISION] == plan.revision
    assert plan.shape.gpus_per_pod == 8 and plan.shape.nodes_per_replica == nodes


@pytest.mark.parametrize("nodes", [2, 4])
def test_leader_and_workers_share_security_shm_and_volumes_and_only_the_leader_probes_http(
    nodes: int,
) -> None:
    plan = _plan(nodes)
    template = _kind(plan, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    leader, worker = template["leaderTemplate"], template["workerTemplate"]
    assert leader["spec"]["securityContext"] == worker["spec"]["securityContext"]
    assert leader["spec"]["securityContext"]["runAsNonRoot"] is True
    assert leader["spec"]["volumes"] == worker["spec"]["volumes"]
    [shm] = [v for v in worker["spec"]["volumes"] if v["name"] == "dshm"]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "8192Mi"}  # 1 GiB per local GPU
    lc, wc = leader["spec"]["containers"][0], worker["spec"]["containers"][0]
    assert lc["securityContext"] == wc["securityContext"]
    assert lc["volumeMounts"] == wc["volumeMounts"]
    assert {"mountPath": "/dev/shm", "name": "dshm"} in wc["volumeMounts"]
    assert lc["resources"] == wc["resources"]
    assert lc["image"] == wc["image"]
    # The pod template's probes, exactly (the Deployment's rules), on the leader only.
    assert lc["readinessProbe"]["httpGet"]["path"] == "/v1/models"
    assert lc["startupProbe"] == plan.pod_template["spec"]["containers"][0]["startupProbe"]
    assert lc["livenessProbe"]["httpGet"]["path"] == "/health"
    assert "preStop" in lc["lifecycle"]
    for key in ("readinessProbe", "livenessProbe", "startupProbe", "lifecycle", "ports"):
        assert key not in wc, key  # --headless: no HTTP server to probe or drain
    assert leader["metadata"]["labels"][ROLE] == "leader"
    assert worker["metadata"]["labels"][ROLE] == "worker"
    assert "prometheus.io/scrape" in leader["metadata"]["annotations"]
    assert "prometheus.io/scrape" not in (worker["metadata"].get("annotations") or {})


@pytest.mark.parametrize("nodes", [2, 4])
def test_the_group_runs_vllm_multiprocessing_across_nodes_leader_rank_0_workers_headless(
    nodes: int,
) -> None:
    template = _kind(_plan(nodes), "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    worker = template["workerTemplate"]["spec"]["containers"][0]

    def flag(args: list[str], name: str) -> str:
        return args[args.index(name) + 1]

    for args in (leader["args"], worker["args"]):
        assert flag(args, "--tensor-parallel-size") == "8"
        assert flag(args, "--pipeline-parallel-size") == str(nodes)
        assert flag(args, "--distributed-executor-backend") == "mp"
        assert flag(args, "--nnodes") == str(nodes)
        assert flag(args, "--master-addr") == "$(LWS_LEADER_ADDRESS)"
    assert flag(leader["args"], "--node-rank") == "0"
    assert "--headless" not in leader["args"]
    assert flag(worker["args"], "--node-rank") == f"$({NODE_RANK_ENV})"
    assert worker["args"][-1] == "--headless"
    [rank] = [e for e in worker["env"] if e["name"] == NODE_RANK_ENV]
    assert rank["valueFrom"]["fieldRef"]["fieldPath"] == f"metadata.labels['{WORKER_INDEX_LABEL}']"
    assert [e for e in leader["env"] if e["name"] == NODE_RANK_ENV] == []


def test_the_exclusive_topology_annotation_follows_resources_topology_key() -> None:
    with_key = _kind(_plan(2), "LeaderWorkerSet")  # the example sets the zone label
    annotations = with_key["metadata"]["annotations"]
    assert annotations[EXCLUSIVE_TOPOLOGY_ANNOTATION] == "topology.kubernetes.io/zone"
    without = _kind(_plan(2, topologyKey=None), "LeaderWorkerSet")
    assert EXCLUSIVE_TOPOLOGY_ANNOTATION not in without["metadata"]["annotations"]
    rack = _kind(_plan(4, topologyKey="example.com/rack"), "LeaderWorkerSet")
    assert rack["metadata"]["annotations"][EXCLUSIVE_TOPOLOGY_ANNOTATION] == "example.com/rack"


def test_a_topology_key_that_is_not_a_label_key_is_refused_by_the_schema() -> None:
    with pytest.raises(SpecError, match=r"spec\.resources\.topologyKey"):
        parse_llmservice(_body(2, topologyKey="not a label key"))
    # The CRD carries the same pattern: the API server refuses it before the operator sees it.
    crd = yaml.safe_load((ROOT / "crds" / "llmservice.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    field = spec["properties"]["resources"]["properties"]["topologyKey"]
    assert field["pattern"] == LABEL_KEY_PATTERN


@pytest.mark.parametrize("nodes", [2, 4])
def test_the_service_selects_leaders_and_the_pdb_covers_every_pod_of_a_group(nodes: int) -> None:
    plan = _plan(nodes)
    template = _kind(plan, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    leader = template["leaderTemplate"]["metadata"]["labels"]
    worker = template["workerTemplate"]["metadata"]["labels"]
    selector = _kind(plan, "Service")["spec"]["selector"]
    assert selector == {**selector_labels("llama-405b"), ROLE: "leader"}
    assert _matches(selector, leader) and not _matches(selector, worker)
    # One pod of the service down at a time: an eviction recreates its whole group, whose
    # other pods then count as disrupted too, so no second group is touched until it is back.
    pdb = _kind(plan, "PodDisruptionBudget")["spec"]
    assert pdb["maxUnavailable"] == 1
    assert _matches(pdb["selector"]["matchLabels"], leader)
    assert _matches(pdb["selector"]["matchLabels"], worker)


def test_the_network_policy_lets_a_groups_pods_reach_each_other_on_any_port() -> None:
    rules = _kind(_plan(2), "NetworkPolicy")["spec"]["ingress"]
    assert rules[0]["ports"] == [{"port": 8000, "protocol": "TCP"}]
    assert rules[1] == {"from": [{"podSelector": {"matchLabels": selector_labels("llama-405b")}}]}


@pytest.mark.parametrize("mode", ["hpa", "keda"])
def test_hpa_and_keda_scale_the_leaderworkerset(mode: str) -> None:
    body = _body(2)
    body["spec"]["scaling"]["mode"] = mode
    if mode == "hpa":
        body["spec"]["scaling"].pop("arrivalRateQuery", None)
    plan = plan_service(parse_llmservice(body), CATALOG)
    kind = {"hpa": "HorizontalPodAutoscaler", "keda": "ScaledObject"}[mode]
    target = _kind(plan, kind)["spec"]["scaleTargetRef"]
    assert target == {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "name": f"llama-405b-{plan.revision}",
    }


def test_a_single_node_replica_is_still_a_deployment_without_roles() -> None:
    body = yaml.safe_load((ROOT / "examples" / "llama-3.1-70b-canary.yaml").read_text())
    plan = plan_service(parse_llmservice(body), CATALOG)
    kinds = [o["kind"] for o in plan.objects]
    assert "Deployment" in kinds and "LeaderWorkerSet" not in kinds
    assert ROLE not in _kind(plan, "Service")["spec"]["selector"]
    assert ROLE not in plan.pod_template["metadata"]["labels"]
    assert "--nnodes" not in plan.pod_template["spec"]["containers"][0]["args"]
    assert len(_kind(plan, "NetworkPolicy")["spec"]["ingress"]) == 1
