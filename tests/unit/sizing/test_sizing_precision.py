"""Weight and KV bytes from dtype, quantization and KV-cache dtype."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import pytest

from llmservice_operator.sizing import (
    ModelArchitecture,
    kv_element_bytes,
    resolve_dtype,
    resolve_quantization,
    weight_bytes,
)
from llmservice_operator.sizing.precision import linear_bytes_per_parameter

Arch = Callable[[str], ModelArchitecture]


def test_bf16_fp32_weights(arch: Arch) -> None:
    """Llama-3.1-8B: 8,030,261,248 x 2 = 16,060,522,496 bytes (the design note's status)."""
    a = arch("meta-llama/Llama-3.1-8B-Instruct")
    assert weight_bytes(a, "bfloat16", "none") == 16_060_522_496
    assert weight_bytes(a, "float32", "none") == 2 * 16_060_522_496


def test_fp8_keeps_embeddings_and_norms_in_model_dtype(arch: Arch) -> None:
    """fp8 Llama-3.1-8B: linear weights 1 byte, the rest 2 bytes.

    linear = 32 x (41,943,040 + 176,160,768) = 6,979,321,856 -> 6,979,321,856 bytes
    rest = embedding + lm_head 1,050,673,152 + norms 32 x 8,192 + 4,096 = 1,050,939,392
         -> x 2 = 2,101,878,784;  total 9,081,200,640
    """
    a = arch("meta-llama/Llama-3.1-8B-Instruct")
    assert weight_bytes(a, "bfloat16", "fp8") == 9_081_200_640
    assert weight_bytes(a, "bfloat16", "int8") == 9_081_200_640


def test_awq_group_128(arch: Arch) -> None:
    """awq/gptq: 0.5 + (2 + 0.5) / 128 = 133/256 bytes per linear weight.

    6,979,321,856 / 256 = 27,262,976; x 133 = 3,625,975,808 + 2,101,878,784 = 5,727,854,592
    """
    a = arch("meta-llama/Llama-3.1-8B-Instruct")
    assert linear_bytes_per_parameter("awq", "bfloat16", a) == Fraction(133, 256)
    assert weight_bytes(a, "bfloat16", "awq") == 5_727_854_592
    assert weight_bytes(a, "bfloat16", "gptq") == 5_727_854_592


def test_moe_router_stays_unquantized(arch: Arch) -> None:
    """Mixtral fp8: routers (32 x 32,768 params) stay bf16 with the embeddings and norms."""
    a = arch("mistralai/Mixtral-8x7B-Instruct-v0.1")
    linear = 32 * (41_943_040 + 8 * 176_160_768)
    rest = a.parameter_count() - linear
    assert weight_bytes(a, "bfloat16", "fp8") == linear + 2 * rest


def test_prequantized_checkpoint_is_sized_as_stored(arch: Arch) -> None:
    """DeepSeek-V3 ships block-fp8 weights (one float32 scale per 128x128 block): quantization
    'none' sizes them as stored, ~626 GiB rather than 1.25 TiB."""
    a = arch("deepseek-ai/DeepSeek-V3")
    effective, warnings = resolve_quantization("none", a)
    assert effective == "fp8" and warnings == []
    assert linear_bytes_per_parameter("fp8", "bfloat16", a) == 1 + Fraction(4, 128 * 128)
    total = weight_bytes(a, "bfloat16", "fp8")
    assert 670e9 < total < 680e9
    _, mismatch = resolve_quantization("awq", a)
    assert mismatch and "fp8" in mismatch[0]


def test_unknown_checkpoint_quantization_warns(arch: Arch) -> None:
    a = arch("meta-llama/Llama-3.1-8B").model_copy(
        update={"checkpoint_quantization": "bitsandbytes"}
    )
    effective, warnings = resolve_quantization("none", a)
    assert effective == "none"
    assert "bitsandbytes" in warnings[0]


@pytest.mark.parametrize(
    ("requested", "config_dtype", "served"),
    [
        ("auto", "bfloat16", "bfloat16"),
        ("auto", "float16", "float16"),
        ("auto", "float32", "bfloat16"),  # vLLM downcasts float32 checkpoints
        ("auto", None, "bfloat16"),
        ("float32", "bfloat16", "float32"),
        ("float16", "bfloat16", "float16"),
    ],
)
def test_dtype_auto(arch: Arch, requested: str, config_dtype: str | None, served: str) -> None:
    a = arch("meta-llama/Llama-3.1-8B").model_copy(update={"torch_dtype": config_dtype})
    assert resolve_dtype(requested, a) == served  # type: ignore[arg-type]


def test_kv_element_bytes() -> None:
    assert kv_element_bytes("auto", "bfloat16") == 2
    assert kv_element_bytes("auto", "float32") == 4
    assert kv_element_bytes("fp8", "bfloat16") == 1
    assert kv_element_bytes("fp8", "float32") == 1
