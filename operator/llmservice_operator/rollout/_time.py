"""Timestamps as the status stores them: RFC 3339, UTC, whole seconds (pure, no clock)."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["from_rfc3339", "to_rfc3339", "utc"]


def utc(moment: datetime) -> datetime:
    """`moment` in UTC; a naive datetime is taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def to_rfc3339(moment: datetime) -> str:
    return utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


def from_rfc3339(text: str) -> datetime:
    """Parse what :func:`to_rfc3339` (or Kubernetes) writes; ValueError for anything else."""
    return utc(datetime.fromisoformat(text.replace("Z", "+00:00")))
