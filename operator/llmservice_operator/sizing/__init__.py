"""Sizing: from a model's config.json, precision and context length to GPUs and parallelism.

Pure: no Kubernetes, no network, no clock. Data files (GPU catalog, carried config.json
files) ship inside the package. docs/sizing.md explains the memory and roofline models.

Typical use::

    arch = parse_hf_config(load_builtin_model("meta-llama/Llama-3.1-8B-Instruct"))
    request = SizingRequest(architecture=arch, max_model_len=16384, min_concurrency=8)
    result = choose_gpu(request, load_catalog(), "auto", ["L4", "H100-80GB"])
    result.to_summary()  # '2x L4, TP=2, 10 full-length sequences'
"""

from __future__ import annotations

from .architecture import SUPPORTED_FAMILIES, LayerParameters, ModelArchitecture, parse_hf_config
from .builtin import builtin_model_ids, load_builtin_model
from .catalog import GpuCatalog, GpuType, builtin_catalog, load_catalog
from .errors import SizingError
from .fit import (
    SizingRequest,
    SizingResult,
    choose_gpu,
    overhead_bytes,
    performance_for,
    size_at_parallelism,
    size_for_gpu,
    stage_layers,
)
from .performance import (
    BANDWIDTH_EFFICIENCY,
    COMPUTE_EFFICIENCY,
    PerformanceModel,
    performance_model,
)
from .precision import (
    DTYPE_BYTES,
    Dtype,
    KvCacheDtype,
    Quantization,
    kv_element_bytes,
    resolve_dtype,
    resolve_quantization,
    weight_bytes,
)

__all__ = [
    "BANDWIDTH_EFFICIENCY",
    "COMPUTE_EFFICIENCY",
    "DTYPE_BYTES",
    "SUPPORTED_FAMILIES",
    "Dtype",
    "GpuCatalog",
    "GpuType",
    "KvCacheDtype",
    "LayerParameters",
    "ModelArchitecture",
    "PerformanceModel",
    "Quantization",
    "SizingError",
    "SizingRequest",
    "SizingResult",
    "builtin_catalog",
    "builtin_model_ids",
    "choose_gpu",
    "kv_element_bytes",
    "load_builtin_model",
    "load_catalog",
    "overhead_bytes",
    "parse_hf_config",
    "performance_for",
    "performance_model",
    "resolve_dtype",
    "resolve_quantization",
    "size_at_parallelism",
    "size_for_gpu",
    "stage_layers",
    "weight_bytes",
]
