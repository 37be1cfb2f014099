"""Bytes per parameter and per KV element, from dtype, quantization and KV-cache dtype.

Rules (docs/sizing.md explains them):

* ``dtype: auto`` follows config.json's ``torch_dtype``; a float32 (or absent) config dtype is
  served in bfloat16, as vLLM does on every GPU in the catalog. An explicit ``float32`` is
  served in float32 (4 bytes).
* Quantization shrinks the decoder's linear weights only. Embeddings, lm_head, norms, biases,
  MoE routers and the vision tower stay in the model dtype (vLLM does not quantize them).
  fp8 and int8: 1 byte (+ one float32 scale per 128x128 block for block-quantized fp8
  checkpoints such as DeepSeek-V3). awq/gptq 4-bit at group size 128: 0.5 byte per weight plus,
  per group of 128 weights, a float16 scale (2 bytes) and a packed 4-bit zero point (0.5 byte):
  0.5 + 2.5/128 = 133/256 bytes per weight. GPTQ's g_idx (one int32 per input row) is ignored.
* ``quantization: none`` on a checkpoint whose config.json carries a ``quantization_config``
  sizes the checkpoint as stored (vLLM reads that config and loads it quantized).
* KV cache: ``auto`` is the served model dtype (not the weight quantization); ``fp8`` 1 byte.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Literal

from .architecture import LayerParameters, ModelArchitecture

__all__ = [
    "AWQ_GROUP_SIZE",
    "DTYPE_BYTES",
    "Dtype",
    "KvCacheDtype",
    "Quantization",
    "kv_element_bytes",
    "layer_bytes",
    "quantized_parameters",
    "linear_bytes_per_parameter",
    "resolve_dtype",
    "resolve_quantization",
    "weight_bytes",
]

Dtype = Literal["auto", "bfloat16", "float16", "float32"]
Quantization = Literal["none", "fp8", "int8", "awq", "gptq"]
KvCacheDtype = Literal["auto", "fp8"]

DTYPE_BYTES: dict[str, int] = {"bfloat16": 2, "float16": 2, "float32": 4}
#: Group size the awq/gptq byte model assumes (the common checkpoints' choice).
AWQ_GROUP_SIZE = 128

#: quantization_config.quant_method -> the quantization it amounts to for sizing.
_CHECKPOINT_QUANT: dict[str, Quantization] = {
    "fp8": "fp8",
    "fbgemm_fp8": "fp8",
    "awq": "awq",
    "awq_marlin": "awq",
    "gptq": "gptq",
    "gptq_marlin": "gptq",
}


def resolve_dtype(requested: Dtype, arch: ModelArchitecture) -> str:
    """The dtype vLLM serves in: explicit wins; auto follows config, float32/absent -> bf16."""
    if requested != "auto":
        return requested
    if arch.torch_dtype in ("bfloat16", "float16"):
        return arch.torch_dtype
    return "bfloat16"


def resolve_quantization(
    requested: Quantization, arch: ModelArchitecture
) -> tuple[Quantization, list[str]]:
    """Effective quantization and any warnings about the checkpoint's own quantization."""
    warnings: list[str] = []
    stored = arch.checkpoint_quantization
    if stored is None:
        return requested, warnings
    as_sized = _CHECKPOINT_QUANT.get(stored)
    if requested == "none":
        if as_sized is not None:
            return as_sized, warnings
        warnings.append(
            f"the checkpoint is pre-quantized ({stored}); sized as unquantized, which "
            "overestimates its weights"
        )
        return requested, warnings
    if as_sized is not None and as_sized != requested:
        warnings.append(
            f"quantization {requested} was requested but the checkpoint is stored as {stored}; "
            "vLLM will refuse a mismatch: set quantization to none (auto-detect) or "
            f"{as_sized}"
        )
    return requested, warnings


def linear_bytes_per_parameter(
    quantization: Quantization, dtype: str, arch: ModelArchitecture
) -> Fraction:
    """Bytes per decoder linear weight, scales included."""
    if quantization == "none":
        return Fraction(DTYPE_BYTES[dtype])
    if quantization == "fp8":
        block = arch.checkpoint_weight_block_size
        if arch.checkpoint_quantization == "fp8" and block:
            return 1 + Fraction(4, block * block)
        return Fraction(1)
    if quantization == "int8":
        return Fraction(1)
    # awq / gptq, 4-bit, group 128: weight nibble + fp16 scale + 4-bit zero per group
    return Fraction(1, 2) + Fraction(2, AWQ_GROUP_SIZE) + Fraction(1, 2 * AWQ_GROUP_SIZE)


def kv_element_bytes(kv_cache_dtype: KvCacheDtype, dtype: str) -> int:
    return 1 if kv_cache_dtype == "fp8" else DTYPE_BYTES[dtype]


def quantized_parameters(layer: LayerParameters) -> int:
    """The layer's parameters that quantization shrinks (its linear weights)."""
    return (
        layer.attention_linear
        + layer.kv_linear
        + layer.replicated_linear
        + layer.mlp_linear
        + layer.expert_linear
    )


def layer_bytes(layer: LayerParameters, linear: Fraction, other: int) -> Fraction:
    """Bytes of one layer, whole (no sharding)."""
    unquantized = layer.router + layer.norms + layer.biases
    return quantized_parameters(layer) * linear + unquantized * other


def weight_bytes(arch: ModelArchitecture, dtype: str, quantization: Quantization) -> int:
    """Bytes of all weights as vLLM holds them (summed over GPUs; tied embeddings once)."""
    other = DTYPE_BYTES[dtype]
    linear = linear_bytes_per_parameter(quantization, dtype, arch)
    total = Fraction(
        (
            arch.embedding_parameters()
            + arch.lm_head_parameters()
            + arch.final_norm_parameters()
            + arch.vision_parameters
        )
        * other
    )
    quantized = unquantized = 0
    for layer in arch.layers():  # integer sums: layer_bytes is linear in them
        quantized += quantized_parameters(layer)
        unquantized += layer.router + layer.norms + layer.biases
    return _ceil(total + quantized * linear + unquantized * other)


def _ceil(value: Fraction) -> int:
    return -(-value.numerator // value.denominator)
