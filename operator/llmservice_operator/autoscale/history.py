"""What the autoscaler remembers between evaluations, and how it lives in the CR's status.

Pure: times are float seconds (the operator passes Unix time, the benchmark simulated time);
nothing here reads a clock.

The history holds two kinds of entries, both needed to survive an operator restart:

* **recommendations** ``(time, replicas)``: what each evaluation recommended before
  stabilization. Scale-down uses the *highest* recommendation within its stabilization
  window (as the Kubernetes HPA does), scale-up the *lowest* within its own window.
* **events** ``(time, change)``: applied changes of the desired replica count (+3, -1), for
  the rate limits ("at most N replicas per period").
* the **throughput** ``(time, requests/s)`` the policy learned a full replica completes (see
  ``policy``).
* since when the replicas have queued beyond the target without a break (**saturated
  since**): a one-minute completion rate is a full replica's throughput only once the whole
  minute was spent full.
* the **capacity in tokens** a full replica showed, per GPU type (``capacity``: prompt and
  output tokens per second, ``status.autoscaling.capacity``).
* the **arrival rates** of the last few minutes (``arrivals``) and the largest recent **surge**
  of arrivals (``surge``: when, and how large in units of ``sqrt(R)``), from which the burst
  headroom follows the measured volatility of arrivals (``policy``).

In ``status.autoscaling.recommendations`` all are strings ``"<epoch>=<value>"``: a
recommendation is a plain count (``"1718000000=4"``), an event carries a sign
(``"1718000000=+3"``, ``"...=-1"``), the learned throughput an at sign
(``"1718000000=@4.07"``), the start of the current saturation an exclamation mark
(``"1718000000=!"``). So one list keeps the whole history and
``history_from_status(history_to_status(...))`` is the identity (times to the millisecond).
Arrival rates (``"1718000000=~12.5"``) and the surge (``"1718000000=^1.25"``) likewise. The arrival
rates are samples, not decisions: the reconcile does not write the status for them alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from ..api.status import AutoscalingStatus, ReplicaCapacityStatus
from ..api.timestamps import from_rfc3339, to_rfc3339
from .capacity import TokenCapacity

__all__ = [
    "MAX_CAPACITY_ENTRIES",
    "MAX_STATUS_ENTRIES",
    "LearnedCapacity",
    "ScaleHistory",
    "decided_entries",
    "format_epoch",
    "history_from_status",
    "history_from_strings",
    "history_to_status",
    "history_to_strings",
]

#: ``AutoscalingStatus.recommendations`` holds at most this many strings (the CRD says so).
MAX_STATUS_ENTRIES = 120
#: ``AutoscalingStatus.capacity`` holds at most this many GPU types (the prior's included).
MAX_CAPACITY_ENTRIES = 16


@dataclass(frozen=True)
class LearnedCapacity:
    """A full replica's capacity in tokens on ``gpu_type``, as last learned at ``time``."""

    gpu_type: str
    time: float
    capacity: TokenCapacity

    def __post_init__(self) -> None:
        if not math.isfinite(self.time):
            raise ValueError(f"bad learned capacity time {self.time}")


@dataclass(frozen=True)
class ScaleHistory:
    """Recent recommendations and scale events, oldest first, plus the last scale times."""

    recommendations: tuple[tuple[float, int], ...] = ()
    events: tuple[tuple[float, int], ...] = ()
    last_scale_time: float | None = None
    last_scale_up_time: float | None = None
    last_scale_down_time: float | None = None
    throughput: tuple[float, float] | None = None
    """(time learned, requests/s one full replica completes), or None before it was seen."""
    saturated_since: float | None = None
    """When the replicas began queueing beyond the target, while they still do; else None."""
    capacities: tuple[LearnedCapacity, ...] = ()
    """The capacity in tokens learned on each GPU type (one entry per type, newest last)."""
    arrivals: tuple[tuple[float, float], ...] = ()
    """(time, requests/s arriving) of the last evaluations as far back as a surge is looked
    for, the lowest of each twelfth of that time (oldest first)."""
    surge: tuple[float, float] | None = None
    """(time, size) of the largest recent surge of arrivals, its size in units of the square
    root of the load (the burst headroom's own unit); None before any arrival was measured."""

    def __post_init__(self) -> None:
        for t, replicas in self.recommendations:
            if not math.isfinite(t) or replicas < 0:
                raise ValueError(f"bad recommendation ({t}, {replicas})")
        for t, change in self.events:
            if not math.isfinite(t) or change == 0:
                raise ValueError(f"bad scale event ({t}, {change})")
        if self.throughput is not None:
            t, value = self.throughput
            if not (math.isfinite(t) and math.isfinite(value) and value > 0):
                raise ValueError(f"bad learned throughput {self.throughput}")
        if self.saturated_since is not None and not math.isfinite(self.saturated_since):
            raise ValueError(f"bad saturation start {self.saturated_since}")
        for t, rate in self.arrivals:
            if not (math.isfinite(t) and math.isfinite(rate) and rate >= 0):
                raise ValueError(f"bad arrival rate ({t}, {rate})")
        if self.surge is not None:
            t, size = self.surge
            if not (math.isfinite(t) and math.isfinite(size) and size >= 0):
                raise ValueError(f"bad surge {self.surge}")

    def capacity_for(self, gpu_type: str) -> LearnedCapacity | None:
        """What was learned on ``gpu_type``, or None."""
        return next((c for c in self.capacities if c.gpu_type == gpu_type), None)

    def recommendations_since(self, cutoff: float) -> list[int]:
        """Recommendations made strictly after ``cutoff``."""
        return [r for t, r in self.recommendations if t > cutoff]

    def changes_since(self, cutoff: float) -> tuple[int, int]:
        """(replicas added, replicas removed) by events strictly after ``cutoff``."""
        added = sum(c for t, c in self.events if t > cutoff and c > 0)
        removed = sum(-c for t, c in self.events if t > cutoff and c < 0)
        return added, removed

    def record(
        self,
        now: float,
        recommendation: int | None,
        change: int,
        *,
        up_window: float,
        down_window: float,
        event_horizon: float,
        throughput: tuple[float, float] | None = None,
        saturated: bool | None = None,
        capacity: LearnedCapacity | None = None,
        arrival_rate: float | None = None,
        arrival_horizon: float = math.inf,
        surge: tuple[float, float] | None = None,
    ) -> ScaleHistory:
        """This history with one evaluation added and what no window can see any more dropped.

        ``recommendation`` None records none (an evaluation without data recommends nothing).
        ``change`` is the applied change of the desired count (0 for none).
        ``throughput`` replaces the learned one when given.
        ``saturated`` True starts the saturation now unless it runs already, False ends it,
        None (nothing measured) leaves it as it is.
        ``capacity`` replaces what was learned for its GPU type when given.
        ``arrival_rate`` is kept with the rates of the last ``arrival_horizon`` seconds (the
        lowest of each twelfth of it); ``surge`` replaces the surge when given.
        """
        recs = list(self.recommendations)
        if recommendation is not None:
            recs.append((now, recommendation))
        events = [(t, c) for t, c in self.events if t > now - event_horizon]
        if change:
            events.append((now, change))
        history = replace(
            self,
            recommendations=_compact(recs, now, up_window, down_window),
            events=tuple(events),
            throughput=throughput or self.throughput,
            capacities=_with_capacity(self.capacities, capacity),
            arrivals=_recent_arrivals(self.arrivals, now, arrival_rate, arrival_horizon),
            surge=surge or self.surge,
            saturated_since=(
                self.saturated_since
                if saturated is None
                else (self.saturated_since or now)
                if saturated
                else None
            ),
        )
        if change > 0:
            history = replace(history, last_scale_time=now, last_scale_up_time=now)
        elif change < 0:
            history = replace(history, last_scale_time=now, last_scale_down_time=now)
        return history


def _recent_arrivals(
    arrivals: tuple[tuple[float, float], ...], now: float, rate: float | None, horizon: float
) -> tuple[tuple[float, float], ...]:
    """``arrivals`` plus ``(now, rate)``, without what is older than ``horizon`` seconds, and
    only the lowest rate of each twelfth of the horizon (a surge is a rise from the lowest:
    however often the operator evaluates, the status keeps 13 rates at most)."""
    kept = [(t, r) for t, r in arrivals if t >= now - horizon]
    if rate is None:
        return tuple(kept)
    slot = horizon / 12
    if kept and math.isfinite(slot) and slot > 0 and now // slot == kept[-1][0] // slot:
        if rate < kept[-1][1]:
            kept[-1] = (now, rate)
        return tuple(kept)
    return (*kept, (now, rate))


def _with_capacity(
    capacities: tuple[LearnedCapacity, ...], learned: LearnedCapacity | None
) -> tuple[LearnedCapacity, ...]:
    """``capacities`` with ``learned`` replacing its GPU type's entry (the newest last; the
    oldest GPU types go first beyond what the status keeps, one slot left for a prior)."""
    if learned is None:
        return capacities
    kept = [c for c in capacities if c.gpu_type != learned.gpu_type]
    return (*kept[-(MAX_CAPACITY_ENTRIES - 2) :], learned)


def _compact(
    recs: list[tuple[float, int]], now: float, up_window: float, down_window: float
) -> tuple[tuple[float, int], ...]:
    """Keep only the recommendations a future window max (down) or min (up) can still need.

    An entry matters to the scale-down window while it is inside it *and* higher than every
    later entry (a later entry at least as high outlives it in the window); to the scale-up
    window while inside it and lower than every later entry. Dropping the rest changes no
    future decision, and keeps the list short (a staircase of distinct values) however often
    the operator evaluates.
    """
    kept: list[tuple[float, int]] = []
    later_max = -1
    later_min = math.inf
    for index, (t, r) in enumerate(reversed(recs)):
        for_down = t > now - down_window and r > later_max
        for_up = t > now - up_window and r < later_min
        if for_down or for_up or index == 0:  # the newest is kept to show in the status
            kept.append((t, r))
        later_max = max(later_max, r)
        later_min = min(later_min, r)
    kept.reverse()
    return tuple(kept)


# -- strings and status -------------------------------------------------------------------------


def format_epoch(t: float) -> str:
    """A number to the millisecond as the shortest text: ``1718000000`` or ``1718000000.25``."""
    rounded = round(t, 3)
    if rounded == int(rounded):
        return str(int(rounded))
    return f"{rounded:.3f}".rstrip("0")


def history_to_strings(history: ScaleHistory) -> list[str]:
    """``"<epoch>=<replicas>"`` per recommendation, ``"<epoch>=<+/-change>"`` per event,
    ``"<epoch>=~<requests/s>"`` per arrival rate, then ``"<epoch>=^<size>"`` for the surge,
    ``"<epoch>=!"`` for a saturation that runs and ``"<epoch>=@<requests/s>"`` learned.

    Sorted by time (recommendations, events, arrival rates at equal times); the oldest go
    first when more than :data:`MAX_STATUS_ENTRIES` would be written.
    """
    entries: list[tuple[float, int, str]] = []
    entries += [(t, 0, f"{format_epoch(t)}={r}") for t, r in history.recommendations]
    entries += [(t, 1, f"{format_epoch(t)}={c:+d}") for t, c in history.events]
    entries += [(t, 2, f"{format_epoch(t)}=~{format_epoch(r)}") for t, r in history.arrivals]
    entries.sort(key=lambda e: (e[0], e[1]))
    texts = [text for _, _, text in entries]
    learned = []
    if history.surge is not None:
        t, size = history.surge
        learned.append(f"{format_epoch(t)}=^{format_epoch(size)}")
    if history.saturated_since is not None:
        learned.append(f"{format_epoch(history.saturated_since)}=!")
    if history.throughput is not None:
        t, value = history.throughput
        learned.append(f"{format_epoch(t)}=@{format_epoch(value)}")
    # The learned values are kept however long the list; the oldest entries go first.
    keep = MAX_STATUS_ENTRIES - len(learned)
    return texts[max(0, len(texts) - keep) :] + learned


def decided_entries(entries: Iterable[str]) -> tuple[str, ...]:
    """The entries of :func:`history_to_strings` that record decisions, without the times of
    samples: what a status write is for. Recommendations and events keep only their values
    (a window's evaluations move every time, what they decided seldom), the start of a
    saturation and a surge keep their times (the time is what they decided), and arrival rates
    are samples: left out."""
    kept: list[str] = []
    for entry in entries:
        value = entry.partition("=")[2]
        if value.startswith("~"):
            continue
        kept.append(entry if value == "!" or value.startswith("^") else value)
    return tuple(kept)


def history_from_strings(
    entries: Iterable[str],
    *,
    last_scale_time: float | None = None,
    last_scale_up_time: float | None = None,
    last_scale_down_time: float | None = None,
) -> ScaleHistory:
    """The inverse of :func:`history_to_strings`; raises ValueError on a malformed entry."""
    recs: list[tuple[float, int]] = []
    events: list[tuple[float, int]] = []
    throughput: tuple[float, float] | None = None
    saturated_since: float | None = None
    arrivals: list[tuple[float, float]] = []
    surge: tuple[float, float] | None = None
    for entry in entries:
        epoch, sep, value = entry.partition("=")
        try:
            if not sep:
                raise ValueError("no '='")
            t = float(epoch)
            if not math.isfinite(t):
                raise ValueError("time is not finite")
            if value.startswith("@"):
                number = float(value[1:])
                if not (number > 0 and math.isfinite(number)):
                    raise ValueError("a learned throughput must be > 0")
                if throughput is None or t >= throughput[0]:
                    throughput = (t, number)
            elif value == "!":
                saturated_since = t
            elif value.startswith("~"):
                rate = float(value[1:])
                if not (rate >= 0 and math.isfinite(rate)):
                    raise ValueError("an arrival rate must be a finite number >= 0")
                arrivals.append((t, rate))
            elif value.startswith("^"):
                size = float(value[1:])
                if not (size >= 0 and math.isfinite(size)):
                    raise ValueError("a surge must be a finite number >= 0")
                if surge is None or t >= surge[0]:
                    surge = (t, size)
            elif value.startswith(("+", "-")):
                change = int(value)
                if change == 0:
                    raise ValueError("a scale event of 0")
                events.append((t, change))
            else:
                replicas = int(value)
                if replicas < 0:
                    raise ValueError("negative replicas")
                recs.append((t, replicas))
        except ValueError as exc:
            raise ValueError(
                f"autoscaling history entry {entry!r} is not '<epoch>=<replicas>': {exc}"
            ) from exc
    return ScaleHistory(
        recommendations=tuple(sorted(recs)),
        events=tuple(sorted(events)),
        last_scale_time=last_scale_time,
        last_scale_up_time=last_scale_up_time,
        last_scale_down_time=last_scale_down_time,
        throughput=throughput,
        saturated_since=saturated_since,
        arrivals=tuple(sorted(arrivals)),
        surge=surge,
    )


def _status_time(t: float | None) -> str | None:
    """Epoch seconds as a status time, to the millisecond (``2024-06-10T06:13:20.500Z``)."""
    if t is None:
        return None
    return to_rfc3339(datetime.fromtimestamp(t, tz=UTC), milliseconds=True)


def _epoch(text: str | None) -> float | None:
    """The inverse of :func:`_status_time` (any offset accepted; naive times are UTC)."""
    return None if text is None else from_rfc3339(text).timestamp()


def _capacity_status(
    history: ScaleHistory, prior: tuple[str, TokenCapacity] | None
) -> list[ReplicaCapacityStatus]:
    entries = [
        ReplicaCapacityStatus(
            gpu_type=c.gpu_type,
            prefill_tokens_per_second=_tokens(c.capacity.prefill_tokens_per_second),
            decode_tokens_per_second=_tokens(c.capacity.decode_tokens_per_second),
            source="learned",
            learned_time=_status_time(c.time),
        )
        for c in history.capacities
    ]
    if prior is not None and history.capacity_for(prior[0]) is None:
        gpu_type, capacity = prior
        entries.append(
            ReplicaCapacityStatus(
                gpu_type=gpu_type,
                prefill_tokens_per_second=_tokens(capacity.prefill_tokens_per_second),
                decode_tokens_per_second=_tokens(capacity.decode_tokens_per_second),
                source="prior",
            )
        )
    return entries[-MAX_CAPACITY_ENTRIES:]


def _tokens(rate: float) -> float:
    """A rate in tokens/s as the status shows it: to a tenth of a token (at least 0.001)."""
    return max(0.001, round(rate, 1 if rate >= 1 else 3))


def history_to_status(
    history: ScaleHistory,
    desired_replicas: int,
    reason: str,
    prior: tuple[str, TokenCapacity] | None = None,
) -> AutoscalingStatus:
    """``status.autoscaling`` for a decision (what the reconcile writes once per pass); with
    ``prior`` (GPU type, capacity) shown as the capacity of that GPU until one is learned."""
    return AutoscalingStatus(
        capacity=_capacity_status(history, prior),
        desired_replicas=desired_replicas,
        last_scale_time=_status_time(history.last_scale_time),
        last_scale_up_time=_status_time(history.last_scale_up_time),
        last_scale_down_time=_status_time(history.last_scale_down_time),
        reason=reason,
        recommendations=history_to_strings(history),
    )


def history_from_status(status: AutoscalingStatus | None) -> ScaleHistory:
    """The history a restarted operator resumes from (empty when there is no status yet)."""
    if status is None:
        return ScaleHistory()
    history = history_from_strings(
        status.recommendations,
        last_scale_time=_epoch(status.last_scale_time),
        last_scale_up_time=_epoch(status.last_scale_up_time),
        last_scale_down_time=_epoch(status.last_scale_down_time),
    )
    learned = tuple(
        LearnedCapacity(
            c.gpu_type,
            _epoch(c.learned_time) or 0.0,
            TokenCapacity(c.prefill_tokens_per_second, c.decode_tokens_per_second),
        )
        for c in status.capacity
        if c.source == "learned"
    )
    return replace(history, capacities=learned)
