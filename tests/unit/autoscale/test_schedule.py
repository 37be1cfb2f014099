"""autoscale.schedule: which spec.scaling.schedules windows are open at a fixed moment, the bounds
they set and the next change, across daylight saving time (Europe/Berlin: CET, UTC+1, turns to
CEST, UTC+2, at 02:00 on the last Sunday of March, 2026-03-29, and back at 03:00 on the last
Sunday of October, 2026-10-25)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from llmservice_operator.api.schedule import ScheduleWindow
from llmservice_operator.api.spec import ScalingSpec
from llmservice_operator.autoscale.schedule import (
    last_fire,
    next_fire,
    scheduled_bounds,
    window_next_change,
    window_open,
)

BERLIN = "Europe/Berlin"


def _utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def _window(**fields: Any) -> ScheduleWindow:
    base: dict[str, Any] = {
        "name": "office",
        "start": "0 8 * * 1-5",
        "end": "0 20 * * 1-5",
        "timeZone": BERLIN,
        "minReplicas": 4,
    }
    return ScheduleWindow.model_validate({**base, **fields})


def _spec(*windows: ScheduleWindow, **fields: Any) -> ScalingSpec:
    base: dict[str, Any] = {
        "minReplicas": 0,
        "maxReplicas": 8,
        "arrivalRateQuery": "sum(rate(gateway_requests_total[1m]))",
    }
    return ScalingSpec.model_validate(
        {**base, **fields, "schedules": [w.model_dump(by_alias=True) for w in windows]}
    )


# -- one window, a weekday in winter and in summer -------------------------------------------


@pytest.mark.parametrize(
    ("moment", "is_open"),
    [
        (_utc(2026, 1, 12, 6, 59), False),  # Monday 07:59 CET
        (_utc(2026, 1, 12, 7, 0), True),  # 08:00 CET: the start minute itself is open
        (_utc(2026, 1, 12, 18, 59, 59), True),  # 19:59:59 CET
        (_utc(2026, 1, 12, 19, 0), False),  # 20:00 CET: the end minute is closed
        (_utc(2026, 1, 17, 10, 0), False),  # Saturday 11:00 CET
        (_utc(2026, 7, 13, 6, 0), True),  # Monday 08:00 CEST (06:00 UTC in summer)
        (_utc(2026, 7, 13, 5, 59), False),  # 07:59 CEST
        (_utc(2026, 7, 13, 18, 0), False),  # 20:00 CEST
    ],
)
def test_a_weekday_window_is_open_from_its_start_to_its_end_local_time(
    moment: datetime, is_open: bool
) -> None:
    assert window_open(_window(), moment) is is_open


def test_the_next_change_of_a_closed_window_is_its_next_start_after_the_weekend() -> None:
    friday_night = _utc(2026, 1, 16, 21, 0)  # Friday 22:00 CET
    assert window_next_change(_window(), friday_night) == _utc(2026, 1, 19, 7, 0)  # Mon 08:00
    open_monday = _utc(2026, 1, 19, 9, 30)
    assert window_next_change(_window(), open_monday) == _utc(2026, 1, 19, 19, 0)  # 20:00 CET


def test_fires_are_at_or_before_now_and_strictly_after_it() -> None:
    start = _utc(2026, 1, 12, 7, 0)
    assert last_fire("0 8 * * 1-5", BERLIN, start) == start
    assert last_fire("0 8 * * 1-5", BERLIN, start + timedelta(microseconds=1)) == start
    assert last_fire("0 8 * * 1-5", BERLIN, start - timedelta(seconds=1)) == _utc(2026, 1, 9, 7)
    assert next_fire("0 8 * * 1-5", BERLIN, start) == _utc(2026, 1, 13, 7, 0)


# -- daylight saving time ----------------------------------------------------------------------


def test_spring_forward_moves_the_utc_start_an_hour_earlier_from_monday() -> None:
    """The weekend of 2026-03-29: Friday's 08:00 is 07:00 UTC, Monday's is 06:00 UTC."""
    friday_evening = _utc(2026, 3, 27, 20, 0)  # Friday 21:00 CET
    assert window_next_change(_window(), friday_evening) == _utc(2026, 3, 30, 6, 0)
    assert not window_open(_window(), _utc(2026, 3, 30, 5, 59))
    assert window_open(_window(), _utc(2026, 3, 30, 6, 0))
    # And it still closes at 20:00 local, 18:00 UTC: twelve hours open.
    assert window_next_change(_window(), _utc(2026, 3, 30, 6, 0)) == _utc(2026, 3, 30, 18, 0)


def test_fall_back_moves_it_an_hour_later_from_monday() -> None:
    friday_evening = _utc(2026, 10, 23, 19, 0)  # Friday 21:00 CEST
    assert window_next_change(_window(), friday_evening) == _utc(2026, 10, 26, 7, 0)
    assert window_next_change(_window(), _utc(2026, 10, 26, 7, 0)) == _utc(2026, 10, 26, 19, 0)


def test_a_window_across_the_changeover_night_is_an_hour_shorter_in_march_and_longer_in_october() -> (
    None
):
    night = _window(name="batch", start="0 1 * * *", end="0 4 * * *", minReplicas=2)
    # 2026-03-29: 01:00 CET is 00:00 UTC; 04:00 CEST is 02:00 UTC: open two hours, not three.
    opens = next_fire(night.start, BERLIN, _utc(2026, 3, 28, 12, 0))
    assert opens == _utc(2026, 3, 29, 0, 0)
    assert window_next_change(night, opens) == _utc(2026, 3, 29, 2, 0)
    assert window_open(night, _utc(2026, 3, 29, 1, 59))
    assert not window_open(night, _utc(2026, 3, 29, 2, 0))
    # 2026-10-25: 01:00 CEST is 23:00 UTC the day before; 04:00 CET is 03:00 UTC: four hours.
    opens = next_fire(night.start, BERLIN, _utc(2026, 10, 24, 12, 0))
    assert opens == _utc(2026, 10, 24, 23, 0)
    assert window_next_change(night, opens) == _utc(2026, 10, 25, 3, 0)
    assert window_open(night, _utc(2026, 10, 25, 2, 30))


def test_a_start_in_the_skipped_hour_opens_right_after_the_gap() -> None:
    """02:30 does not exist on 2026-03-29 in Berlin: cron (and cronsim) fire at 03:00 CEST."""
    early = _window(name="early", start="30 2 * * *", end="0 6 * * *", minReplicas=1)
    assert next_fire(early.start, BERLIN, _utc(2026, 3, 28, 12, 0)) == _utc(2026, 3, 29, 1, 0)
    assert not window_open(early, _utc(2026, 3, 29, 0, 59))
    assert window_open(early, _utc(2026, 3, 29, 1, 0))


def test_a_start_in_the_repeated_hour_opens_once_at_its_first_occurrence() -> None:
    """02:30 happens twice on 2026-10-25 in Berlin (CEST, then CET): the window opens at the
    first, 00:30 UTC, and is still open (not reopened) at the second, 01:30 UTC."""
    late = _window(name="late", start="30 2 * * *", end="0 5 * * *", minReplicas=1)
    assert next_fire(late.start, BERLIN, _utc(2026, 10, 24, 12, 0)) == _utc(2026, 10, 25, 0, 30)
    assert window_open(late, _utc(2026, 10, 25, 1, 45))
    assert window_next_change(late, _utc(2026, 10, 25, 1, 45)) == _utc(2026, 10, 25, 4, 0)


# -- bounds --------------------------------------------------------------------------------------


def test_no_windows_are_the_specs_bounds_and_no_status() -> None:
    spec = ScalingSpec(min_replicas=1, max_replicas=3)
    bounds = scheduled_bounds(spec, _utc(2026, 1, 12, 9, 0))
    assert (bounds.min_replicas, bounds.max_replicas, bounds.open) == (1, 3, ())
    assert bounds.next_change is None and bounds.to_status() is None


def test_an_open_windows_bounds_replace_the_specs_and_are_named() -> None:
    spec = _spec(_window(maxReplicas=12))
    monday = scheduled_bounds(spec, _utc(2026, 1, 12, 9, 0))
    assert (monday.min_replicas, monday.max_replicas) == (4, 12)
    assert (monday.window, monday.cap_window, monday.open) == ("office", "office", ("office",))
    status = monday.to_status()
    assert status is not None and status.window == "office"
    assert status.next_change_time == "2026-01-12T19:00:00Z"
    night = scheduled_bounds(spec, _utc(2026, 1, 12, 22, 0))
    assert (night.min_replicas, night.max_replicas, night.window) == (0, 8, None)
    assert night.next_change == _utc(2026, 1, 13, 7, 0)


def test_a_window_may_lower_the_floor() -> None:
    """A night window of 0 under a daytime minReplicas of 2: it replaces it, it is not a max."""
    night = _window(name="night", start="0 22 * * *", end="0 6 * * *", minReplicas=0)
    spec = _spec(night, minReplicas=2)
    assert scheduled_bounds(spec, _utc(2026, 1, 12, 23, 0)).min_replicas == 0  # 00:00 CET
    assert scheduled_bounds(spec, _utc(2026, 1, 12, 12, 0)).min_replicas == 2
    # Overnight: open across midnight, closes at 06:00 local.
    assert scheduled_bounds(spec, _utc(2026, 1, 13, 4, 0)).next_change == _utc(2026, 1, 13, 5, 0)


def test_overlapping_windows_the_larger_minimum_and_the_larger_cap_win() -> None:
    office = _window(maxReplicas=10)
    launch = _window(
        name="launch",
        start="0 12 12 1 *",
        end="0 14 12 1 *",
        minReplicas=6,
        maxReplicas=16,
    )
    small = _window(name="small", start="0 0 * * *", end="0 23 * * *", minReplicas=1)
    spec = _spec(small, office, launch)
    noon = scheduled_bounds(spec, _utc(2026, 1, 12, 11, 30))  # 12:30 CET, Monday 12 January
    assert noon.open == ("small", "office", "launch")
    assert (noon.min_replicas, noon.window) == (6, "launch")
    assert (noon.max_replicas, noon.cap_window) == (16, "launch")
    assert noon.next_change == _utc(2026, 1, 12, 13, 0)  # the launch window ends first
    after = scheduled_bounds(spec, _utc(2026, 1, 12, 13, 0))
    assert (after.min_replicas, after.max_replicas, after.window) == (4, 10, "office")
    evening = scheduled_bounds(spec, _utc(2026, 1, 12, 20, 0))  # 21:00 CET: small alone
    assert (evening.min_replicas, evening.max_replicas, evening.cap_window) == (1, 8, None)


def test_equal_minimums_name_the_first_window() -> None:
    spec = _spec(_window(name="a"), _window(name="b"))
    assert scheduled_bounds(spec, _utc(2026, 1, 12, 9, 0)).window == "a"
