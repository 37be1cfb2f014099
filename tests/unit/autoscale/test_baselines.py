"""The benchmark's baselines (benchmarks.scalers) against decisions worked by hand from each
one's documented formula: a table per scaler, each row's arithmetic in its text."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pytest
from benchmarks.fleet import FleetView, ReplicaPeak
from benchmarks.scalers import (
    ApaScaler,
    DynamoScaler,
    HpaScaler,
    KedaScaler,
    StaticScaler,
    WvaScaler,
)

from llmservice_operator.autoscale import ReplicaSample


def view(
    samples: Sequence[ReplicaSample],
    *,
    now: float = 100.0,
    loading: int = 0,
    desired: int | None = None,
    peaks: Sequence[ReplicaPeak] | None = None,
    gateway_waiting: int = 0,
    arrived: tuple[int, int, int] = (0, 0, 0),
) -> FleetView:
    ready = len(samples)
    return FleetView(
        now=now,
        desired=ready + loading if desired is None else desired,
        ready=ready,
        loading=loading,
        samples=tuple(samples),
        scraped=True,
        gateway_waiting=gateway_waiting,
        arrival_rate=None,
        peaks=tuple(peaks)
        if peaks is not None
        else tuple(ReplicaPeak(s.waiting, s.kv_cache_usage or 0.0) for s in samples),
        arrived=arrived,
    )


def s(waiting: float = 0, running: float = 0, kv: float = 0.0) -> ReplicaSample:
    return ReplicaSample(waiting=waiting, running=running, kv_cache_usage=kv)


# -- HPA ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HpaRow:
    name: str
    scaler: HpaScaler
    view: FleetView
    desired: int


HPA_ROWS = [
    HpaRow(
        "queue: 3 replicas waiting 4 each against a target of 2: ratio 2, ceil(2 x 3) = 6 (the "
        "rate limit allows max(3 + 4, 2 x 3) = 7)",
        HpaScaler(target=2, min_replicas=1, max_replicas=10),
        view([s(waiting=4)] * 3),
        6,
    ),
    HpaRow(
        "queue: waiting 2.1 against 2 is a ratio of 1.05, inside the 10% tolerance: hold 3",
        HpaScaler(target=2, min_replicas=1, max_replicas=10),
        view([s(waiting=2.1)] * 3),
        3,
    ),
    HpaRow(
        "running: 4 replicas running 40 against a target of 32: ratio 1.25, ceil(1.25 x 4) = 5",
        HpaScaler(target=32, min_replicas=1, max_replicas=10, metric="running"),
        view([s(running=40)] * 4),
        5,
    ),
    HpaRow(
        "KV: usages 0.3 and 0.1 average 0.2 against a target of 0.1: ratio 2, 2 x 2 = 4",
        HpaScaler(target=0.1, min_replicas=1, max_replicas=10, metric="kv"),
        view([s(kv=0.3), s(kv=0.1)]),
        4,
    ),
    HpaRow(
        "loading pods count as 0 on a scale-up: 2 ready waiting 6 (target 2, ratio 3) and 2 "
        "loading: (6 + 6 + 0 + 0) / 4 / 2 = 1.5, ceil(1.5 x 4) = 6",
        HpaScaler(target=2, min_replicas=1, max_replicas=10),
        view([s(waiting=6)] * 2, loading=2),
        6,
    ),
    HpaRow(
        "bounds: a ratio of 10 on 4 replicas asks 40; the rate limit allows max(4 + 4, 8) = 8 "
        "and maxReplicas 6 caps it",
        HpaScaler(target=1, min_replicas=1, max_replicas=6),
        view([s(waiting=10)] * 4),
        6,
    ),
]


@pytest.mark.parametrize("row", HPA_ROWS, ids=lambda r: r.name[:50])
def test_hpa(row: HpaRow) -> None:
    assert row.scaler.evaluate(row.view) == row.desired


def test_hpa_scale_down_waits_for_its_window() -> None:
    """6 recommended at t=0; at t=100 6 replicas waiting 0.5 against 2 recommend
    ceil(0.25 x 6) = 2, but the 300 s window holds the highest, 6; at t=301 the window holds
    only 2s: down to 2 (100% per 15 s allows it)."""
    hpa = HpaScaler(target=2, min_replicas=1, max_replicas=10)
    assert hpa.evaluate(view([s(waiting=4)] * 3, now=0.0)) == 6
    assert hpa.evaluate(view([s(waiting=0.5)] * 6, now=100.0)) == 6
    assert hpa.evaluate(view([s(waiting=0.5)] * 6, now=301.0)) == 2


# -- KEDA --------------------------------------------------------------------------------------


def test_keda_sums_the_query_and_the_gateway() -> None:
    """sum(waiting) 4 + 4 + 4 plus 3 at the gateway = 15 against a target of 2 on 3 replicas:
    ratio 15 / 6 = 2.5, ceil(15 / 2) = 8; the HPA's rate limit allows max(3 + 4, 6) = 7."""
    keda = KedaScaler(target=2, min_replica_count=0, max_replicas=10)
    assert keda.evaluate(view([s(waiting=4)] * 3, now=0.0, gateway_waiting=3)) == 7


def test_keda_on_running_requests() -> None:
    """sum(running) 3 x 40 = 120 against 32 on 3 replicas: ratio 1.25, ceil(120 / 32) = 4."""
    keda = KedaScaler(target=32, min_replica_count=0, max_replicas=10, metric="running")
    assert keda.evaluate(view([s(running=40)] * 3, now=0.0)) == 4


def test_keda_activates_from_zero_and_sleeps_after_its_cooldown() -> None:
    """At 0 replicas a request at the gateway is activity at the poll: 1. Nothing for the
    300 s cooldown after the last activity (polled every 30 s): 0."""
    keda = KedaScaler(target=2, min_replica_count=0, max_replicas=10)
    assert keda.evaluate(view([], now=0.0, desired=0, gateway_waiting=1)) == 1
    assert keda.evaluate(view([s()], now=200.0)) == 1  # idle 200 s: not yet
    assert keda.evaluate(view([s()], now=300.0)) == 0


# -- WVA ---------------------------------------------------------------------------------------

KV_TOKENS = 100_000


def wva(**kw: object) -> WvaScaler:
    return WvaScaler(
        min_replicas=1,
        max_replicas=10,
        kv_capacity_tokens=KV_TOKENS,
        max_num_seqs=64,
        hpa_up=replace(WvaScaler.hpa_up, stabilization_s=0.0),
        hpa_down=replace(WvaScaler.hpa_down, stabilization_s=0.0),
        **kw,  # type: ignore[arg-type]
    )


def wva_sample(kv: float, waiting: float = 2.0) -> ReplicaSample:
    """1 request/s of 1000 prompt and 100 output tokens; its minute's peaks are these gauges."""
    return ReplicaSample(
        waiting=waiting,
        running=20,
        kv_cache_usage=kv,
        completion_rate=1.0,
        prompt_token_rate=1000.0,
        generation_token_rate=100.0,
    )


@dataclass(frozen=True)
class WvaRow:
    name: str
    samples: list[ReplicaSample]
    analyzed: int


WVA_ROWS = [
    WvaRow(
        "balanced: each replica 0.5 x 100k = 50,000 tokens in use + 2 waiting x 1000 = 52,000; "
        "k1 = 0.8 x 100k = 80,000, k2 derived = min(8192 x 100 / 1100, 64) x (1000 + 50) = "
        "67,200, capacity 67,200; required = 104,000 / 0.85 - 2 x 67,200 < 0, spare = 134,400 "
        "- 104,000 / 0.70 < 0: hold 2",
        [wva_sample(0.5)] * 2,
        2,
    ),
    WvaRow(
        "hot: 60,000 + 2,000 = 62,000 each; required = 124,000 / 0.85 - 134,400 = 11,482: "
        "+ceil(11,482 / 67,200) = +1 -> 3",
        [wva_sample(0.6)] * 2,
        3,
    ),
    WvaRow(
        "cold: 20,000 + 2,000 = 22,000 each; spare = 134,400 - 44,000 / 0.70 = 71,543: "
        "-floor(71,543 / 67,200) = -1 -> 1",
        [wva_sample(0.2)] * 2,
        1,
    ),
    WvaRow(
        "saturated: the queue (6) reaches queueLengthThreshold 5, so k2 is the tokens in use "
        "observed, 55,000 (capacity min(80,000, 55,000)); demand 55,000 + 6 x 1000 = 61,000 "
        "each; required = 122,000 / 0.85 - 2 x 55,000 = 33,529: +ceil(33,529 / 55,000) -> 3",
        [wva_sample(0.55, waiting=6)] * 2,
        3,
    ),
]


@pytest.mark.parametrize("row", WVA_ROWS, ids=lambda r: r.name[:40])
def test_wva_analysis(row: WvaRow) -> None:
    assert wva().analyze(view(row.samples)) == row.analyzed


def test_wva_remembers_what_saturation_showed_and_runs_once_a_minute() -> None:
    """After the saturated row, k2 is the history's 55,000 even without a queue: 0.5 x 100k +
    2 x 1000 = 52,000 each, required = 104,000 / 0.85 - 110,000 = 12,353: +1 -> 3. Within the
    60 s cycle nothing is analyzed again: the HPA keeps applying what was published."""
    scaler = wva()
    assert scaler.evaluate(view([wva_sample(0.55, waiting=6)] * 2, now=0.0)) == 3
    assert list(scaler.history["medium"]) == [55_000, 55_000]  # one per saturated replica
    assert scaler.evaluate(view([wva_sample(0.2)] * 3, now=30.0)) == 3  # not analyzed
    assert scaler.analyze(view([wva_sample(0.5)] * 2)) == 3


def test_wva_published_count_goes_through_its_hpa() -> None:
    """The chart's HPA: 240 s scale-up stabilization takes the lowest recommendation of the
    window: 2 recommended at t=0 holds 2 when 3 is published at t=60; at t=241 it is 3."""
    scaler = WvaScaler(
        min_replicas=1, max_replicas=10, kv_capacity_tokens=KV_TOKENS, max_num_seqs=64
    )
    assert scaler.evaluate(view([wva_sample(0.5)] * 2, now=0.0)) == 2
    assert scaler.evaluate(view([wva_sample(0.6)] * 2, now=60.0)) == 2
    assert scaler.evaluate(view([wva_sample(0.6)] * 2, now=241.0)) == 3


# -- APA ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApaRow:
    name: str
    current: int
    use: float
    recommended: int


APA_ROWS = [
    ApaRow(
        "use 0.8 against 0.5 on 4: ratio 1.6 > 1.1, ceil(4 x 1.6) = 7 (at most 2 x 4)", 4, 0.8, 7
    ),
    ApaRow("ratio 3 on 4 asks 12, capped at ceil(2 x 4) = 8", 4, 1.5, 8),
    ApaRow("ratio 1.05: inside the 10% tolerance, hold 4", 4, 0.525, 4),
    ApaRow("ratio 0.3 on 4: ceil(4 x 0.3) = 2, at least floor(4 / 2) = 2", 4, 0.15, 2),
    ApaRow("ratio 0.1 on 10: ceil(1) = 1, but at least floor(10 / 2) = 5", 10, 0.05, 5),
]


@pytest.mark.parametrize("row", APA_ROWS, ids=lambda r: r.name[:40])
def test_apa_target_replicas(row: ApaRow) -> None:
    scaler = ApaScaler(target=0.5, min_replicas=1, max_replicas=20)
    assert scaler.recommend(row.current, row.use) == row.recommended


def test_apa_reads_the_mean_of_its_stable_window() -> None:
    """KV 0.5 at t=0 is the target: hold 4. KV 0.8 at t=15: the 180 s window's mean is 0.65,
    ratio 1.3, ceil(4 x 1.3) = 6 (the reading alone would ask 7). At t=200 the window holds
    only t=200's 0.8: ratio 1.6, ceil(4 x 1.6) = 7."""
    scaler = ApaScaler(target=0.5, min_replicas=1, max_replicas=20)
    assert scaler.evaluate(view([s(kv=0.5)] * 4, now=0.0)) == 4
    assert scaler.evaluate(view([s(kv=0.8)] * 4, now=15.0)) == 6
    assert scaler.evaluate(view([s(kv=0.8)] * 4, now=200.0)) == 7


def test_apa_scale_down_takes_the_lowest_of_its_cooldown_window() -> None:
    """AIBrix's stabilizeRecommendation picks the minimum of the 300 s window on a scale-down:
    3 recommended at t=0 and 5 at t=100 on 6 replicas go to 3 at t=100."""
    scaler = ApaScaler(target=0.5, min_replicas=1, max_replicas=20)
    assert scaler.stabilize(0.0, 6, 3) == 3
    assert scaler.stabilize(100.0, 6, 5) == 3
    assert scaler.stabilize(401.0, 6, 5) == 5  # the 3 has left the window


# -- Dynamo ------------------------------------------------------------------------------------


def wall_time(prefill_tokens: float, batch: int, decode_kv_tokens: float) -> float:
    """20 ms per iteration plus 20 us per prefill token, whatever the batch."""
    return 0.020 + 0.000_02 * prefill_tokens


def dynamo(**kw: object) -> DynamoScaler:
    return DynamoScaler(
        min_replicas=1,
        max_replicas=20,
        wall_time=wall_time,
        kv_capacity_tokens=KV_TOKENS,
        max_num_seqs=64,
        **kw,  # type: ignore[arg-type]
    )


def test_dynamo_engine_rate_under_its_targets() -> None:
    """ISL 1000, OSL 100: a sequence holds 1050 KV tokens, 100k hold 95, max_num_seqs caps at
    64; the prefill/decode balance (1000 / (8192 - bs) <= 100) allows all 64. At bs decode
    sequences a iteration prefills bs x 1000 / 100 = 10 bs tokens: wt = 20 ms + 0.2 ms x bs.
    ITL 50 ms allows bs 150, so 64: wt = 32.8 ms, TTFT (10 x 64 + 1000 tokens in one chunk)
    20 + 32.8 = 52.8 ms; engine_rps = 64 / (100 x 32.8 ms) = 19.51. ITL 30.5 ms allows bs 52
    (30.4 ms): 52 / (100 x 30.4 ms) = 17.11. A TTFT target of 45.5 ms stops at bs 27 (20 + 20
    + 5.4 = 45.4 ms; 28 would take 45.6): 27 / (100 x 25.4 ms) = 10.63."""
    assert dynamo().engine_rps(1000, 100) == pytest.approx(64 / (100 * 0.0328))
    assert dynamo(itl_ms=30.5).engine_rps(1000, 100) == pytest.approx(52 / (100 * 0.0304))
    assert dynamo(ttft_ms=45.5).engine_rps(1000, 100) == pytest.approx(27 / (100 * 0.0254))


def test_dynamo_plans_the_last_interval_at_the_engine_rate() -> None:
    """36,000 requests of 1000 in and 100 out in the 180 s interval: 200 req/s over 19.51 per
    engine = ceil(10.25) = 11 replicas at t=180; nothing changes between adjustments."""
    scaler = dynamo()
    assert scaler.evaluate(view([s()] * 2, now=0.0, arrived=(0, 0, 0))) == 2
    arrived = (36_000, 36_000_000, 3_600_000)
    assert scaler.evaluate(view([s()] * 2, now=90.0, arrived=(18_000, 18_000_000, 1_800_000))) == 2
    assert scaler.evaluate(view([s()] * 2, now=180.0, arrived=arrived)) == 11
    assert scaler.evaluate(view([s()] * 11, now=200.0, arrived=arrived)) == 11


def test_static_holds_its_count() -> None:
    assert StaticScaler(7).evaluate(view([s(waiting=100)] * 3)) == 7
