"""What one load run measured, summarised as percentiles, rates and counts. Pure.

All times are seconds on the run's clock: wall seconds, or simulated seconds when the run was
time-scaled to match a simulator (``--time-scale``), so they compare with the simulator's
``/metrics`` directly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

__all__ = [
    "LoadReport",
    "Percentiles",
    "RequestRecord",
    "TargetCounts",
    "percentile",
    "summarize",
]


@dataclass(frozen=True)
class RequestRecord:
    """One request as the client saw it."""

    target: str
    start: float
    """Seconds from the start of the run at which it was sent."""
    ok: bool
    status: int | None
    """HTTP status; None when no response came (connection error, timeout)."""
    error: str | None = None
    """``http_<status>``, ``timeout``, ``connection``, ``cancelled`` or ``bad_stream``."""
    ttft: float | None = None
    tpot: float | None = None
    e2e: float | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100), interpolating linearly between ranks; None when empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is not within [0, 100]")
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class Percentiles:
    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Percentiles:
        return cls(
            count=len(values),
            mean=sum(values) / len(values) if values else None,
            p50=percentile(values, 50),
            p90=percentile(values, 90),
            p99=percentile(values, 99),
            max=max(values) if values else None,
        )


@dataclass(frozen=True)
class TargetCounts:
    requests: int = 0
    ok: int = 0
    errors: int = 0


@dataclass(frozen=True)
class LoadReport:
    requests: int
    completed: int
    errors: int
    error_rate: float
    duration_s: float
    throughput_rps: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    ttft_s: Percentiles
    tpot_s: Percentiles
    e2e_s: Percentiles
    per_target: dict[str, TargetCounts] = field(default_factory=dict)
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    time_scale: float = 1.0

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def to_text(self) -> str:
        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value * 1000:.1f}"

        lines = [
            f"requests      {self.requests} sent, {self.completed} ok, {self.errors} errors "
            f"({self.error_rate:.2%})",
            f"duration      {self.duration_s:.2f} s"
            + (f" (time scale {self.time_scale:g})" if self.time_scale != 1 else ""),
            f"throughput    {self.throughput_rps:.2f} req/s, "
            f"{self.output_tokens_per_s:.1f} output tok/s, {self.total_tokens_per_s:.1f} tok/s",
            f"{'latency (ms)':<13} {'p50':>9} {'p90':>9} {'p99':>9} {'mean':>9} {'max':>9}",
        ]
        for name, stats in (("TTFT", self.ttft_s), ("TPOT", self.tpot_s), ("E2E", self.e2e_s)):
            cells = (stats.p50, stats.p90, stats.p99, stats.mean, stats.max)
            lines.append(f"{name:<13} " + " ".join(f"{ms(c):>9}" for c in cells))
        if self.per_target:
            lines.append("targets")
            for url, counts in sorted(self.per_target.items()):
                lines.append(
                    f"  {url}  {counts.requests} sent, {counts.ok} ok, {counts.errors} errors"
                )
        if self.errors_by_kind:
            kinds = ", ".join(f"{k}={v}" for k, v in sorted(self.errors_by_kind.items()))
            lines.append(f"errors        {kinds}")
        return "\n".join(lines) + "\n"


def summarize(
    records: Sequence[RequestRecord], duration_s: float, time_scale: float = 1.0
) -> LoadReport:
    """Aggregate ``records`` of a run that lasted ``duration_s`` (first send to last answer)."""
    ok = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    per_target: dict[str, TargetCounts] = {}
    for record in records:
        counts = per_target.get(record.target, TargetCounts())
        per_target[record.target] = TargetCounts(
            requests=counts.requests + 1,
            ok=counts.ok + (1 if record.ok else 0),
            errors=counts.errors + (0 if record.ok else 1),
        )
    errors_by_kind: dict[str, int] = {}
    for record in failed:
        kind = record.error or "unknown"
        errors_by_kind[kind] = errors_by_kind.get(kind, 0) + 1
    output_tokens = sum(r.output_tokens for r in ok)
    total_tokens = output_tokens + sum(r.prompt_tokens for r in ok)
    per_second = 1 / duration_s if duration_s > 0 else 0.0
    return LoadReport(
        requests=len(records),
        completed=len(ok),
        errors=len(failed),
        error_rate=len(failed) / len(records) if records else 0.0,
        duration_s=duration_s,
        throughput_rps=len(ok) * per_second,
        output_tokens_per_s=output_tokens * per_second,
        total_tokens_per_s=total_tokens * per_second,
        ttft_s=Percentiles.of([r.ttft for r in ok if r.ttft is not None]),
        tpot_s=Percentiles.of([r.tpot for r in ok if r.tpot is not None]),
        e2e_s=Percentiles.of([r.e2e for r in ok if r.e2e is not None]),
        per_target=per_target,
        errors_by_kind=errors_by_kind,
        time_scale=time_scale,
    )
