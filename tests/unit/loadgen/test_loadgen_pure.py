"""Length distributions, rate schedules and the report: the pure half of the load generator."""

from __future__ import annotations

import itertools
import json
import math
import random
import statistics
from pathlib import Path

import pytest

from llmservice_operator.loadgen.client import prompt_text
from llmservice_operator.loadgen.distributions import LengthDist, parse_length_dist
from llmservice_operator.loadgen.report import RequestRecord, percentile, summarize
from llmservice_operator.loadgen.schedule import (
    RateSchedule,
    Segment,
    load_schedule,
    parse_schedule,
)
from llmservice_operator.sim.server import estimate_tokens


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("256", LengthDist("fixed", 256)),
        ("fixed:64", LengthDist("fixed", 64)),
        ("uniform:10:20", LengthDist("uniform", 10, 20)),
        ("lognormal:200:0.5", LengthDist("lognormal", 200, 32768, 0.5)),
        ("lognormal:200:0.5:1000", LengthDist("lognormal", 200, 1000, 0.5)),
    ],
)
def test_length_distributions_parse(text: str, expected: LengthDist) -> None:
    assert parse_length_dist(text) == expected
    assert parse_length_dist(str(expected)) == expected


@pytest.mark.parametrize(
    "text", ["", "0", "fixed", "uniform:5", "uniform:9:3", "lognormal:100:-1", "poisson:3", "x"]
)
def test_bad_length_distributions_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="bad length distribution"):
        parse_length_dist(text)


def test_length_draws_are_seeded_and_in_range() -> None:
    uniform = parse_length_dist("uniform:10:20")
    draws = [uniform.sample(random.Random(1)) for _ in range(3)]
    assert len(set(draws)) == 1
    rng = random.Random(2)
    values = [uniform.sample(rng) for _ in range(2000)]
    assert min(values) == 10
    assert max(values) == 20
    lognormal = parse_length_dist("lognormal:300:0.6:2000")
    rng = random.Random(3)
    values = [lognormal.sample(rng) for _ in range(4000)]
    assert statistics.median(values) == pytest.approx(300, rel=0.06)
    assert min(values) >= 1
    assert max(values) <= 2000
    assert parse_length_dist("7").sample(rng) == 7


def test_constant_schedule_is_poisson() -> None:
    schedule = RateSchedule.constant(rate=20.0, duration_s=100.0)
    times = schedule.arrival_times(random.Random(4))
    expected = schedule.expected_requests()
    assert abs(len(times) - expected) <= 4 * math.sqrt(expected)
    assert times == sorted(times)
    assert times[0] > 0
    assert times[-1] < 100.0
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # Exponential gaps: mean 1/rate and coefficient of variation 1.
    assert statistics.mean(gaps) == pytest.approx(0.05, rel=0.1)
    assert statistics.stdev(gaps) / statistics.mean(gaps) == pytest.approx(1.0, rel=0.1)
    assert schedule.arrival_times(random.Random(4)) == times


def test_burst_schedule_and_request_cap() -> None:
    schedule = parse_schedule(
        [
            {"duration_s": 50, "rate": 2},
            {"duration_s": 10, "rate": 30},
            {"duration_s": 20, "rate": 0},
        ]
    )
    assert schedule.duration_s == 80
    assert schedule.rate_at(55) == 30
    assert schedule.rate_at(79) == 0
    times = schedule.arrival_times(random.Random(5))
    warm = [t for t in times if t < 50]
    burst = [t for t in times if 50 <= t < 60]
    assert abs(len(warm) - 100) <= 40
    assert abs(len(burst) - 300) <= 70
    assert not [t for t in times if t >= 60]
    assert len(schedule.arrival_times(random.Random(5), max_requests=17)) == 17


def test_schedule_files(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("- {duration_s: 5, rate: 1}\n- duration_s: 2\n  rate: 10\n")
    assert load_schedule(good).segments == (Segment(5, 1), Segment(2, 10))
    wrapped = tmp_path / "wrapped.yaml"
    wrapped.write_text("segments:\n  - {duration_s: 1, rate: 3}\n")
    assert load_schedule(wrapped).segments == (Segment(1, 3),)
    for name, text, message in [
        ("empty.yaml", "[]\n", "at least one segment"),
        ("keys.yaml", "- {duration_s: 1, rps: 3}\n", "exactly the keys"),
        ("negative.yaml", "- {duration_s: 1, rate: -3}\n", "rate must be >= 0"),
        ("zero.yaml", "- {duration_s: 0, rate: 3}\n", "duration_s must be > 0"),
        ("scalar.yaml", "7\n", "a YAML list"),
        ("broken.yaml", "- [\n", "not valid YAML"),
    ]:
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ValueError, match=message):
            load_schedule(path)


def test_percentile_interpolates_like_numpy() -> None:
    values = [float(v) for v in range(1, 11)]
    assert percentile(values, 50) == 5.5
    assert percentile(values, 90) == pytest.approx(9.1)
    assert percentile(values, 99) == pytest.approx(9.91)
    assert percentile(values, 0) == 1
    assert percentile(values, 100) == 10
    assert percentile([3.0], 99) == 3
    assert percentile([], 50) is None
    with pytest.raises(ValueError, match="not within"):
        percentile(values, 101)


def test_summary_counts_rates_and_text() -> None:
    records = [
        RequestRecord("http://a", 0.0, True, 200, None, 0.1, 0.01, 1.0, 100, 50),
        RequestRecord("http://b", 0.5, True, 200, None, 0.3, 0.03, 2.0, 100, 50),
        RequestRecord("http://a", 1.0, False, 500, "http_500"),
        RequestRecord("http://b", 1.5, False, None, "timeout"),
    ]
    report = summarize(records, duration_s=10.0, time_scale=2.0)
    assert (report.requests, report.completed, report.errors) == (4, 2, 2)
    assert report.error_rate == 0.5
    assert report.throughput_rps == pytest.approx(0.2)
    assert report.output_tokens_per_s == pytest.approx(10.0)
    assert report.total_tokens_per_s == pytest.approx(30.0)
    assert report.ttft_s.p50 == pytest.approx(0.2)
    assert report.tpot_s.max == pytest.approx(0.03)
    assert report.per_target["http://a"].requests == 2
    assert report.per_target["http://a"].errors == 1
    assert report.errors_by_kind == {"http_500": 1, "timeout": 1}
    data = json.loads(report.to_json())
    assert data["ttft_s"]["p99"] == pytest.approx(0.298)
    assert data["per_target"]["http://b"] == {"requests": 2, "ok": 1, "errors": 1}
    text = report.to_text()
    assert "4 sent, 2 ok, 2 errors (50.00%)" in text
    assert "time scale 2" in text
    assert "http_500=1, timeout=1" in text
    empty = summarize([], 0.0)
    assert empty.error_rate == 0
    assert empty.ttft_s.p99 is None
    assert "TTFT" in empty.to_text()


@pytest.mark.parametrize("tokens", [1, 2, 63, 128, 1000])
def test_prompt_text_is_four_characters_a_token(tokens: int) -> None:
    text = prompt_text(tokens)
    assert len(text) == 4 * tokens
    assert estimate_tokens(text) == tokens  # what the simulator counts without the hint
    assert set(text.split()) <= {"lorem", "l", "lo", "lor", "lore"}
