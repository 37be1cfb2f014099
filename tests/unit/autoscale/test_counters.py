"""counter_rate: Prometheus' rate(counter[1m]) over readings the caller keeps."""

from __future__ import annotations

import pytest

from llmservice_operator.autoscale import counter_rate


def test_no_rate_before_a_second_reading() -> None:
    assert counter_rate([], 0.0) == ([], None)
    assert counter_rate([(10.0, 5.0)], 10.0) == ([(10.0, 5.0)], None)


def test_rate_from_the_oldest_reading_of_the_window_to_the_newest() -> None:
    readings = [(0.0, 0.0), (15.0, 30.0), (30.0, 60.0), (45.0, 75.0)]
    kept, rate = counter_rate(readings, 45.0)
    assert kept == readings
    assert rate == pytest.approx(75.0 / 45.0)


def test_readings_older_than_the_window_go_but_the_newest_of_them_stays() -> None:
    readings = [(0.0, 0.0), (15.0, 10.0), (30.0, 20.0), (80.0, 120.0), (90.0, 140.0)]
    kept, rate = counter_rate(readings, 90.0, window=60.0)
    # 30 s is the newest reading at least a window old: the rate spans 30..90 s.
    assert kept == [(30.0, 20.0), (80.0, 120.0), (90.0, 140.0)]
    assert rate == pytest.approx(120.0 / 60.0)


def test_a_long_gap_still_gives_the_rate_over_it() -> None:
    """Evaluations further apart than the window (a long evaluation interval): the two last
    readings span the gap."""
    kept, rate = counter_rate([(0.0, 0.0), (300.0, 600.0)], 300.0, window=60.0)
    assert kept == [(0.0, 0.0), (300.0, 600.0)]
    assert rate == pytest.approx(2.0)


def test_a_counter_that_restarts_drops_what_came_before() -> None:
    """An engine restart begins its counter at 0 again: no negative rate, no mixed one."""
    kept, rate = counter_rate([(0.0, 500.0), (15.0, 530.0), (30.0, 4.0)], 30.0)
    assert kept == [(30.0, 4.0)]
    assert rate is None
    kept, rate = counter_rate([*kept, (45.0, 34.0)], 45.0)
    assert rate == pytest.approx(2.0)


def test_readings_at_one_instant_have_no_rate() -> None:
    assert counter_rate([(5.0, 1.0), (5.0, 3.0)], 5.0)[1] is None
