"""Monotonicity: more context or concurrency never needs fewer GPUs; fp8 never needs more."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from llmservice_operator.sizing import (
    GpuCatalog,
    ModelArchitecture,
    SizingRequest,
    SizingResult,
    choose_gpu,
    load_catalog,
    size_for_gpu,
)
from tests.unit.sizing.conftest import builtin_architecture

MODELS = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct",
    "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen3-30B-A3B",
    "google/gemma-2-9b-it",
    "google/gemma-3-4b-it",
    "deepseek-ai/DeepSeek-V2-Lite",
    "deepseek-ai/DeepSeek-V3",
    "EleutherAI/pythia-6.9b",
]
ARCHS: dict[str, ModelArchitecture] = {m: builtin_architecture(m) for m in MODELS}
CATALOG: GpuCatalog = load_catalog()
GPUS = CATALOG.names()

models = st.sampled_from(MODELS)
gpus = st.sampled_from(GPUS)
lengths = st.integers(min_value=128, max_value=163_840)
concurrency = st.integers(min_value=0, max_value=256)
utilization = st.sampled_from([0.8, 0.9, 0.92, 0.95])


def _gpus(result: SizingResult) -> float:
    return result.gpus_per_replica if result.fits else math.inf


def _size(model: str, gpu: str, **kw: object) -> SizingResult:
    request = SizingRequest(architecture=ARCHS[model], **kw)
    return size_for_gpu(request, CATALOG.get(gpu))


@settings(max_examples=150, deadline=None)
@given(models, gpus, lengths, lengths, concurrency, utilization)
def test_longer_context_never_needs_fewer_gpus(
    model: str, gpu: str, a: int, b: int, c: int, u: float
) -> None:
    short, long = sorted((a, b))
    small = _size(model, gpu, max_model_len=short, min_concurrency=c, gpu_memory_utilization=u)
    big = _size(model, gpu, max_model_len=long, min_concurrency=c, gpu_memory_utilization=u)
    assert _gpus(big) >= _gpus(small)
    if small.fits and big.fits and small.gpus_per_replica == big.gpus_per_replica:
        assert big.max_concurrent_sequences_at_max_len <= small.max_concurrent_sequences_at_max_len


@settings(max_examples=150, deadline=None)
@given(models, gpus, lengths, concurrency, concurrency)
def test_more_concurrency_never_needs_fewer_gpus(
    model: str, gpu: str, length: int, a: int, b: int
) -> None:
    low, high = sorted((a, b))
    assert _gpus(_size(model, gpu, max_model_len=length, min_concurrency=high)) >= _gpus(
        _size(model, gpu, max_model_len=length, min_concurrency=low)
    )


@settings(max_examples=150, deadline=None)
@given(models, gpus, lengths, concurrency, st.sampled_from(["auto", "fp8"]))
def test_fp8_weights_never_need_more_gpus(
    model: str, gpu: str, length: int, c: int, kv: str
) -> None:
    base = _size(model, gpu, max_model_len=length, min_concurrency=c, kv_cache_dtype=kv)
    fp8 = _size(
        model, gpu, max_model_len=length, min_concurrency=c, kv_cache_dtype=kv, quantization="fp8"
    )
    assert _gpus(fp8) <= _gpus(base)
    assert fp8.weight_bytes <= base.weight_bytes


@settings(max_examples=150, deadline=None)
@given(models, gpus, lengths, concurrency, st.sampled_from(["none", "fp8", "awq"]))
def test_fp8_kv_cache_never_needs_more_gpus(
    model: str, gpu: str, length: int, c: int, quantization: str
) -> None:
    auto = _size(model, gpu, max_model_len=length, min_concurrency=c, quantization=quantization)
    fp8 = _size(
        model,
        gpu,
        max_model_len=length,
        min_concurrency=c,
        quantization=quantization,
        kv_cache_dtype="fp8",
    )
    assert _gpus(fp8) <= _gpus(auto)
    if fp8.fits and auto.fits and fp8.gpus_per_replica == auto.gpus_per_replica:
        assert fp8.max_concurrent_sequences_at_max_len >= auto.max_concurrent_sequences_at_max_len


@settings(max_examples=60, deadline=None)
@given(models, lengths, concurrency, st.lists(gpus, min_size=1, max_size=5, unique=True))
def test_auto_fp8_never_costs_more(model: str, length: int, c: int, allowed: list[str]) -> None:
    def cost(result: SizingResult) -> float:
        if not result.fits:
            return math.inf
        return result.gpus_per_replica * CATALOG.get(result.gpu_type).relative_cost_per_hour

    base = SizingRequest(architecture=ARCHS[model], max_model_len=length, min_concurrency=c)
    fp8 = base.model_copy(update={"quantization": "fp8"})
    assert cost(choose_gpu(fp8, CATALOG, "auto", allowed)) <= cost(
        choose_gpu(base, CATALOG, "auto", allowed)
    )


@settings(max_examples=100, deadline=None)
@given(models, gpus, lengths, concurrency)
def test_a_fitting_result_is_consistent(model: str, gpu: str, length: int, c: int) -> None:
    r = _size(model, gpu, max_model_len=length, min_concurrency=c)
    if not r.fits:
        assert r.reason and r.condition_reason in ("InsufficientMemory", "ContextTooLong")
        return
    g = CATALOG.get(gpu)
    assert r.max_concurrent_sequences_at_max_len >= max(1, c)
    assert r.kv_pool_tokens >= length
    assert r.weight_bytes_per_gpu + r.overhead_bytes_per_gpu + r.kv_pool_bytes_per_gpu <= (
        0.92 * g.memory_bytes
    )
    assert r.tensor_parallel_size in (1, 2, 4, 8)
    assert 1 <= r.pipeline_parallel_size <= 4
    assert r.max_num_seqs >= 1
    assert r.decode_ms_per_token_at_batch1 > 0 and r.prefill_ms_per_1k_tokens > 0
