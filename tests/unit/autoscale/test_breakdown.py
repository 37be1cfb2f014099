"""The benchmark's per-minute breakdown (benchmarks.breakdown) on a hand-made run."""

from __future__ import annotations

import pytest
from benchmarks.breakdown import compare_minutes, minutes
from benchmarks.fleet import FleetResult


def run(name: str, ttft: list[float], arrivals: list[float]) -> FleetResult:
    # 2 replicas from 0 (the pre-roll), 3 from 130 s (10 s into the trace's second minute).
    return FleetResult(
        scaler=name,
        duration_s=300.0,
        ttft=ttft,
        arrivals=arrivals,
        replica_timeline=[(0.0, 2), (130.0, 3)],
    )


def test_minutes_counts_late_requests_and_weights_replicas_by_time() -> None:
    # Measured from 60 s for 150 s: buckets [60, 120), [120, 180), [180, 210) (a half one).
    result = run("a", [0.5, 2.5, 3.0, 1.0, 2.0], [10.0, 61.0, 119.0, 150.0, 200.0])
    got = minutes(result, measure_from=60.0, duration_s=150.0, slo_s=2.0)
    assert [m.start_s for m in got] == [0.0, 60.0, 120.0]
    # The pre-roll's request (10 s) is not counted; TTFT 2.0 is within a 2 s SLO.
    assert [m.arrivals for m in got] == [2, 1, 1]
    assert [m.late for m in got] == [2, 0, 0]
    # Second bucket: 10 s at 2 replicas, 50 s at 3: 2.83; the half bucket: 3.
    assert [m.replicas for m in got] == pytest.approx([2.0, (10 * 2 + 50 * 3) / 60, 3.0])


def test_compare_minutes_names_the_minutes_where_one_run_is_late() -> None:
    a = minutes(run("a", [5.0, 0.1], [70.0, 130.0]), 60.0, 120.0)
    b = minutes(run("b", [0.1, 0.1], [70.0, 130.0]), 60.0, 120.0)
    text = compare_minutes("a", a, "b", b)
    assert "| all | 2 | 1 | 0 |" in text
    assert "minute     0:     1 arrivals; late    1 /    0" in text
    with pytest.raises(ValueError, match="differ in length"):
        compare_minutes("a", a, "b", b[:1])
