"""Parallelism choice, concurrency, refusals and GPU choice: clear-cut cases worked by hand.

Numbers used below (docs/sizing.md): budget = 0.92 x memory; overhead per GPU = 1 GiB runtime
+ 0.5 GiB (TP x PP > 1) + 0.5 GiB CUDA graphs + 8,192 tokens x 2 bytes x activation width
+ 256 x vocab x 8 bytes of warm-up logits. Llama-3.1-8B at TP=1: width 4 x 4,096 + (2 x 32 +
2 x 8) x 128 + 3 x 14,336 = 69,632 -> 1.0625 GiB; logits 256 x 128,256 x 8 = 0.245 GiB; total
2.81 GiB. Llama-3.1-70B: 3.84 / 3.54 / 3.14 / 2.94 GiB at TP 1 / 2 / 4 / 8.
H100-80GB budget: 0.92 x 85,520,809,984 B = 73.28 GiB; A100-40GB 36.80 GiB; L4 20.70 GiB.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from llmservice_operator.sizing import (
    GpuCatalog,
    ModelArchitecture,
    SizingError,
    SizingRequest,
    SizingResult,
    choose_gpu,
    overhead_bytes,
    size_for_gpu,
    stage_layers,
)

Arch = Callable[[str], ModelArchitecture]
GIB = 1 << 30


def _size(
    arch: Arch, catalog: GpuCatalog, model: str, gpu: str, max_model_len: int, **kw: Any
) -> SizingResult:
    request = SizingRequest(architecture=arch(model), max_model_len=max_model_len, **kw)
    return size_for_gpu(request, catalog.get(gpu))


# -- table of parallelism choices ----------------------------------------------------------------

CASES = [
    # (model, gpu, max_model_len, extra, tp, pp, why)
    pytest.param(
        "meta-llama/Llama-3.1-8B-Instruct",
        "H100-80GB",
        8192,
        {},
        1,
        1,
        id="8B-bf16-H100-TP1",
        # 73.28 - 14.96 weights - 2.81 overhead = 55.5 GiB pool / (8,192 x 128 KiB = 1 GiB)
        # -> 55 sequences.
    ),
    pytest.param(
        "meta-llama/Llama-3.1-8B-Instruct",
        "L4",
        8192,
        {},
        1,
        1,
        id="8B-bf16-L4-TP1-8k",
        # 20.70 - 14.96 - 2.81 = 2.93 GiB pool -> 2 sequences of 8,192 tokens (1 GiB each).
    ),
    pytest.param(
        "meta-llama/Llama-3.1-70B-Instruct",
        "H100-80GB",
        8192,
        {},
        2,
        1,
        id="70B-bf16-H100-TP2-one-sequence",
        # TP=1: 131.4 GiB weights > 73.3 GiB. TP=2: 73.28 - 65.71 - 3.54 = 4.03 GiB pool;
        # KV per GPU 327,680 / 2 = 160 KiB per token -> 1.25 GiB per 8k sequence -> 3 fit.
        # It truly fits for min_concurrency 1 (vLLM serves 70B on 2x H100 at 8k), with little
        # headroom; the next case asks for 8 sequences.
    ),
    pytest.param(
        "meta-llama/Llama-3.1-70B-Instruct",
        "H100-80GB",
        8192,
        {"min_concurrency": 8},
        4,
        1,
        id="70B-bf16-H100-TP4-eight-sequences",
        # TP=2 holds 3 < 8. TP=4: 73.28 - 32.86 - 3.14 = 37.28 GiB / (8,192 x 80 KiB) -> 59.
    ),
    pytest.param(
        "meta-llama/Llama-3.1-70B-Instruct",
        "A100-40GB",
        8192,
        {"min_concurrency": 4},
        8,
        1,
        id="70B-bf16-A100-40GB-TP8",
        # TP=4: 36.80 - 32.86 - 3.14 = 0.80 GiB / 0.625 GiB per sequence -> 1 < 4.
        # TP=8: 36.80 - 16.43 - 2.94 = 17.43 GiB / 0.3125 GiB -> 55.
    ),
    pytest.param(
        "meta-llama/Llama-3.1-70B-Instruct",
        "L4",
        8192,
        {},
        8,
        1,
        id="70B-bf16-L4-TP8-at-8k",
        # TP=4: 32.9 GiB weights per GPU > 20.7. TP=8: 20.70 - 16.43 - 2.94 = 1.32 GiB /
        # (8,192 x 40 KiB = 0.3125 GiB) -> 4 sequences: one node of 8 L4 serves 70B at 8k.
    ),
    pytest.param(
        "meta-llama/Llama-3.1-70B-Instruct",
        "L4",
        131072,
        {"min_concurrency": 4},
        8,
        3,
        id="70B-bf16-L4-PP3-at-128k",
        # TP=8: 1.32 GiB pool, a 131k sequence needs 5 GiB per GPU -> 0. PP=2 (40 layers per
        # stage, 20 KiB/token/GPU): 9.5 GiB pool -> 3 < 4. PP=3 (27/27/26 layers): 7 sequences.
    ),
    pytest.param(
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        "H100-80GB",
        32768,
        {"quantization": "fp8"},
        1,
        1,
        id="Mixtral-fp8-H100-TP1",
        # fp8: 46.44e9 linear x 1 B + 0.26e9 x 2 B = 43.74 GiB; 73.28 - 43.74 - 3.41 = 26.1 GiB
        # / (32,768 x 128 KiB = 4 GiB) -> 6 sequences.
    ),
    pytest.param(
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        "H100-80GB",
        32768,
        {},
        2,
        1,
        id="Mixtral-bf16-H100-TP2",
        # bf16: 87.0 GiB of weights > 73.3 GiB on one GPU.
    ),
    pytest.param(
        "deepseek-ai/DeepSeek-V3",
        "H200-141GB",
        131072,
        {},
        8,
        1,
        id="DeepSeek-V3-fp8-checkpoint-H200-TP8",
        # fp8 as stored: TP=4 needs 157.5 GiB per GPU. TP=8: 79.3 GiB (MLA down-projections
        # replicated); pool 46.0 GiB; the MLA latent is NOT split by TP: 70,272 B/token per
        # GPU -> 703k tokens -> 5 sequences of 131,072.
    ),
    pytest.param(
        "deepseek-ai/DeepSeek-V3",
        "H100-80GB",
        32768,
        {},
        8,
        2,
        id="DeepSeek-V3-H100-PP2",
        # 79.3 GiB per GPU at TP=8 > 73.3 GiB: two 8-GPU stages.
    ),
]


@pytest.mark.parametrize(("model", "gpu", "max_len", "extra", "tp", "pp"), CASES)
def test_parallelism_choice(
    arch: Arch,
    catalog: GpuCatalog,
    model: str,
    gpu: str,
    max_len: int,
    extra: dict[str, Any],
    tp: int,
    pp: int,
) -> None:
    result = _size(arch, catalog, model, gpu, max_len, **extra)
    assert result.fits, result.reason
    assert (result.tensor_parallel_size, result.pipeline_parallel_size) == (tp, pp)
    assert result.gpus_per_replica == tp * pp
    assert result.max_concurrent_sequences_at_max_len >= max(1, extra.get("min_concurrency", 1))
    assert result.condition_reason == "Fits"


def test_worked_llama_8b_on_h100(arch: Arch, catalog: GpuCatalog) -> None:
    """Every headline number of 8B bf16 on one H100 at 16k, from the arithmetic above."""
    r = _size(arch, catalog, "meta-llama/Llama-3.1-8B-Instruct", "H100-80GB", 16384)
    assert r.parameter_count == 8_030_261_248
    assert r.weight_bytes == r.weight_bytes_per_gpu == 16_060_522_496
    assert r.kv_cache_bytes_per_token == 131_072
    assert r.overhead_bytes_per_gpu == GIB + GIB // 2 + 8192 * 2 * 69_632 + 256 * 128_256 * 8
    budget = int(0.92 * 85_520_809_984)
    assert r.kv_pool_bytes_per_gpu == budget - 16_060_522_496 - r.overhead_bytes_per_gpu
    tokens = r.kv_pool_bytes_per_gpu // 131_072 // 16 * 16
    assert r.kv_pool_tokens == tokens
    assert r.max_concurrent_sequences_at_max_len == tokens // 16384 == 27
    assert r.to_summary() == "1x H100-80GB, TP=1, 27 full-length sequences"
    assert r.shm_bytes == GIB
    assert r.nodes_per_replica == 1
    assert r.warnings == ()


def test_reason_explains_why_the_smaller_option_failed(arch: Arch, catalog: GpuCatalog) -> None:
    r = _size(
        arch, catalog, "meta-llama/Llama-3.1-70B-Instruct", "H100-80GB", 8192, min_concurrency=8
    )
    assert r.reason.startswith("2x H100-80GB (TP=2) is not enough")
    assert "3 full-length sequences, 8 required" in r.reason
    assert "4x H100-80GB (TP=4)" in r.reason


def test_pipeline_reason_and_multi_node_warning(arch: Arch, catalog: GpuCatalog) -> None:
    r = _size(arch, catalog, "meta-llama/Llama-3.1-70B-Instruct", "L4", 131072, min_concurrency=4)
    assert "pipeline stages across 3 nodes" in r.reason
    assert r.nodes_per_replica == 3
    assert any("spans 3 nodes" in w for w in r.warnings)
    assert any("PCIe" in w for w in r.warnings)
    assert r.to_summary() == "24x L4, TP=8, PP=3, 7 full-length sequences"


def test_weights_alone_too_big_reason(arch: Arch, catalog: GpuCatalog) -> None:
    """DeepSeek-V3 in bf16 on A10G: even 32 GPUs (TP=8, PP=4) cannot hold 1.25 TiB."""
    a = arch("deepseek-ai/DeepSeek-V3").model_copy(update={"checkpoint_quantization": None})
    r = size_for_gpu(SizingRequest(architecture=a, max_model_len=4096), catalog.get("A10G"))
    assert not r.fits
    assert r.condition_reason == "InsufficientMemory"
    assert r.reason.startswith("needs 1249.9 GiB for weights alone; the largest option, 32x A10G")
    assert "use fp8/awq weights or a bigger GPU" in r.reason
    assert (r.tensor_parallel_size, r.pipeline_parallel_size) == (8, 4)
    assert r.to_summary().startswith("does not fit: needs")


def test_kv_too_small_reason(arch: Arch, catalog: GpuCatalog) -> None:
    r = _size(arch, catalog, "meta-llama/Llama-3.1-70B-Instruct", "L4", 131072, min_concurrency=64)
    assert not r.fits
    assert "the largest option, 32x L4 (TP=8, PP=4)" in r.reason
    assert "10 full-length sequences of 131072 tokens, 64 required" in r.reason
    assert "kvCacheDtype fp8" in r.reason


def test_max_model_len_beyond_context(arch: Arch, catalog: GpuCatalog) -> None:
    r = _size(arch, catalog, "meta-llama/Llama-3.1-8B-Instruct", "H100-80GB", 200_000)
    assert not r.fits and r.condition_reason == "ContextTooLong"
    assert "200000 exceeds the model's context limit of 131072" in r.reason
    assert r.gpus_per_replica == 0
    qwen = arch("Qwen/Qwen2.5-7B-Instruct").model_copy(
        update={
            "rope_scaling_type": "yarn",
            "rope_scaling_factor": 4.0,
            "rope_original_max_position_embeddings": 32768,
        }
    )
    yarn = size_for_gpu(
        SizingRequest(architecture=qwen, max_model_len=200_000), catalog.get("H100-80GB")
    )
    assert "limit of 131072 tokens (max_position_embeddings 32768 with yarn rope scaling x4)" in (
        yarn.reason
    )
    assert size_for_gpu(
        SizingRequest(architecture=qwen, max_model_len=131_072), catalog.get("H100-80GB")
    ).fits


def test_tp_must_divide_heads(arch: Arch, catalog: GpuCatalog) -> None:
    """Qwen2.5-7B has 28 heads: TP=8 is invalid, so PP starts from TP=4."""
    r = _size(arch, catalog, "Qwen/Qwen2.5-7B-Instruct", "L4", 32768, min_concurrency=24)
    assert r.fits
    assert r.tensor_parallel_size in (1, 2, 4)
    big = _size(arch, catalog, "Qwen/Qwen2.5-7B-Instruct", "L4", 32768, min_concurrency=60)
    assert (big.tensor_parallel_size, big.pipeline_parallel_size) == (4, 2)
    assert big.nodes_per_replica == 1  # 4 x 2 GPUs fit on one 8-GPU node


def test_awq_group_size_limits_tp(arch: Arch) -> None:
    """Qwen2.5-72B's intermediate_size 29,568 splits into 14,784 / 7,392 / 3,696-wide shards at
    TP 2 / 4 / 8, none a multiple of 128: vLLM cannot load a group-128 AWQ checkpoint of it
    with TP > 1 (which is why Qwen's published AWQ checkpoint pads it to 29,696 = 8 x 29 x
    128). Unquantized, any of those TPs is fine."""
    from llmservice_operator.sizing.fit import _tp_problem

    a = arch("Qwen/Qwen2.5-7B-Instruct").model_copy(
        update={
            "num_attention_heads": 64,
            "num_kv_heads": 8,
            "hidden_size": 8192,
            "intermediate_size": 29568,
            "num_layers": 80,
        }
    )
    for tp in (2, 4, 8):
        problem = _tp_problem(a, tp, "awq")
        assert problem is not None and "group size 128" in problem
        assert _tp_problem(a, tp, "none") is None
    padded = a.model_copy(update={"intermediate_size": 29696})
    assert all(_tp_problem(padded, tp, "awq") is None for tp in (1, 2, 4, 8))


def test_kv_heads_replicate_beyond_tp() -> None:
    """TP=8 with 4 kv heads is valid (each kv head on 2 ranks); 3 kv heads with TP=2 is not."""
    from llmservice_operator.sizing.fit import _tp_problem
    from tests.unit.sizing.conftest import builtin_architecture

    a = builtin_architecture("meta-llama/Llama-3.1-8B").model_copy(update={"num_kv_heads": 4})
    assert _tp_problem(a, 8, "none") is None
    b = a.model_copy(update={"num_kv_heads": 3, "num_attention_heads": 24})
    assert _tp_problem(b, 2, "none") is not None


def test_mla_kv_is_not_split_by_tp(arch: Arch, catalog: GpuCatalog) -> None:
    """Per-GPU pool tokens x per-GPU bytes: for MLA the per-GPU bytes per token equal the
    model's (61 x 576 x 2), for GQA they are divided by TP."""
    r = _size(arch, catalog, "deepseek-ai/DeepSeek-V3", "H200-141GB", 32768)
    assert r.kv_pool_tokens == r.kv_pool_bytes_per_gpu // 70_272 // 16 * 16
    g = _size(
        arch, catalog, "meta-llama/Llama-3.1-70B-Instruct", "H100-80GB", 8192, min_concurrency=8
    )
    assert g.kv_pool_tokens == g.kv_pool_bytes_per_gpu // (327_680 // 4) // 16 * 16


def test_stage_layers_like_vllm() -> None:
    assert [len(s) for s in stage_layers(80, 3)] == [27, 27, 26]
    assert [len(s) for s in stage_layers(61, 2)] == [31, 30]
    assert [len(s) for s in stage_layers(62, 4)] == [15, 16, 16, 15]
    assert [len(s) for s in stage_layers(32, 1)] == [32]
    assert sum(len(s) for s in stage_layers(61, 4)) == 61


def test_overhead_scales_with_batched_tokens(arch: Arch) -> None:
    a = arch("meta-llama/Llama-3.1-8B")
    small = overhead_bytes(a, 1, 1, dtype="bfloat16", max_num_batched_tokens=2048)
    default = overhead_bytes(a, 1, 1, dtype="bfloat16")
    assert default - small == (8192 - 2048) * 2 * 69_632
    assert overhead_bytes(a, 2, 1, dtype="bfloat16") > GIB * 2  # + NCCL buffers


# -- max_num_seqs and warnings -----------------------------------------------------------------


def test_derived_max_num_seqs(arch: Arch, catalog: GpuCatalog) -> None:
    """Derived: pool tokens / min(max_model_len, 2,048), capped at 256, at least the
    full-length count. 8B on L4 at 8k: 24,000 tokens / 2,048 = 11."""
    r = _size(arch, catalog, "meta-llama/Llama-3.1-8B-Instruct", "L4", 8192)
    assert r.kv_pool_tokens == 24_000
    assert r.max_num_seqs == 11
    h = _size(arch, catalog, "meta-llama/Llama-3.1-8B-Instruct", "H100-80GB", 1024)
    assert h.max_num_seqs == 256


def test_given_max_num_seqs_is_checked(arch: Arch, catalog: GpuCatalog) -> None:
    r = _size(
        arch,
        catalog,
        "meta-llama/Llama-3.1-8B-Instruct",
        "L4",
        8192,
        max_num_seqs=64,
        min_concurrency=2,
    )
    assert r.fits and r.max_num_seqs == 64
    assert any("preempt" in w for w in r.warnings)
    low = _size(
        arch,
        catalog,
        "meta-llama/Llama-3.1-8B-Instruct",
        "H100-80GB",
        8192,
        max_num_seqs=4,
        min_concurrency=8,
    )
    assert any("below minConcurrency 8" in w for w in low.warnings)


def test_slo_warnings_do_not_refuse(arch: Arch, catalog: GpuCatalog) -> None:
    r = _size(
        arch,
        catalog,
        "meta-llama/Llama-3.1-70B-Instruct",
        "L4",
        8192,
        ttft_p99_ms=100,
        tpot_p99_ms=20,
    )
    assert r.fits
    assert any("TTFT" in w and "ttftP99Ms 100" in w for w in r.warnings)
    assert any("tpotP99Ms 20" in w and "one sequence alone" in w for w in r.warnings)
    ok = _size(
        arch,
        catalog,
        "meta-llama/Llama-3.1-8B-Instruct",
        "H100-80GB",
        8192,
        ttft_p99_ms=800,
        tpot_p99_ms=60,
    )
    assert not any("P99Ms" in w for w in ok.warnings)


def test_tpot_warning_at_full_batch_suggests_a_batch(arch: Arch, catalog: GpuCatalog) -> None:
    r = _size(arch, catalog, "meta-llama/Llama-3.1-8B-Instruct", "H100-80GB", 8192, tpot_p99_ms=12)
    warning = next(w for w in r.warnings if "tpotP99Ms" in w)
    assert "concurrent sequences meet it" in warning


def test_sliding_window_warning(arch: Arch, catalog: GpuCatalog) -> None:
    r = _size(arch, catalog, "google/gemma-2-9b-it", "L4", 8192)
    assert any("21 of 42 layers use a 4096-token sliding window" in w for w in r.warnings)


def test_fp8_on_ampere_warns(arch: Arch, catalog: GpuCatalog) -> None:
    r = _size(
        arch,
        catalog,
        "meta-llama/Llama-3.1-8B-Instruct",
        "A100-80GB",
        8192,
        quantization="fp8",
        kv_cache_dtype="fp8",
    )
    assert r.fits
    assert any("weight-only (Marlin)" in w for w in r.warnings)
    assert any("fp8 KV cache" in w for w in r.warnings)


# -- choose_gpu --------------------------------------------------------------------------------


def test_auto_picks_cheapest_feasible(arch: Arch, catalog: GpuCatalog) -> None:
    """8B at 16k with 8 sequences: 2x L4 (cost 2 x 1.0) beats 1x A100-80GB (4.8), 1x H100."""
    request = SizingRequest(
        architecture=arch("meta-llama/Llama-3.1-8B-Instruct"),
        max_model_len=16384,
        min_concurrency=8,
    )
    r = choose_gpu(request, catalog, "auto", ["L4", "A100-80GB", "H100-80GB"])
    assert (r.gpu_type, r.tensor_parallel_size) == ("L4", 2)
    assert r.reason.startswith("gpu auto: cheapest fitting of 3 allowed GPU types")
    assert "1x A100-80GB (4.8)" in r.reason
    only_big = choose_gpu(request, catalog, "auto", ["H100-80GB", "A100-80GB"])
    assert only_big.gpu_type == "A100-80GB"


def test_auto_without_allowed_uses_whole_catalog(arch: Arch, catalog: GpuCatalog) -> None:
    request = SizingRequest(architecture=arch("Qwen/Qwen3-8B"), max_model_len=4096)
    r = choose_gpu(request, catalog)
    assert r.fits and r.gpu_type == "L4"


def test_auto_none_fits(arch: Arch, catalog: GpuCatalog) -> None:
    request = SizingRequest(
        architecture=arch("meta-llama/Llama-3.1-70B-Instruct"),
        max_model_len=131072,
        min_concurrency=64,
    )
    r = choose_gpu(request, catalog, "auto", ["L4", "A10G"])
    assert not r.fits
    assert r.reason.startswith("no allowed GPU type fits (L4: ")
    assert "A10G: " in r.reason


def test_named_gpu(arch: Arch, catalog: GpuCatalog) -> None:
    request = SizingRequest(architecture=arch("Qwen/Qwen3-8B"), max_model_len=4096)
    assert choose_gpu(request, catalog, "h100-80gb").gpu_type == "H100-80GB"
    assert choose_gpu(request, catalog, "NVIDIA-H100-80GB-HBM3").gpu_type == "H100-80GB"
    with pytest.raises(SizingError) as unknown:
        choose_gpu(request, catalog, "TPU-v5")
    assert unknown.value.field == "resources.gpu" and "H100-80GB" in str(unknown.value)
    with pytest.raises(SizingError) as outside:
        choose_gpu(request, catalog, "H100-80GB", ["L4"])
    assert outside.value.field == "resources.gpu"
    with pytest.raises(SizingError) as bad_allowed:
        choose_gpu(request, catalog, "auto", ["L4", "nope"])
    assert bad_allowed.value.field == "resources.allowedGPUs"


# -- result serialisation ----------------------------------------------------------------------


def test_json_dict_is_camel_case(arch: Arch, catalog: GpuCatalog) -> None:
    r = _size(arch, catalog, "meta-llama/Llama-3.1-8B-Instruct", "H100-80GB", 8192)
    data = r.to_json_dict()
    for key in (
        "parameterCount",
        "weightBytes",
        "kvCacheBytesPerToken",
        "tensorParallelSize",
        "pipelineParallelSize",
        "gpusPerReplica",
        "gpuType",
        "maxConcurrentSequencesAtMaxLen",
        "decodeMsPerTokenAtBatch1",
        "prefillMsPer1kTokens",
        "fits",
        "reason",
        "shmBytes",
        "maxNumSeqs",
        "warnings",
        "summary",
    ):
        assert key in data, key
    assert SizingResult.model_validate(data).to_summary() == r.to_summary()
    assert r.summary() == r.to_summary()


def test_request_validation(arch: Arch) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        SizingRequest(architecture=arch("Qwen/Qwen3-8B"), max_model_len=0)
    with pytest.raises(ValidationError):
        SizingRequest(architecture=arch("Qwen/Qwen3-8B"), max_model_len=10, dtype="int4")
    with pytest.raises(ValidationError):
        SizingRequest(
            architecture=arch("Qwen/Qwen3-8B"), max_model_len=10, gpu_memory_utilization=1.5
        )


def test_size_at_fixed_parallelism(arch: Arch, catalog: GpuCatalog) -> None:
    """A given TP x PP (what an engine was started with) is evaluated as is."""
    from llmservice_operator.sizing import size_at_parallelism

    request = SizingRequest(
        architecture=arch("meta-llama/Llama-3.1-70B-Instruct"), max_model_len=8192
    )
    h100 = catalog.get("H100-80GB")
    four = size_at_parallelism(request, h100, 4)
    assert four.fits and four.tensor_parallel_size == 4
    assert four.max_concurrent_sequences_at_max_len == 59
    assert (
        four.kv_pool_tokens
        == size_for_gpu(request.model_copy(update={"min_concurrency": 8}), h100).kv_pool_tokens
    )
    one = size_at_parallelism(request, h100, 1)
    assert not one.fits and one.reason.startswith("1x H100-80GB (TP=1) is not enough: weights")
    bad = size_at_parallelism(request, h100, 3)
    assert not bad.fits and bad.condition_reason == "InvalidParallelism"
    assert "does not divide 64 attention heads" in bad.reason
    staged = size_at_parallelism(request, h100, 8, 2)
    assert staged.fits and staged.gpus_per_replica == 16
