"""InferencePools and their endpoint pickers (spec.serving.inferencePool). Pure.

One pool per serving role, named by :mod:`.pool_names`: the stable revision's, and during a
rollout the candidate's (while it has a preview Service). Each pool has its own endpoint picker
(EPP: one picker serves one pool, ``--pool-name``), a Deployment and a Service, with the flags
of the pinned extension release (:data:`~llmservice_operator.api.inference_pool.EPP_VERSION`,
cmd/epp/runner/runner.go and its chart config/charts/inferencepool). The HTTPRoute's backends
are the pools, with the rollout's weights (``http_route``): the extension's documented way to
split traffic between two versions of a model server.
"""

from __future__ import annotations

from typing import Any

import yaml

from ..api import SpecError
from ..api.images import picker_image
from ..api.inference_pool import EPP_VERSION, EndpointPickerSpec, InferencePoolSpec
from ..api.spec import LLMServiceSpec
from ..vllm.metrics import metric_names
from .labels import MANAGED_BY, revision_selector, selector_labels
from .objects import RenderInput, _common_labels, _render
from .pool_names import (
    INFERENCE_POOL_API_GROUP,
    endpoint_picker_name,
    endpoint_picker_service_account,
    inference_pool_name,
)

__all__ = [
    "EPP_GRPC_PORT",
    "check_inference_pool",
    "EPP_HEALTH_PORT",
    "EPP_METRICS_PORT",
    "PICKER_LABEL",
    "endpoint_picker_args",
    "endpoint_picker_objects",
    "inference_pool",
    "inference_pool_objects",
    "picker_config",
]

#: The extension's default ports (runserver.DefaultGrpcPort and friends).
EPP_GRPC_PORT = 9002
EPP_HEALTH_PORT = 9003
EPP_METRICS_PORT = 9090
#: Label of a picker's pods (never the serving pods' labels: the pools must not select them).
PICKER_LABEL = "llmservice.dev/endpoint-picker"


def check_inference_pool(spec: LLMServiceSpec) -> None:
    """SpecError (InvalidSpec) for a pool no route could reach."""
    if spec.serving.inference_pool is not None and spec.rollout.gateway_parent_ref is None:
        raise SpecError(
            "spec.serving.inferencePool",
            "an InferencePool is reached through an HTTPRoute: set spec.rollout.gatewayParentRef "
            "to the Gateway that serves it",
        )


def _pool_spec(render_input: RenderInput) -> InferencePoolSpec:
    check_inference_pool(render_input.spec)
    pool = render_input.spec.serving.inference_pool
    if pool is None:
        raise ValueError("spec.serving.inferencePool is not set")
    return pool


def inference_pool(
    render_input: RenderInput, revision: str | None, preview: bool = False
) -> dict[str, Any]:
    """The pool of one revision (None: every serving pod of the service)."""
    pool = _pool_spec(render_input)
    name = inference_pool_name(render_input.name, preview)
    selector = (
        revision_selector(render_input.name, revision)
        if revision
        else selector_labels(render_input.name)
    )
    return _render(
        "inferencepool.yaml.j2",
        name=name,
        namespace=render_input.namespace,
        labels=_common_labels(render_input),
        selector=selector,
        port=render_input.spec.serving.port,
        picker=endpoint_picker_name(name),
        grpc_port=EPP_GRPC_PORT,
        failure_mode=pool.endpoint_picker.failure_mode,
    )


def picker_config(picker: EndpointPickerSpec) -> str:
    """The EndpointPickerConfig (``--config-text``): the chart's default plugins, or the
    spec's scorers, in one default scheduling profile."""
    config = {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [{"type": scorer} for scorer in picker.scorers],
        "schedulingProfiles": [
            {"name": "default", "plugins": [{"pluginRef": s} for s in picker.scorers]}
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)


def endpoint_picker_args(render_input: RenderInput, pool_name: str) -> list[str]:
    """The picker's flags (extension v1.0.0). The metric names are the pinned vLLM's: the
    picker's own default for the KV cache, ``vllm:gpu_cache_usage_perc``, is gone from vLLM
    since 0.9.2; LoRA info is not scraped (the operator serves no adapters)."""
    picker = _pool_spec(render_input).endpoint_picker
    try:
        names = metric_names(render_input.spec.engine.vllm_version)
    except ValueError as err:
        raise SpecError("spec.engine.vllmVersion", str(err)) from err
    return [
        "--pool-name", pool_name,
        "--pool-namespace", render_input.namespace,
        "--pool-group", INFERENCE_POOL_API_GROUP,
        "--grpc-port", str(EPP_GRPC_PORT),
        "--grpc-health-port", str(EPP_HEALTH_PORT),
        "--metrics-port", str(EPP_METRICS_PORT),
        f"--secure-serving={'true' if picker.secure_serving else 'false'}",
        "--zap-encoder", "json",
        "--v", "1",
        "--total-queued-requests-metric", names.num_requests_waiting,
        "--kv-cache-usage-percentage-metric", names.kv_cache_usage,
        "--lora-info-metric", "",
        "--config-text", picker_config(picker),
    ]  # fmt: skip


def _picker_labels(render_input: RenderInput, pool_name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "llmservice-epp",
        "app.kubernetes.io/instance": render_input.name,
        "app.kubernetes.io/component": "endpoint-picker",
        "app.kubernetes.io/part-of": "llmservice",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/version": EPP_VERSION,
        PICKER_LABEL: pool_name,
    }


def endpoint_picker_objects(render_input: RenderInput, pool_name: str) -> list[dict[str, Any]]:
    """The picker of one pool: its Deployment and its Service."""
    picker = _pool_spec(render_input).endpoint_picker
    name = endpoint_picker_name(pool_name)
    selector = {PICKER_LABEL: pool_name}
    labels = _picker_labels(render_input, pool_name)
    image = picker_image(picker)
    ports = {
        "grpc_port": EPP_GRPC_PORT,
        "health_port": EPP_HEALTH_PORT,
        "metrics_port": EPP_METRICS_PORT,
    }
    deployment = _render(
        "endpoint-picker.yaml.j2",
        name=name,
        namespace=render_input.namespace,
        labels=labels,
        replicas=picker.replicas,
        selector=selector,
        pod_labels=labels,
        service_account=endpoint_picker_service_account(render_input.name),
        termination_grace_seconds=render_input.spec.serving.drain_seconds + 30,
        image=image,
        args=endpoint_picker_args(render_input, pool_name),
        **ports,
    )
    service = _render(
        "endpoint-picker-service.yaml.j2",
        name=name,
        namespace=render_input.namespace,
        labels=labels,
        selector=selector,
        **ports,
    )
    return [deployment, service]


def _picker_rbac(render_input: RenderInput) -> list[dict[str, Any]]:
    """What a picker reads (the extension chart's Role, less ``get``: the picker's
    controller-runtime client reads from its watch caches, and the operator, which lists and
    watches by label, may grant only what it holds): its pool, the objectives, the pods."""
    name = endpoint_picker_service_account(render_input.name)
    namespace = render_input.namespace

    def meta() -> dict[str, Any]:  # a fresh copy for each object: callers add labels
        labels = _picker_labels(render_input, inference_pool_name(render_input.name))
        labels.pop(PICKER_LABEL)
        return {"name": name, "namespace": namespace, "labels": labels}

    def read(group: str, resource: str) -> dict[str, Any]:
        return {"apiGroups": [group], "resources": [resource], "verbs": ["list", "watch"]}

    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta()},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta(),
            "rules": [
                read("inference.networking.x-k8s.io", "inferenceobjectives"),
                read(INFERENCE_POOL_API_GROUP, "inferencepools"),
                read("", "pods"),
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta(),
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        },
    ]


def inference_pool_objects(
    render_input: RenderInput, active_revision: str | None, preview_revision: str | None
) -> list[dict[str, Any]]:
    """Every object of spec.serving.inferencePool now: the pickers' RBAC, then per pool (the
    stable's; the candidate's while it has a preview) the pool, its picker and Service.
    Empty when the spec has no inferencePool."""
    if render_input.spec.serving.inference_pool is None:
        return []
    objects = _picker_rbac(render_input)
    roles: list[tuple[str | None, bool]] = [(active_revision, False)]
    if preview_revision is not None:
        roles.append((preview_revision, True))
    for revision, preview in roles:
        pool = inference_pool(render_input, revision, preview)
        objects.append(pool)
        objects += endpoint_picker_objects(render_input, pool["metadata"]["name"])
    return objects
