"""Worked examples of the autoscaling policy: each row spells out the arithmetic.

Unless a row says otherwise: ``max_num_seqs`` 64 (so the default target queue depth is
64 // 8 = 8), KV ceiling 0.9, target utilization 0.8 of a full replica's throughput with no
burst headroom (``CONFIG``: what an explicit ``targetUtilization: 0.8`` configures), bounds
1..10, scale-up without delay at most 4 per 60 s, scale-down after 300 s at most 1 per 60 s,
and a scale-down plans 15% under the targets (0.8 x 0.85 = 0.68 of the throughput, 0.9 x
0.85 = 0.765 of slots and KV). ``DEFAULT`` is the policy's default (``targetUtilization``
unset): for a load of ``R`` full replicas the larger of ``R / 0.8`` and ``R`` plus the burst
headroom ``min(2 R, 2 sqrt(R))`` plus a spare replica ``min(1, R)`` (N+1).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import pytest

from llmservice_operator.api.spec import ScalingBehavior, ScalingSpec
from llmservice_operator.autoscale import (
    PolicyConfig,
    ReplicaSample,
    ScaleHistory,
    ScalingInputs,
    burst_headroom,
    decide_replicas,
    default_target_queue_depth,
    estimate_load,
    planned_replicas,
    resolve_target_queue_depth,
)

DEFAULT = PolicyConfig(min_replicas=1, max_replicas=10, max_num_seqs=64, target_queue_depth=8)
CONFIG = replace(DEFAULT, burst_headroom=0.0)
S = ReplicaSample


def inputs(
    ready: int,
    sample: ReplicaSample | None,
    *,
    loading: int = 0,
    current: int | None = None,
    now: float = 1000.0,
    history: ScaleHistory | None = None,
    **kw: object,
) -> ScalingInputs:
    return ScalingInputs(
        now=now,
        ready=ready,
        loading=loading,
        current=ready + loading if current is None else current,
        samples=None if sample is None else [sample] * ready,
        history=history or ScaleHistory(),
        **kw,  # type: ignore[arg-type]
    )


def learned(mu: float, at: float = 0.0) -> ScaleHistory:
    return ScaleHistory(throughput=(at, mu))


@dataclass(frozen=True)
class Row:
    name: str
    arithmetic: str
    inputs: ScalingInputs
    desired: int
    config: PolicyConfig = CONFIG
    reason_has: str = ""
    computes: Mapping[str, float] = field(default_factory=dict)
    """The load model's numbers the arithmetic derives by hand (LoadEstimate fields)."""


ROWS = [
    Row(
        "queue above the target scales up to where it drains",
        "F = min(64 slots, 64 running / 0.5 KV = 128) = 64; D = 2 x (64 + 40) = 208; n_conc = "
        "ceil(208 / (0.9 x 64)) = ceil(3.61) = 4; n_kv = ceil(2 x 0.5 / 0.9) = 2; 40 waiting per "
        "replica > 8: at least 2 + 1 = 3; n_fit = max(4, 2, 3) = 4",
        inputs(2, S(waiting=40, running=64, kv_cache_usage=0.5)),
        4,
        computes={"full": 64, "load": 208, "n_conc": 4, "n_kv": 2, "n_fit": 4},
        reason_has="scale up 2 -> 4: 80 waiting over 2 ready replicas (40.0 each, target 8)",
    ),
    Row(
        "replicas already loading are not added again",
        "the same load needs 4; 2 ready + 2 loading = 4 already desired: nothing to add",
        inputs(2, S(waiting=40, running=64, kv_cache_usage=0.5), loading=2),
        4,
        reason_has="the 2 loading cover it",
    ),
    Row(
        "only the missing part is added when some are loading",
        "needs 4; 2 ready + 1 loading = 3: add 1",
        inputs(2, S(waiting=40, running=64, kv_cache_usage=0.5), loading=1),
        4,
        reason_has="(the 1 loading already counted)",
    ),
    Row(
        "KV usage above the ceiling scales up before any queue",
        "no queue; n_kv = ceil(2 x 0.95 / 0.9) = ceil(2.11) = 3; F = min(64, 40/0.95 = 42.1); "
        "n_conc = ceil(80 / (0.9 x 42.1)) = 3",
        inputs(2, S(waiting=0, running=40, kv_cache_usage=0.95)),
        3,
        computes={"full": 40 / 0.95, "n_kv": 3, "n_conc": 3},
        reason_has="KV usage 95% above the ceiling 90%",
    ),
    Row(
        "arrival rate beyond the learned throughput scales up with no queue yet",
        "mu = 4 req/s learned; n_rate = ceil(30 / (0.8 x 4)) = ceil(9.4) = 10 > 8 ready; "
        "D = 8 x 20 = 160 alone would need only ceil(160 / (0.9 x 64)) = 3",
        inputs(
            8, S(waiting=0, running=20, kv_cache_usage=0.2), arrival_rate=30.0, history=learned(4.0)
        ),
        10,
        computes={"load": 160, "n_rate": 10, "n_conc": 3},
        reason_has="30 req/s arriving for replicas that complete 4 req/s when full",
    ),
    Row(
        "a steady load between the thresholds holds (hysteresis)",
        "up needs n_rate = ceil(17 / (0.8 x 4)) = ceil(5.3) = 6 > 6: no; down needs "
        "ceil(17 / (0.68 x 4)) = ceil(6.25) = 7 < 6: no",
        inputs(
            6, S(waiting=0, running=20, kv_cache_usage=0.2), arrival_rate=17.0, history=learned(4.0)
        ),
        6,
        computes={"n_rate": 6, "n_fit": 6, "n_down": 7},
        reason_has="holding 6",
    ),
    Row(
        "the first scale-down waits for a whole window (an empty window starts now)",
        "a scale-down plans 15% under: ceil(10 / (0.68 x 4)) = ceil(3.68) = 4 for the rate, "
        "ceil(120 / (0.765 x 64)) = 3 for slots: fits 4, but no recommendation in the last "
        "300 s: this one counts as 6",
        inputs(
            6, S(waiting=0, running=20, kv_cache_usage=0.2), arrival_rate=10.0, history=learned(4.0)
        ),
        6,
        computes={"n_down": 4, "n_conc": 3},
        reason_has="recommended up to 6",
    ),
    Row(
        "after the window the scale-down goes one replica per minute",
        "fits 4 (as above); the last 300 s recommended at most 3 (310 s ago: 6, outside): "
        "toward 4, 6 -> 5 (1 per 60 s)",
        inputs(
            6,
            S(waiting=0, running=20, kv_cache_usage=0.2),
            arrival_rate=10.0,
            history=ScaleHistory(
                recommendations=((690.0, 6), (800.0, 3), (985.0, 3)), throughput=(0.0, 4.0)
            ),
        ),
        5,
        reason_has="scale down 6 -> 5: 4 replicas would carry it with 15% to spare",
    ),
    Row(
        "a scale-down within the period waits",
        "one replica went 30 s ago: the period (60 s) allows no more",
        inputs(
            5,
            S(waiting=0, running=24, kv_cache_usage=0.24),
            arrival_rate=10.0,
            history=ScaleHistory(
                recommendations=((600.0, 3), (970.0, 3)),
                events=((970.0, -1),),
                throughput=(0.0, 4.0),
            ),
        ),
        5,
        reason_has="scale-down rate limit reached",
    ),
    Row(
        "scale-up is rate-limited to 4 per minute",
        "D = 2 x (64 + 200) = 528; n_fit = ceil(528 / 57.6) = 10; 2 + 4 = 6 allowed",
        inputs(2, S(waiting=200, running=64, kv_cache_usage=0.6)),
        6,
        computes={"load": 528, "n_fit": 10},
        reason_has="rate-limited from 10",
    ),
    Row(
        "replicas added earlier in the period count against the limit",
        "3 added 20 s ago from 2: period start 2, limit 2 + 4 = 6",
        inputs(
            5,
            S(waiting=200, running=64, kv_cache_usage=0.6),
            history=ScaleHistory(events=((980.0, 3),)),
        ),
        6,
    ),
    Row(
        "maxReplicas caps the answer",
        "n_rate = ceil((100 + 240 waiting / 120 s) / (0.8 x 4)) = ceil(31.9) = 32 > max 10",
        inputs(
            8,
            S(waiting=30, running=64, kv_cache_usage=0.7),
            arrival_rate=100.0,
            history=learned(4.0),
        ),
        10,
        computes={"n_rate": 32},
        reason_has="capped by maxReplicas 10",
    ),
    Row(
        "minReplicas holds a floor even when idle",
        "nothing runs: n_fit = 0, but min 2",
        inputs(2, S(waiting=0, running=0, kv_cache_usage=0.0), arrival_rate=0.0),
        2,
        config=replace(CONFIG, min_replicas=2),
    ),
    Row(
        "no metrics at all: hold, degraded",
        "the metrics source is down: nothing is known, nothing changes",
        inputs(4, None),
        4,
        reason_has="never scaling down without data",
    ),
    Row(
        "metrics from some replicas: no scale-down",
        "2 of 4 ready report a light load that fits 1, but 2 are silent: hold 4",
        replace(
            inputs(
                4,
                S(waiting=0, running=2, kv_cache_usage=0.02),
                arrival_rate=1.0,
                history=learned(4.0),
            ),
            samples=[S(waiting=0, running=2, kv_cache_usage=0.02)] * 2,
        ),
        4,
        reason_has="some ready replicas sent no metrics",
    ),
    Row(
        "metrics from some replicas may still scale up",
        "2 of 3 report 40 waiting each: extrapolated D = 3 x 104 = 312; n_fit = ceil(312 / "
        "57.6) = 6",
        replace(
            inputs(3, S(waiting=40, running=64, kv_cache_usage=0.5)),
            samples=[S(waiting=40, running=64, kv_cache_usage=0.5)] * 2,
        ),
        6,
        computes={"load": 312, "n_fit": 6},
        reason_has="scale up 3 -> 6",
    ),
    Row(
        "scale to zero once idle for the whole window",
        "nothing runs, waits or arrives; the window holds only 0s (and none older)",
        inputs(
            1,
            S(waiting=0, running=0, kv_cache_usage=0.0),
            arrival_rate=0.0,
            history=ScaleHistory(recommendations=((710.0, 0), (990.0, 0))),
        ),
        0,
        config=replace(CONFIG, min_replicas=0),
        reason_has="idle",
    ),
    Row(
        "an unknown arrival rate is no proof of idleness",
        "nothing runs, but arrivals are not measured: keep 1",
        inputs(
            1,
            S(waiting=0, running=0, kv_cache_usage=0.0),
            history=ScaleHistory(recommendations=((710.0, 0), (990.0, 0))),
        ),
        1,
        config=replace(CONFIG, min_replicas=0),
    ),
    Row(
        "activation: a request arriving at zero replicas starts one",
        "0 replicas, 0.2 req/s arriving: 1",
        inputs(0, None, arrival_rate=0.2),
        1,
        config=replace(CONFIG, min_replicas=0),
        reason_has="activating 0 -> 1",
    ),
    Row(
        "activation sized by what waits upstream",
        "300 requests at the gateway: n_conc = ceil(300 / (0.9 x 64)) = ceil(5.2) = 6",
        inputs(0, None, gateway_waiting=300),
        6,
        computes={"n_conc": 6},
        config=replace(CONFIG, min_replicas=0),
        reason_has="activating 0 -> 6: 300 request(s) waiting",
    ),
    Row(
        "zero stays zero without demand",
        "nothing waits upstream, nothing arrives",
        inputs(0, None, arrival_rate=0.0),
        0,
        config=replace(CONFIG, min_replicas=0),
    ),
    # -- the default: burst headroom, and the window that remembers the base ----------------
    Row(
        "burst headroom: 2 sqrt(R) spare replicas and one more (N+1) on top of the load",
        "R = 10 / 4 = 2.5 full replicas of load; at 80%: 2.5 / 0.8 = 3.125 (4 alone); headroom "
        "min(2 x 2.5, 2 x sqrt(2.5)) = 3.16, spare min(1, 2.5) = 1; n_fit = ceil(max(3.125, "
        "2.5 + 3.16 + 1)) = ceil(6.66) = 7; 3 + 4 allowed per minute",
        inputs(
            3, S(waiting=0, running=20, kv_cache_usage=0.2), arrival_rate=10.0, history=learned(4.0)
        ),
        7,
        computes={"n_fit": 7, "n_base": 4},
        config=DEFAULT,
        reason_has="7 replicas carry it within the targets (4 at 80% utilization, 3 more for "
        "burst headroom)",
    ),
    Row(
        "a tiny load with a small queue keeps its one replica",
        "R = (0.8 + 3 waiting / 120 s) / 4 = 0.206; 0.206 / 0.8 = 0.26; headroom min(2 x 0.206, "
        "2 x sqrt(0.206)) = 0.41 (at most twice the load), spare min(1, 0.206) = 0.21 (at most "
        "the load); ceil(max(0.26, 0.206 + 0.41 + 0.21)) = ceil(0.83) = 1; 3 waiting < target 8",
        inputs(
            1, S(waiting=3, running=2, kv_cache_usage=0.05), arrival_rate=0.8, history=learned(4.0)
        ),
        1,
        computes={"n_fit": 1},
        config=DEFAULT,
        reason_has="holding 1",
    ),
    Row(
        "past a quarter of a replica's load, the spare is a second replica",
        "R = (1 + 3 / 120) / 4 = 0.256; 0.256 + min(0.51, 1.01) + min(1, 0.256) = 1.02 -> 2 "
        "(a replica lost would leave none; without the spare: 0.256 / 0.8 + 0.51 = 0.83 -> 1)",
        inputs(
            1, S(waiting=3, running=2, kv_cache_usage=0.05), arrival_rate=1.0, history=learned(4.0)
        ),
        2,
        computes={"n_fit": 2, "n_base": 1},
        config=DEFAULT,
        reason_has="2 replicas carry it within the targets (1 at 80% utilization, 1 more for "
        "burst headroom)",
    ),
    Row(
        "the rate measured now is planned for, however it rose to it",
        "3.75 req/s (after a minute of 1 req/s more each minute): R = 3.75 / 4 = 0.94; 0.94 + "
        "min(1.88, 2 x sqrt(0.94)) + min(1, 0.94) = 0.94 + 1.88 + 0.94 = 3.75 -> 4: the burst "
        "headroom, not a projection, covers what comes next",
        inputs(
            3,
            S(waiting=0, running=10, kv_cache_usage=0.1),
            arrival_rate=3.75,
            history=learned(4.0),
        ),
        4,
        computes={"n_fit": 4, "n_base": 2},
        config=DEFAULT,
        reason_has="3.75 req/s arriving for replicas that complete 4 req/s when full; 4 replicas "
        "carry it within the targets (2 at 80% utilization, 2 more for burst headroom)",
    ),
    Row(
        "after a peak the headroom follows the load; the window keeps the peak's base",
        "8 req/s: R = 2; down plans 15% under the target: max(2 / 0.68, 2 / 0.85 + 2 x sqrt(2) "
        "+ 1) = 6.18 -> 7; the window (300 s) recorded a base recommendation of 5 at the peak, "
        "not 9: toward 7, 9 -> 8 (1 per 60 s)",
        inputs(
            9,
            S(waiting=0, running=10, kv_cache_usage=0.1),
            arrival_rate=8.0,
            history=ScaleHistory(recommendations=((850.0, 5),), throughput=(0.0, 4.0)),
        ),
        8,
        computes={"n_down": 7},
        config=DEFAULT,
        reason_has="scale down 9 -> 8: 7 replicas would carry it with 15% to spare",
    ),
    Row(
        "the window still holds what the peak's load needed",
        "the same load fits 7, but the window recorded a base of 8 150 s ago: hold 8",
        inputs(
            8,
            S(waiting=0, running=10, kv_cache_usage=0.1),
            arrival_rate=8.0,
            history=ScaleHistory(recommendations=((850.0, 8),), throughput=(0.0, 4.0)),
        ),
        8,
        config=DEFAULT,
        reason_has="but the last 300s recommended up to 8",
    ),
    Row(
        "a scale-up window compares base recommendations plus today's headroom",
        "as the burst-headroom row (7 = base 4 + headroom 3), with a 60 s scale-up window whose "
        "lowest base was 2: min(7, 2 + 3) = 5",
        inputs(
            3,
            S(waiting=0, running=20, kv_cache_usage=0.2),
            arrival_rate=10.0,
            history=ScaleHistory(recommendations=((950.0, 2),), throughput=(0.0, 4.0)),
        ),
        5,
        config=replace(DEFAULT, scale_up=ScalingBehavior(stabilization_window_seconds=60)),
    ),
    Row(
        "nothing ready yet: wait for the loading replicas",
        "3 desired, none ready, no metrics to go by: hold",
        inputs(0, None, loading=3),
        3,
        reason_has="waiting for replicas to load",
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_worked_example(row: Row) -> None:
    decision = decide_replicas(row.config, row.inputs)
    assert decision.desired_replicas == row.desired, (row.arithmetic, decision.reason)
    assert row.reason_has in decision.reason, decision.reason
    for name, value in row.computes.items():
        assert getattr(decision.load, name) == pytest.approx(value), (name, row.arithmetic)


def test_missing_metrics_is_flagged_degraded() -> None:
    assert decide_replicas(CONFIG, inputs(4, None)).degraded
    partial = replace(inputs(4, S(0, 2, 0.02)), samples=[S(0, 2, 0.02)])
    assert decide_replicas(CONFIG, partial).degraded
    assert not decide_replicas(CONFIG, inputs(4, S(0, 2, 0.02))).degraded


def test_throughput_is_learned_from_the_queueing_replicas() -> None:
    """mu = the median completion rate of the replicas queueing beyond the target (the upper
    one of two: a replica that just became ready completes little yet)."""
    samples = [
        S(waiting=20, running=60, kv_cache_usage=0.5, completion_rate=3.0),
        S(waiting=30, running=60, kv_cache_usage=0.5, completion_rate=4.0),
        S(waiting=0, running=5, kv_cache_usage=0.05, completion_rate=0.5),
    ]
    full = ScaleHistory(saturated_since=940.0)  # queueing beyond the target for a minute
    decision = decide_replicas(CONFIG, replace(inputs(3, None), samples=samples, history=full))
    assert decision.history.throughput == (1000.0, 4.0)
    assert decision.load is not None and decision.load.saturated


def test_nothing_is_learned_before_a_whole_rate_window_was_spent_full() -> None:
    """A burst's first evaluations: the replicas' one-minute completion rates still hold the
    minute before the queue (here: 0.2 req/s, a twentieth of a full replica). Learned, they
    would plan maxReplicas for any load from then on. The saturation starts in the history
    and teaches mu a minute later; a replica Ready for less than a minute is not asked."""
    early = [S(waiting=20, running=60, kv_cache_usage=0.5, completion_rate=0.2)] * 2
    first = decide_replicas(CONFIG, replace(inputs(2, None), samples=early))
    assert first.history.throughput is None
    assert first.history.saturated_since == 1000.0
    later = [S(waiting=20, running=60, kv_cache_usage=0.5, completion_rate=4.0)] * 2
    at = replace(inputs(2, None, now=1059.0), samples=later, history=first.history)
    assert decide_replicas(CONFIG, at).history.throughput is None
    after = decide_replicas(CONFIG, replace(at, now=1060.0))
    assert after.history.throughput == (1060.0, 4.0)
    young = [replace(s, ready_seconds=30.0) for s in later]
    assert (
        decide_replicas(CONFIG, replace(at, now=1060.0, samples=young)).history.throughput is None
    )
    calm = [S(waiting=0, running=10, kv_cache_usage=0.1, completion_rate=1.0)] * 2
    ended = decide_replicas(CONFIG, replace(at, now=1075.0, samples=calm, history=after.history))
    assert ended.history.saturated_since is None


def test_throughput_is_smoothed_once_known() -> None:
    """A new observation moves a known throughput by a fifth of the difference: a rate window
    that started before the queue reads low for a while."""
    samples = [S(waiting=20, running=60, kv_cache_usage=0.5, completion_rate=3.0)] * 2
    history = replace(learned(4.0), saturated_since=900.0)
    decision = decide_replicas(CONFIG, replace(inputs(2, None), samples=samples, history=history))
    assert decision.history.throughput is not None
    t, mu = decision.history.throughput
    assert t == 1000.0
    assert mu == pytest.approx(3.8)


def test_no_replica_queueing_learns_nothing() -> None:
    decision = decide_replicas(
        CONFIG, inputs(2, S(0, 10, 0.1, completion_rate=1.0), history=learned(4.0, at=5.0))
    )
    assert decision.history.throughput == (5.0, 4.0)


def test_no_scale_down_before_the_throughput_is_known() -> None:
    """Completions are measured but no replica ever queued: the capacity to simulate the
    smaller fleet against is unknown, so the fleet holds (a new service learns it at its
    first saturation)."""
    decision = decide_replicas(
        CONFIG,
        inputs(
            6,
            S(0, 2, 0.02, completion_rate=0.5),
            history=ScaleHistory(recommendations=((710.0, 1), (990.0, 1))),
        ),
    )
    assert decision.desired_replicas == 6
    assert "not scaling down before a full replica's throughput is known" in decision.reason


def test_arrival_rate_falls_back_to_completions() -> None:
    """Without a gateway rate, the replicas' completions are the arrival rate (steady state)."""
    load = estimate_load(
        CONFIG, [S(0, 20, 0.2, completion_rate=2.5)] * 4, ready=4, learned_throughput=2.0
    )
    assert load.arrival_rate == 10.0
    assert load.n_rate == 7  # ceil(10 / (0.8 x 2)) = ceil(6.25)


def test_a_queue_adds_replicas_to_drain_it() -> None:
    """n_rate = ceil((lambda + W / 120 s) / (0.8 mu)) = ceil((10 + 720 / 120) / 3.2) = 5."""
    load = estimate_load(
        CONFIG,
        [S(waiting=240, running=64, kv_cache_usage=0.5)] * 3,
        ready=3,
        arrival_rate=10.0,
        learned_throughput=4.0,
    )
    assert load.n_rate == 5


def test_the_window_keeps_the_highest_recommendation() -> None:
    """A 4 recommended 100 s ago holds a scale-down from 6 at 4, not 3."""
    history = ScaleHistory(recommendations=((600.0, 6), (900.0, 4), (985.0, 3)))
    decision = decide_replicas(
        CONFIG,
        inputs(6, S(0, 20, 0.2), arrival_rate=10.0, history=replace(history, throughput=(0, 4))),
    )
    assert decision.desired_replicas == 5  # toward 4, one per minute


def test_scale_up_stabilization_window_delays_a_scale_up() -> None:
    """With a 60 s scale-up window, the lowest recommendation of the last minute rules."""
    config = replace(CONFIG, scale_up=ScalingBehavior(stabilization_window_seconds=60))
    history = ScaleHistory(recommendations=((950.0, 2),))
    decision = decide_replicas(config, inputs(2, S(40, 64, 0.5), history=history))
    assert decision.desired_replicas == 2
    assert "stabilization window" in decision.reason


def test_bounds_changed_below_the_current_count_apply_at_once() -> None:
    decision = decide_replicas(replace(CONFIG, max_replicas=3), inputs(5, None))
    assert decision.desired_replicas == 3


def test_decision_history_records_the_recommendation_and_the_event() -> None:
    decision = decide_replicas(CONFIG, inputs(2, S(waiting=40, running=64, kv_cache_usage=0.5)))
    assert decision.recommendation == 4
    assert decision.direction == "up"
    assert decision.history.recommendations[-1] == (1000.0, 4)
    assert decision.history.events == ((1000.0, 2),)
    assert decision.history.last_scale_up_time == 1000.0
    status = decision.to_status()
    assert status.desired_replicas == 4
    assert status.recommendations == ["1000=4", "1000=+2"]
    assert status.last_scale_up_time == "1970-01-01T00:16:40Z"


def test_default_target_queue_depth_is_an_eighth_of_the_batch() -> None:
    assert default_target_queue_depth(256) == 32.0
    assert default_target_queue_depth(114) == 14.0
    assert default_target_queue_depth(4) == 1.0  # never below one
    assert resolve_target_queue_depth(5.0, 256) == 5.0
    assert resolve_target_queue_depth(None, 256) == 32.0


def test_config_from_spec_mirrors_scaling_spec() -> None:
    spec = ScalingSpec(min_replicas=2, max_replicas=8, kv_cache_usage_ceiling=0.8)
    config = PolicyConfig.from_spec(spec, max_num_seqs=128)
    assert (config.min_replicas, config.max_replicas) == (2, 8)
    assert config.target_queue_depth == 16.0
    assert config.kv_cache_usage_ceiling == 0.8
    assert config.scale_down.stabilization_window_seconds == 300
    assert config.scale_up == spec.scale_up
    # targetUtilization unset: the default, 0.8 plus the burst headroom.
    assert (config.target_utilization, config.burst_headroom) == (0.8, 2.0)


def test_an_explicit_target_utilization_is_planned_for_exactly() -> None:
    """spec.scaling.targetUtilization set: that utilization and no headroom on top (the user
    chose the headroom). 10 req/s at 0.5 of mu 4: ceil(10 / 2) = 5."""
    config = PolicyConfig.from_spec(ScalingSpec(max_replicas=10, target_utilization=0.5), 64)
    assert (config.target_utilization, config.burst_headroom) == (0.5, 0.0)
    decision = decide_replicas(
        config, inputs(3, S(0, 20, 0.2), arrival_rate=10.0, history=learned(4.0))
    )
    assert decision.desired_replicas == 5


@pytest.mark.parametrize(
    ("load", "headroom"),
    [(0.0, 0.0), (0.25, 0.75), (1.0, 3.0), (4.0, 5.0), (16.0, 9.0), (100.0, 21.0)],
)
def test_burst_headroom_is_twice_the_square_root_of_the_load_plus_a_spare(
    load: float, headroom: float
) -> None:
    """min(2 R, 2 sqrt(R)) + min(1, R): relative headroom shrinks as the fleet grows (three
    times the load at R = 1, 125% of it at 4, a fifth of it at 100); the burst part never
    exceeds twice the load, the spare never the load itself."""
    assert burst_headroom(DEFAULT, load) == pytest.approx(headroom)
    assert burst_headroom(CONFIG, load) == 0.0


@pytest.mark.parametrize(
    ("load", "slack", "planned", "without_headroom"),
    [
        (0.2, 1.0, 0.8, 0.25),  # 0.2 + 0.4 + 0.2: one replica
        (1.0, 1.0, 4.0, 1.25),  # 1 + 2 + 1, where 80% utilization alone plans 1.25
        (1.3, 1.0, 1.3 + 2 * 1.3**0.5 + 1, 1.625),  # 4.58 -> 5: the old R / 0.8 + H gave 4
        (4.0, 1.0, 9.0, 5.0),  # 4 + 4 + 1 (the old 5 + 4 = 9 too)
        (4.6, 1.0, 4.6 + 2 * 4.6**0.5 + 1, 5.75),  # 9.89 -> 10 (the old 10.04 -> 11)
        (100.0, 1.0, 125.0, 125.0),  # 100 + 20 + 1 = 121 < 100 / 0.8: the target bounds it
        (4.0, 0.85, 4 / 0.85 + 4 + 1, 4 / 0.68),  # scale-down: the load 15% over, headroom kept
    ],
)
def test_planned_replicas_is_the_larger_of_the_target_and_load_plus_headroom(
    load: float, slack: float, planned: float, without_headroom: float
) -> None:
    """Where the headroom is the larger it keeps the replicas under the utilization target by
    itself, so it replaces the target's margin rather than adding to it (fewer replicas from a
    load of about 4 up, more below); large fleets stay at the target."""
    assert planned_replicas(DEFAULT, load, slack) == pytest.approx(planned)
    assert planned_replicas(CONFIG, load, slack) == pytest.approx(without_headroom)


def test_the_window_records_the_base_recommendation() -> None:
    """The burst-headroom row: 7 recommended, 4 of them for the load at the target: the
    history (the scale-down window) keeps 4, the decision says 7."""
    decision = decide_replicas(
        DEFAULT, inputs(3, S(0, 20, 0.2), arrival_rate=10.0, history=learned(4.0))
    )
    assert decision.recommendation == 7
    assert decision.history.recommendations[-1] == (1000.0, 4)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"waiting": -1, "running": 0}, "waiting"),
        ({"waiting": 0, "running": float("nan")}, "running"),
        ({"waiting": 0, "running": 0, "kv_cache_usage": 1.5}, "kv_cache_usage"),
        ({"waiting": 0, "running": 0, "completion_rate": -2.0}, "completion_rate"),
    ],
)
def test_bad_samples_are_rejected(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ReplicaSample(**kwargs)


def test_bad_config_is_rejected() -> None:
    with pytest.raises(ValueError, match="min_replicas"):
        PolicyConfig(min_replicas=3, max_replicas=2, max_num_seqs=8, target_queue_depth=1)
    with pytest.raises(ValueError, match="target_queue_depth"):
        PolicyConfig(min_replicas=0, max_replicas=2, max_num_seqs=8, target_queue_depth=0)
