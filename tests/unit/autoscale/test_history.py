"""The autoscaler's memory: compaction, strings in the CR status, restart round trips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmservice_operator.api.status import AutoscalingStatus
from llmservice_operator.autoscale import (
    PolicyConfig,
    ReplicaSample,
    ScaleHistory,
    ScalingInputs,
    decide_replicas,
    history_from_status,
    history_from_strings,
    history_to_status,
    history_to_strings,
)
from llmservice_operator.autoscale.history import MAX_STATUS_ENTRIES, decided_entries


def test_strings_spell_recommendations_events_and_throughput() -> None:
    history = ScaleHistory(
        recommendations=((1718000000.0, 4), (1718000015.25, 3)),
        events=((1718000000.0, 2), (1718000060.0, -1)),
        throughput=(1717999000.0, 4.07),
    )
    texts = history_to_strings(history)
    assert texts == [
        "1718000000=4",
        "1718000000=+2",
        "1718000015.25=3",
        "1718000060=-1",
        "1717999000=@4.07",
    ]
    assert history_from_strings(texts) == history


def test_status_round_trip_resumes_the_same_history() -> None:
    history = ScaleHistory(
        recommendations=((1718000000.0, 4),),
        events=((1718000000.0, 1),),
        last_scale_time=1718000000.0,
        last_scale_up_time=1718000000.0,
        throughput=(1718000000.0, 3.5),
        saturated_since=1717999990.5,
    )
    status = history_to_status(history, desired_replicas=5, reason="because")
    assert "1717999990.5=!" in status.recommendations
    assert status.last_scale_up_time == "2024-06-10T06:13:20Z"
    assert status.last_scale_down_time is None
    wire = AutoscalingStatus.model_validate(status.to_wire())
    assert history_from_status(wire) == history
    assert history_from_status(None) == ScaleHistory()


def test_status_scale_times_keep_milliseconds_and_read_offsets() -> None:
    status = history_to_status(ScaleHistory(last_scale_up_time=1718000000.5), 1, "")
    assert status.last_scale_up_time == "2024-06-10T06:13:20.500Z"
    assert status.last_scale_time is None
    written = {"desiredReplicas": 1, "lastScaleTime": "2024-06-10T08:13:20+02:00"}
    read = history_from_status(AutoscalingStatus.model_validate(written))
    assert read.last_scale_time == 1718000000.0
    assert history_from_status(status).last_scale_up_time == 1718000000.5


@pytest.mark.parametrize(
    "entry",
    [
        "nope",
        "x=3",
        "1718000000=",
        "1718000000=+0",
        "1=-x",
        "1=@0",
        "inf=2",
        "1=-",
        "1=~-1",
        "1=~",
        "1=^-1",
        "1=^",
        "1=^nan",
    ],
)
def test_malformed_entries_are_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="autoscaling history entry"):
        history_from_strings([entry])


def test_arrival_rates_and_the_surge_round_trip_through_the_status() -> None:
    """The arrival rates (``=~``) and the surge (``=^``) a restarted operator needs to keep its
    burst headroom come back from the status; a later surge wins over an earlier one."""
    history = history_from_strings(
        [
            "1717999985=~11.75",
            "1718000000=4",
            "1718000000=~12.5",
            "1717999000=@4.07",
            "1717990000=^2",
            "1717999900=^1.25",
        ]
    )
    assert history == ScaleHistory(
        recommendations=((1718000000.0, 4),),
        throughput=(1717999000.0, 4.07),
        arrivals=((1717999985.0, 11.75), (1718000000.0, 12.5)),
        surge=(1717999900.0, 1.25),
    )
    assert history_to_strings(history) == [
        "1717999985=~11.75",
        "1718000000=4",
        "1718000000=~12.5",
        "1717999900=^1.25",
        "1717999000=@4.07",
    ]
    assert history_from_strings(history_to_strings(history)) == history


def test_arrival_rates_are_kept_for_the_horizon_the_lowest_of_each_twelfth() -> None:
    """With a 120 s horizon (10 s slots): rates older than 120 s go; of two rates in one slot
    the lower stays (a later lower one replaces an earlier, an earlier lower one is kept); an
    evaluation without a rate adds none. However often it evaluates, 13 rates at most."""
    history = ScaleHistory()
    steps = [(0, 1.0), (60, 2.0), (61, 1.5), (69, 1.8), (120, 3.0), (180, 4.0), (181, None)]
    for t, rate in steps:
        history = history.record(
            float(t),
            1,
            0,
            up_window=0,
            down_window=0,
            event_horizon=0,
            arrival_rate=rate,
            arrival_horizon=120.0,
        )
    assert history.arrivals == ((61.0, 1.5), (120.0, 3.0), (180.0, 4.0))
    kept = history.record(
        190.0,
        1,
        0,
        up_window=0,
        down_window=0,
        event_horizon=0,
        arrival_horizon=120.0,
        surge=(190.0, 0.5),
    )
    assert kept.arrivals == ((120.0, 3.0), (180.0, 4.0))
    assert kept.surge == (190.0, 0.5)
    assert kept.record(200.0, 1, 0, up_window=0, down_window=0, event_horizon=0).surge == (
        190.0,
        0.5,
    )
    rising = ScaleHistory()
    for t in range(1000):  # every second, a rate higher than the last
        rising = rising.record(
            float(t),
            None,
            0,
            up_window=0,
            down_window=0,
            event_horizon=0,
            arrival_rate=float(t),
            arrival_horizon=120.0,
        )
    assert len(rising.arrivals) <= 13
    assert rising.arrivals[0] == (880.0, 880.0)


def test_compaction_keeps_what_a_window_can_still_need() -> None:
    """Scale-down looks at the window's maximum: a 5 followed by a later 6 is never needed
    (the 6 outlives it in the window); a 6 followed by 4s stays until it leaves the window."""
    history = ScaleHistory()
    for t, rec in [(0, 5), (15, 6), (30, 4), (45, 4), (60, 3)]:
        history = history.record(float(t), rec, 0, up_window=0, down_window=300, event_horizon=60)
    assert history.recommendations == ((15.0, 6), (45.0, 4), (60.0, 3))
    later = history.record(400.0, 3, 0, up_window=0, down_window=300, event_horizon=60)
    assert later.recommendations == ((400.0, 3),)


def test_compaction_keeps_the_newest_recommendation_for_the_status_without_windows() -> None:
    history = ScaleHistory(recommendations=((0.0, 5),))
    history = history.record(15.0, 2, 0, up_window=0, down_window=0, event_horizon=60)
    assert history.recommendations == ((15.0, 2),)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 12), min_size=1, max_size=60),
    st.sampled_from([0, 30, 120]),
    st.sampled_from([0, 60, 300]),
    st.integers(0, 600),
)
def test_compaction_never_changes_a_window_max_or_min(
    recs: list[int], up_window: int, down_window: int, ahead: int
) -> None:
    """For any later evaluation time, the max over the scale-down window and the min over the
    scale-up window are the same with the compacted history as with the full one."""
    history = ScaleHistory()
    full: list[tuple[float, int]] = []
    for i, rec in enumerate(recs):
        t = 15.0 * i
        full.append((t, rec))
        history = history.record(
            t, rec, 0, up_window=up_window, down_window=down_window, event_horizon=60
        )
    now = 15.0 * (len(recs) - 1) + ahead
    for window, pick in ((down_window, max), (up_window, min)):
        if window == 0:
            continue
        kept = [r for t, r in history.recommendations if t > now - window]
        every = [r for t, r in full if t > now - window]
        assert (pick(kept) if kept else None) == (pick(every) if every else None)


def test_status_list_stays_within_the_crd_limit() -> None:
    history = ScaleHistory(
        recommendations=tuple((float(i), i % 7) for i in range(200)),
        events=tuple((float(i), 1) for i in range(50)),
        throughput=(0.0, 2.0),
    )
    texts = history_to_strings(history)
    assert len(texts) == MAX_STATUS_ENTRIES
    assert texts[-1] == "0=@2"  # the learned throughput is kept; the oldest entries went


def test_a_restarted_operator_continues_the_window() -> None:
    """Persist after each evaluation, rebuild from the status, decide again: the same as an
    operator that never restarted."""
    config = PolicyConfig(min_replicas=1, max_replicas=10, max_num_seqs=64, target_queue_depth=8)
    light = ReplicaSample(waiting=0, running=5, kv_cache_usage=0.05)
    kept = ScaleHistory(throughput=(0.0, 4.0))
    restarted = kept
    current_a = current_b = 6
    for i in range(40):
        now = 1718000000.0 + 15 * i
        a = decide_replicas(
            config,
            ScalingInputs(
                now, current_a, 0, current_a, [light] * current_a, kept, arrival_rate=3.0
            ),
        )
        b = decide_replicas(
            config,
            ScalingInputs(
                now, current_b, 0, current_b, [light] * current_b, restarted, arrival_rate=3.0
            ),
        )
        kept, current_a = a.history, a.desired_replicas
        restarted = history_from_status(AutoscalingStatus.model_validate(b.to_status().to_wire()))
        current_b = b.desired_replicas
        assert current_a == current_b
    assert current_a < 6  # it did scale down, after the window


def test_decided_entries_keep_what_was_decided_and_drop_the_samples() -> None:
    entries = history_to_strings(
        ScaleHistory(
            recommendations=((100.0, 3),),
            events=((100.0, 2),),
            throughput=(90.0, 4.07),
            saturated_since=95.0,
            arrivals=((100.0, 12.5),),
            surge=(98.0, 1.25),
        )
    )
    assert decided_entries(entries) == ("3", "+2", "98=^1.25", "95=!", "@4.07")
    # The same decisions taken at a later evaluation, with new rates: nothing to write.
    later = [e.replace("100=", "115=") for e in entries if "=~" not in e] + ["115=~30"]
    assert decided_entries(later) == decided_entries(entries)
