"""api.timestamps: the one RFC 3339 writer and reader of status times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from llmservice_operator.api.timestamps import from_rfc3339, to_rfc3339, utc

MOMENT = datetime(2024, 6, 10, 6, 13, 20, 500_400, tzinfo=UTC)


def test_whole_seconds_unless_milliseconds_are_asked_for() -> None:
    assert to_rfc3339(MOMENT) == "2024-06-10T06:13:20Z"
    assert to_rfc3339(MOMENT, milliseconds=True) == "2024-06-10T06:13:20.500Z"
    assert to_rfc3339(MOMENT.replace(microsecond=0), milliseconds=True) == "2024-06-10T06:13:20Z"
    assert to_rfc3339(MOMENT.replace(microsecond=5_999), milliseconds=True).endswith("20.005Z")


def test_other_offsets_and_naive_times_are_written_in_utc() -> None:
    plus_two = MOMENT.astimezone(timezone(timedelta(hours=2)))
    assert to_rfc3339(plus_two) == "2024-06-10T06:13:20Z"
    assert to_rfc3339(MOMENT.replace(tzinfo=None)) == "2024-06-10T06:13:20Z"
    assert utc(MOMENT.replace(tzinfo=None)) == MOMENT


def test_reads_what_it_writes_and_what_kubernetes_writes() -> None:
    assert from_rfc3339("2024-06-10T06:13:20.500Z") == MOMENT.replace(microsecond=500_000)
    assert from_rfc3339("2024-06-10T08:13:20+02:00") == MOMENT.replace(microsecond=0)
    assert from_rfc3339("2024-06-10T06:13:20") == MOMENT.replace(microsecond=0)
    assert from_rfc3339(to_rfc3339(MOMENT)).tzinfo == UTC


def test_refuses_what_is_not_a_time() -> None:
    with pytest.raises(ValueError, match="Invalid isoformat"):
        from_rfc3339("yesterday")
