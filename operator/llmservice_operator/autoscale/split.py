"""Sharing one replica count between the stable and candidate revisions during a rollout.

The autoscaler decides one total for the service (from the samples of both revisions'
replicas: the load balancer sends both the same kind of request). While a canary or
blue-green rollout sends ``weight_percent`` of the traffic to the candidate, each revision
gets replicas for its share, rounded *up*, so neither is starved and both move together when
the total moves: the two are scaled in proportion, never one against the other.
"""

from __future__ import annotations

__all__ = ["split_replicas"]


def split_replicas(total: int, weight_percent: int) -> tuple[int, int]:
    """``(stable, candidate)`` replicas for ``total`` with ``weight_percent`` on the candidate.

    Each side gets ``ceil(total x share)``, and at least one replica while its share of the
    traffic is above zero, so the stable revision never has fewer replicas than its share of
    the load needs (``stable >= ceil(total x (100 - weight) / 100)``) and the candidate can
    serve even a 1% step. The sum is at most ``total + 1`` (both sides round up), or ``total``
    at weights 0 and 100 and at ``total`` 0 (scaled to zero: nothing to share).

    Blue-green: the preview is ``split_replicas(total, 100)[1]`` candidate replicas while the
    stable side keeps ``split_replicas(total, 0)[0]``, then the switch moves the weight.

    >>> split_replicas(10, 10)   # 9 for 90% of the load, 1 for 10%
    (9, 1)
    >>> split_replicas(5, 50)    # 2.5 each, rounded up on both sides
    (3, 3)
    >>> split_replicas(3, 1)     # 2.97 -> 3 stay; the canary still gets one
    (3, 1)
    """
    if total < 0:
        raise ValueError(f"total must be >= 0, got {total}")
    if not 0 <= weight_percent <= 100:
        raise ValueError(f"weight_percent must be within 0..100, got {weight_percent}")
    if total == 0:
        return 0, 0
    stable_share = 100 - weight_percent
    stable = -(-total * stable_share // 100)
    candidate = -(-total * weight_percent // 100)
    if stable_share > 0:
        stable = max(stable, 1)
    if weight_percent > 0:
        candidate = max(candidate, 1)
    return stable, candidate
