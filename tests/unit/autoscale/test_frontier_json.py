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


def test_across_runs_a_row_per_run_and_trace_and_the_goals_counted() -> None:
    from benchmarks.frontier import DEFAULT_SETTING, OPERATOR_COLD, across_table

    met = [
        Point(OPERATOR, "targetUtilization 0.65", 15.0, 0.991),
        Point(OPERATOR, DEFAULT_SETTING, 20.0, 0.994),
        Point(OPERATOR_COLD, DEFAULT_SETTING, 22.0, 0.990),
        Point("HPA KV", "target 0.1", 21.0, 0.9915),
        Point(STATIC, "peak minute at 90%", 21.0, 0.989),
    ]
    missed = [
        Point(OPERATOR, DEFAULT_SETTING, 20.0, 0.980),
        Point(OPERATOR_COLD, DEFAULT_SETTING, 22.0, 0.970),
        Point("Dynamo", "defaults", 16.0, 0.981),
        Point(STATIC, "peak minute at 90%", 13.0, 0.955),
    ]
    table = across_table({"seed1-gateway": {"day": met}, "seed2-gateway": {"azure-code": missed}})
    rows = table.splitlines()
    assert rows[2].startswith(
        "| seed1-gateway | day | 15.00 (99.10%) | HPA KV 21.00 (99.15%) | 0.71x | met |"
    )
    assert "| 20.00 (99.40%) | -0.40 |" in rows[2]  # the default, and cold 0.4 points behind
    assert rows[3].startswith(
        "| seed2-gateway | azure-code | - | none; best Dynamo 16.00 (98.10%) | never | **missed** |"
    )
    assert rows[3].endswith("| **missed** | 20.00 (98.00%) | -1.00 |")
    assert rows[-1] == (
        "2 runs of a trace: the baseline goal met on 1, the static fleet on 1, cold within 0.5 "
        "points of warm on 1."
    )


def test_the_cold_start_line_says_behind_or_ahead() -> None:
    from benchmarks.frontier import DEFAULT_SETTING, OPERATOR_COLD, goal_lines

    def cold_line(cold_attainment: float) -> str:
        points = [
            Point(OPERATOR, DEFAULT_SETTING, 20.0, 0.994),
            Point(OPERATOR_COLD, DEFAULT_SETTING, 21.0, cold_attainment),
            Point(STATIC, "peak minute at 90%", 21.0, 0.989),
        ]
        return next(line for line in goal_lines({"day": points}) if "cold" in line)

    assert "0.25 points ahead (goal <= 0.5: met" in cold_line(0.9965)
    assert "0.60 points behind (goal <= 0.5: missed" in cold_line(0.988)
