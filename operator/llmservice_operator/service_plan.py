"""From an LLMService to what should run: architecture -> sizing -> serving shape -> objects.

Pure: the GPU catalog comes in as data, and every refusal is a SpecError that names the field
to change. `llmservice plan` and the operator's reconcile both start here.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from .api import LLMService, SpecError
from .api.errors import SpecErrorKind
from .render.labels import SERVICE
from .render.model_cache import cache_pvc
from .render.objects import RenderInput, pod_template, render_service_objects, revision_hash
from .render.shape import ServingShape
from .sizing import (
    GpuCatalog,
    ModelArchitecture,
    SizingError,
    SizingRequest,
    SizingResult,
    choose_gpu,
    load_builtin_model,
    parse_hf_config,
)

__all__ = ["ServicePlan", "plan_service", "resolve_architecture", "serving_shape", "size_service"]

#: How many distinct sizings are kept (a few KiB each).
SIZINGS_KEPT = 256


@dataclass(frozen=True)
class ServicePlan:
    service: LLMService
    sizing: SizingResult
    shape: ServingShape
    render_input: RenderInput
    #: The serving pod template and its revision (the hash of the template).
    pod_template: dict[str, Any]
    revision: str

    @functools.cached_property
    def architecture(self) -> ModelArchitecture:
        """The model's architecture, as the sizing saw it (resolved once per plan: the
        autoscaler's prior reads it at every evaluation)."""
        return resolve_architecture(self.service)

    @functools.cached_property
    def objects(self) -> list[dict[str, Any]]:
        """The rendered objects (as `llmservice plan` prints them). Rendered on first use: the
        operator renders what a reconcile applies itself (decide.py). With a model cache, its
        PVC too (the download Job runs the operator's image, which only the operator knows)."""
        objects = render_service_objects(self.render_input)
        pvc = cache_pvc(self.render_input, self.sizing.weight_bytes)
        if pvc is not None:
            pvc["metadata"]["labels"][SERVICE] = self.service.metadata.name
            objects.append(pvc)
        return objects


def resolve_architecture(service: LLMService) -> ModelArchitecture:
    """The model's config.json (carried for known models) with the spec's override on top."""
    model = service.spec.model
    config = load_builtin_model(model.id)
    override = model.architecture.config() if model.architecture is not None else {}
    if config is None and not override:
        raise SpecError(
            "spec.model.architecture",
            f"the operator has no config.json for {model.id!r}; set spec.model.architecture to "
            "the model's config.json fields (model_type, num_hidden_layers, hidden_size, "
            "num_attention_heads, num_key_value_heads, intermediate_size, vocab_size)",
        )
    merged = {**(config or {}), **override}
    try:
        return parse_hf_config(merged)
    except SizingError as err:  # err.field: the key, e.g. model.architecture.num_hidden_layers
        raise SpecError(f"spec.{err.field}", str(err)) from err


def size_service(service: LLMService, catalog: GpuCatalog) -> SizingResult:
    spec = service.spec
    request = SizingRequest(
        architecture=resolve_architecture(service),
        dtype=spec.model.dtype,
        quantization=spec.model.quantization,
        kv_cache_dtype=spec.engine.kv_cache_dtype,
        max_model_len=spec.engine.max_model_len,
        min_concurrency=spec.resources.min_concurrency,
        gpu_memory_utilization=spec.engine.gpu_memory_utilization,
        max_num_seqs=spec.engine.max_num_seqs,
        max_num_batched_tokens=spec.engine.max_num_batched_tokens,
        ttft_p99_ms=spec.slo.ttft_p99_ms,
        tpot_p99_ms=spec.slo.tpot_p99_ms,
    )
    try:
        return _choose_gpu(request, catalog, spec.resources.gpu, tuple(spec.resources.allowed_gpus))
    except SizingError as err:
        field = f"spec.{err.field}" if err.field else "spec.resources"
        kind: SpecErrorKind = "invalid" if err.field.startswith("model.") else "does_not_fit"
        raise SpecError(field, str(err), kind=kind) from err


@functools.lru_cache(maxsize=SIZINGS_KEPT)
def _choose_gpu(
    request: SizingRequest, catalog: GpuCatalog, gpu: str, allowed: tuple[str, ...]
) -> SizingResult:
    """choose_gpu, a pure function of frozen (hashable) inputs, kept for the last few: a
    fleet serving one model in one shape many times over (a service per tenant or namespace)
    is sized once, not once per service (its Fraction arithmetic is most of a plan's CPU)."""
    return choose_gpu(request, catalog, gpu, list(allowed))


def serving_shape(result: SizingResult, catalog: GpuCatalog) -> ServingShape:
    gpu = catalog.get(result.gpu_type)
    nodes = _nodes_per_replica(result, gpu.gpus_per_node, gpu.name)
    shm = result.shm_bytes
    # Host RAM: weights are staged through page cache while loading; keep a third of what
    # each pod loads (its pipeline stages' share of the weights).
    host_memory = math.ceil(result.weight_bytes / nodes / 3) + 16 * 1024**3
    return ServingShape(
        gpu_name=gpu.name,
        node_label_key=gpu.node_label_key,
        node_label_value=gpu.node_label,
        resource_name=gpu.resource_name,
        gpus_per_replica=result.gpus_per_replica,
        tensor_parallel_size=result.tensor_parallel_size,
        pipeline_parallel_size=result.pipeline_parallel_size,
        max_num_seqs=result.max_num_seqs,
        shm_bytes=shm,
        host_memory_bytes=host_memory,
        nodes_per_replica=nodes,
    )


def _nodes_per_replica(result: SizingResult, gpus_per_node: int, gpu_name: str) -> int:
    """Pods (nodes) of one replica: 1, or a LeaderWorkerSet group where each node holds whole
    pipeline stages (tensor parallel never crosses a node: its all-reduces need NVLink)."""
    if result.gpus_per_replica <= gpus_per_node:
        return 1
    tp, pp = result.tensor_parallel_size, result.pipeline_parallel_size
    nodes = math.ceil(result.gpus_per_replica / gpus_per_node)
    if tp > gpus_per_node or pp % nodes != 0 or tp * (pp // nodes) > gpus_per_node:
        raise SpecError(
            "spec.resources",
            f"{result.summary()} needs {result.gpus_per_replica} GPUs in one replica, which do "
            f"not split into equal {gpus_per_node}-GPU {gpu_name} nodes of whole pipeline "
            "stages; choose another GPU, fp8/awq quantization or a shorter maxModelLen",
            kind="does_not_fit",
        )
    return nodes


def plan_service(
    service: LLMService,
    catalog: GpuCatalog,
    prometheus_url: str = "http://prometheus.monitoring.svc:9090",
    operator_namespace: str | None = None,
) -> ServicePlan:
    """Size and render, or raise SpecError saying what to change."""
    result = size_service(service, catalog)
    if not result.fits:
        raise SpecError("spec.resources", result.reason, kind="does_not_fit")
    shape = serving_shape(result, catalog)
    render_input = RenderInput(
        service=service,
        shape=shape,
        prometheus_url=prometheus_url,
        operator_namespace=operator_namespace,
    )
    template = pod_template(render_input)  # raises SpecError for flags or env it refuses
    return ServicePlan(
        service=service,
        sizing=result,
        shape=shape,
        render_input=render_input,
        pod_template=template,
        revision=revision_hash(template),
    )
