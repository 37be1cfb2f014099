"""The local cluster's LeaderWorkerSet side: one simulator per group (on the leader), workers
Ready by the kubelet's rule, and the LWS controller's configuration and webhooks."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

from llmservice_dev.localcluster import DEFAULT_NODES, H100
from llmservice_dev.localcluster.binaries import LWS_CONTROLLER, Versions, missing_binaries
from llmservice_dev.localcluster.lws import (
    LWS_LABEL_NAME,
    controller_args,
    controller_config,
    webhook_configurations,
)
from llmservice_dev.localcluster.nodes import ZONE_LABEL, node_manifest
from llmservice_dev.simrunner.podspec import launch_for, worker_ready
from llmservice_operator.commands.sim import options_from

H100_NODE = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "type": "kwok"}
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
#: The leader's arguments as the operator renders them for 2 nodes of 8 GPUs (TP 8, PP 2).
LEADER_ARGS = [
    "meta-llama/Llama-3.1-405B-Instruct", "--port", "8000", "--served-model-name", "big",
    "--tensor-parallel-size", "8", "--pipeline-parallel-size", "2", "--max-model-len", "8192",
    "--distributed-executor-backend", "mp", "--nnodes", "2", "--node-rank", "0",
    "--master-addr", "$(LWS_LEADER_ADDRESS)", "--master-port", "29501",
]  # fmt: skip


def group_pod(worker_index: str, **status: Any) -> dict[str, Any]:
    args = list(LEADER_ARGS)
    container: dict[str, Any] = {"name": "vllm", "command": ["vllm", "serve"], "args": args}
    if worker_index == "0":
        container["readinessProbe"] = {"httpGet": {"path": "/v1/models", "port": 8000}}
    else:
        args[args.index("--node-rank") + 1] = "$(LLMSERVICE_NODE_RANK)"
        args.append("--headless")
    return {
        "metadata": {
            "name": "big-0" if worker_index == "0" else f"big-0-{worker_index}",
            "namespace": "ml",
            "uid": f"u-{worker_index}",
            "labels": {
                "llmservice.dev/service": "big",
                LWS_LABEL_NAME: "big",
                WORKER_INDEX: worker_index,
            },
        },
        "spec": {"nodeName": "gpu-h100-0", "containers": [container]},
        "status": {"phase": "Running", "podIP": "127.1.1.2", **status},
    }


def test_the_leader_runs_the_groups_simulator_without_the_multinode_flags() -> None:
    launch = launch_for(group_pod("0"), H100_NODE, time_scale=10)
    assert launch is not None
    for flag in ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless"):
        assert flag not in launch.argv
    assert "$(LWS_LEADER_ADDRESS)" not in launch.argv and "29501" not in launch.argv
    options = options_from(list(launch.argv), dict(launch.env))
    # The one simulator stands for the whole group: 8 x 2 GPUs of the node's kind.
    assert (options.host, options.port, options.gpu) == ("127.1.1.2", 8000, "H100-80GB")
    assert launch.probe.path == "/v1/models"
    assert "--tensor-parallel-size" in launch.argv and "--pipeline-parallel-size" in launch.argv


def test_the_equals_form_of_the_multinode_flags_is_dropped_too() -> None:
    pod = group_pod("0")
    pod["spec"]["containers"][0]["args"] = ["m", "--nnodes=2", "--master-addr=x", "--port", "8000"]
    launch = launch_for(pod, H100_NODE, time_scale=1)
    assert launch is not None and launch.argv[:3] == ("m", "--port", "8000")


def test_workers_get_no_simulator_and_are_ready_once_running_without_a_probe() -> None:
    worker = group_pod("1")
    assert launch_for(worker, H100_NODE, time_scale=10) is None
    assert worker_ready(worker, H100_NODE) is True
    assert worker_ready(group_pod("1", phase="Pending"), H100_NODE) is False
    assert worker_ready(worker, None) is False  # not on a managed node
    probed = copy.deepcopy(worker)
    probed["spec"]["containers"][0]["readinessProbe"] = {"exec": {"command": ["true"]}}
    assert worker_ready(probed, H100_NODE) is False  # nothing here can answer it
    assert worker_ready(group_pod("0"), H100_NODE) is None  # the leader: its simulator says
    plain = group_pod("1")
    del plain["metadata"]["labels"][WORKER_INDEX]
    assert worker_ready(plain, H100_NODE) is None  # not a group's pod


def test_the_controller_serves_its_webhooks_on_loopback_with_no_cert_rotation() -> None:
    config = controller_config(webhook_port=9443, health_port=8081, cert_dir=Path("/c"))
    assert config["webhook"] == {"host": "127.0.0.1", "port": 9443, "certDir": "/c"}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["health"]["healthProbeBindAddress"] == "127.0.0.1:8081"
    args = controller_args(Path("/c/lws.yaml"), Path("/k"))
    assert "--config=/c/lws.yaml" in args and "--kubeconfig=/k" in args


def test_webhooks_call_the_controller_by_url_and_see_only_lws_pods() -> None:
    mutating, validating = webhook_configurations(9443, b"CA")
    assert mutating["kind"] == "MutatingWebhookConfiguration"
    assert validating["kind"] == "ValidatingWebhookConfiguration"
    hooks = {h["name"]: h for h in mutating["webhooks"] + validating["webhooks"]}
    assert set(hooks) == {"mleaderworkerset.kb.io", "mpod.kb.io", "vleaderworkerset.kb.io",
                          "vpod.kb.io"}  # fmt: skip
    assert hooks["mpod.kb.io"]["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate--v1-pod",
        "caBundle": base64.b64encode(b"CA").decode(),
    }
    for name in ("mpod.kb.io", "vpod.kb.io"):
        selector = hooks[name]["objectSelector"]["matchExpressions"]
        assert selector == [{"key": LWS_LABEL_NAME, "operator": "Exists"}]
        assert hooks[name]["rules"][0]["resources"] == ["pods"]
    lws_rule = hooks["vleaderworkerset.kb.io"]["rules"][0]
    assert lws_rule["apiGroups"] == ["leaderworkerset.x-k8s.io"]
    assert "objectSelector" not in hooks["mleaderworkerset.kb.io"]


def test_the_lws_controller_and_its_crd_are_part_of_the_pinned_binaries(tmp_path: Path) -> None:
    versions = Versions(k8s="v1.37.2", etcd="v3.6.16", kwok="v0.8.0", helm="v3.22.0", lws="v0.7.0")
    assert versions.for_binary(LWS_CONTROLLER) == "v0.7.0"
    missing = missing_binaries(tmp_path, versions)
    assert LWS_CONTROLLER in missing and "lws-crd" in missing
    exe = tmp_path / LWS_CONTROLLER
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    (tmp_path / f".{LWS_CONTROLLER}.version").write_text("v0.7.0\n")
    (tmp_path / "crds").mkdir()
    (tmp_path / "crds" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml").write_text("{}")
    (tmp_path / "crds" / ".lws.version").write_text("v0.6.0\n")
    missing = missing_binaries(tmp_path, versions)
    assert LWS_CONTROLLER not in missing and "lws-crd" in missing  # a CRD of another version
    (tmp_path / "crds" / ".lws.version").write_text("v0.7.0\n")
    assert "lws-crd" not in missing_binaries(tmp_path, versions)


def test_h100_nodes_come_two_to_a_zone_so_three_exclusive_groups_fit() -> None:
    h100 = [(i, spec) for i, spec in enumerate(DEFAULT_NODES) if spec.gpu_product == H100]
    zones: dict[str, int] = {}
    for index, spec in h100:
        labels = node_manifest(spec, index)["metadata"]["labels"]
        zones[labels[ZONE_LABEL]] = zones.get(labels[ZONE_LABEL], 0) + 1
    assert zones == {"zone-a": 2, "zone-b": 2, "zone-c": 2}
