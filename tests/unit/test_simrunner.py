"""The simulator runner's pure parts, Prometheus discovery/config, and load targets."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from llmservice_dev.localcluster.cluster import _kwok_config, sim_stages_dir
from llmservice_dev.localcluster.prometheus import (
    prometheus_config,
    runner_sd,
    scrape_job,
)
from llmservice_dev.simrunner.discovery import pod_target_groups, target_groups
from llmservice_dev.simrunner.podspec import (
    READY_ANNOTATION,
    RESTARTS_ANNOTATION,
    annotations_patch,
    launch_for,
    sim_argv,
)
from llmservice_operator.commands.sim import options_from
from llmservice_operator.loadgen.targets import ready_endpoints, service_selector

ROOT = Path(__file__).parents[2]
L4_NODE = {"nvidia.com/gpu.product": "NVIDIA-L4", "type": "kwok"}


def pod(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "metadata": {
            "name": "chat-abc-1",
            "namespace": "ml",
            "uid": "u-1",
            "labels": {"llmservice.dev/service": "chat", "llmservice.dev/revision": "r1"},
            "annotations": {"prometheus.io/port": "8000"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "chat-abc", "controller": True}],
        },
        "spec": {
            "nodeName": "gpu-l4-0",
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.33.0",
                    "command": ["vllm", "serve"],
                    "args": [
                        "meta-llama/Llama-3.1-8B-Instruct",
                        "--host",
                        "0.0.0.0",
                        "--port",
                        "8000",
                        "--served-model-name",
                        "chat",
                        "--max-model-len",
                        "4096",
                    ],
                    "env": [
                        {"name": "HF_HOME", "value": "/models-cache"},
                        {"name": "LLMSERVICE_SIM_ERROR_RATE", "value": "0.1"},
                        {"name": "LLMSERVICE_SIM_SECRET", "valueFrom": {"secretKeyRef": {}}},
                    ],
                    "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}],
                    "readinessProbe": {
                        "httpGet": {"path": "/v1/models", "port": "http"},
                        "periodSeconds": 5,
                        "failureThreshold": 3,
                    },
                }
            ],
        },
        "status": {
            "phase": "Running",
            "podIP": "127.1.5.3",
            "hostIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": "False"}],
        },
    }
    for path, value in overrides.items():
        *parents, leaf = path.split("__")
        target = base
        for key in parents:
            target = target[key]
        if value is None:
            target.pop(leaf, None)
        else:
            target[leaf] = value
    return base


# ----------------------------------------------------------------------- podspec


def test_launch_takes_the_pods_args_env_ip_gpu_and_probe() -> None:
    launch = launch_for(pod(), L4_NODE, time_scale=10)
    assert launch is not None
    assert launch.key == "ml/chat-abc-1" and launch.ip == "127.1.5.3" and launch.gpu == "L4"
    assert launch.argv[:2] == ("meta-llama/Llama-3.1-8B-Instruct", "--host")
    assert launch.argv[-6:] == (
        "--host", "127.1.5.3", "--sim-time-scale", "10", "--sim-gpu", "L4",
    )  # fmt: skip
    assert launch.env["LLMSERVICE_SIM_ERROR_RATE"] == "0.1"
    assert "HF_HOME" not in launch.env and "LLMSERVICE_SIM_SECRET" not in launch.env
    assert launch.env["LLMSERVICE_SIM_SEED"].isdigit()
    assert launch.probe.path == "/v1/models" and launch.probe.port == 8000
    assert launch.probe.period_s == 0.5 and launch.probe.failure_threshold == 3
    assert (launch.service, launch.revision) == ("chat", "r1")
    # The simulator accepts exactly these arguments, and the later --host wins.
    options = options_from(list(launch.argv), dict(launch.env))
    assert (options.host, options.port, options.gpu) == ("127.1.5.3", 8000, "L4")
    assert options.time_scale == 10 and options.server_faults.error_rate == 0.1


def test_a_pod_asking_for_the_real_engine_gets_its_probes_key_and_drain_on_the_wall_clock() -> None:
    container = pod()["spec"]["containers"][0]
    container["env"] += [
        {"name": "LLMSERVICE_SIM_ENGINE", "value": "vllm"},
        {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "keys", "key": "k"}}},
        {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"},
    ]
    container["startupProbe"] = {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": 10,
        "failureThreshold": 60,
    }
    container["livenessProbe"] = {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": 10,
        "failureThreshold": 3,
        "timeoutSeconds": 5,
    }
    container["lifecycle"] = {"preStop": {"exec": {"command": ["python3", "-c", "drain"]}}}
    spec = pod()["spec"] | {"containers": [container], "terminationGracePeriodSeconds": 90}
    launch = launch_for(pod(spec=spec), L4_NODE, time_scale=10)
    assert launch is not None and launch.engine is not None
    engine = launch.engine
    # The container as rendered, untouched: the runner swaps only model and address later.
    assert engine.command == ("vllm", "serve") and engine.args == tuple(container["args"])
    assert "--sim-time-scale" not in launch.argv and "--sim-gpu" not in launch.argv
    # Probes on the wall clock, whatever the cluster's time scale.
    assert launch.probe.period_s == 5 and launch.probe.path == "/v1/models"
    assert (engine.startup.period_s, engine.startup.failure_threshold) == (10, 60)
    assert (engine.liveness.timeout_s, engine.liveness.failure_threshold) == (5, 3)
    assert engine.api_key_ref == ("keys", "k")
    assert engine.env == {"VLLM_LOGGING_LEVEL": "DEBUG"}
    assert engine.pre_stop == ("python3", "-c", "drain") and engine.grace_s == 90
    plain = launch_for(pod(), L4_NODE, time_scale=10)
    assert plain is not None and plain.engine is None


def test_seed_is_stable_per_pod_name() -> None:
    one = launch_for(pod(), L4_NODE, time_scale=1)
    two = launch_for(pod(metadata__name="chat-abc-2"), L4_NODE, time_scale=1)
    assert one is not None and two is not None
    assert (
        one.env["LLMSERVICE_SIM_SEED"]
        == launch_for(pod(), L4_NODE, time_scale=1).env[  # type: ignore[union-attr]
            "LLMSERVICE_SIM_SEED"
        ]
    )
    assert one.env["LLMSERVICE_SIM_SEED"] != two.env["LLMSERVICE_SIM_SEED"]


def test_no_simulator_until_running_with_an_ip_on_a_managed_node() -> None:
    assert launch_for(pod(status__podIP=None), L4_NODE, time_scale=1) is None
    assert launch_for(pod(status__phase="Pending"), L4_NODE, time_scale=1) is None
    assert (
        launch_for(pod(metadata__deletionTimestamp="2026-01-01T00:00:00Z"), L4_NODE, time_scale=1)
        is None
    )
    assert launch_for(pod(), None, time_scale=1) is None  # not a kwok node
    assert launch_for(pod(metadata__labels={"app": "x"}), L4_NODE, time_scale=1) is None


def test_unknown_gpu_product_leaves_the_simulators_default() -> None:
    launch = launch_for(pod(), {"nvidia.com/gpu.product": "Some-Other-GPU"}, time_scale=1)
    assert launch is not None and launch.gpu is None and "--sim-gpu" not in launch.argv


def test_sim_argv_handles_command_forms() -> None:
    assert sim_argv({"command": ["vllm", "serve", "m"], "args": ["--port", "1"]}) == [
        "m", "--port", "1",
    ]  # fmt: skip
    assert sim_argv({"args": ["serve", "m"]}) == ["m"]
    assert sim_argv({"command": ["python", "-m", "x"], "args": ["--model", "m"]}) == [
        "--model", "m",
    ]  # fmt: skip


def test_annotations_patch_only_when_the_pod_disagrees() -> None:
    assert annotations_patch({}, ready=False, restarts=0) is None
    assert annotations_patch({}, ready=True, restarts=0) == {READY_ANNOTATION: "true"}
    assert annotations_patch({READY_ANNOTATION: "true"}, ready=False, restarts=1) == {
        READY_ANNOTATION: "false",
        RESTARTS_ANNOTATION: "1",
    }
    assert (
        annotations_patch(
            {READY_ANNOTATION: "true", RESTARTS_ANNOTATION: "1"}, ready=True, restarts=1
        )
        is None
    )


# ----------------------------------------------------------------------- discovery


def test_target_groups_mirror_the_kubernetes_pod_role() -> None:
    [group] = pod_target_groups(pod())
    assert group["targets"] == ["127.1.5.3:8000"]
    labels = group["labels"]
    assert labels["__meta_kubernetes_namespace"] == "ml"
    assert labels["__meta_kubernetes_pod_name"] == "chat-abc-1"
    assert labels["__meta_kubernetes_pod_phase"] == "Running"
    assert labels["__meta_kubernetes_pod_ready"] == "false"
    assert labels["__meta_kubernetes_pod_label_llmservice_dev_service"] == "chat"
    assert labels["__meta_kubernetes_pod_labelpresent_llmservice_dev_revision"] == "true"
    assert labels["__meta_kubernetes_pod_annotation_prometheus_io_port"] == "8000"
    assert labels["__meta_kubernetes_pod_container_port_name"] == "http"
    assert labels["__meta_kubernetes_pod_container_port_number"] == "8000"
    assert labels["__meta_kubernetes_pod_controller_kind"] == "ReplicaSet"
    assert all(re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", k) for k in labels)
    assert pod_target_groups(pod(status__podIP=None)) == []
    no_ports = pod()
    del no_ports["spec"]["containers"][0]["ports"]
    assert [g["targets"] for g in pod_target_groups(no_ports)] == [["127.1.5.3"]]
    second = pod(metadata__name="a-first")
    assert [g["labels"]["__meta_kubernetes_pod_name"] for g in target_groups([pod(), second])] == [
        "a-first",
        "chat-abc-1",
    ]


# ----------------------------------------------------------------------- Prometheus


def test_docs_carry_the_production_scrape_job() -> None:
    text = (ROOT / "docs" / "prometheus.md").read_text()
    [block] = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "scrape_configs" in b]
    assert yaml.safe_load(block) == {"scrape_configs": [scrape_job()]}


def test_local_config_is_the_production_job_with_runner_discovery() -> None:
    config = yaml.safe_load(prometheus_config(runner_url="http://127.0.0.1:9", interval="1s"))
    [job] = config["scrape_configs"]
    production = scrape_job()
    assert job["relabel_configs"] == production["relabel_configs"]
    assert job["http_sd_configs"] == runner_sd("http://127.0.0.1:9", "1s")["http_sd_configs"]
    assert job["scrape_interval"] == "1s" and "kubernetes_sd_configs" not in job


def test_local_config_can_keep_to_some_namespaces() -> None:
    config = yaml.safe_load(
        prometheus_config(runner_url="http://127.0.0.1:9", interval="1s", namespaces=["a", "b"])
    )
    [job] = config["scrape_configs"]
    keep, *rest = job["relabel_configs"]
    assert keep == {
        "source_labels": ["__meta_kubernetes_namespace"],
        "regex": "a|b",
        "action": "keep",
    }
    assert rest == scrape_job()["relabel_configs"]


def test_podmonitor_keeps_the_same_labels() -> None:
    text = (ROOT / "charts/llmservice-operator/templates/podmonitor.yaml").read_text()
    pairs = set(re.findall(r"sourceLabels: \[(\w+)\], targetLabel: (\w+)", text))
    job_pairs = {
        (r["source_labels"][0], r["target_label"])
        for r in scrape_job()["relabel_configs"]
        if "target_label" in r
    }
    assert pairs == job_pairs
    assert "port: http" in text and "path: /metrics" in text


# ----------------------------------------------------------------------- kwok stages


def test_kwok_stages_leave_llmservice_pods_to_the_runner(tmp_path: Path) -> None:
    upstream = {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "pod-ready"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    {"key": ".status.phase", "operator": "In", "values": ["Pending"]}
                ]
            },
            "next": {"statusTemplate": "phase: Running\n"},
        },
    }
    delete = {**upstream, "metadata": {"name": "pod-delete"}}
    delete["spec"] = {**upstream["spec"], "next": {"delete": True}}
    (tmp_path / "pod-ready.yaml").write_text(yaml.safe_dump(upstream))
    (tmp_path / "pod-delete.yaml").write_text(yaml.safe_dump(delete))
    docs = list(yaml.safe_load_all(_kwok_config(tmp_path, sim_stages_dir())))
    stages = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Stage"}
    assert set(stages) == {"pod-ready", "pod-delete", "llmservice-pod-start", "llmservice-pod-sync"}
    exclusion = {"key": '.metadata.labels["llmservice.dev/service"]', "operator": "DoesNotExist"}
    assert exclusion in stages["pod-ready"]["spec"]["selector"]["matchExpressions"]
    assert exclusion not in stages["pod-delete"]["spec"]["selector"]["matchExpressions"]
    sync = yaml.safe_dump(stages["llmservice-pod-sync"])
    assert READY_ANNOTATION in sync and RESTARTS_ANNOTATION in sync


# ----------------------------------------------------------------------- load targets


def test_ready_endpoints_follow_the_services_selector_and_port() -> None:
    service = {
        "spec": {
            "selector": {"llmservice.dev/service": "chat", "app.kubernetes.io/name": "vllm"},
            "ports": [{"name": "http", "port": 8000, "targetPort": "http"}],
        }
    }
    selector, port = service_selector(service, "chat")
    assert selector == "app.kubernetes.io/name=vllm,llmservice.dev/service=chat"
    assert port == "http"
    assert service_selector(None, "chat") == ("llmservice.dev/service=chat", "http")
    ready = pod(status__conditions=[{"type": "Ready", "status": "True"}])
    other = pod(status__podIP="127.1.5.4", status__conditions=[{"type": "Ready", "status": "True"}])
    going = pod(
        status__podIP="127.1.5.5",
        status__conditions=[{"type": "Ready", "status": "True"}],
        metadata__deletionTimestamp="2026-01-01T00:00:00Z",
    )
    assert ready_endpoints([other, pod(), ready, going], port) == [
        "http://127.1.5.3:8000",
        "http://127.1.5.4:8000",
    ]
    assert ready_endpoints([ready], 9000) == ["http://127.1.5.3:9000"]
