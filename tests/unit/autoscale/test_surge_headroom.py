"""The burst headroom that follows the measured volatility of arrivals (the default rule).

Unless a test says otherwise: ``max_num_seqs`` 64, bounds 1..20, the default rule
``R + c sqrt(R) + min(1, R)`` (at least ``R / 0.8``) with ``c`` between 2 and the floor of
``ADAPTIVE`` (``DEFAULT_MIN_BURST_HEADROOM``), a surge's headroom halving every
``SURGE_HALF_LIFE_SECONDS`` (3,600 s), and a full replica completing 2 requests/s.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from llmservice_operator.api.spec import ScalingSpec
from llmservice_operator.autoscale import (
    PolicyConfig,
    ReplicaSample,
    ScaleDecision,
    ScaleHistory,
    ScalingInputs,
    decide_replicas,
)
from llmservice_operator.autoscale.policy import (
    DEFAULT_MIN_BURST_HEADROOM,
    SURGE_HALF_LIFE_SECONDS,
    SURGE_LOOKBACK_SECONDS,
    surge_headroom,
    surge_size,
)

FIXED = PolicyConfig(min_replicas=1, max_replicas=20, max_num_seqs=64, target_queue_depth=8)
ADAPTIVE = replace(FIXED, min_burst_headroom=DEFAULT_MIN_BURST_HEADROOM)
MU = 2.0
HOUR = 3600.0


def test_the_defaults_the_docs_state() -> None:
    assert (DEFAULT_MIN_BURST_HEADROOM, SURGE_HALF_LIFE_SECONDS) == (1.0, 3600.0)
    assert SURGE_LOOKBACK_SECONDS == 180.0
    assert PolicyConfig.from_spec(ScalingSpec(), 64).min_burst_headroom == 1.0
    explicit = PolicyConfig.from_spec(ScalingSpec(target_utilization=0.7), 64)
    assert (explicit.burst_headroom, explicit.min_burst_headroom) == (0.0, None)


@pytest.mark.parametrize(
    ("arrivals", "now", "rate", "mu", "size"),
    [
        # rose 4 -> 12 req/s: 8 / 2 = 4 replicas from a load of 2: 4 / sqrt(2)
        (((0.0, 4.0), (60.0, 6.0)), 120.0, 12.0, MU, 4 / math.sqrt(2)),
        # from under one replica's load (0.5): the rise over sqrt(1), 2 replicas
        (((0.0, 1.0),), 60.0, 5.0, MU, 2.0),
        # a fall is no surge
        (((0.0, 8.0),), 60.0, 4.0, MU, 0.0),
        # 181 s ago is outside the lookback: the low is 10 (60 s ago), 2 / 2 = 1 / sqrt(5)
        (((0.0, 2.0), (121.0, 10.0)), 181.0, 12.0, MU, 1 / math.sqrt(5)),
    ],
)
def test_surge_size_is_the_rise_in_replicas_per_root_of_the_load_it_rose_from(
    arrivals: tuple[tuple[float, float], ...], now: float, rate: float, mu: float, size: float
) -> None:
    assert surge_size(arrivals, now, rate, mu) == pytest.approx(size)


@pytest.mark.parametrize(
    ("arrivals", "rate", "mu"),
    [
        ((), 4.0, MU),
        (((0.0, 2.0),), None, MU),
        (((0.0, 2.0),), 4.0, None),
        (((60.0, 2.0),), 4.0, MU),
    ],
)
def test_surge_size_is_unknown_without_a_rate_a_capacity_or_an_earlier_rate(
    arrivals: tuple[tuple[float, float], ...], rate: float | None, mu: float | None
) -> None:
    assert surge_size(arrivals, 60.0, rate, mu) is None


@pytest.mark.parametrize(
    ("surge", "now", "headroom"),
    [
        ((0.0, 2.0), 0.0, 2.0),
        ((0.0, 2.0), HOUR, 1.5),  # 1 + (2 - 1) / 2
        ((0.0, 2.0), 2 * HOUR, 1.25),  # 1 + 1 / 4
        ((0.0, 5.0), 0.0, 2.0),  # never more than burst_headroom
        ((0.0, 0.2), 0.0, 1.0),  # never less than the floor
        (None, 0.0, 2.0),  # nothing seen: the full headroom
    ],
)
def test_surge_headroom_decays_from_the_surge_to_the_floor(
    surge: tuple[float, float] | None, now: float, headroom: float
) -> None:
    assert surge_headroom(ADAPTIVE, surge, now) == pytest.approx(headroom)


def test_a_fixed_headroom_ignores_surges() -> None:
    assert surge_headroom(FIXED, (0.0, 0.1), 10 * HOUR) == 2.0


def _evaluate(
    config: PolicyConfig, history: ScaleHistory, now: float, rate: float, current: int
) -> ScaleDecision:
    """One evaluation of ``current`` replicas each running 10 (nothing waiting)."""
    return decide_replicas(
        config,
        ScalingInputs(
            now=now,
            ready=current,
            loading=0,
            current=current,
            samples=[ReplicaSample(waiting=0, running=10)] * current,
            history=history,
            arrival_rate=rate,
        ),
    )


def test_a_smooth_load_gives_its_headroom_back_and_a_surge_takes_it_again() -> None:
    """16 req/s on replicas of 2 req/s is R = 8. The fixed rule keeps 8 + 2 sqrt(8) + 1 =
    14.66, i.e. 15 replicas, however smooth the load (a scale-down plans 15% under the
    targets: 8 / 0.85 + 2 sqrt(8) + 1 = 16.07 > 15). The adaptive rule starts there (the
    first arrivals are a surge of the full size); after 3 hours of a flat rate its headroom
    is 1 + (2 - 1) / 2^3 = 1.125 sqrt(R), and it scales down to 8 / 0.85 + 1.125 sqrt(8) + 1
    = 13.59, i.e. 14. The rate doubling within a minute (a surge of 16 / 2 / sqrt(8) = 2.83,
    capped at 2) brings back R + 2 sqrt(R) + 1 at once: 16 + 8 + 1 = 25, held at
    maxReplicas 20 (as the fixed rule is)."""
    history = fixed_history = ScaleHistory(throughput=(0.0, MU))
    current = fixed_current = 15
    for step in range(0, int(3 * HOUR) + 1, 15):
        adaptive = _evaluate(ADAPTIVE, history, float(step), 16.0, current)
        fixed = _evaluate(FIXED, fixed_history, float(step), 16.0, fixed_current)
        current, history = adaptive.desired_replicas, adaptive.history
        fixed_current, fixed_history = fixed.desired_replicas, fixed.history
        if step == 0:
            assert adaptive.recommendation == fixed.recommendation == 15
            assert history.surge == (0.0, 2.0)
    assert fixed_current == 15
    assert current == 14
    assert history.surge == (0.0, 2.0)  # no rise since the start
    assert history.arrivals[0][0] <= 3 * HOUR - SURGE_LOOKBACK_SECONDS < history.arrivals[1][0]
    surge_at = 3 * HOUR + 60
    surged = _evaluate(ADAPTIVE, history, surge_at, 32.0, current)
    assert surged.history.surge == (surge_at, 2.0)
    assert surged.recommendation == 20
    assert _evaluate(FIXED, fixed_history, surge_at, 32.0, fixed_current).recommendation == 20
    assert "more for burst headroom" in surged.reason


def test_a_rise_smaller_than_the_remembered_headroom_leaves_the_surge_as_it_is() -> None:
    """After 1 hour the remembered surge calls for 1.5; a rise of 1 sqrt(R) (8 -> 10 req/s
    from R = 4: 1 replica / sqrt(4) = 0.5) changes nothing; one of 2.5 sqrt(R) (8 -> 18
    req/s: 5 / 2 = 2.5) is remembered at the cap, 2."""
    start = ScaleHistory(throughput=(0.0, MU), surge=(0.0, 2.0), arrivals=((HOUR - 60, 8.0),))
    assert _evaluate(ADAPTIVE, start, HOUR, 10.0, 8).history.surge == (0.0, 2.0)
    assert _evaluate(ADAPTIVE, start, HOUR, 18.0, 8).history.surge == (HOUR, 2.0)
    smaller = replace(start, surge=(0.0, 1.2))  # calls for 1 + 0.2 / 2 = 1.1 after an hour
    # 3.6 / 2 = 1.8 replicas / sqrt(4) = 0.9: none
    assert _evaluate(ADAPTIVE, smaller, HOUR, 11.6, 8).history.surge == (0.0, 1.2)
    # 5 / 2 = 2.5 replicas / 2 = 1.25
    assert _evaluate(ADAPTIVE, smaller, HOUR, 13.0, 8).history.surge == (HOUR, 1.25)


def test_the_fixed_rule_keeps_no_arrival_rates() -> None:
    history = _evaluate(FIXED, ScaleHistory(throughput=(0.0, MU)), 0.0, 16.0, 15).history
    assert (history.arrivals, history.surge) == ((), None)


def test_a_spare_that_follows_the_surge_shrinks_in_proportion() -> None:
    """Two half-lives after a surge of 2, with the floor at 0, ``c`` is 0.5: 9 req/s is R =
    4.5, whose burst headroom is 0.5 sqrt(4.5) = 1.06. The whole spare makes it 4.5 + 1.06 +
    1 = 6.56, i.e. 7 replicas; the spare shrunk to 0.5 / 2 of itself 4.5 + 1.06 + 0.25 = 5.81,
    i.e. 6."""
    history = ScaleHistory(throughput=(0.0, MU), surge=(0.0, 2.0))
    floor_0 = replace(FIXED, min_burst_headroom=0.0)
    whole = _evaluate(floor_0, history, 2 * HOUR, 9.0, 5)
    follows = _evaluate(replace(floor_0, spare_follows_surge=True), history, 2 * HOUR, 9.0, 5)
    assert (whole.recommendation, follows.recommendation) == (7, 6)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"min_burst_headroom": 2.5}, "min_burst_headroom must be within 0..burst_headroom"),
        ({"min_burst_headroom": -0.1}, "min_burst_headroom must be within"),
        ({"burst_headroom": 0.0, "min_burst_headroom": 1.0}, "min_burst_headroom must be within"),
        ({"surge_half_life_seconds": 0.0}, "surge_half_life_seconds must be > 0"),
    ],
)
def test_a_headroom_floor_outside_the_headroom_is_refused(
    changes: dict[str, float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        replace(ADAPTIVE, **changes)  # type: ignore[arg-type]
