"""When a failed reconcile is tried again (pure: the caller gives the randomness and the time).

- Per-service exponential backoff: 5 ms, doubling with each failure in a row, up to about
  1,000 s (controller-runtime's default), with *jitter*: each delay is drawn from the upper half
  of its step, so a thousand services that failed together (the API server restarting) come
  back spread out, not all in the same instant.
- An answer that asks to wait (429 Too Many Requests, or a 5xx, with ``Retry-After``, as
  client-go reads it) is not tried again before the wait it asks for, up to
  RETRY_AFTER_MAX_S: a wait longer than that (a proxy's hour) would freeze the service.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

__all__ = [
    "BACKOFF_BASE_S",
    "BACKOFF_MAX_S",
    "RETRY_AFTER_MAX_S",
    "Retry",
    "backoff_seconds",
    "retry",
    "retry_after_seconds",
]

BACKOFF_BASE_S = 0.005
BACKOFF_MAX_S = 1000.0
#: The longest Retry-After honoured. The API server asks for 1 s (API Priority and Fairness,
#: max-requests-inflight, a shutdown); a minute is ample for anything it means.
RETRY_AFTER_MAX_S = 60.0


@dataclass(frozen=True)
class Retry:
    delay_s: float
    """When to reconcile the service again."""
    not_before_s: float | None = None
    """Nothing reconciles it before this (the server's Retry-After); None: anything may."""


def backoff_seconds(failures: int, jitter: float) -> float:
    """The delay before retry number ``failures`` (1-based): the step ``5 ms * 2^(failures-1)``,
    at most BACKOFF_MAX_S, times ``0.5 + jitter / 2`` for ``jitter`` drawn from [0, 1)."""
    step = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2.0 ** min(max(0, failures - 1), 64))
    return step * (0.5 + 0.5 * min(max(jitter, 0.0), 1.0))


def retry_after_seconds(value: str | None, now: datetime) -> float | None:
    """A ``Retry-After`` header's wait from ``now``: seconds, or an HTTP date; None when there is
    none or it reads as neither."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - now).total_seconds())
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def retry(
    failures: int, jitter: float, status: int | None, retry_after: str | None, now: datetime
) -> Retry:
    """When to try again after failure number ``failures``, which the API server answered with
    ``status`` and ``retry_after`` (None when it did not answer)."""
    delay = backoff_seconds(failures, jitter)
    asks_to_wait = status is not None and (status == 429 or 500 <= status < 600)
    wait = retry_after_seconds(retry_after, now) if asks_to_wait else None
    if wait is None:
        return Retry(delay)
    not_before = min(wait, RETRY_AFTER_MAX_S)
    # After the wait, spread as the backoff is: the services it answered come back apart.
    spread = min(RETRY_AFTER_MAX_S, not_before * (1.0 + 0.5 * min(max(jitter, 0.0), 1.0)))
    return Retry(max(delay, spread, not_before), not_before)
