from datetime import UTC, datetime, timedelta

from llmservice_operator.conditions import find, set_condition

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def test_transition_time_kept_while_status_unchanged() -> None:
    first = set_condition([], "Available", "False", "Starting", "0/1 ready", T0)
    later = set_condition(first, "Available", "False", "Starting", "0/1 ready", T0 + timedelta(1))
    assert later == first


def test_transition_time_moves_when_status_flips() -> None:
    first = set_condition([], "Available", "False", "Starting", "", T0)
    flipped = set_condition(first, "Available", "True", "Ready", "1/1", T0 + timedelta(hours=1))
    cond = find(flipped, "Available")
    assert cond is not None
    assert cond.last_transition_time == "2026-01-01T13:00:00Z"
    assert len(flipped) == 1


def test_reason_change_without_flip_keeps_time_but_updates_message() -> None:
    first = set_condition([], "Degraded", "True", "Unschedulable", "a", T0)
    second = set_condition(first, "Degraded", "True", "CrashLoop", "b", T0 + timedelta(1))
    cond = find(second, "Degraded")
    assert cond is not None
    assert (cond.reason, cond.message, cond.last_transition_time) == (
        "CrashLoop",
        "b",
        "2026-01-01T12:00:00Z",
    )
