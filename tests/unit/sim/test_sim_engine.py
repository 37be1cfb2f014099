"""The pure engine model: queueing, KV limits, chunked prefill, faults, determinism."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from llmservice_operator.sim.engine import (
    Arrival,
    Engine,
    EngineFaults,
    RequestStats,
    simulate,
)
from llmservice_operator.sim.profile import EngineProfile, fallback_profile, linear_profile


def poisson(rate: float, duration: float, prompt: int, output: int, seed: int) -> list[Arrival]:
    rng = random.Random(seed)
    t, arrivals = 0.0, list[Arrival]()
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            return arrivals
        arrivals.append(Arrival(t, prompt, output))


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def ttfts(requests: list[RequestStats]) -> list[float]:
    return [r.ttft for r in requests if r.ttft is not None]


def small_profile(
    kv_tokens: int = 1600,
    max_model_len: int = 160,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 8192,
) -> EngineProfile:
    return linear_profile(
        kv_capacity_tokens=kv_tokens,
        max_model_len=max_model_len,
        decode_base_ms=5.0,
        decode_per_seq_ms=0.1,
        decode_per_context_token_ms=0.0,
        prefill_per_token_ms=0.05,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
    )


def test_below_capacity_the_queue_stays_empty_and_ttft_is_the_prefill() -> None:
    profile = fallback_profile()
    result = simulate(profile, poisson(rate=2.0, duration=60, prompt=512, output=128, seed=1))
    assert len(result.requests) > 80
    assert result.max_waiting() == 0
    # An idle engine answers with one prefill step; a busy one adds at most a decode step.
    alone = profile.prefill_ms(512) / 1000
    assert min(ttfts(result.requests)) == pytest.approx(alone)
    assert p99(ttfts(result.requests)) < 3 * alone + 0.05


def test_above_capacity_waiting_rises_and_ttft_grows() -> None:
    profile = fallback_profile()
    rows = []
    for rate in (5.0, 40.0, 80.0):
        result = simulate(profile, poisson(rate, duration=15, prompt=512, output=256, seed=2))
        rows.append((rate, result.max_waiting(), p99(ttfts(result.requests))))
    (_, wait_low, ttft_low), (_, wait_mid, ttft_mid), (_, wait_high, ttft_high) = rows
    assert wait_low == 0
    assert wait_high > wait_mid > 0
    assert ttft_high > ttft_mid > 10 * ttft_low


def test_tpot_degrades_with_batch_size() -> None:
    profile = fallback_profile()
    light = simulate(profile, poisson(1.0, 30, 256, 128, seed=3))
    heavy = simulate(profile, poisson(30.0, 30, 256, 128, seed=3))
    light_tpot = sorted(r.tpot for r in light.requests)[len(light.requests) // 2]
    heavy_tpot = sorted(r.tpot for r in heavy.requests)[len(heavy.requests) // 2]
    assert light_tpot == pytest.approx(profile.decode_step_ms(1, 256 + 64) / 1000, rel=0.2)
    assert heavy_tpot > 1.5 * light_tpot


def test_kv_capacity_limits_concurrency_as_the_profile_predicts() -> None:
    # 100 blocks of 16 tokens; a full-length sequence (160 tokens) takes 10 blocks.
    profile = small_profile(kv_tokens=1600, max_model_len=160, max_num_seqs=256)
    assert profile.full_length_sequences() == 10
    burst = [Arrival(0.0, 100, 60) for _ in range(40)]
    reserved = simulate(profile, burst, kv_policy="reserve")
    assert reserved.max_running() == profile.full_length_sequences()
    assert reserved.num_preemptions == 0
    assert len(reserved.requests) == 40

    # vLLM's policy admits on the prompt's blocks and preempts as sequences grow: more run at
    # first, some are recomputed, and the pool is never over-committed.
    preempting = simulate(profile, burst, kv_policy="preempt")
    assert preempting.num_preemptions > 0
    assert max(s.kv_usage for s in preempting.samples) <= 1.0
    assert profile.full_length_sequences() <= preempting.max_running() <= 100 // 7
    assert sorted(r.generation_tokens for r in preempting.requests) == [60] * 40
    assert any(r.num_preemptions for r in preempting.requests)


def test_max_num_seqs_limits_concurrency_when_kv_is_ample() -> None:
    profile = small_profile(kv_tokens=160_000, max_num_seqs=8)
    result = simulate(profile, [Arrival(0.0, 50, 20) for _ in range(30)])
    assert result.max_running() == 8
    assert result.max_waiting() == 22


def test_chunked_prefill_splits_a_long_prompt() -> None:
    profile = small_profile(kv_tokens=64_000, max_model_len=12_000, max_num_batched_tokens=2048)
    result = simulate(profile, [Arrival(0.0, 10_000, 2)])
    (request,) = result.requests
    assert result.steps == 5 + 1  # five prefill chunks, then one decode step
    chunks = [2048] * 4 + [10_000 - 4 * 2048]
    assert request.ttft == pytest.approx(sum(profile.prefill_ms(c) for c in chunks) / 1000)


def test_a_lone_request_decodes_one_token_per_step() -> None:
    profile = small_profile()
    engine = Engine(profile)
    engine.add_request("a", prompt_tokens=20, output_tokens=5, now=0.0)
    times, now = [], 0.0
    while engine.has_work():
        step = engine.step(now)
        assert step is not None
        times += [t.time for t in step.tokens]
        now = step.end
    assert len(times) == 5
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps == pytest.approx([profile.decode_step_ms(1, 0) / 1000] * 4)


def test_faults_extra_ttft_and_decode_slowdown() -> None:
    profile = small_profile()
    arrivals = [Arrival(float(i), 50, 30) for i in range(5)]
    base = simulate(profile, arrivals)
    slow = simulate(profile, arrivals, EngineFaults(extra_ttft_s=0.25, decode_slowdown=3.0))
    for plain, faulty in zip(base.requests, slow.requests, strict=True):
        assert faulty.ttft == pytest.approx(plain.ttft + 0.25)  # type: ignore[operator]
        assert faulty.tpot == pytest.approx(3.0 * plain.tpot)
        assert faulty.queue_time == pytest.approx(plain.queue_time)  # the delay is before it


def test_same_arrivals_same_results() -> None:
    profile = fallback_profile()
    first = simulate(profile, poisson(20.0, 20, 300, 100, seed=7))
    second = simulate(profile, poisson(20.0, 20, 300, 100, seed=7))
    other = simulate(profile, poisson(20.0, 20, 300, 100, seed=8))
    assert first.requests == second.requests
    assert first.requests != other.requests


def test_abort_frees_the_blocks() -> None:
    engine = Engine(small_profile())
    engine.add_request("a", 100, 50, now=0.0)
    step = engine.step(0.0)
    assert step is not None
    assert engine.kv_usage > 0
    stats = engine.abort("a", step.end)
    assert stats is not None
    assert stats.finish_reason == "abort"
    assert engine.kv_usage == 0
    assert not engine.has_work()
    assert engine.abort("a", step.end) is None


def test_requests_longer_than_the_context_are_refused() -> None:
    engine = Engine(small_profile(max_model_len=160))
    with pytest.raises(ValueError, match="maximum context length is 160"):
        engine.add_request("a", 150, 20, now=0.0)
    engine.add_request("b", 10, 10, now=0.0)
    with pytest.raises(ValueError, match="duplicate"):
        engine.add_request("b", 10, 10, now=0.0)


def test_a_kv_pool_smaller_than_one_full_sequence_is_refused() -> None:
    with pytest.raises(ValueError, match="fewer than max_model_len"):
        small_profile(kv_tokens=1000, max_model_len=4096)
