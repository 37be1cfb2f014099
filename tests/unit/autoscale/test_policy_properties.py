"""Properties of the policy over generated inputs: bounds, missing data, flapping, loading."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from llmservice_operator.api.spec import ScalingBehavior
from llmservice_operator.autoscale import (
    PolicyConfig,
    ReplicaSample,
    ScaleHistory,
    ScalingInputs,
    decide_replicas,
    planned_replicas,
)

FAST = settings(max_examples=150, deadline=None)


@st.composite
def configs(draw: st.DrawFn) -> PolicyConfig:
    lo = draw(st.integers(0, 5))
    hi = draw(st.integers(max(lo, 1), 20))
    return PolicyConfig(
        min_replicas=lo,
        max_replicas=hi,
        max_num_seqs=draw(st.sampled_from([8, 64, 114, 256])),
        target_queue_depth=draw(st.sampled_from([1.0, 4.0, 14.0, 32.0])),
        kv_cache_usage_ceiling=draw(st.sampled_from([0.5, 0.8, 0.9, 1.0])),
        target_utilization=draw(st.sampled_from([0.5, 0.8, 1.0])),
        burst_headroom=draw(st.sampled_from([0.0, 2.0, 3.0])),
        scale_up=ScalingBehavior(
            stabilization_window_seconds=draw(st.sampled_from([0, 30])),
            max_replicas_per_period=draw(st.integers(1, 8)),
            period_seconds=draw(st.sampled_from([15, 60])),
        ),
        scale_down=ScalingBehavior(
            stabilization_window_seconds=draw(st.sampled_from([0, 60, 300])),
            max_replicas_per_period=draw(st.integers(1, 4)),
            period_seconds=draw(st.sampled_from([15, 60])),
        ),
    )


samples = st.builds(
    ReplicaSample,
    waiting=st.integers(0, 500).map(float),
    running=st.integers(0, 256).map(float),
    kv_cache_usage=st.one_of(st.none(), st.floats(0.0, 1.0)),
    completion_rate=st.one_of(st.none(), st.floats(0.0, 20.0)),
)


@st.composite
def histories(draw: st.DrawFn, now: float = 10_000.0) -> ScaleHistory:
    recs = draw(st.lists(st.tuples(st.integers(0, 600), st.integers(0, 25)), max_size=30))
    events = draw(
        st.lists(st.tuples(st.integers(0, 120), st.integers(-5, 5).filter(bool)), max_size=6)
    )
    mu = draw(st.one_of(st.none(), st.floats(0.1, 20.0)))
    return ScaleHistory(
        recommendations=tuple(sorted((now - age, r) for age, r in recs)),
        events=tuple(sorted((now - age, c) for age, c in events)),
        throughput=None if mu is None else (now - 1000.0, mu),
    )


@st.composite
def scaling_inputs(draw: st.DrawFn) -> ScalingInputs:
    ready = draw(st.integers(0, 20))
    loading = draw(st.integers(0, 5))
    current = ready + loading + draw(st.integers(0, 3))
    n = draw(st.integers(0, ready))
    return ScalingInputs(
        now=10_000.0,
        ready=ready,
        loading=loading,
        current=current,
        samples=draw(st.one_of(st.none(), st.lists(samples, min_size=n, max_size=n))),
        history=draw(histories()),
        gateway_waiting=draw(st.integers(0, 50)),
        arrival_rate=draw(st.one_of(st.none(), st.floats(0.0, 100.0))),
    )


@FAST
@given(configs(), scaling_inputs())
def test_never_outside_min_and_max(config: PolicyConfig, inputs: ScalingInputs) -> None:
    desired = decide_replicas(config, inputs).desired_replicas
    assert config.min_replicas <= desired <= config.max_replicas


def _clamped(config: PolicyConfig, n: int) -> int:
    return min(max(n, config.min_replicas), config.max_replicas)


@FAST
@given(configs(), scaling_inputs())
def test_never_scales_down_on_missing_data(config: PolicyConfig, inputs: ScalingInputs) -> None:
    """No samples, or samples from only some ready replicas: never below the current count
    (save for bounds that moved below it)."""
    if inputs.ready == 0:
        inputs = replace(inputs, ready=2, current=max(inputs.current, 2))
    for missing in (None, [], list(inputs.samples or [])[: inputs.ready - 1]):
        decision = decide_replicas(config, replace(inputs, samples=missing))
        assert decision.desired_replicas >= _clamped(config, inputs.current)
        assert decision.degraded


@FAST
@given(configs(), scaling_inputs())
def test_never_scales_down_or_wakes_without_the_arrival_rate(
    config: PolicyConfig, inputs: ScalingInputs
) -> None:
    """An arrivalRateQuery that did not answer: never below the current count, whatever the
    replicas say; at zero with nothing queued upstream, it stays at zero (save for bounds)."""
    missing = replace(inputs, arrival_rate=None, arrival_rate_missing=True)
    decision = decide_replicas(config, missing)
    assert decision.desired_replicas >= _clamped(config, inputs.current)
    assert decision.degraded
    asleep = replace(missing, ready=0, loading=0, current=0, samples=[], gateway_waiting=0)
    assert decide_replicas(config, asleep).desired_replicas == config.min_replicas


@FAST
@given(configs(), scaling_inputs(), st.integers(1, 6))
def test_loading_replicas_are_not_counted_twice(
    config: PolicyConfig, inputs: ScalingInputs, loading: int
) -> None:
    """With L replicas loading, the answer is the answer without them, or the L already there:
    never both added up."""
    config = replace(config, scale_up=ScalingBehavior(max_replicas_per_period=1000))
    ready = max(inputs.ready, 1)
    samples = list(inputs.samples or [ReplicaSample(waiting=0, running=0)])
    samples = (samples * ready)[:ready]
    base = replace(inputs, ready=ready, loading=0, current=ready, samples=samples)
    without = decide_replicas(config, base).desired_replicas
    with_loading = decide_replicas(
        config, replace(base, loading=loading, current=ready + loading)
    ).desired_replicas
    assert with_loading <= max(without, _clamped(config, ready + loading))
    if without > ready + loading:
        assert with_loading == without


def _threshold(config: PolicyConfig, k: int) -> float:
    """The load R (in full replicas) at which the rate rule asks for exactly k replicas:
    ``planned_replicas(R) = k`` (bisection; the left side grows with R)."""
    lo, hi = 0.0, float(k)
    for _ in range(100):
        mid = (lo + hi) / 2
        if planned_replicas(config, mid) < k:
            lo = mid
        else:
            hi = mid
    return lo


def _steady_run(
    config: PolicyConfig, rate: float, mu: float, seed: int, start: int | None = None
) -> list[int]:
    """Evaluations every 15 s for an hour of a steady arrival rate with +-3% noise; the fleet
    follows the decisions at once (no loading delay: the harshest case for flapping)."""
    rng = random.Random(seed)
    current = start or max(1, math.ceil(rate / (0.8 * mu)))  # at the utilization target
    history = ScaleHistory(throughput=(0.0, mu))
    out = []
    for i in range(240):
        noisy = rate * (1 + rng.uniform(-0.03, 0.03))
        per_replica = noisy / current
        busy = min(1.0, per_replica / mu)
        sample = ReplicaSample(
            waiting=0.0 if busy < 1 else 20.0,
            running=round(40 * busy),
            kv_cache_usage=0.4 * busy,
            completion_rate=min(per_replica, mu),
        )
        decision = decide_replicas(
            config,
            ScalingInputs(
                now=15.0 * i,
                ready=current,
                loading=0,
                current=current,
                samples=[sample] * current,
                history=history,
                arrival_rate=noisy,
            ),
        )
        history = decision.history
        current = decision.desired_replicas
        out.append(current)
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.floats(2.0, 60.0),
    st.floats(1.0, 8.0),
    st.integers(0, 10_000),
    st.sampled_from([0.0, 2.0]),
)
def test_no_flapping_on_a_steady_load_near_a_threshold(
    rate: float, mu: float, seed: int, headroom: float
) -> None:
    """Put the rate right at a scaling threshold (k replicas at 80% of their throughput, or
    the load plus the burst headroom and the spare when there is one; +-3% noise), starting from those k: the count may
    settle (ratchet up to the noise's peak), then never reverses."""
    config = PolicyConfig(
        min_replicas=1,
        max_replicas=100,
        max_num_seqs=64,
        target_queue_depth=8,
        burst_headroom=headroom,
    )
    k = max(1, round(planned_replicas(config, rate / mu)))
    at_threshold = _threshold(config, k) * mu
    counts = _steady_run(config, at_threshold, mu, seed, start=k)
    changes = [b - a for a, b in itertools.pairwise(counts) if b != a]
    reversals = sum(1 for a, b in itertools.pairwise(changes) if (a > 0) != (b > 0))
    assert reversals == 0, counts
    assert len(changes) <= 4, counts


@FAST
@given(configs(), scaling_inputs())
def test_decisions_are_deterministic_and_history_is_well_formed(
    config: PolicyConfig, inputs: ScalingInputs
) -> None:
    first = decide_replicas(config, inputs)
    assert decide_replicas(config, inputs) == first
    times = [t for t, _ in first.history.recommendations]
    assert times == sorted(times)
    assert len(first.to_status().recommendations) <= 120
