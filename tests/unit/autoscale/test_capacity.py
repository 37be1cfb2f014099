"""A full replica's capacity in tokens (autoscale.capacity) and the sizing's prior of it, and
how the policy plans on them: worked examples with the arithmetic spelled out, and a property
of the prior."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmservice_operator import sizing
from llmservice_operator.api.status import AutoscalingStatus
from llmservice_operator.autoscale import (
    DEFAULT_MIX,
    CapacityPrior,
    LearnedCapacity,
    PolicyConfig,
    ReplicaSample,
    RequestMix,
    ScaleHistory,
    ScalingInputs,
    TokenCapacity,
    TokenRates,
    batch_that_fits,
    decide_replicas,
    estimate_load,
    history_from_status,
    history_to_status,
    measured_mix,
    rescaled_capacity,
    roofline_capacity,
)


def llama_70b_fp8_on_2_h100() -> tuple[sizing.SizingResult, sizing.PerformanceModel]:
    arch = sizing.parse_hf_config(sizing.load_builtin_model("meta-llama/Llama-3.1-70B-Instruct"))
    request = sizing.SizingRequest(
        architecture=arch, max_model_len=16384, min_concurrency=8, quantization="fp8"
    )
    gpu = sizing.builtin_catalog().get("H100-80GB")
    result = sizing.size_for_gpu(request, gpu)
    return result, sizing.performance_for(request, gpu, result.tensor_parallel_size)


def test_the_prior_of_llama_70b_fp8_on_two_h100() -> None:
    """The benchmark's replica, worked by hand from sizing.performance's roofline.

    The sizing: TP=2, max_num_seqs 114, a KV pool of 235,264 tokens of 327,680 bytes (bf16 KV:
    80 layers x 8 KV heads x 128 x 2 (K and V) x 2 bytes); 70,555,025,408 weight bytes read per
    decode step, 68,451,041,280 matmul parameters plus a 1,050,673,152-parameter lm_head;
    3.35 TB/s and 989 TFLOP/s per H100 at 70% and 50% efficiency, times 2 GPUs.

    The default mix (1020 prompt, 129 output tokens): a sequence holds 1020 + 129 / 2 = 1084.5
    KV tokens on average, so the pool fits 235,264 // 1084.5 = 216 of them: the batch that fits
    is max_num_seqs, 114.

    Decode at 114 x 1084 = 123,576 KV tokens: 70,555,025,408 + 123,576 x 327,680 = 111.05 GB
    over 3.35e12 x 2 x 0.7 = 4.69 TB/s is 23.68 ms (the compute bound is 16.35 ms); D = 114 /
    23.68 ms = 4,815 tokens/s.

    Prefill of 1020 tokens: 2 x 1020 x 68,451,041,280 + 2 x 1,050,673,152 + (1020 x 1021 / 2)
    x 2,621,440 = 1.4101e14 FLOPs over 989e12 x 2 x 0.5 = 989 TFLOP/s is 142.58 ms (memory
    bound 15.1 ms); P = 1020 / 142.58 ms = 7,154 tokens/s.

    Discounted by 0.8: 5,723 prefill and 3,852 decode tokens/s; a request of the default mix
    takes 1020 / 5,723 + 129 / 3,852 = 0.2117 s of a replica, 4.72 requests/s when full.
    """
    result, perf = llama_70b_fp8_on_2_h100()
    assert (result.tensor_parallel_size, result.max_num_seqs) == (2, 114)
    assert (result.kv_pool_tokens, perf.kv_cache_bytes_per_token) == (235_264, 327_680)
    assert batch_that_fits(result.max_num_seqs, result.kv_pool_tokens, DEFAULT_MIX) == 114
    assert perf.decode_step_ms(114, 123_576) == pytest.approx(23.68, abs=0.01)
    assert perf.prefill_ms(1020) == pytest.approx(142.58, abs=0.01)

    prior = CapacityPrior(perf, result.max_num_seqs, result.kv_pool_tokens)
    roofline = prior.roofline()
    assert roofline.decode_tokens_per_second == pytest.approx(114 / 0.02368, rel=1e-3)
    assert roofline.prefill_tokens_per_second == pytest.approx(1020 / 0.14258, rel=1e-3)
    at = prior.at()
    assert at.prefill_tokens_per_second == pytest.approx(5723, abs=1)
    assert at.decode_tokens_per_second == pytest.approx(3852, abs=1)
    assert at.seconds_per_request(DEFAULT_MIX) == pytest.approx(0.2117, abs=1e-4)
    assert at.requests_per_second(DEFAULT_MIX) == pytest.approx(4.72, abs=0.01)


def test_the_local_clusters_time_scale_multiplies_the_prior() -> None:
    """The simulator at 10x the wall clock completes 10x more per wall second."""
    result, perf = llama_70b_fp8_on_2_h100()
    real = CapacityPrior(perf, result.max_num_seqs, result.kv_pool_tokens).at()
    fast = CapacityPrior(perf, result.max_num_seqs, result.kv_pool_tokens, time_scale=10).at()
    assert fast.prefill_tokens_per_second == pytest.approx(10 * real.prefill_tokens_per_second)
    assert fast.decode_tokens_per_second == pytest.approx(10 * real.decode_tokens_per_second)


@dataclass(frozen=True)
class Steps:
    """A replica whose decode steps take 10 ms plus 0.1 ms per 1000 KV tokens in the batch, and
    whose prefill takes 0.2 ms per prompt token: easy numbers."""

    def decode_step_ms(self, batch: int, context_tokens: int) -> float:
        return 10.0 + 0.1 * context_tokens / 1000 if batch else 0.0

    def prefill_ms(self, prompt_tokens: int) -> float:
        return 0.2 * prompt_tokens


def test_the_batch_that_fits_is_the_kv_pool_when_it_fills_first() -> None:
    """Prompts of 3000 and outputs of 400 hold 3200 tokens each on average: a pool of 64,000
    fits 20 of them, fewer than the 64 slots; KV-bound, the decode rate follows."""
    mix = RequestMix(3000, 400)
    assert batch_that_fits(64, 64_000, mix) == 20
    assert batch_that_fits(16, 64_000, mix) == 16  # the slots run out first
    capacity = roofline_capacity(Steps(), max_num_seqs=64, kv_pool_tokens=64_000, mix=mix)
    # decode: 20 sequences x 3200 = 64,000 KV tokens: 10 + 0.1 x 64 = 16.4 ms -> 20 / 16.4 ms
    assert capacity.decode_tokens_per_second == pytest.approx(20 / 0.0164)
    # prefill: 3000 x 0.2 ms = 600 ms -> 5,000 tokens/s
    assert capacity.prefill_tokens_per_second == pytest.approx(5000)


def test_busy_share_and_requests_per_second() -> None:
    """P 5,000 and D 1,000 tokens/s: 2,000 prompt and 300 output tokens/s keep a replica
    2000 / 5000 + 300 / 1000 = 0.7 busy; a request of 1000 in, 100 out takes 0.3 s of it:
    3.33 requests/s when full."""
    capacity = TokenCapacity(5000, 1000)
    assert capacity.busy(2000, 300) == pytest.approx(0.7)
    assert capacity.seconds_per_request(RequestMix(1000, 100)) == pytest.approx(0.3)
    assert capacity.requests_per_second(RequestMix(1000, 100)) == pytest.approx(1 / 0.3)


def test_the_mix_is_the_token_rates_over_the_completions() -> None:
    """Two replicas: 3,000 + 1,000 prompt and 300 + 100 output tokens/s for 2 + 2 completions/s:
    1000 in and 100 out per request."""
    rates = [TokenRates(3000, 300, 2), TokenRates(1000, 100, 2)]
    assert measured_mix(rates) == RequestMix(1000, 100)
    assert measured_mix([TokenRates(0, 0, 0)]) is None  # nothing completed: no mix


def test_full_replicas_rescale_the_reference_by_how_busy_it_reads_them() -> None:
    """Reference P 5,000, D 1,000. Three full replicas read at busy 1.2, 1.5 and 0.9 (e.g.
    4,000 / 5,000 + 700 / 1,000 = 1.5): the median, 1.2, says a full replica does 20% more
    than the reference: 6,000 and 1,200 tokens/s."""
    reference = TokenCapacity(5000, 1000)
    full = [TokenRates(3000, 600, 3), TokenRates(4000, 700, 4), TokenRates(2500, 400, 2)]
    assert [
        reference.busy(r.prompt_tokens_per_second, r.generation_tokens_per_second) for r in full
    ] == pytest.approx([1.2, 1.5, 0.9])
    learned = rescaled_capacity(reference, full)
    assert learned is not None
    assert learned.prefill_tokens_per_second == pytest.approx(6000)
    assert learned.decode_tokens_per_second == pytest.approx(1200)
    assert rescaled_capacity(reference, [TokenRates(0, 0, 0)]) is None


# -- the policy on tokens ---------------------------------------------------------------------

#: Steps() with 64 slots and 64,000 KV tokens, undiscounted for round numbers: for the mix of
#: 1000 in / 100 out, P = 1000 / 200 ms = 5,000 tokens/s; 64 sequences of 1050 tokens (67,200:
#: more than the pool) -> the pool fits 60: D = 60 / (10 + 0.1 x 63) ms = 60 / 16.3 ms.
PRIOR = CapacityPrior(Steps(), max_num_seqs=64, kv_pool_tokens=64_000, discount=1.0)
MIX = RequestMix(1000, 100)
CONFIG = PolicyConfig(
    min_replicas=1,
    max_replicas=40,
    max_num_seqs=64,
    target_queue_depth=8,
    burst_headroom=0.0,
    gpu_type="H100-80GB",
    capacity_prior=PRIOR,
)


def test_the_prior_of_each_mix_is_its_own_when_mixes_alternate() -> None:
    """The prior keeps its last answer: asked for another mix, it answers for that one."""
    prior = CapacityPrior(Steps(), max_num_seqs=64, kv_pool_tokens=64_000, discount=1.0)
    other = RequestMix(200, 400)
    answers = [prior.at(MIX), prior.at(other), prior.at(MIX), prior.at(MIX), prior.at(other)]
    fresh = [replace(PRIOR).at(m) for m in (MIX, other, MIX, MIX, other)]
    assert answers == fresh
    assert answers[0].prefill_tokens_per_second == pytest.approx(5000)
    assert answers[0] != answers[1]


def sample(completions: float, waiting: float = 0.0, **kw: float) -> ReplicaSample:
    """A replica completing ``completions`` requests/s of MIX."""
    return ReplicaSample(
        waiting=waiting,
        running=20,
        kv_cache_usage=0.3,
        completion_rate=completions,
        prompt_token_rate=completions * MIX.prompt_tokens,
        generation_token_rate=completions * MIX.output_tokens,
        ready_seconds=kw.get("ready_seconds", 600.0),
    )


def test_before_anything_is_learned_the_policy_plans_on_the_prior() -> None:
    """The prior for MIX: 1000 / 5000 + 100 / (60 / 16.3 ms) = 0.2 + 0.02717 = 0.22717 s per
    request, 4.402 requests/s when full. 30 req/s arriving on 3 replicas: R = 30 / 4.402 =
    6.815, at 80%: ceil(8.52) = 9 replicas (the queue and KV rules ask for fewer)."""
    inputs = ScalingInputs(
        now=1000.0, ready=3, loading=0, current=3, samples=[sample(3.0)] * 3, arrival_rate=30.0
    )
    decision = decide_replicas(CONFIG, inputs)
    load = decision.load
    assert load is not None
    assert load.mix == MIX
    assert load.throughput_source == "prior"
    assert load.throughput == pytest.approx(1 / (0.2 + 100 * 0.0163 / 60), rel=1e-9)
    assert load.throughput == pytest.approx(4.402, abs=1e-3)
    assert decision.desired_replicas == 7  # rate-limited: at most 4 more per minute
    assert load.n_fit == 9
    assert "the sizing's estimate" in decision.reason
    # The status shows the prior for the GPU, until something is learned for it.
    status = decision.to_status()
    assert [(c.gpu_type, c.source) for c in status.capacity] == [("H100-80GB", "prior")]
    assert status.capacity[0].prefill_tokens_per_second == 5000.0


def test_without_a_prior_a_new_service_knows_nothing() -> None:
    """capacityPriorScale 0 (no prior): no throughput, no plan from the rate, no scale-down
    before the first saturation (the policy of before)."""
    inputs = ScalingInputs(
        now=1000.0, ready=3, loading=0, current=3, samples=[sample(1.0)] * 3, arrival_rate=3.0
    )
    load = decide_replicas(replace(CONFIG, capacity_prior=None), inputs).load
    assert load is not None
    assert load.throughput is None and load.n_rate is None and not load.capacity_known


def saturated(history: ScaleHistory, now: float, completions: float) -> ScalingInputs:
    """4 replicas queueing 20 each (beyond the target of 8) a minute after the saturation
    began, completing ``completions`` each."""
    return ScalingInputs(
        now=now,
        ready=4,
        loading=0,
        current=4,
        samples=[sample(completions, waiting=20)] * 4,
        history=replace(history, saturated_since=now - 60.0),
        arrival_rate=4 * completions,
    )


def test_the_first_saturation_replaces_the_prior_then_learning_is_smoothed() -> None:
    """Full replicas completing 5.5 requests/s of MIX: 5,500 prompt and 550 output tokens/s,
    busy 5500 / 5000 + 550 / 3681 = 1.1 + 0.1494 = 1.2494 of the prior: the learned capacity
    is the prior x 1.2494 (6,247 prefill tokens/s), not a blend with it. A second saturation
    at 4.4 requests/s reads busy 4400 / 6247 + 440 / 4599 = 0.80 of that: smoothed 20%, the
    capacity becomes (0.8 + 0.2 x 0.80) = 0.96 of it."""
    first = decide_replicas(CONFIG, saturated(ScaleHistory(), 1000.0, 5.5))
    learned = first.history.capacity_for("H100-80GB")
    assert learned is not None and learned.time == 1000.0
    prior = PRIOR.at(MIX)
    busy = prior.busy(5500, 550)
    assert busy == pytest.approx(1.2494, abs=1e-4)
    assert learned.capacity.prefill_tokens_per_second == pytest.approx(5000 * busy)
    assert learned.capacity.decode_tokens_per_second == pytest.approx(
        prior.decode_tokens_per_second * busy
    )
    # Learned now: the status shows the learned capacity and no prior for this GPU.
    assert [(c.gpu_type, c.source) for c in first.to_status().capacity] == [
        ("H100-80GB", "learned")
    ]

    second = decide_replicas(CONFIG, saturated(first.history, 2000.0, 4.4))
    relearned = second.history.capacity_for("H100-80GB")
    assert relearned is not None and relearned.time == 2000.0
    again = learned.capacity.busy(4400, 440)
    assert again == pytest.approx(0.80, abs=0.01)
    factor = 0.8 + 0.2 * again
    assert relearned.capacity.prefill_tokens_per_second == pytest.approx(
        learned.capacity.prefill_tokens_per_second * factor
    )


def test_a_change_of_mix_is_understood_at_once() -> None:
    """Learned: P 5,000, D 1,000 tokens/s. The same 10 req/s, first of 1000 in / 100 out
    (1000 / 5000 + 100 / 1000 = 0.3 s each, R = 3), then of 2000 in / 20 out (0.4 + 0.02 =
    0.42 s each, R = 4.2): the plan follows from the evaluation the replicas report the new
    mix in, no saturation needed."""
    history = ScaleHistory(
        capacities=(LearnedCapacity("H100-80GB", 0.0, TokenCapacity(5000, 1000)),),
        throughput=(0.0, 3.33),  # learned in requests/s for the old mix: the tokens win
    )

    def plan(mix: RequestMix) -> float | None:
        s = replace(
            sample(2.5),
            prompt_token_rate=2.5 * mix.prompt_tokens,
            generation_token_rate=2.5 * mix.output_tokens,
        )
        inputs = ScalingInputs(
            now=1000.0,
            ready=4,
            loading=0,
            current=4,
            samples=[s] * 4,
            history=history,
            arrival_rate=10.0,
        )
        load = decide_replicas(CONFIG, inputs).load
        assert load is not None and load.throughput_source == "learned"
        return load.throughput

    assert plan(RequestMix(1000, 100)) == pytest.approx(1 / 0.3)
    assert plan(RequestMix(2000, 20)) == pytest.approx(1 / 0.42)


def test_learned_capacities_are_kept_per_gpu_type() -> None:
    """Learned on an L4 says nothing of an H100: the H100 service plans on its prior, and the
    status keeps both (the L4 for a move back)."""
    history = ScaleHistory(capacities=(LearnedCapacity("L4", 5.0, TokenCapacity(900, 300)),))
    inputs = ScalingInputs(
        now=1000.0,
        ready=2,
        loading=0,
        current=2,
        samples=[sample(1.0)] * 2,
        history=history,
        arrival_rate=2.0,
    )
    decision = decide_replicas(CONFIG, inputs)
    assert decision.load is not None and decision.load.throughput_source == "prior"
    status = decision.to_status()
    assert [(c.gpu_type, c.source) for c in status.capacity] == [
        ("L4", "learned"),
        ("H100-80GB", "prior"),
    ]
    # Read back: the learned entry is history, the prior is not (it is recomputed).
    back = history_from_status(status)
    assert back.capacities == (LearnedCapacity("L4", 5.0, TokenCapacity(900, 300)),)


def test_capacity_in_the_status_round_trips() -> None:
    status = AutoscalingStatus.model_validate(
        {
            "desiredReplicas": 3,
            "capacity": [
                {
                    "gpuType": "H100-80GB",
                    "prefillTokensPerSecond": 6737.5,
                    "decodeTokensPerSecond": 4534.2,
                    "source": "learned",
                    "learnedTime": "2024-06-10T06:13:20.500Z",
                }
            ],
        }
    )
    history = history_from_status(status)
    (learned,) = history.capacities
    assert learned.capacity == TokenCapacity(6737.5, 4534.2)
    assert learned.time == 1718000000.5
    rewritten = replace(history, recommendations=((1718000000.5, 3),))
    assert history_to_status(rewritten, 3, "").capacity == status.capacity


# -- the property -----------------------------------------------------------------------------

_, LLAMA_PERF = llama_70b_fp8_on_2_h100()


@settings(max_examples=150, deadline=None)
@given(
    arrival=st.floats(0.0, 200.0),
    prompt=st.floats(1.0, 16000.0),
    output=st.floats(1.0, 4000.0),
    replicas=st.integers(1, 20),
    discount=st.floats(0.05, 1.0),
    scale=st.floats(0.1, 100.0),
    headroom=st.sampled_from([0.0, 1.0, 2.0]),
    utilization=st.floats(0.3, 1.0),
)
def test_the_prior_never_plans_fewer_replicas_than_arrivals_over_the_roofline(
    arrival: float,
    prompt: float,
    output: float,
    replicas: int,
    discount: float,
    scale: float,
    headroom: float,
    utilization: float,
) -> None:
    """Whatever the mix, the load, the discount, the time scale and the headroom rule: before
    anything is learned, the replicas planned for the rate are at least the arrival rate over
    what the roofline says a full replica completes for the mix the replicas report."""
    prior = CapacityPrior(
        LLAMA_PERF, max_num_seqs=114, kv_pool_tokens=235_264, time_scale=scale, discount=discount
    )
    config = replace(
        CONFIG,
        max_replicas=1000,
        capacity_prior=prior,
        burst_headroom=headroom,
        target_utilization=utilization,
    )
    mix = RequestMix(prompt, output)
    per = arrival / replicas
    s = ReplicaSample(
        waiting=0,
        running=1,
        kv_cache_usage=0.1,
        completion_rate=per,
        prompt_token_rate=per * prompt,
        generation_token_rate=per * output,
    )
    load = estimate_load(config, [s] * replicas, replicas, arrival_rate=arrival)
    seen = load.mix or DEFAULT_MIX
    if per > 0:  # the replicas report the mix
        assert seen.prompt_tokens == pytest.approx(mix.prompt_tokens)
        assert seen.output_tokens == pytest.approx(mix.output_tokens)
    roofline = prior.roofline(seen).requests_per_second(seen)
    assert load.n_rate is not None
    assert load.n_rate >= math.ceil(arrival / roofline - 1e-9)
    assert load.n_fit >= load.n_rate
