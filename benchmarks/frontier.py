"""The cost-SLO frontier: every scaler with its knob swept, per trace.

Each (scaler, setting) run gives one point: GPU-hours over the trace and the share of its
requests whose TTFT is within 2 s. Per trace and scaler the frontier is the cheapest point
that reaches 99%; the goals compare the operator's with the best baseline's (the static fleet
is a baseline). ``python -m benchmarks.autoscale --frontier`` prints the tables, saves the
plot and, with ``--json``, ends with the JSON object of :func:`frontier_json`.

Figures, not assertions: the goals are reported met or missed, never asserted.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

from llmservice_operator.autoscale import PolicyConfig
from llmservice_operator.autoscale.policy import SURGE_HALF_LIFE_SECONDS

from .fleet import Scaler
from .scalers import (
    WVA_HPA_DOWN,
    WVA_HPA_UP,
    ApaScaler,
    DynamoScaler,
    HpaScaler,
    KedaScaler,
    Metric,
    OperatorScaler,
    StaticScaler,
    WvaScaler,
)

__all__ = [
    "ATTAINMENT_GOAL",
    "BASELINE_SHARE_GOAL",
    "OPERATOR",
    "OPERATOR_COLD",
    "Point",
    "Setting",
    "Summary",
    "across_table",
    "baseline_settings",
    "frontier_json",
    "frontier_table",
    "goal_lines",
    "operator_settings",
    "pareto",
    "plot_frontier",
    "points_table",
    "summarize",
]

#: The SLO the frontier is drawn at: TTFT <= 2 s for this share of requests.
ATTAINMENT_GOAL = 0.99
#: At that attainment the operator uses at most this share of the best baseline's GPU-hours.
BASELINE_SHARE_GOAL = 0.8
OPERATOR = "operator"
OPERATOR_COLD = "operator (cold)"
STATIC = "static (peak)"


@dataclass(frozen=True)
class Point:
    scaler: str
    setting: str
    gpu_hours: float
    attainment: float
    """TTFT <= 2 s, a fraction."""


@dataclass(frozen=True)
class Setting:
    """One scaler at one setting: ``make()`` builds a fresh one for a run."""

    scaler: str
    setting: str
    make: Callable[[], Scaler]


@dataclass(frozen=True)
class BaselineContext:
    """What the baselines are configured from."""

    min_replicas: int
    max_replicas: int
    peak_replicas: int
    target_queue_depth: float
    kv_capacity_tokens: int
    max_num_seqs: int
    wall_time: Callable[[float, int, float], float]


def _hpa(metric: Metric, targets: Iterable[float], c: BaselineContext) -> list[Setting]:
    label = {"waiting": "HPA queue", "running": "HPA running", "kv": "HPA KV"}[metric]
    return [
        Setting(
            label,
            f"target {t:g}",
            functools.partial(
                HpaScaler,
                target=t,
                min_replicas=c.min_replicas,
                max_replicas=c.max_replicas,
                metric=metric,
                name=f"{label} {t:g}",
            ),
        )
        for t in targets
    ]


def _keda(metric: Metric, targets: Iterable[float], c: BaselineContext) -> list[Setting]:
    label = {"waiting": "KEDA queue", "running": "KEDA running", "kv": "KEDA KV"}[metric]
    return [
        Setting(
            label,
            f"target {t:g}",
            functools.partial(
                KedaScaler,
                target=t,
                min_replica_count=0,
                max_replicas=c.max_replicas,
                metric=metric,
                name=f"{label} {t:g}",
            ),
        )
        for t in targets
    ]


#: The knob of each baseline, swept around its documented default. Queue depth: 0.5 to the
#: benchmark's default target of 14 (``max_num_seqs // 8``); running requests: a full replica
#: runs 114, one at 80% of its throughput about 40; KV usage: a replica at 80% of its
#: throughput uses about a quarter of its pool (a long KV pool: 235k tokens for 114 sequences
#: of ~1.5k), so the HPA-style 0.8 is shown with the levels that ever trigger.
QUEUE_TARGETS = (0.5, 1.0, 2.0, 4.0, 8.0, 14.0)
KEDA_QUEUE_TARGETS = (0.5, 1.0, 2.0, 4.0, 14.0)
RUNNING_TARGETS = (16.0, 24.0, 32.0, 48.0, 64.0)
KEDA_RUNNING_TARGETS = (24.0, 32.0, 48.0)
KV_TARGETS = (0.1, 0.15, 0.2, 0.3, 0.8)
#: WVA: (label, scale-up threshold, scale-down boundary, the HPA's stabilization windows).
WVA_SETTINGS = (
    ("defaults (0.85/0.70, HPA 240 s)", 0.85, 0.70, 240.0),
    ("0.85/0.70, HPA 0 s", 0.85, 0.70, 0.0),
    ("0.70/0.50, HPA 0 s", 0.70, 0.50, 0.0),
    ("0.50/0.35, HPA 0 s", 0.50, 0.35, 0.0),
    ("0.30/0.20, HPA 0 s", 0.30, 0.20, 0.0),
)
#: APA: (label, metric, target).
APA_SETTINGS: tuple[tuple[str, Metric, float], ...] = (
    ("KV 0.5 (the sample)", "kv", 0.5),
    ("KV 0.2", "kv", 0.2),
    ("KV 0.1", "kv", 0.1),
    ("running 32", "running", 32.0),
    ("running 24", "running", 24.0),
)
#: Dynamo: (label, adjustment interval s, TTFT target ms, ITL target ms).
DYNAMO_SETTINGS = (
    ("defaults (180 s, TTFT 500 ms, ITL 50 ms)", 180.0, 500.0, 50.0),
    ("60 s, ITL 50 ms", 60.0, 500.0, 50.0),
    ("180 s, ITL 40 ms", 180.0, 500.0, 40.0),
    ("60 s, ITL 35 ms", 60.0, 500.0, 35.0),
)


def baseline_settings(c: BaselineContext) -> list[Setting]:
    """Every baseline with its knob swept (the defaults among them)."""
    lo, hi = c.min_replicas, c.max_replicas
    out = [
        *_hpa("waiting", QUEUE_TARGETS, c),
        *_keda("waiting", KEDA_QUEUE_TARGETS, c),
        *_hpa("running", RUNNING_TARGETS, c),
        *_keda("running", KEDA_RUNNING_TARGETS, c),
        *_hpa("kv", KV_TARGETS, c),
    ]
    for label, up, down, window in WVA_SETTINGS:
        make = functools.partial(
            WvaScaler,
            min_replicas=lo,
            max_replicas=hi,
            kv_capacity_tokens=c.kv_capacity_tokens,
            max_num_seqs=c.max_num_seqs,
            scale_up_threshold=up,
            scale_down_boundary=down,
            hpa_up=replace(WVA_HPA_UP, stabilization_s=window),
            hpa_down=replace(WVA_HPA_DOWN, stabilization_s=window),
            name=f"WVA {label}",
        )
        out.append(Setting("WVA", label, make))
    for label, metric, target in APA_SETTINGS:
        make_apa = functools.partial(
            ApaScaler,
            target=target,
            min_replicas=lo,
            max_replicas=hi,
            metric=metric,
            name=f"APA {label}",
        )
        out.append(Setting("APA", label, make_apa))
    for label, interval, ttft, itl in DYNAMO_SETTINGS:
        make_dynamo = functools.partial(
            DynamoScaler,
            min_replicas=lo,
            max_replicas=hi,
            wall_time=c.wall_time,
            kv_capacity_tokens=c.kv_capacity_tokens,
            max_num_seqs=c.max_num_seqs,
            ttft_ms=ttft,
            itl_ms=itl,
            interval_s=interval,
            name=f"Dynamo {label}",
        )
        out.append(Setting("Dynamo", label, make_dynamo))
    out.append(
        Setting(STATIC, "peak minute at 90%", functools.partial(StaticScaler, c.peak_replicas))
    )
    return out


class OperatorVariant(NamedTuple):
    """One setting of the operator's own knob."""

    label: str
    burst_headroom: float
    spare: float
    utilization: float
    min_burst_headroom: float | None = None
    """The headroom follows the volatility of arrivals down to this (None: fixed)."""
    spare_follows: bool = False
    half_life_s: float = SURGE_HALF_LIFE_SECONDS
    """How fast a surge is forgotten (with ``min_burst_headroom``)."""


#: The operator's own knob. The default (first) is the shipped rule: ``R + c sqrt(R) +
#: min(1, R)``, at least ``R / 0.8``, its burst headroom ``c`` following the surges of arrivals
#: between 2 and 1 (half-life 60 min). Then the rule with a fixed ``c`` (2: the default before
#: the surge memory), other floors and half-lives, no spare replica, or an explicit
#: ``targetUtilization`` (no headroom on top).
OPERATOR_VARIANTS: tuple[OperatorVariant, ...] = (
    OperatorVariant("default (surge 2-1 sqrt(R) + 1)", 2.0, 1.0, 0.8, 1.0),
    OperatorVariant("fixed 2 sqrt(R) + 1", 2.0, 1.0, 0.8),
    OperatorVariant("fixed 1.5 sqrt(R) + 1", 1.5, 1.0, 0.8),
    OperatorVariant("fixed 1 sqrt(R) + 1", 1.0, 1.0, 0.8),
    OperatorVariant("fixed 2 sqrt(R), no spare", 2.0, 0.0, 0.8),
    OperatorVariant("surge 2-0.5 sqrt(R) + 1", 2.0, 1.0, 0.8, 0.5),
    OperatorVariant("surge 2-1, half-life 30 min", 2.0, 1.0, 0.8, 1.0, False, 1800.0),
    OperatorVariant("surge 2-0, spare follows", 2.0, 1.0, 0.8, 0.0, True),
    OperatorVariant("targetUtilization 0.5", 0.0, 0.0, 0.5),
    OperatorVariant("targetUtilization 0.6", 0.0, 0.0, 0.6),
    OperatorVariant("targetUtilization 0.65", 0.0, 0.0, 0.65),
    OperatorVariant("targetUtilization 0.7", 0.0, 0.0, 0.7),
    OperatorVariant("targetUtilization 0.8", 0.0, 0.0, 0.8),
)


#: The shipped rule's label among the operator's settings.
DEFAULT_SETTING = OPERATOR_VARIANTS[0].label


def operator_settings(
    config: PolicyConfig,
    make: Callable[[PolicyConfig], OperatorScaler],
    variants: Sequence[OperatorVariant] = OPERATOR_VARIANTS,
    scaler: str = OPERATOR,
) -> list[Setting]:
    """The operator at each of ``variants`` of ``config`` (``make`` adds its start)."""
    return [
        Setting(
            scaler,
            v.label,
            functools.partial(
                make,
                replace(
                    config,
                    burst_headroom=v.burst_headroom,
                    spare_replicas=v.spare,
                    target_utilization=v.utilization,
                    min_burst_headroom=v.min_burst_headroom,
                    spare_follows_surge=v.spare_follows,
                    surge_half_life_seconds=v.half_life_s,
                ),
            ),
        )
        for v in variants
    ]


# -- summaries ---------------------------------------------------------------------------------


def _cheapest_at(points: Iterable[Point], attainment: float) -> Point | None:
    ok = [p for p in points if p.attainment >= attainment - 1e-12]
    return min(ok, key=lambda p: (p.gpu_hours, -p.attainment)) if ok else None


def _is_baseline(scaler: str) -> bool:
    return scaler not in (OPERATOR, OPERATOR_COLD)


@dataclass(frozen=True)
class Summary:
    """One trace's frontier."""

    operator_at_99: Point | None
    best_baseline_at_99: Point | None
    cheapest_baseline_best: Point
    """The baseline point with the highest attainment (the cheapest of those)."""
    static: Point
    operator_at_baseline_best: Point | None
    """The operator's cheapest point at least as good as ``cheapest_baseline_best``."""
    operator_at_static: Point | None
    """The operator's cheapest point at least as good as the static fleet."""

    @property
    def baseline_goal_met(self) -> bool:
        """At 99% at most 0.8x the best baseline's GPU-hours; where no baseline reaches 99%,
        at least the best baseline's attainment for no more than its GPU-hours."""
        if self.best_baseline_at_99 is not None:
            op = self.operator_at_99
            return op is not None and op.gpu_hours <= (
                BASELINE_SHARE_GOAL * self.best_baseline_at_99.gpu_hours + 1e-9
            )
        op = self.operator_at_baseline_best
        return op is not None and op.gpu_hours <= self.cheapest_baseline_best.gpu_hours + 1e-9

    @property
    def static_goal_met(self) -> bool:
        """At least the static fleet's attainment for no more than its GPU-hours."""
        op = self.operator_at_static
        return op is not None and op.gpu_hours <= self.static.gpu_hours + 1e-9


def summarize(points: Sequence[Point]) -> Summary:
    baselines = [p for p in points if _is_baseline(p.scaler)]
    operator = [p for p in points if p.scaler == OPERATOR]
    best = max(baselines, key=lambda p: (p.attainment, -p.gpu_hours))
    static = next(p for p in points if p.scaler == STATIC)
    return Summary(
        operator_at_99=_cheapest_at(operator, ATTAINMENT_GOAL),
        best_baseline_at_99=_cheapest_at(baselines, ATTAINMENT_GOAL),
        cheapest_baseline_best=best,
        static=static,
        operator_at_baseline_best=_cheapest_at(operator, best.attainment),
        operator_at_static=_cheapest_at(operator, static.attainment),
    )


def _p(point: Point | None) -> str:
    if point is None:
        return "-"
    return f"{point.gpu_hours:.2f} ({point.attainment:.2%}, {point.setting})"


def points_table(trace: str, points: Sequence[Point]) -> str:
    """Every point of one trace, by scaler then GPU-hours."""
    lines = [
        "| trace | scaler | setting | GPU-hours | TTFT <= 2 s |",
        "|---|---|---|---:|---:|",
    ]
    for p in sorted(points, key=lambda p: (p.scaler, p.gpu_hours)):
        lines.append(
            f"| {trace} | {p.scaler} | {p.setting} | {p.gpu_hours:.2f} | {p.attainment:.2%} |"
        )
    return "\n".join(lines)


def frontier_table(traces: Mapping[str, Sequence[Point]]) -> str:
    """Per trace and scaler: the cheapest point reaching 99% (GPU-hours, its setting), or the
    best it reaches."""
    lines = [
        "| trace | scaler | cheapest at >= 99% (GPU-h) | setting | best TTFT <= 2 s (GPU-h) |",
        "|---|---|---:|---|---:|",
    ]
    for trace, points in traces.items():
        scalers = sorted({p.scaler for p in points}, key=_order)
        for name in scalers:
            mine = [p for p in points if p.scaler == name]
            at = _cheapest_at(mine, ATTAINMENT_GOAL)
            top = max(mine, key=lambda p: (p.attainment, -p.gpu_hours))
            lines.append(
                f"| {trace} | {name} | {f'{at.gpu_hours:.2f}' if at else '-'} "
                f"| {at.setting if at else '-'} | {top.attainment:.2%} ({top.gpu_hours:.2f}) |"
            )
    return "\n".join(lines)


def _order(name: str) -> tuple[int, str]:
    first = {OPERATOR: 0, OPERATOR_COLD: 1, STATIC: 2}
    return (first.get(name, 3), name)


def goal_lines(traces: Mapping[str, Sequence[Point]], realistic: str = "day") -> list[str]:
    """The goals of the frontier, per trace, in words."""
    out = []
    for trace, points in traces.items():
        s = summarize(points)
        if s.best_baseline_at_99 is not None:
            b = s.best_baseline_at_99
            op = s.operator_at_99
            ratio = f"{op.gpu_hours / b.gpu_hours:.2f}x" if op else "never reaches 99%"
            out.append(
                f"{trace}: at 99% the operator {_p(op)} against the best baseline "
                f"{b.scaler} {_p(b)}: {ratio} "
                f"(goal <= {BASELINE_SHARE_GOAL:g}x: {'met' if s.baseline_goal_met else 'missed'})"
            )
        else:
            b = s.cheapest_baseline_best
            out.append(
                f"{trace}: no baseline reaches 99%; the best is {b.scaler} {_p(b)}; the operator "
                f"at that attainment {_p(s.operator_at_baseline_best)} "
                f"(goal <= its GPU-hours: {'met' if s.baseline_goal_met else 'missed'})"
            )
        verdict = "met" if s.static_goal_met else "missed"
        kind = "goal" if trace == realistic else "tie"
        out.append(
            f"{trace}: static {_p(s.static)}; the operator at >= its attainment "
            f"{_p(s.operator_at_static)} ({kind}: {verdict})"
        )
        for c, w in _cold_and_warm(points):
            gap = (w.attainment - c.attainment) * 100
            out.append(
                f"{trace}: cold {_p(c)} against warm {_p(w)}: {abs(gap):.2f} points "
                f"{'behind' if gap > 0 else 'ahead'} "
                f"(goal <= 0.5: {'met' if gap <= 0.5 + 1e-9 else 'missed'}; static "
                f"{'reached' if c.attainment >= s.static.attainment else 'not reached'})"
            )
    return out


def _ratio(op: Point | None, base: Point | None) -> str:
    if base is None:
        return "-"
    return "never" if op is None else f"{op.gpu_hours / base.gpu_hours:.2f}x"


def _gh(point: Point | None) -> str:
    return "-" if point is None else f"{point.gpu_hours:.2f} ({point.attainment:.2%})"


def _cold_and_warm(points: Sequence[Point]) -> list[tuple[Point, Point]]:
    """Each cold-start point of the operator with its warm point of the same setting."""
    warm = {p.setting: p for p in points if p.scaler == OPERATOR}
    return [(c, warm[c.setting]) for c in points if c.scaler == OPERATOR_COLD and c.setting in warm]


def across_table(runs: Mapping[str, Mapping[str, Sequence[Point]]]) -> str:
    """The goals of several whole frontiers (``runs``: a label, e.g. the seed and arrival mode,
    to each run's traces), a row per run and trace, then how many rows meet each goal. GPU-hours
    (TTFT <= 2 s); "baseline": at 99% the operator's cheapest against the best baseline's (or,
    where none reaches 99%, the operator at the best baseline's attainment against it);
    "static": the operator's cheapest at the static fleet's attainment against it; the default
    and its cold start."""
    lines = [
        "| run | trace | operator at 99% | best baseline at 99% | ratio | baseline goal "
        "| static | operator at static's | static goal | default | cold - warm (points) |",
        "|---|---|---:|---|---:|---|---:|---:|---|---:|---:|",
    ]
    met = {"baseline": 0, "static": 0, "cold": 0}
    rows = 0
    for label, traces in runs.items():
        for trace, points in traces.items():
            s = summarize(points)
            rows += 1
            default = next(
                (p for p in points if (p.scaler, p.setting) == (OPERATOR, DEFAULT_SETTING)), None
            )
            pair = next(iter(_cold_and_warm(points)), None)
            gap = None if pair is None else pair[1].attainment - pair[0].attainment
            met["baseline"] += s.baseline_goal_met
            met["static"] += s.static_goal_met
            met["cold"] += gap is not None and gap * 100 <= 0.5 + 1e-9
            if s.best_baseline_at_99 is not None:
                base = f"{s.best_baseline_at_99.scaler} {_gh(s.best_baseline_at_99)}"
                ratio = _ratio(s.operator_at_99, s.best_baseline_at_99)
            else:
                b = s.cheapest_baseline_best
                base = f"none; best {b.scaler} {_gh(b)}"
                op = s.operator_at_baseline_best
                ratio = (
                    "never"
                    if op is None
                    else f"{op.gpu_hours / b.gpu_hours:.2f}x at {b.attainment:.2%}"
                )
            lines.append(
                f"| {label} | {trace} | {_gh(s.operator_at_99)} | {base} | {ratio} "
                f"| {'met' if s.baseline_goal_met else '**missed**'} | {_gh(s.static)} "
                f"| {_gh(s.operator_at_static)} "
                f"| {'met' if s.static_goal_met else '**missed**'} | {_gh(default)} "
                f"| {'-' if gap is None else f'{-gap * 100:+.2f}'} |"
            )
    lines.append("")
    lines.append(
        f"{rows} runs of a trace: the baseline goal met on {met['baseline']}, the static fleet "
        f"on {met['static']}, cold within 0.5 points of warm on {met['cold']}."
    )
    return "\n".join(lines)


def frontier_json(traces: Mapping[str, Sequence[Point]]) -> dict[str, Any]:
    """``{"traces": {NAME: {"points": {SCALER: [...]}, "operatorGpuHoursAt99", "bestBaselineAt99",
    "cheapestBaselineBest", "static"}}}``: attainment as a fraction; the static fleet counts as
    a baseline. A trace without the static fleet's point (a partial ``--only`` run) has its
    points and null figures."""
    out: dict[str, Any] = {}
    for trace, points in traces.items():
        by_scaler: dict[str, list[dict[str, Any]]] = {}
        for p in points:
            by_scaler.setdefault(p.scaler, []).append(
                {
                    "setting": p.setting,
                    "gpuHours": _r(p.gpu_hours),
                    "attainment2s": _r(p.attainment, 6),
                }
            )
        if not any(p.scaler == STATIC for p in points) or not any(
            _is_baseline(p.scaler) for p in points
        ):
            # A partial run (``--only``): its points, to merge; the figures need the static fleet.
            out[trace] = {"points": by_scaler, **dict.fromkeys(_SUMMARY_KEYS)}
            continue
        s = summarize(points)
        best = s.best_baseline_at_99
        cheapest = s.cheapest_baseline_best
        out[trace] = {
            "points": by_scaler,
            "operatorGpuHoursAt99": None
            if s.operator_at_99 is None
            else _r(s.operator_at_99.gpu_hours),
            "bestBaselineAt99": (
                None if best is None else {"scaler": best.scaler, "gpuHours": _r(best.gpu_hours)}
            ),
            "cheapestBaselineBest": {
                "scaler": cheapest.scaler,
                "gpuHours": _r(cheapest.gpu_hours),
                "attainment2s": _r(cheapest.attainment, 6),
            },
            "static": {
                "gpuHours": _r(s.static.gpu_hours),
                "attainment2s": _r(s.static.attainment, 6),
            },
        }
    return {"traces": out}


_SUMMARY_KEYS = ("operatorGpuHoursAt99", "bestBaselineAt99", "cheapestBaselineBest", "static")


def _r(x: float, digits: int = 3) -> float:
    return round(x, digits) if math.isfinite(x) else x


def points_from_json(data: Mapping[str, Any]) -> dict[str, list[Point]]:
    """The points of a :func:`frontier_json` object (to merge runs)."""
    out: dict[str, list[Point]] = {}
    for trace, body in data["traces"].items():
        out[trace] = [
            Point(scaler, p["setting"], float(p["gpuHours"]), float(p["attainment2s"]))
            for scaler, points in body["points"].items()
            for p in points
        ]
    return out


def pareto(points: Iterable[Point]) -> list[Point]:
    """The points no other point beats on both counts (fewer GPU-hours and at least the
    attainment), by GPU-hours: a scaler's frontier."""
    out: list[Point] = []
    for p in sorted(points, key=lambda p: (p.gpu_hours, -p.attainment)):
        if not out or p.attainment > out[-1].attainment:
            out.append(p)
    return out


#: The plot's attainment ticks (a logit scale spreads 99% from 99.5%).
_TICKS = (0.6, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.998)


def plot_frontier(traces: Mapping[str, Sequence[Point]], path: Path, title: str) -> None:
    """GPU-hours on x, TTFT <= 2 s attainment on y (logit scale: 99% and 99.5% apart), one line
    per scaler through its frontier (the settings no other of its settings beats), its other
    settings as faint dots; the static fleet a star; 99% dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    names = sorted({p.scaler for points in traces.values() for p in points}, key=_order)
    cmap = plt.get_cmap("tab10")
    others = [n for n in names if n not in (OPERATOR, STATIC)]
    colors = {name: cmap(i % 10) for i, name in enumerate(others)}
    colors[OPERATOR] = (0.0, 0.0, 0.0, 1.0)
    colors[STATIC] = (0.85, 0.1, 0.1, 1.0)
    fig, axes = plt.subplots(1, len(traces), figsize=(5.5 * len(traces), 5.4), squeeze=False)
    lo, hi = 0.6, 0.998

    def clip(a: float) -> float:
        return min(max(a, lo + 1e-4), hi - 1e-4)

    for ax, (trace, points) in zip(axes[0], traces.items(), strict=True):
        for name in names:
            mine = [p for p in points if p.scaler == name]
            if not mine:
                continue
            color = colors[name]
            if name == STATIC:
                (p,) = mine[:1]
                ax.plot([p.gpu_hours], [clip(p.attainment)], "*", ms=14, color=color, label=name)
                continue
            front = pareto(mine)
            bold = name == OPERATOR
            ax.plot(
                [p.gpu_hours for p in front],
                [clip(p.attainment) for p in front],
                marker="o",
                ms=5 if bold else 3.5,
                lw=2.2 if bold else 1.1,
                ls="--" if name == OPERATOR_COLD else "-",
                color=color,
                label=name,
            )
            rest = [p for p in mine if p not in front]
            ax.plot(
                [p.gpu_hours for p in rest],
                [clip(p.attainment) for p in rest],
                ".",
                ms=4,
                color=color,
                alpha=0.35,
            )
        ax.axhline(ATTAINMENT_GOAL, color="grey", ls=":", lw=1.0)
        ax.set_yscale("logit")
        ax.set_ylim(lo, hi)
        ax.yaxis.set_major_locator(FixedLocator(list(_TICKS)))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:.1%}".replace(".0%", "%")))
        ax.set_title(trace)
        ax.set_xlabel("GPU-hours")
        ax.grid(True, lw=0.3)
    axes[0][0].set_ylabel("requests with TTFT <= 2 s")
    handles: dict[str, Any] = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    ordered = sorted(handles, key=_order)
    fig.legend(
        [handles[n] for n in ordered],
        ordered,
        loc="lower center",
        ncol=2 * len(traces) + 1,
        fontsize=8,
        frameon=False,
    )
    fig.suptitle(title, fontsize=10)
    fig.subplots_adjust(left=0.15 / len(traces), right=0.98, top=0.88, bottom=0.24, wspace=0.22)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=72)
    plt.close(fig)


def dump(data: Mapping[str, Any]) -> str:
    return json.dumps(data, sort_keys=False)
