"""What the runner starts for one pod, read from the Pod and its Node (plain API dicts).

Pure functions: no clock, no I/O. The runner (``runner.py``) calls :func:`launch_for` for every
pod event and starts, keeps or stops a simulator process accordingly.

A pod gets a simulator when it carries ``llmservice.dev/service``, is bound to a node the
runner manages (kwok's fake nodes), is ``Running`` with an IP and is not being deleted. The
simulator is ``llmservice sim`` with the container's ``vllm serve`` arguments verbatim, then
``--host <pod IP>`` (pod IPs are loopback addresses, so the process can bind them), the GPU of
the node (``--sim-gpu``, from ``nvidia.com/gpu.product`` through the GPU catalog) and the
cluster's time scale. The container's literal ``LLMSERVICE_SIM_*`` variables (faults) pass
through; ``LLMSERVICE_SIM_SEED`` defaults to a hash of the pod's name.

A pod whose container sets ``LLMSERVICE_SIM_ENGINE=vllm`` gets the real CPU vLLM engine
instead (``llmservice_dev.engine``), on the wall clock: the same rendered arguments with only
the model and the bind address swapped, its startup, readiness and liveness probes, its
``VLLM_API_KEY`` Secret and its preStop drain (see :class:`EngineSpec`).

A multi-node replica is one LeaderWorkerSet group: one simulator per group, on the leader
(``leaderworkerset.sigs.k8s.io/worker-index`` "0"), which gets the group's arguments less the
flags that join the nodes (``--nnodes``, ``--node-rank``, ``--master-addr``, ``--master-port``,
``--headless``), so it simulates the whole group's tensor x pipeline parallel GPUs. Worker pods
get no process: with no readiness probe (what the operator renders for them) a worker is Ready
once Running, as the kubelet would have it (:func:`worker_ready`).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmservice_operator.render.labels import REVISION, SERVICE
from llmservice_operator.sizing import builtin_catalog

__all__ = [
    "READY_ANNOTATION",
    "RESTARTS_ANNOTATION",
    "SIM_ENV_PREFIX",
    "Probe",
    "SimLaunch",
    "annotations_patch",
    "gpu_for_node",
    "launch_for",
    "sim_argv",
    "worker_ready",
]

#: Set by the runner to "true" while the simulator passes the pod's readiness probe; the
#: local cluster's kwok stages copy it into the pod's Ready condition.
READY_ANNOTATION = "llmservice.dev/sim-ready"
#: How many times the runner restarted the pod's simulator (kwok copies it to restartCount).
RESTARTS_ANNOTATION = "llmservice.dev/sim-restarts"
SIM_ENV_PREFIX = "LLMSERVICE_SIM_"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
DEFAULT_PORT = 8000
#: The fastest the runner probes, whatever the pod's periodSeconds and the time scale say.
MIN_PROBE_PERIOD_S = 0.2
#: The LWS controller's label: "0" on a group's leader, 1..N-1 on its workers.
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
#: vLLM's multi-node flags (value, then boolean): how the group's nodes join, nothing the
#: single simulator of the group models.
_MULTINODE_VALUE_FLAGS = ("--nnodes", "--node-rank", "--master-addr", "--master-port")
_MULTINODE_BOOLEAN_FLAGS = ("--headless",)
#: Container variable choosing the process: the simulator (default) or "vllm", the real engine.
ENGINE_ENV = f"{SIM_ENV_PREFIX}ENGINE"
REAL_ENGINE = "vllm"


@dataclass(frozen=True)
class Probe:
    """The pod's readiness probe (HTTP GET), on the wall clock."""

    path: str = "/health"
    port: int = DEFAULT_PORT
    period_s: float = 1.0
    timeout_s: float = 1.0
    failure_threshold: int = 3
    success_threshold: int = 1


@dataclass(frozen=True)
class EngineSpec:
    """What the real engine needs beyond the simulator: the container as rendered, the
    kubelet's other probes, the API key's Secret and how the pod is stopped."""

    command: tuple[str, ...]
    args: tuple[str, ...]
    startup: Probe
    liveness: Probe
    #: (Secret name, key) of ``VLLM_API_KEY``, when the container takes it from a Secret.
    api_key_ref: tuple[str, str] | None = None
    #: Literal ``VLLM_*`` variables of the container (the spec's engine env).
    env: Mapping[str, str] = field(default_factory=dict)
    #: The preStop exec command, run before SIGTERM, bounded by the grace period.
    pre_stop: tuple[str, ...] = ()
    grace_s: float = 30.0


@dataclass(frozen=True)
class SimLaunch:
    """One simulator process for one pod."""

    namespace: str
    name: str
    uid: str
    ip: str
    argv: tuple[str, ...]
    """Arguments after ``llmservice sim``."""
    env: Mapping[str, str] = field(default_factory=dict)
    """``LLMSERVICE_SIM_*`` variables for the process."""
    probe: Probe = field(default_factory=Probe)
    gpu: str | None = None
    service: str = ""
    revision: str = ""
    #: Set when the pod asks for the real engine (``LLMSERVICE_SIM_ENGINE=vllm``).
    engine: EngineSpec | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def address(self) -> tuple[str, int]:
        return self.ip, self.probe.port


def gpu_for_node(node_labels: Mapping[str, str]) -> str | None:
    """The GPU catalog name of a node (from ``nvidia.com/gpu.product``), None if unknown."""
    product = node_labels.get(GPU_PRODUCT_LABEL)
    if not product:
        return None
    gpu = builtin_catalog().find(product)
    return gpu.name if gpu is not None else None


def _container(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    containers = (pod.get("spec") or {}).get("containers") or []
    for container in containers:
        if container.get("name") == "vllm":
            return dict(container)
    return dict(containers[0]) if containers else None


def sim_argv(container: Mapping[str, Any]) -> list[str]:
    """The ``vllm serve`` arguments of a container: what follows ``serve`` in command + args."""
    command = [str(c) for c in container.get("command") or []]
    args = [str(a) for a in container.get("args") or []]
    if "serve" in command:
        return command[command.index("serve") + 1 :] + args
    if not command and args[:1] == ["serve"]:
        return args[1:]
    return args


def _is_lws_worker(labels: Mapping[str, str]) -> bool:
    index = labels.get(LWS_WORKER_INDEX_LABEL)
    return index is not None and index != "0"


def _without_multinode_flags(argv: Sequence[str]) -> list[str]:
    """``argv`` less the multi-node flags (``--flag value`` and ``--flag=value`` forms)."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in _MULTINODE_VALUE_FLAGS:
            skip = "=" not in arg
            continue
        if name in _MULTINODE_BOOLEAN_FLAGS:
            continue
        kept.append(arg)
    return kept


def worker_ready(pod: Mapping[str, Any], node_labels: Mapping[str, str] | None) -> bool | None:
    """Whether an LWS worker pod (no simulator of its own) is Ready; None for any other pod.

    A worker is Ready once it is Running on a managed node when its container has no
    readiness probe (the kubelet's rule); with one, nothing here could answer it, so never.
    """
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if SERVICE not in labels or not _is_lws_worker(labels):
        return None
    status = pod.get("status") or {}
    running = (
        node_labels is not None
        and not meta.get("deletionTimestamp")
        and status.get("phase") == "Running"
        and bool(status.get("podIP"))
    )
    container = _container(pod)
    return running and container is not None and not container.get("readinessProbe")


def _port(container: Mapping[str, Any], port: Any) -> int | None:
    if isinstance(port, int):
        return port
    if isinstance(port, str):
        if port.isdigit():
            return int(port)
        for item in container.get("ports") or []:
            if item.get("name") == port:
                return int(item["containerPort"])
    return None


def _listen_port(container: Mapping[str, Any], argv: Sequence[str]) -> int:
    for i, arg in enumerate(argv):
        if arg == "--port" and i + 1 < len(argv) and argv[i + 1].isdigit():
            return int(argv[i + 1])
        if arg.startswith("--port=") and arg[7:].isdigit():
            return int(arg[7:])
    return DEFAULT_PORT  # where `vllm serve` listens without --port


def _probe(
    container: Mapping[str, Any],
    listen_port: int,
    time_scale: float,
    kind: str = "readinessProbe",
) -> Probe:
    spec = container.get(kind) or {}
    http = spec.get("httpGet") or {}
    period = float(spec.get("periodSeconds") or 10) / time_scale
    return Probe(
        path=str(http.get("path") or "/health"),
        port=_port(container, http.get("port")) or listen_port,
        period_s=max(MIN_PROBE_PERIOD_S, period),
        timeout_s=max(1.0, float(spec.get("timeoutSeconds") or 1)),
        failure_threshold=max(1, int(spec.get("failureThreshold") or 3)),
        success_threshold=max(1, int(spec.get("successThreshold") or 1)),
    )


def _seed(namespace: str, name: str) -> int:
    return zlib.crc32(f"{namespace}/{name}".encode()) & 0x7FFFFFFF


def launch_for(
    pod: Mapping[str, Any],
    node_labels: Mapping[str, str] | None,
    *,
    time_scale: float,
) -> SimLaunch | None:
    """The simulator ``pod`` should have, or None when it should have none (yet, or any more).

    ``node_labels`` are the labels of the pod's node, None when the node is not one the runner
    manages (or the pod is not bound yet).
    """
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    labels = meta.get("labels") or {}
    if SERVICE not in labels or meta.get("deletionTimestamp") or node_labels is None:
        return None
    if _is_lws_worker(labels):
        return None  # the group's simulator runs on its leader
    ip = status.get("podIP")
    if not ip or status.get("phase") != "Running":
        return None
    container = _container(pod)
    if container is None:
        return None
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    argv = sim_argv(container)
    if LWS_WORKER_INDEX_LABEL in labels:
        argv = _without_multinode_flags(argv)
    listen_port = _listen_port(container, argv)
    gpu = gpu_for_node(node_labels)
    env = {f"{SIM_ENV_PREFIX}SEED": str(_seed(namespace, name))}
    for var in container.get("env") or []:
        var_name = str(var.get("name", ""))
        if var_name.startswith(SIM_ENV_PREFIX) and "value" in var:
            env[var_name] = str(var["value"])
    engine = None
    if env.get(ENGINE_ENV) == REAL_ENGINE:
        time_scale = 1.0  # a real engine runs on the wall clock
        engine = _engine_spec(pod, container, listen_port)
    else:
        # Flags win over the variables: the host is the pod's, the clock is the cluster's.
        argv += ["--host", str(ip), "--sim-time-scale", f"{time_scale:g}"]
        if gpu is not None:
            argv += ["--sim-gpu", gpu]
    return SimLaunch(
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid", "")),
        ip=str(ip),
        argv=tuple(argv),
        env=env,
        probe=_probe(container, listen_port, time_scale),
        gpu=gpu,
        service=str(labels.get(SERVICE, "")),
        revision=str(labels.get(REVISION, "")),
        engine=engine,
    )


def _engine_spec(
    pod: Mapping[str, Any], container: Mapping[str, Any], listen_port: int
) -> EngineSpec:
    api_key_ref = None
    literal: dict[str, str] = {}
    for var in container.get("env") or []:
        var_name = str(var.get("name", ""))
        ref = (var.get("valueFrom") or {}).get("secretKeyRef") or {}
        if var_name == "VLLM_API_KEY" and ref.get("name"):
            api_key_ref = (str(ref["name"]), str(ref.get("key", "")))
        elif var_name.startswith("VLLM_") and "value" in var:
            literal[var_name] = str(var["value"])
    pre_stop = ((container.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return EngineSpec(
        command=tuple(str(c) for c in container.get("command") or []),
        args=tuple(str(a) for a in container.get("args") or []),
        startup=_probe(container, listen_port, 1.0, "startupProbe"),
        liveness=_probe(container, listen_port, 1.0, "livenessProbe"),
        api_key_ref=api_key_ref,
        env=literal,
        pre_stop=tuple(str(c) for c in pre_stop.get("command") or []),
        grace_s=float(grace if grace is not None else 30),
    )


def annotations_patch(
    current: Mapping[str, str], *, ready: bool, restarts: int
) -> dict[str, str] | None:
    """The annotations to patch so the pod says ``ready`` and ``restarts``; None if it does.

    A missing annotation reads as not ready and no restarts (a fresh pod needs no patch).
    """
    want = {READY_ANNOTATION: "true" if ready else "false", RESTARTS_ANNOTATION: str(restarts)}
    have = {
        READY_ANNOTATION: current.get(READY_ANNOTATION, "false"),
        RESTARTS_ANNOTATION: current.get(RESTARTS_ANNOTATION, "0"),
    }
    changed = {k: v for k, v in want.items() if have[k] != v}
    return changed or None
