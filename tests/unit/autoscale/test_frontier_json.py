"""The frontier's JSON object (benchmarks.frontier.frontier_json), whole and partial."""

from __future__ import annotations

from benchmarks.frontier import OPERATOR, STATIC, Point, frontier_json, points_from_json


def test_a_whole_trace_has_its_figures() -> None:
    points = [
        Point(OPERATOR, "default", 20.0, 0.995),
        Point("HPA KV", "target 0.1", 21.0, 0.9915),
        Point(STATIC, "peak minute at 90%", 21.0, 0.989),
    ]
    body = frontier_json({"diurnal": points})["traces"]["diurnal"]
    assert body["operatorGpuHoursAt99"] == 20.0
    assert body["bestBaselineAt99"] == {"scaler": "HPA KV", "gpuHours": 21.0}
    assert body["cheapestBaselineBest"]["scaler"] == "HPA KV"
    assert body["static"] == {"gpuHours": 21.0, "attainment2s": 0.989}


def test_a_partial_run_without_the_static_fleet_keeps_its_points_to_merge() -> None:
    points = [Point("WVA", "defaults", 17.2, 0.5783)]
    data = frontier_json({"day": points})
    body = data["traces"]["day"]
    assert body["static"] is None
    assert body["operatorGpuHoursAt99"] is None
    assert points_from_json(data) == {"day": points}
