"""Roofline estimates, checked against the formulas worked by hand."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llmservice_operator.sizing import (
    BANDWIDTH_EFFICIENCY,
    COMPUTE_EFFICIENCY,
    GpuCatalog,
    ModelArchitecture,
    SizingRequest,
    performance_for,
    size_for_gpu,
)

Arch = Callable[[str], ModelArchitecture]


def test_decode_batch1_llama_8b_h100(arch: Arch, catalog: GpuCatalog) -> None:
    """(weights read + KV of 1,024 tokens) / (HBM bandwidth x TP) / efficiency.

    weights read: 16,060,522,496 - the input embedding 1,050,673,152 (a lookup) = 15,009,849,344
    KV: 1,024 x 131,072 = 134,217,728  ->  15,144,067,072 bytes
    / (3.35e12 x 1 x 0.7) = 6.4580 ms
    """
    assert BANDWIDTH_EFFICIENCY == 0.7 and COMPUTE_EFFICIENCY == 0.5
    request = SizingRequest(
        architecture=arch("meta-llama/Llama-3.1-8B-Instruct"), max_model_len=8192
    )
    result = size_for_gpu(request, catalog.get("H100-80GB"))
    expected = 15_144_067_072 / (3.35e12 * 0.7) * 1e3
    assert result.decode_ms_per_token_at_batch1 == pytest.approx(expected, abs=1e-3)
    perf = performance_for(request, catalog.get("H100-80GB"), 1)
    assert perf.decode_step_ms(1, 1024) == pytest.approx(expected)


def test_prefill_1k_llama_8b_h100(arch: Arch, catalog: GpuCatalog) -> None:
    """2 x matmul params x 1,024 + lm_head for the last token + attention, / (989e12 x 0.5).

    matmul params: 32 x (41,943,040 + 176,160,768) = 6,979,321,856
    2 x 6,979,321,856 x 1,024 = 14,293,651,161,088; lm_head 2 x 525,336,576 = 1,050,673,152
    attention: 1,024 x 1,025 / 2 = 524,800 pairs x 2 x 32 layers x 32 heads x (128 + 128)
               = 524,800 x 524,288 = 275,146,342,400
    total 14,569,848,176,640 FLOPs / 494.5e12 = 29.4638 ms
    """
    request = SizingRequest(
        architecture=arch("meta-llama/Llama-3.1-8B-Instruct"), max_model_len=8192
    )
    result = size_for_gpu(request, catalog.get("H100-80GB"))
    assert result.prefill_ms_per_1k_tokens == pytest.approx(
        14_569_848_176_640 / 494.5e12 * 1e3, abs=1e-3
    )


def test_tp_divides_and_pp_does_not(arch: Arch, catalog: GpuCatalog) -> None:
    request = SizingRequest(architecture=arch("meta-llama/Llama-3.1-70B"), max_model_len=8192)
    h100 = catalog.get("H100-80GB")
    one, four = performance_for(request, h100, 1), performance_for(request, h100, 4)
    assert four.decode_step_ms(1, 1024) == pytest.approx(one.decode_step_ms(1, 1024) / 4)
    assert four.prefill_ms(1024) == pytest.approx(one.prefill_ms(1024) / 4)


def test_moe_reads_only_active_experts_at_batch1(arch: Arch, catalog: GpuCatalog) -> None:
    """Mixtral bf16 at batch 1 reads 2 of 8 experts: 32 x 2 x 176,160,768 x 2 B of experts +
    the rest; at a large batch almost every expert."""
    request = SizingRequest(
        architecture=arch("mistralai/Mixtral-8x7B-Instruct-v0.1"), max_model_len=8192
    )
    perf = performance_for(request, catalog.get("H100-80GB"), 2)
    expert = 3 * 4096 * 14336 * 2
    assert perf.expert_bytes == expert
    non_expert = 2 * (46_702_792_704 - 32 * 8 * 3 * 4096 * 14336) - 2 * 32000 * 4096
    assert perf.weight_read_bytes(1) == pytest.approx(non_expert + 32 * 2 * expert)
    assert perf.weight_read_bytes(256) == pytest.approx(non_expert + 32 * 8 * expert, rel=1e-6)
    dense_equivalent = performance_for(
        SizingRequest(architecture=arch("meta-llama/Llama-3.1-70B"), max_model_len=8192),
        catalog.get("H100-80GB"),
        2,
    )
    assert perf.decode_step_ms(1, 1024) < dense_equivalent.decode_step_ms(1, 1024)


def test_step_times_grow_with_batch_context_and_prompt(arch: Arch, catalog: GpuCatalog) -> None:
    request = SizingRequest(architecture=arch("Qwen/Qwen3-30B-A3B"), max_model_len=32768)
    perf = performance_for(request, catalog.get("L40S"), 1)
    assert perf.decode_step_ms(0, 0) == 0.0 and perf.prefill_ms(0) == 0.0
    steps = [perf.decode_step_ms(b, b * 1000) for b in (1, 2, 8, 64, 256)]
    assert steps == sorted(steps)
    assert perf.decode_step_ms(8, 100_000) > perf.decode_step_ms(8, 1_000)
    prefills = [perf.prefill_ms(t) for t in (16, 256, 1024, 8192)]
    assert prefills == sorted(prefills)
    assert perf.prefill_ms(512, past_tokens=8000) > perf.prefill_ms(512)


def test_fp8_kv_and_weights_decode_faster(arch: Arch, catalog: GpuCatalog) -> None:
    a = arch("meta-llama/Llama-3.1-8B-Instruct")
    gpu = catalog.get("H100-80GB")
    base = performance_for(SizingRequest(architecture=a, max_model_len=8192), gpu, 1)
    fp8 = performance_for(
        SizingRequest(architecture=a, max_model_len=8192, quantization="fp8", kv_cache_dtype="fp8"),
        gpu,
        1,
    )
    assert fp8.decode_step_ms(1, 1024) < base.decode_step_ms(1, 1024)
    assert fp8.kv_cache_bytes_per_token == base.kv_cache_bytes_per_token // 2


def test_mla_attention_dims(arch: Arch, catalog: GpuCatalog) -> None:
    """DeepSeek-V3 decodes in the latent space (576 + 512 per head), prefills expanded
    (192 + 128)."""
    request = SizingRequest(architecture=arch("deepseek-ai/DeepSeek-V3"), max_model_len=8192)
    perf = performance_for(request, catalog.get("H200-141GB"), 8)
    assert perf.decode_attention_flops_per_pair == 2 * 61 * 128 * (576 + 512)
    assert perf.prefill_attention_flops_per_pair == 2 * 61 * 128 * (192 + 128)
