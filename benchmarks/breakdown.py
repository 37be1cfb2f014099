"""Per-minute breakdown of two runs of the same trace: where one misses the SLO and spends.

A frontier goal is a total over the trace (GPU-hours, the share of requests within 2 s); when
the operator misses one, the minutes say why: which minutes its late requests fall in, and
where it holds more replicas than the scaler it is compared with. ``python -m
benchmarks.autoscale --frontier --minutes`` prints one for every goal the operator misses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .fleet import FleetResult

__all__ = ["Minute", "compare_minutes", "minutes"]


@dataclass(frozen=True)
class Minute:
    """One bucket of a run: what arrived in it, what of that was late, what the fleet held."""

    start_s: float
    """Seconds from the trace's start (the pre-roll excluded)."""
    arrivals: int
    """Requests that arrived in the bucket and finished (their TTFT is known)."""
    late: int
    """Of those, the ones whose TTFT exceeds the SLO."""
    replicas: float
    """Replicas held (loading or ready, not draining), time-weighted over the bucket."""


def minutes(
    result: FleetResult,
    measure_from: float,
    duration_s: float,
    slo_s: float = 2.0,
    bucket_s: float = 60.0,
) -> list[Minute]:
    """``result`` in buckets of ``bucket_s`` from ``measure_from`` over ``duration_s``."""
    count = max(1, math.ceil(duration_s / bucket_s))
    arrivals = [0] * count
    late = [0] * count
    for arrived, ttft in zip(result.arrivals, result.ttft, strict=True):
        index = int((arrived - measure_from) // bucket_s)
        if 0 <= index < count:
            arrivals[index] += 1
            late[index] += ttft > slo_s
    held = [0.0] * count
    timeline = result.replica_timeline
    end = measure_from + duration_s
    for i, (t, n) in enumerate(timeline):
        stop = timeline[i + 1][0] if i + 1 < len(timeline) else end
        lo, hi = max(t, measure_from), min(stop, end)
        while lo < hi:
            index = int((lo - measure_from) // bucket_s)
            edge = min(hi, measure_from + (index + 1) * bucket_s)
            held[index] += n * (edge - lo)
            lo = edge
    return [
        Minute(
            i * bucket_s,
            arrivals[i],
            late[i],
            held[i] / min(bucket_s, duration_s - i * bucket_s),
        )
        for i in range(count)
    ]


def compare_minutes(
    label_a: str,
    a: Sequence[Minute],
    label_b: str,
    b: Sequence[Minute],
    top: int = 12,
    group: int = 10,
) -> str:
    """Two runs of one trace side by side: per ``group`` buckets (late requests and mean
    replicas of each), then the ``top`` buckets where ``a`` has the most late requests more
    than ``b``, and the ``top`` where it holds the most replicas more."""
    if len(a) != len(b):
        raise ValueError(f"the runs differ in length: {len(a)} and {len(b)} buckets")
    bucket = a[1].start_s - a[0].start_s if len(a) > 1 else 60.0
    lines = [
        f"a = {label_a}; b = {label_b}",
        "| minutes | arrivals | late a | late b | replicas a | replicas b |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for lo in range(0, len(a), group):
        chunk_a, chunk_b = a[lo : lo + group], b[lo : lo + group]
        lines.append(
            f"| {_span(chunk_a, bucket)} | {sum(m.arrivals for m in chunk_a)} "
            f"| {sum(m.late for m in chunk_a)} | {sum(m.late for m in chunk_b)} "
            f"| {_mean(chunk_a):.1f} | {_mean(chunk_b):.1f} |"
        )
    lines.append(
        f"| all | {sum(m.arrivals for m in a)} | {sum(m.late for m in a)} "
        f"| {sum(m.late for m in b)} | {_mean(a):.2f} | {_mean(b):.2f} |"
    )
    pairs = list(zip(a, b, strict=True))
    worse = sorted(pairs, key=lambda p: p[1].late - p[0].late)[:top]
    worse = [p for p in worse if p[0].late > p[1].late]
    if worse:
        lines.append(f"minutes where a is late more often than b (top {len(worse)}):")
        lines.extend(_minute_lines(sorted(worse, key=lambda p: p[0].start_s)))
    costlier = sorted(pairs, key=lambda p: p[1].replicas - p[0].replicas)[:top]
    costlier = [p for p in costlier if p[0].replicas > p[1].replicas]
    if costlier:
        extra = sum(max(0.0, x.replicas - y.replicas) for x, y in pairs)
        saved = sum(max(0.0, y.replicas - x.replicas) for x, y in pairs)
        lines.append(
            f"replica-minutes a holds beyond b: {extra * bucket / 60:.0f}, below b: "
            f"{saved * bucket / 60:.0f}; where a holds the most more (top {len(costlier)}):"
        )
        lines.extend(_minute_lines(sorted(costlier, key=lambda p: p[0].start_s)))
    return "\n".join(lines)


def _minute_lines(pairs: Sequence[tuple[Minute, Minute]]) -> list[str]:
    return [
        f"  minute {x.start_s / 60:5.0f}: {x.arrivals:5d} arrivals; late {x.late:4d} / "
        f"{y.late:4d}; replicas {x.replicas:5.2f} / {y.replicas:5.2f}"
        for x, y in pairs
    ]


def _span(chunk: Sequence[Minute], bucket: float) -> str:
    return f"{chunk[0].start_s / 60:.0f}-{(chunk[-1].start_s + bucket) / 60:.0f}"


def _mean(chunk: Sequence[Minute]) -> float:
    return sum(m.replicas for m in chunk) / len(chunk) if chunk else 0.0
