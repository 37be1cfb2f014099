"""The leader election's three durations, as client-go names and checks them (pure: no I/O).

- ``leaseDuration``: how long a standby waits, from when it last *observed* the Lease record
  change, before it takes the Lease (written in the record as whole seconds).
- ``renewDeadline``: how long after the start of its last successful renewal the leader acts;
  shorter than ``leaseDuration``, so the leader stops before any standby may take over.
- ``retryPeriod``: the time between tries, jittered.

Defaults are client-go's (15 s, 10 s, 2 s); given only a lease duration, the other two keep
those proportions (a 6 s lease: 4 s and 0.8 s).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ACQUIRE_JITTER",
    "RENEW_JITTER",
    "LeaseTiming",
    "derived",
    "jittered",
    "timing_problem",
]

#: client-go's JitterFactor: a standby waits retryPeriod x (1 + up to 1.2) between tries.
ACQUIRE_JITTER = 1.2
#: The leader's tries: retryPeriod x (1 + up to 0.2), never more than 1.2 x retryPeriod, which
#: timing_problem keeps below renewDeadline (a renewal is always tried before the deadline).
RENEW_JITTER = 0.2
#: client-go's defaults, whose proportions apply to a lease duration given alone.
_LEASE_S, _DEADLINE_S, _RETRY_S = 15.0, 10.0, 2.0


def derived(
    lease_duration_s: float,
    renew_deadline_s: float | None = None,
    retry_period_s: float | None = None,
) -> tuple[float, float, float]:
    """The three durations of a lease duration; an unset deadline or period keeps client-go's
    proportions (10/15 and 2/15 of the lease)."""
    return (
        lease_duration_s,
        renew_deadline_s if renew_deadline_s is not None else
        lease_duration_s * _DEADLINE_S / _LEASE_S,
        retry_period_s if retry_period_s is not None else lease_duration_s * _RETRY_S / _LEASE_S,
    )  # fmt: skip


def timing_problem(
    lease_duration_s: float, renew_deadline_s: float, retry_period_s: float
) -> str | None:
    """What is wrong with these durations (client-go's checks), or None."""
    if retry_period_s <= 0:
        return f"retryPeriod ({retry_period_s:g}s) must be more than 0"
    if int(lease_duration_s) <= renew_deadline_s:
        return (
            f"renewDeadline ({renew_deadline_s:g}s) must be shorter than leaseDuration "
            f"({int(lease_duration_s)}s, as written in the Lease)"
        )
    if renew_deadline_s <= ACQUIRE_JITTER * retry_period_s:
        return (
            f"renewDeadline ({renew_deadline_s:g}s) must be more than {ACQUIRE_JITTER:g} x "
            f"retryPeriod ({retry_period_s:g}s)"
        )
    return None


@dataclass(frozen=True)
class LeaseTiming:
    lease_duration_s: float = _LEASE_S
    renew_deadline_s: float = _DEADLINE_S
    retry_period_s: float = _RETRY_S

    def __post_init__(self) -> None:
        problem = timing_problem(self.lease_duration_s, self.renew_deadline_s, self.retry_period_s)
        if problem is not None:
            raise ValueError(problem)

    @classmethod
    def for_lease(
        cls,
        lease_duration_s: float,
        renew_deadline_s: float | None = None,
        retry_period_s: float | None = None,
    ) -> LeaseTiming:
        """The timing of a lease duration (see ``derived``); ValueError if it does not hold."""
        return cls(*derived(lease_duration_s, renew_deadline_s, retry_period_s))

    @property
    def written_duration_s(self) -> int:
        """``spec.leaseDurationSeconds``: what every other replica times expiry by."""
        return int(self.lease_duration_s)

    @property
    def request_timeout_s(self) -> float:
        """Each Lease call's timeout: a quarter of the deadline, so that a call that hangs
        leaves time for more tries before it."""
        return max(0.5, self.renew_deadline_s / 4)


def jittered(period_s: float, factor: float, uniform: float) -> float:
    """client-go's ``wait.Jitter``: ``period_s`` plus up to ``factor`` x more (``uniform`` is
    a draw from [0, 1))."""
    return period_s * (1.0 + factor * uniform)
