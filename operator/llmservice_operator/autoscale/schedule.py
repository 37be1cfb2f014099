"""Scheduled capacity: which of ``spec.scaling.schedules`` are open at ``now``, the bounds they
set, and when that changes next. Pure: ``now`` is an argument.

A window opens at each time its ``start`` cron expression names and closes at the next time its
``end`` names, both read as wall-clock times in its ``timeZone``. It is **open** at ``now``
when the latest start at or before ``now`` is later than the latest end at or before ``now``:
a window whose end and start fall on the same minute is closed (the end wins), and one that
never started is closed. Overnight windows need nothing special (start ``0 22 * * *``, end
``0 6 * * *``).

Daylight saving time follows cron's rules as cronsim (and Debian's cron) implements them: a
time that a spring-forward skips fires at the first minute after the gap (``30 2 * * *`` in
Europe/Berlin on the last Sunday of March fires at 03:00 CEST); a time that a fall-back repeats
fires once, at its first occurrence. So ``0 8`` to ``0 20`` is open 08:00 to 20:00 local time
every day of the year: 12 hours, whatever the UTC offset.

While windows are open their bounds replace ``spec.scaling.minReplicas`` and ``maxReplicas``:
the floor is the largest ``minReplicas`` among them, the cap the largest of their
``maxReplicas`` (``spec.scaling.maxReplicas`` for a window without one). With none open the
spec's bounds apply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from cronsim import CronSim

from ..api.schedule import ScheduleWindow
from ..api.spec import ScalingSpec
from ..api.status import ScheduleStatus
from ..api.timestamps import to_rfc3339, utc

__all__ = [
    "ScheduledBounds",
    "last_fire",
    "next_fire",
    "scheduled_bounds",
    "window_next_change",
    "window_open",
]

_SECOND = timedelta(seconds=1)


@lru_cache(maxsize=64)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def last_fire(expression: str, time_zone: str, now: datetime) -> datetime | None:
    """The latest time at or before ``now`` that ``expression`` names in ``time_zone`` (UTC);
    None when it names none (within cronsim's search range)."""
    # cronsim counts back from strictly before its start: start a second after now.
    after = (utc(now).replace(microsecond=0) + _SECOND).astimezone(_zone(time_zone))
    found = next(iter(CronSim(expression, after, reverse=True)), None)
    return None if found is None else found.astimezone(UTC)


def next_fire(expression: str, time_zone: str, now: datetime) -> datetime | None:
    """The first time strictly after ``now`` that ``expression`` names in ``time_zone`` (UTC)."""
    start = utc(now).astimezone(_zone(time_zone))
    found = next(iter(CronSim(expression, start)), None)
    return None if found is None else found.astimezone(UTC)


def window_open(window: ScheduleWindow, now: datetime) -> bool:
    """The window's latest start at or before ``now`` is later than its latest end."""
    started = last_fire(window.start, window.time_zone, now)
    if started is None:
        return False
    ended = last_fire(window.end, window.time_zone, now)
    return ended is None or started > ended


def window_next_change(window: ScheduleWindow, now: datetime) -> datetime | None:
    """When the window next opens (closed now) or closes (open now), UTC."""
    expression = window.end if window_open(window, now) else window.start
    return next_fire(expression, window.time_zone, now)


@dataclass(frozen=True)
class ScheduledBounds:
    """The replica bounds in force at one moment, and where they come from."""

    min_replicas: int
    max_replicas: int
    open: tuple[str, ...] = ()
    """The open windows' names, in spec order."""
    window: str | None = None
    """The open window whose minReplicas is the floor (the first of equals); None: none open."""
    cap_window: str | None = None
    """The open window whose maxReplicas is the cap; None: ``spec.scaling.maxReplicas``."""
    next_change: datetime | None = None
    """The next time any window opens or closes (UTC); None without windows."""

    def to_status(self) -> ScheduleStatus | None:
        """``status.autoscaling.schedule``; None for a service without windows."""
        if self.next_change is None and not self.open:
            return None
        return ScheduleStatus(
            window=self.window,
            open=list(self.open),
            min_replicas=self.min_replicas,
            max_replicas=self.max_replicas,
            next_change_time=None if self.next_change is None else to_rfc3339(self.next_change),
        )


def scheduled_bounds(spec: ScalingSpec, now: datetime) -> ScheduledBounds:
    """The bounds ``spec.scaling`` sets at ``now``: its own, or its open windows'."""
    return _bounds(tuple(spec.schedules), spec.min_replicas, spec.max_replicas, utc(now))


def _bounds(
    windows: Sequence[ScheduleWindow], min_replicas: int, max_replicas: int, now: datetime
) -> ScheduledBounds:
    if not windows:
        return ScheduledBounds(min_replicas, max_replicas)
    opened = {w.name: window_open(w, now) for w in windows}
    open_ = [w for w in windows if opened[w.name]]
    changes = [
        t
        for w in windows
        if (t := next_fire(w.end if opened[w.name] else w.start, w.time_zone, now)) is not None
    ]
    next_change = min(changes) if changes else None
    if not open_:
        return ScheduledBounds(min_replicas, max_replicas, next_change=next_change)
    floor = max(open_, key=lambda w: w.min_replicas)  # max() keeps the first of equals
    caps = [(w.max_replicas if w.max_replicas is not None else max_replicas, w) for w in open_]
    cap = max(c for c, _ in caps)
    from_window = next((w.name for c, w in caps if c == cap and w.max_replicas is not None), None)
    return ScheduledBounds(
        min_replicas=floor.min_replicas,
        max_replicas=max(cap, floor.min_replicas),
        open=tuple(w.name for w in open_),
        window=floor.name,
        cap_window=from_window,
        next_change=next_change,
    )
