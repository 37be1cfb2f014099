"""Timestamps as the status stores them: RFC 3339 in UTC (pure, no clock).

The one place that writes and reads them: conditions, rollout steps and analysis runs keep
whole seconds (as Kubernetes' own metav1.Time does); the autoscaler's history keeps
milliseconds, so that a restarted operator resumes its windows where they were.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["from_rfc3339", "to_rfc3339", "utc"]


def utc(moment: datetime) -> datetime:
    """`moment` in UTC; a naive datetime is taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def to_rfc3339(moment: datetime, *, milliseconds: bool = False) -> str:
    """``2024-06-10T06:13:20Z``; with ``milliseconds``, ``2024-06-10T06:13:20.500Z`` when the
    moment has a fraction of a second (truncated to the millisecond)."""
    stamp = utc(moment)
    text = stamp.strftime("%Y-%m-%dT%H:%M:%S")
    if milliseconds and stamp.microsecond:
        text += f".{stamp.microsecond // 1000:03d}"
    return text + "Z"


def from_rfc3339(text: str) -> datetime:
    """Parse what :func:`to_rfc3339` (or Kubernetes) writes, any offset; naive times are UTC.
    ValueError for anything else."""
    return utc(datetime.fromisoformat(text.replace("Z", "+00:00")))
