"""Desired Kubernetes objects from spec + sizing. Pure: data in, dicts out.

The templates hold the structure a reader recognises as Kubernetes YAML; this module computes
the values (flags, env, volumes) that need logic, and the revision hash.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import cache
from typing import Any

import jinja2
import yaml

from ..api import LLMService, SpecError
from ..api.images import engine_image
from ..api.spec import LLMServiceSpec, ScalingBehavior
from ..autoscale.policy import resolve_target_queue_depth
from ..vllm.flags import flag_table
from .alerts import alert_context
from .cache_layout import CACHE_MOUNT_DIR, cache_claim_name, cached_model_path
from .labels import MANAGED_BY, REVISION, ROLE, SERVICE, revision_selector, selector_labels
from .multinode import (
    EXCLUSIVE_TOPOLOGY_ANNOTATION,
    LEADER,
    LWS_API_VERSION,
    LWS_KIND,
    MASTER_PORT,
    leader_args,
    worker_template,
)
from .pool_names import inference_pool_name, pool_backend_ref
from .shape import ServingShape
from .template_json import LONE_SURROGATE, template_dumps, unrenderable
from .timeouts import gateway_duration, route_timeout_seconds

__all__ = [
    "PROMETHEUS_SERVICE_LABEL",
    "RenderInput",
    "deployment",
    "deployment_name",
    "http_route",
    "engine_args",
    "leader_worker_set",
    "network_policy",
    "pod_template",
    "pod_disruption_budget",
    "prometheus_rule",
    "render_service_objects",
    "revision_hash",
    "scaler",
    "service",
    "workload",
    "workload_kind",
]

#: Label Prometheus attaches to every scraped vLLM series (from the pod label SERVICE).
PROMETHEUS_SERVICE_LABEL = "llmservice"
MODEL_CACHE_DIR = "/models-cache"
PVC_MOUNT_DIR = "/models"
GIB = 1024**3


@dataclass(frozen=True)
class RenderInput:
    service: LLMService
    shape: ServingShape
    prometheus_url: str = "http://prometheus.monitoring.svc:9090"
    #: Where the operator runs: its smoke tests and pod scrapes must pass the NetworkPolicy.
    operator_namespace: str | None = None

    @property
    def name(self) -> str:
        return self.service.metadata.name

    @property
    def namespace(self) -> str:
        return self.service.metadata.namespace

    @property
    def spec(self) -> LLMServiceSpec:
        return self.service.spec


@cache
@functools.cache
def _environment() -> jinja2.Environment:
    # One environment, its templates compiled once: the package's files do not change while
    # the operator runs (auto_reload would stat every file on every render).
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("llmservice_operator.render", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        auto_reload=False,
    )
    # tojson: JSON the YAML loader reads back whatever the characters (template_json.py)
    environment.policies["json.dumps_function"] = template_dumps
    return environment


#: libyaml's loader where PyYAML has it (its wheels do): the pure-Python one was most of a
#: reconcile's CPU.
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _render(template: str, **context: Any) -> dict[str, Any]:
    text = _environment().get_template(template).render(**context)
    try:
        loaded = _PARSED.load(text)
    except (yaml.YAMLError, UnicodeError) as err:
        # A value no Kubernetes object can carry (a lone surrogate): permanent, InvalidSpec.
        problem = unrenderable(context)
        why = f"{problem}, {LONE_SURROGATE}" if problem else " ".join(str(err).split())
        raise SpecError("spec", f"a value cannot be rendered into {template}: {why}") from err
    if not isinstance(loaded, dict):
        raise TypeError(f"template {template} did not render a mapping")
    return loaded


class _ParsedYaml:
    """Rendered YAML parsed once: each decision renders its objects again, and parsing them
    back (libyaml, then PyYAML's constructor) was a third of the operator's CPU when a
    thousand services arrived at once; the same text comes back as JSON, ~50 times faster to
    load. Bounded (least recently used); kept by a digest of the text, as JSON text (a
    fresh object every time: decisions change what they get)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._kept: OrderedDict[bytes, str] = OrderedDict()
        self._lock = threading.Lock()  # reconciles render on several threads

    def load(self, text: str) -> Any:
        key = hashlib.blake2b(text.encode(), digest_size=16).digest()
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None:
                self._kept.move_to_end(key)
        if kept is not None:
            return json.loads(kept)
        loaded = yaml.load(text, Loader=_YAML_LOADER)
        try:
            dumped = json.dumps(loaded)
        except (TypeError, ValueError):  # not plain JSON (a date, say): not kept
            return loaded
        if json.loads(dumped) != loaded:  # e.g. integer keys: JSON would change them
            return loaded
        with self._lock:
            self._kept[key] = dumped
            if len(self._kept) > self._size:
                self._kept.popitem(last=False)
        return loaded


#: About a thousand services' objects, at a few KiB each.
_PARSED = _ParsedYaml(4096)


def _common_labels(render_input: RenderInput) -> dict[str, str]:
    return {
        **selector_labels(render_input.name),
        "app.kubernetes.io/component": "server",
        "app.kubernetes.io/part-of": "llmservice",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/version": render_input.spec.engine.vllm_version,
    }


def _model_tag(render_input: RenderInput) -> str:
    if render_input.spec.model.cache is not None:
        return cached_model_path(render_input.spec.model)
    source = render_input.spec.model.source
    if source.type == "pvc":
        return f"{PVC_MOUNT_DIR}/{(source.path or '').strip('/')}".rstrip("/")
    if source.type == "uri":
        assert source.uri is not None  # the spec validator guarantees it
        return source.uri
    return render_input.spec.model.id


def engine_args(render_input: RenderInput) -> list[str]:
    """`vllm serve` arguments, every flag checked against the pinned release's table."""
    engine = render_input.spec.engine
    model = render_input.spec.model
    try:
        table = flag_table(engine.vllm_version)
    except KeyError as err:
        raise SpecError("spec.engine.vllmVersion", str(err.args[0])) from err
    flag = table.require
    args = [
        _model_tag(render_input),
        flag("--host"), "0.0.0.0",
        flag("--port"), str(render_input.spec.serving.port),
        flag("--served-model-name"), render_input.service.served_model_name,
        flag("--tensor-parallel-size"), str(render_input.shape.tensor_parallel_size),
        flag("--pipeline-parallel-size"), str(render_input.shape.pipeline_parallel_size),
        *(leader_args(render_input.shape, flag) if render_input.shape.multi_node else []),
        flag("--max-model-len"), str(engine.max_model_len),
        flag("--max-num-seqs"), str(render_input.shape.max_num_seqs),
        flag("--gpu-memory-utilization"), f"{engine.gpu_memory_utilization:g}",
        flag("--dtype"), model.dtype,
        flag("--kv-cache-dtype"), engine.kv_cache_dtype,
        table.boolean("--enable-prefix-caching", engine.prefix_caching),
        table.boolean("--enable-chunked-prefill", engine.chunked_prefill),
        flag("--disable-uvicorn-access-log"),
    ]  # fmt: skip
    if model.quantization != "none":
        args += [flag("--quantization"), model.quantization]
    if engine.max_num_batched_tokens is not None:
        args += [flag("--max-num-batched-tokens"), str(engine.max_num_batched_tokens)]
    if engine.scheduling_policy != "fcfs":  # fcfs is vLLM's default: render nothing for it
        args += [flag("--scheduling-policy"), engine.scheduling_policy]
    if model.revision and model.source.type == "hf" and model.cache is None:
        args += [flag("--revision"), model.revision]
    if model.source.type == "uri":
        args += [flag("--load-format"), "runai_streamer"]
    for extra in engine.extra_args:
        if extra.split("=", 1)[0] in {"--api-key", "--hf-token"}:
            raise SpecError(
                "spec.engine.extraArgs",
                f"{extra.split('=', 1)[0]} would put a secret in the pod spec; use "
                "spec.serving.apiKeySecretRef / spec.engine.hfTokenSecretRef",
            )
    return args + list(engine.extra_args)


def _env(render_input: RenderInput) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "HF_HOME", "value": MODEL_CACHE_DIR},
        {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
    ]
    cached = render_input.spec.model.cache is not None
    if cached:  # the weights are on the read-only cache volume: never ask the hub
        env.append({"name": "HF_HUB_OFFLINE", "value": "1"})
    token = render_input.spec.engine.hf_token_secret_ref
    if token is not None and not cached:
        ref = {"name": token.name, "key": token.key}
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": ref}})
    api_key = render_input.spec.serving.api_key_secret_ref
    if api_key is not None:
        ref = {"name": api_key.name, "key": api_key.key}
        env.append({"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": ref}})
    reserved = {e["name"] for e in env}
    for var in render_input.spec.engine.env:
        if var.name in reserved:
            raise SpecError("spec.engine.env", f"{var.name} is set by the operator; remove it")
        env.append({"name": var.name, "value": var.value})
    return env


def _volumes(render_input: RenderInput) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    shm_mib = max(1024, math.ceil(render_input.shape.shm_bytes / 1024**2))
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_mib}Mi"}},
        {"name": "model-cache", "emptyDir": {}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "model-cache", "mountPath": MODEL_CACHE_DIR},
    ]
    source = render_input.spec.model.source
    if source.type == "pvc":
        volumes.append(
            {
                "name": "weights",
                "persistentVolumeClaim": {"claimName": source.claim_name, "readOnly": True},
            }
        )
        mounts.append({"name": "weights", "mountPath": PVC_MOUNT_DIR, "readOnly": True})
    if render_input.spec.model.cache is not None:
        claim = cache_claim_name(render_input.name, render_input.spec.model)
        volumes.append(
            {"name": "weights", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
        )
        mounts.append({"name": "weights", "mountPath": CACHE_MOUNT_DIR, "readOnly": True})
    return volumes, mounts


def _prestop_command(port: int, drain_seconds: int) -> list[str]:
    # Poll vLLM's own gauge until no request is running, bounded by the drain budget.
    script = (
        "import time,urllib.request\n"
        f"end=time.time()+{drain_seconds}\n"
        "time.sleep(5)\n"
        "while time.time()<end:\n"
        "  try:\n"
        f"    m=urllib.request.urlopen('http://127.0.0.1:{port}/metrics',timeout=2).read().decode()\n"
        "  except Exception:\n"
        "    break\n"
        "  busy=[l for l in m.splitlines() if l.startswith('vllm:num_requests_running')"
        " and not l.rstrip().endswith(' 0.0')]\n"
        "  if not busy:\n"
        "    break\n"
        "  time.sleep(2)\n"
    )
    return ["python3", "-c", script]


def pod_template(render_input: RenderInput) -> dict[str, Any]:
    """The serving pod template without its revision label (the hash is taken over this)."""
    spec = render_input.spec
    shape = render_input.shape
    gpus = str(shape.gpus_per_pod)  # a multi-node replica: each pod holds one node's GPUs
    cpu = spec.resources.cpu or str(max(4, 4 * shape.gpus_per_pod))
    memory = spec.resources.memory or f"{max(32, math.ceil(shape.host_memory_bytes / GIB))}Gi"
    requests = {"cpu": cpu, "memory": memory, shape.resource_name: gpus}
    limits = {"memory": memory, shape.resource_name: gpus}
    tolerations = [{"key": shape.resource_name, "operator": "Exists", "effect": "NoSchedule"}]
    tolerations += [t.model_dump(exclude_none=True) for t in spec.resources.tolerations]
    volumes, mounts = _volumes(render_input)
    drain = spec.serving.drain_seconds
    image = engine_image(spec.engine)
    # With an API key vLLM guards /v1/*: probe readiness on /health then (the server only
    # listens once the engine has loaded the model).
    readiness = "/health" if spec.serving.api_key_secret_ref else "/v1/models"
    labels = _common_labels(render_input)
    if shape.multi_node:  # the leader: the one pod of a group that serves HTTP
        labels[ROLE] = LEADER
    return _render(
        "pod.yaml.j2",
        pod_labels=labels,
        port=spec.serving.port,
        termination_grace_seconds=drain + 30,
        shape=shape,
        node_selector=spec.resources.node_selector,
        tolerations=tolerations,
        image=image,
        args=engine_args(render_input),
        env=_env(render_input),
        requests=requests,
        limits=limits,
        startup_budget_seconds=min(spec.rollout.progress_deadline_seconds, 3600),
        readiness_path=readiness,
        prestop_command=_prestop_command(spec.serving.port, drain),
        volume_mounts=mounts,
        volumes=volumes,
    )


def revision_hash(template: dict[str, Any]) -> str:
    """Ten hex digits of SHA-256 over the canonical JSON of the pod template."""
    canonical = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:10]


def deployment_name(service_name: str, revision: str) -> str:
    return f"{service_name}-{revision}"


def deployment(
    render_input: RenderInput, template: dict[str, Any], revision: str, replicas: int | None
) -> dict[str, Any]:
    """One revision's Deployment. `replicas` None leaves the field to its one other writer."""
    labelled = _with_revision_label(template, revision)
    labels = {**_common_labels(render_input), REVISION: revision}
    rendered = _render(
        "deployment.yaml.j2",
        name=deployment_name(render_input.name, revision),
        namespace=render_input.namespace,
        labels=labels,
        annotations={
            "llmservice.dev/gpu": f"{render_input.shape.gpus_per_replica}x {render_input.shape.gpu_name}"
        },
        replicas=replicas,
        progress_deadline_seconds=render_input.spec.rollout.progress_deadline_seconds,
        selector=revision_selector(render_input.name, revision),
    )
    rendered["spec"]["template"] = _sorted_copy(labelled)
    return rendered


def _with_revision_label(template: dict[str, Any], revision: str) -> dict[str, Any]:
    """The pod template with the revision label, sharing the rest (_sorted_copy copies it)."""
    meta = template["metadata"]
    labels = {**meta["labels"], REVISION: revision}
    return {**template, "metadata": {**meta, "labels": labels}}


def _sorted_copy(obj: dict[str, Any]) -> dict[str, Any]:
    """A deep copy with every mapping's keys sorted, as jinja2's ``tojson`` writes them (what
    the templates embedded before the pod templates were put in after parsing)."""
    copied: dict[str, Any] = json.loads(json.dumps(obj, sort_keys=True))
    return copied


def leader_worker_set(
    render_input: RenderInput, template: dict[str, Any], revision: str, replicas: int | None
) -> dict[str, Any]:
    """One revision's LeaderWorkerSet: a multi-node replica is one group of
    ``nodes_per_replica`` pods; ``replicas`` counts groups (None: left to its other writer)."""
    leader = _with_revision_label(template, revision)
    shape = render_input.shape
    annotations = {"llmservice.dev/gpu": f"{shape.gpus_per_replica}x {shape.gpu_name}"}
    topology_key = render_input.spec.resources.topology_key
    if topology_key is not None:
        annotations[EXCLUSIVE_TOPOLOGY_ANNOTATION] = topology_key
    rendered = _render(
        "leaderworkerset.yaml.j2",
        name=deployment_name(render_input.name, revision),
        namespace=render_input.namespace,
        labels={**_common_labels(render_input), REVISION: revision},
        annotations=annotations,
        replicas=replicas,
        size=shape.nodes_per_replica,
    )
    group = rendered["spec"]["leaderWorkerTemplate"]
    group["leaderTemplate"] = _sorted_copy(leader)
    group["workerTemplate"] = _sorted_copy(worker_template(leader))
    return rendered


def workload_kind(render_input: RenderInput) -> tuple[str, str]:
    """(apiVersion, kind) of a revision's workload: a LeaderWorkerSet for multi-node replicas."""
    return (
        (LWS_API_VERSION, LWS_KIND) if render_input.shape.multi_node else ("apps/v1", "Deployment")
    )


def workload(
    render_input: RenderInput, template: dict[str, Any], revision: str, replicas: int | None
) -> dict[str, Any]:
    """One revision's Deployment, or LeaderWorkerSet when a replica spans nodes; named alike."""
    if render_input.shape.multi_node:
        return leader_worker_set(render_input, template, revision, replicas)
    return deployment(render_input, template, revision, replicas)


def _serving_selector(render_input: RenderInput, selector: dict[str, str]) -> dict[str, str]:
    """Only the leaders of multi-node groups serve HTTP."""
    return {**selector, ROLE: LEADER} if render_input.shape.multi_node else selector


def service(
    render_input: RenderInput, name: str | None = None, revision: str | None = None
) -> dict[str, Any]:
    """The client-facing Service; pinned to one revision for blue-green (active/preview)."""
    selector = (
        revision_selector(render_input.name, revision)
        if revision
        else selector_labels(render_input.name)
    )
    return _render(
        "service.yaml.j2",
        name=name or render_input.name,
        namespace=render_input.namespace,
        labels=_common_labels(render_input),
        selector=_serving_selector(render_input, selector),
        port=render_input.spec.serving.port,
    )


def pod_disruption_budget(render_input: RenderInput) -> dict[str, Any]:
    return _render(
        "pdb.yaml.j2",
        name=render_input.name,
        namespace=render_input.namespace,
        labels=_common_labels(render_input),
        selector=selector_labels(render_input.name),
    )


#: Set on every namespace by the API server (NamespaceDefaultLabelName).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def network_policy(render_input: RenderInput) -> dict[str, Any] | None:
    policy = render_input.spec.serving.network_policy
    if not policy.enabled:
        return None
    peers: list[dict[str, Any]] = [{"podSelector": {}}]  # same namespace
    for peer in policy.allow_from:
        entry: dict[str, Any] = {}
        if peer.namespace_selector is not None:
            entry["namespaceSelector"] = {"matchLabels": peer.namespace_selector}
        if peer.pod_selector is not None:
            entry["podSelector"] = {"matchLabels": peer.pod_selector}
        peers.append(entry or {"podSelector": {}})
    if policy.prometheus_namespace_selector is not None:
        peers.append({"namespaceSelector": {"matchLabels": policy.prometheus_namespace_selector}})
    operator = render_input.operator_namespace
    if operator is not None and operator != render_input.namespace:
        # The smoke test and `metricsSource: pods` connect from the operator's pod.
        peers.append({"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: operator}}})
    return _render(
        "networkpolicy.yaml.j2",
        name=render_input.name,
        namespace=render_input.namespace,
        labels=_common_labels(render_input),
        selector=selector_labels(render_input.name),
        peers=peers,
        port=render_input.spec.serving.port,
        # A multi-node group's pods talk to each other (the master port, then NCCL/Gloo on
        # ports they pick): any port, from the service's own pods.
        group_peers=[{"podSelector": {"matchLabels": selector_labels(render_input.name)}}]
        if render_input.shape.multi_node
        else [],
        master_port=MASTER_PORT,
    )


def http_route(
    render_input: RenderInput, weights: tuple[int, int] | None, has_preview: bool
) -> dict[str, Any] | None:
    """Gateway API traffic split (active Service, preview Service) when a parent is named."""
    parent_ref = render_input.spec.rollout.gateway_parent_ref
    if parent_ref is None:
        return None
    active_weight, preview_weight = weights if weights is not None else (100, 0)
    port = render_input.spec.serving.port
    backends: list[dict[str, Any]] = [
        {"name": render_input.name, "port": port, "weight": active_weight}
    ]
    if has_preview and preview_weight > 0:
        backends.append(
            {"name": f"{render_input.name}-preview", "port": port, "weight": preview_weight}
        )
    if render_input.spec.serving.inference_pool is not None:
        # The same weights, on the revisions' InferencePools (render/inference_pool.py).
        backends = [
            pool_backend_ref(inference_pool_name(render_input.name, preview=i > 0), b["weight"])
            for i, b in enumerate(backends)
        ]
    parent: dict[str, Any] = {"name": parent_ref.name}
    if parent_ref.namespace:
        parent["namespace"] = parent_ref.namespace
    if parent_ref.section_name:
        parent["sectionName"] = parent_ref.section_name
    return _render(
        "httproute.yaml.j2",
        name=render_input.name,
        namespace=render_input.namespace,
        labels=_common_labels(render_input),
        parent=parent,
        backends=backends,
        request_timeout=gateway_duration(route_timeout_seconds(render_input.spec)),
    )


def scaler(
    render_input: RenderInput,
    target_deployment: str,
    target_kind: tuple[str, str] = ("apps/v1", "Deployment"),
) -> dict[str, Any] | None:
    """The HPA (mode hpa) or KEDA ScaledObject (mode keda); None when the operator scales.
    ``target_kind``: (apiVersion, kind) of the target, a LeaderWorkerSet's scale subresource
    counting groups."""
    scaling = render_input.spec.scaling
    # The operator's own policy scales on the same number (autoscale.policy).
    target_queue_depth = resolve_target_queue_depth(
        scaling.target_queue_depth, render_input.shape.max_num_seqs
    )
    behaviours: dict[str, ScalingBehavior] = {
        "scale_up": scaling.scale_up,
        "scale_down": scaling.scale_down,
    }
    common = {
        "name": render_input.name,
        "namespace": render_input.namespace,
        "labels": _common_labels(render_input),
        "target": target_deployment,
        "target_api_version": target_kind[0],
        "target_kind": target_kind[1],
        "min_replicas": scaling.min_replicas,
        "max_replicas": scaling.max_replicas,
        "target_value": f"{target_queue_depth:g}",
        **behaviours,
    }
    if scaling.mode == "hpa":
        return _render("hpa.yaml.j2", metric_name="vllm:num_requests_waiting", **common)
    if scaling.mode == "keda":
        query = (
            f'sum(vllm:num_requests_waiting{{namespace="{render_input.namespace}",'
            f'{PROMETHEUS_SERVICE_LABEL}="{render_input.name}"}})'
        )
        return _render(
            "scaledobject.yaml.j2",
            prometheus_url=render_input.prometheus_url,
            query=query,
            arrival_query=scaling.arrival_rate_query,
            polling_interval=scaling.evaluation_interval_seconds,
            **common,
        )
    return None


def prometheus_rule(render_input: RenderInput) -> dict[str, Any]:
    """The service's alert rules (render/alerts.py); applied where the cluster serves the
    Prometheus Operator's PrometheusRule, like KEDA's ScaledObject."""
    return _render(
        "prometheusrule.yaml.j2", **alert_context(render_input, _common_labels(render_input))
    )


def _replicas_field(render_input: RenderInput) -> int | None:
    """Who writes Deployment.spec.replicas: only manual mode puts it in the rendered object."""
    scaling = render_input.spec.scaling
    if scaling.mode == "manual":
        return (
            render_input.spec.replicas
            if render_input.spec.replicas is not None
            else scaling.min_replicas
        )
    return None


def render_service_objects(render_input: RenderInput) -> list[dict[str, Any]]:
    """Every object of a service at rest (one revision, no rollout in flight).

    The operator's reconcile composes the same pieces per revision during rollouts; this is
    what `llmservice plan` prints and what golden files pin.
    """
    template = pod_template(render_input)
    revision = revision_hash(template)
    objects = [
        workload(render_input, template, revision, _replicas_field(render_input)),
        service(render_input),
    ]
    objects.append(pod_disruption_budget(render_input))
    policy = network_policy(render_input)
    if policy is not None:
        objects.append(policy)
    scale = scaler(
        render_input, deployment_name(render_input.name, revision), workload_kind(render_input)
    )
    if scale is not None:
        objects.append(scale)
    objects.append(prometheus_rule(render_input))
    for obj in objects:
        obj["metadata"].setdefault("labels", {})[SERVICE] = render_input.name
    return objects
