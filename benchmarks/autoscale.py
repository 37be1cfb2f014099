"""Autoscaling benchmark: this operator's policy against HPA, KEDA and a static fleet.

    python -m benchmarks.autoscale            # the table in docs/autoscaling.md (~40 s)
    python -m benchmarks.autoscale --quick    # 20-minute traces, a smoke run
    python -m benchmarks.autoscale --cold     # the operator starts with an empty status

A trace-driven discrete-event simulation (``benchmarks.fleet``) of replicas that each run the
simulator's engine model, sized by the operator's sizing package for Llama-3.1-70B-Instruct
in FP8 on 2x H100-80GB (TP=2, its default ``max_num_seqs``), with a 90-180 s start-up (GPU
node, image, weights) before a new replica serves, behind a least-request gateway (Envoy's
default power of two choices; ``--router least`` scans every replica). Every scaler sees the
same Prometheus scrapes (15 s) of the same fleet and the same sequence of start-up delays. Two traces
(``benchmarks.traces``): a compressed day with flash-crowd bursts (conversation mix) and the
Azure LLM inference 2023 coding shape. All scalers get bounds 1 (KEDA: 0, its default) to
1.25x the static fleet + 1; the static fleet holds the trace's peak minute at 90% of a
replica's throughput. Prints, per trace and scaler: the share of requests whose TTFT is within
2 s and 5 s, p50/p99 TTFT, GPU-hours (loading time included) and the most replicas.
Figures, not assertions.

The operator starts *warm* by default: its status holds the throughput it learned when the
service last saturated (``warm_history`` overloads one replica for five minutes through the
policy itself). A fresh install learns the throughput at its first saturation: ``--cold``
shows that. Either way every dynamic scaler (operator, HPA, KEDA) starts from the same fleet,
1.2x the replicas the opening rate needs, ``PREROLL_S`` (10 minutes) before the trace, with
the opening rate arriving (``preroll``): each settles into its own steady state before the
measured part begins. Only requests of the trace itself, and GPU time from its start, count.

Speed: the engines run at a token granularity of ``--token-scale`` (default 4): every
request's prompt and output are divided by it and each engine step stands for that many
decode iterations (step times, KV pool and batch budget scaled to match; the first token is
timed at the step's first decode iteration). It keeps the engine's queueing, batching and KV
pressure while cutting the steps to simulate four-fold; it adds a little to TTFT near
saturation (docs/autoscaling.md gives the measured difference). ``--token-scale 1`` runs the
unscaled model, a few times slower.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import random
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from llmservice_operator import sizing
from llmservice_operator.autoscale import (
    CapacityPrior,
    LearnedCapacity,
    PolicyConfig,
    ScaleHistory,
    TokenCapacity,
    default_target_queue_depth,
)
from llmservice_operator.autoscale.policy import DEFAULT_MIN_BURST_HEADROOM
from llmservice_operator.sim.engine import Arrival, simulate
from llmservice_operator.sim.profile import EngineProfile

from .breakdown import Minute, compare_minutes, minutes
from .fleet import FleetResult, Request, Router, Scaler, simulate_fleet
from .frontier import (
    OPERATOR,
    OPERATOR_COLD,
    OPERATOR_VARIANTS,
    STATIC,
    BaselineContext,
    Point,
    Setting,
    across_table,
    baseline_settings,
    dump,
    frontier_json,
    frontier_table,
    goal_lines,
    operator_settings,
    plot_frontier,
    points_from_json,
    points_table,
    summarize,
)
from .scalers import HpaScaler, KedaScaler, OperatorScaler, StaticScaler
from .traces import (
    AZURE_CODE_DURATION_S,
    AZURE_CONV_DURATION_S,
    Lengths,
    Trace,
    azure_code,
    azure_conv,
    coding_lengths,
    conversation_lengths,
    day,
    diurnal,
)

MODEL = "meta-llama/Llama-3.1-70B-Instruct"
GPU = "H100-80GB"
MAX_MODEL_LEN = 16384
TTFT_SLOS_S = (2.0, 5.0)
STARTUP_S = (90.0, 180.0)
#: Traffic at the opening rate before the measured trace, from the same fleet for every
#: dynamic scaler: two scale-down windows, so each is in its own steady state when it starts.
PREROLL_S = 600.0
#: The day trace: its 24 h in this many hours by default, its afternoon peak this many full
#: replicas' worth of the conversation mix.
DAY_HOURS = 4.0
DAY_PEAK_REPLICAS = 4.0
#: Where --frontier saves its plot (docs/autoscaling.md shows it).
PLOT = Path("docs/autoscaling-frontier.png")


@dataclass(frozen=True)
class Deployment:
    profile: EngineProfile
    gpus_per_replica: int
    max_num_seqs: int
    token_scale: int
    summary: str
    perf: sizing.PerformanceModel
    """The roofline at the trace's own tokens (token scale 1)."""
    kv_pool_tokens: int
    """KV tokens a replica holds, at the trace's own tokens."""
    prior: CapacityPrior
    """What the operator plans on before it has seen a replica full."""

    def wall_time(self, prefill_tokens: float, batch: int, decode_kv_tokens: float) -> float:
        """Seconds of one engine iteration (the engine model: prefill plus decode), at the
        trace's own tokens: what Dynamo's profiling measures."""
        decode = self.perf.decode_step_ms(batch, round(decode_kv_tokens)) if batch else 0.0
        prefill = self.perf.prefill_ms(round(prefill_tokens)) if prefill_tokens >= 1 else 0.0
        return (prefill + decode) / 1e3


def deployment(token_scale: int) -> Deployment:
    """The replica the sizing package picks, as an engine profile at ``token_scale``."""
    arch = sizing.parse_hf_config(_builtin(MODEL))
    request = sizing.SizingRequest(
        architecture=arch, max_model_len=MAX_MODEL_LEN, min_concurrency=8, quantization="fp8"
    )
    gpu = sizing.builtin_catalog().get(GPU, field="gpu")
    result = sizing.size_for_gpu(request, gpu)
    perf = sizing.performance_for(request, gpu, result.tensor_parallel_size)
    k = token_scale

    def decode_step_ms(batch: int, context_tokens: int) -> float:
        return k * perf.decode_step_ms(batch, context_tokens * k)

    def prefill_ms(prompt_tokens: int) -> float:
        return perf.prefill_ms(prompt_tokens * k) if prompt_tokens > 0 else 0.0

    profile = EngineProfile(
        kv_capacity_tokens=result.kv_pool_tokens // k,
        max_num_seqs=result.max_num_seqs,
        max_num_batched_tokens=max(1, 8192 // k),
        max_model_len=MAX_MODEL_LEN // k,
        decode_step_ms=decode_step_ms,
        prefill_ms=prefill_ms,
        block_size=max(1, 16 // k),
        description=f"{MODEL} fp8 on {result.to_summary()}",
    )
    prior = CapacityPrior(
        perf, max_num_seqs=result.max_num_seqs, kv_pool_tokens=result.kv_pool_tokens
    )
    return Deployment(
        profile,
        result.gpus_per_replica,
        result.max_num_seqs,
        k,
        profile.description,
        perf,
        result.kv_pool_tokens,
        prior,
    )


def _builtin(model: str) -> dict[str, object]:
    config = sizing.load_builtin_model(model)
    if config is None:
        raise SystemExit(f"the sizing package does not carry {model}")
    return config


def scaled(requests: Sequence[Request], k: int) -> list[Request]:
    return [
        Request(r.time, math.ceil(r.prompt_tokens / k), math.ceil(r.output_tokens / k))
        for r in requests
    ]


def replica_capacity_rps(dep: Deployment, seed: int, lengths: Lengths) -> float:
    """Requests/s one replica completes when saturated with the mix of ``lengths``."""
    rng = random.Random(seed)
    k = dep.token_scale
    arrivals = []
    for i in range(1500):
        prompt, output = lengths(rng)
        arrivals.append(Arrival(0.0, math.ceil(prompt / k), math.ceil(output / k), f"c{i}"))
    result = simulate(dep.profile, arrivals)
    finished = sorted(r.finished for r in result.requests)
    # Steady state: skip the first and last fifth (ramp-up and the draining tail).
    lo, hi = len(finished) // 5, 4 * len(finished) // 5
    return (hi - lo) / (finished[hi] - finished[lo])


def warm_history(dep: Deployment, lengths: Lengths, capacity: float, seed: int) -> ScaleHistory:
    """What the operator's status holds once it has seen the service saturate: five minutes of
    one replica overloaded (1.5x its throughput), through the policy itself, which learns a
    full replica's throughput from it. A fresh install learns it at its first saturation."""
    rng = random.Random(seed + 2)
    k = dep.token_scale
    requests, t = [], 0.0
    while t < 300.0:
        t += rng.expovariate(1.5 * capacity)
        prompt, output = lengths(rng)
        requests.append(Request(t, math.ceil(prompt / k), math.ceil(output / k)))
    scaler = OperatorScaler(operator_config(dep, 1))
    simulate_fleet(
        requests,
        300.0,
        scaler,
        dep.profile,
        initial_replicas=1,
        startup_delays=lambda _: 0.0,
        token_scale=k,
        drain_limit_s=0.0,
    )
    learned = scaler.history
    return ScaleHistory(
        throughput=None if learned.throughput is None else (0.0, learned.throughput[1]),
        capacities=tuple(LearnedCapacity(c.gpu_type, 0.0, c.capacity) for c in learned.capacities),
    )


def describe_learned(history: ScaleHistory, dep: Deployment) -> str:
    """What the operator's status holds about a full replica, in words."""
    parts = []
    if history.throughput:
        parts.append(f"a full replica completes {history.throughput[1]:.2f} req/s")
    if (learned := history.capacity_for(GPU)) is not None:
        parts.append(f"{_tokens(learned.capacity)} learned")
    if not parts:
        return f"nothing (cold); it plans on the sizing's prior, {_tokens(dep.prior.at())}"
    return "; ".join(parts)


def _tokens(capacity: TokenCapacity) -> str:
    return (
        f"{capacity.prefill_tokens_per_second:.0f} prefill / "
        f"{capacity.decode_tokens_per_second:.0f} decode tokens/s"
    )


def startup_delays(seed: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.uniform(*STARTUP_S) for _ in range(10_000)]


def preroll(trace: Trace, lengths: Lengths, seed: int, duration_s: float) -> list[Request]:
    """``duration_s`` of Poisson arrivals at the trace's opening rate, with its mix, ending at 0
    (the trace's start): what the service ran before the measured part."""
    rng = random.Random(seed + 3)
    rate = trace.rate_at(0.0)
    out, t = [], -duration_s
    while rate > 0:
        t += rng.expovariate(rate)
        if t >= 0.0:
            break
        prompt, output = lengths(rng)
        out.append(Request(t, prompt, output))
    return out


@dataclass(frozen=True)
class Bench:
    """One trace made ready for every scaler: the same requests (pre-roll first), start, bounds
    and start-up delays."""

    trace: Trace
    requests: list[Request]
    peak_replicas: int
    """The static fleet: the trace's peak minute at 90% of a replica's throughput."""
    max_replicas: int
    """Every scaler's upper bound: 1.25x the static fleet + 1."""
    initial: int
    """Where every dynamic scaler starts: 1.2x the replicas the opening rate needs."""
    delays: list[float]
    target_queue_depth: float


def bench(trace: Trace, dep: Deployment, capacity: float, seed: int, lengths: Lengths) -> Bench:
    peak_replicas = math.ceil(trace.peak_rate() / (0.9 * capacity))
    # Every dynamic scaler starts from the same fleet (1.2x what the opening rate needs), warm
    # or cold, PREROLL_S before the trace, with the opening rate arriving: each settles into
    # its own steady state (HPA and KEDA shrink on an empty queue, the operator grows to its
    # plan) before anything is counted. The static fleet is its peak size throughout.
    before = preroll(trace, lengths, seed, PREROLL_S)
    shifted = [
        Request(r.time + PREROLL_S, r.prompt_tokens, r.output_tokens)
        for r in (*before, *trace.requests)
    ]
    return Bench(
        trace=trace,
        requests=scaled(shifted, dep.token_scale),
        peak_replicas=peak_replicas,
        max_replicas=math.ceil(peak_replicas * 1.25) + 1,
        initial=max(1, math.ceil(trace.rate_at(0.0) / capacity * 1.2)),
        delays=startup_delays(seed + 1),
        target_queue_depth=default_target_queue_depth(dep.max_num_seqs),
    )


def run_scaler(b: Bench, dep: Deployment, scaler: Scaler, router: Router = "p2c") -> FleetResult:
    """``scaler`` through the bench's trace (the static fleet at its size throughout)."""
    return simulate_fleet(
        b.requests,
        PREROLL_S + b.trace.duration_s,
        scaler,
        dep.profile,
        initial_replicas=scaler.replicas if isinstance(scaler, StaticScaler) else b.initial,
        startup_delays=b.delays.__getitem__,
        gpus_per_replica=dep.gpus_per_replica,
        token_scale=dep.token_scale,
        measure_from=PREROLL_S,
        router=router,
    )


def operator_config(dep: Deployment, max_replicas: int, prior: bool = True) -> PolicyConfig:
    """The operator's policy with its defaults for the benchmark's replica (and the sizing's
    prior of its capacity, as the operator computes it)."""
    return PolicyConfig(
        min_replicas=1,
        max_replicas=max_replicas,
        max_num_seqs=dep.max_num_seqs,
        target_queue_depth=default_target_queue_depth(dep.max_num_seqs),
        min_burst_headroom=DEFAULT_MIN_BURST_HEADROOM,
        gpu_type=GPU,
        capacity_prior=dep.prior if prior else None,
    )


def run_trace(
    trace: Trace,
    dep: Deployment,
    capacity: float,
    seed: int,
    only: Sequence[str],
    warm: ScaleHistory,
    lengths: Lengths,
    gateway_rate: bool = True,
    router: Router = "p2c",
    prior: bool = True,
) -> list[tuple[FleetResult, Scaler]]:
    b = bench(trace, dep, capacity, seed, lengths)
    target = b.target_queue_depth
    operator = OperatorScaler(
        operator_config(dep, b.max_replicas, prior), history=warm, gateway_rate=gateway_rate
    )
    scalers: list[Scaler] = [
        operator,
        HpaScaler(target=target, min_replicas=1, max_replicas=b.max_replicas),
        KedaScaler(target=target, min_replica_count=0, max_replicas=b.max_replicas),
        StaticScaler(b.peak_replicas),
    ]
    out = []
    for scaler in scalers:
        if only and not any(word in scaler.name.lower() for word in only):
            continue
        out.append((run_scaler(b, dep, scaler, router), scaler))
    return out


def table(rows: list[tuple[str, FleetResult]]) -> str:
    slos = " | ".join(f"TTFT <= {s:g} s" for s in TTFT_SLOS_S)
    lines = [
        f"| trace | scaler | {slos} | p50 TTFT | p99 TTFT | GPU-hours | max replicas |",
        "|---|---|" + "---:|" * (len(TTFT_SLOS_S) + 4),
    ]
    for trace_name, r in rows:
        shares = " | ".join(f"{r.slo_attainment(s):.2%}" for s in TTFT_SLOS_S)
        lines.append(
            f"| {trace_name} | {r.scaler} | {shares} "
            f"| {r.ttft_percentile(0.5):.2f} s | {r.ttft_percentile(0.99):.1f} s "
            f"| {r.gpu_seconds / 3600:.2f} | {r.max_replicas()} |"
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.autoscale", description=__doc__)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--token-scale", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="20-minute traces (a smoke run)")
    parser.add_argument(
        "--trace",
        choices=["all", "diurnal", "azure-code", "azure-conv", "day"],
        default="all",
        help="all: diurnal and azure-code (with --frontier, day too)",
    )
    parser.add_argument("--only", nargs="*", default=[], help="scalers whose name has a word")
    parser.add_argument(
        "--jobs", type=int, default=1, help="with --frontier: settings run in this many processes"
    )
    parser.add_argument(
        "--settings", nargs="*", default=[], help="with --frontier: settings whose label has a word"
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="start the operator with an empty status (it plans on the sizing's prior until "
        "its first saturation)",
    )
    parser.add_argument(
        "--no-prior",
        action="store_true",
        help="the operator without the sizing's prior (capacityPriorScale 0): cold, it plans on "
        "nothing until its first saturation",
    )
    parser.add_argument(
        "--arrivals",
        choices=["gateway", "completions"],
        default="gateway",
        help="what the operator plans on: the gateway's arrival rate (a service with "
        "spec.scaling.arrivalRateQuery, the default here) or the replicas' completions (without)",
    )
    parser.add_argument(
        "--router",
        choices=["p2c", "least"],
        default="p2c",
        help="the gateway's balancer: the fewer requests in flight of two random replicas "
        "(Envoy's LEAST_REQUEST default, the default here) or of all of them (nginx "
        "least_conn without slow start, which floods a replica that just became ready)",
    )
    parser.add_argument(
        "--day-hours",
        type=float,
        default=DAY_HOURS,
        help=f"the day trace's 24 h compressed into this many hours (default {DAY_HOURS:g})",
    )
    parser.add_argument(
        "--frontier",
        action="store_true",
        help="every scaler with its knob swept: the cost-SLO frontier per trace, as tables and "
        "a plot (--plot)",
    )
    parser.add_argument(
        "--plot", type=Path, default=PLOT, help=f"where --frontier saves its plot ({PLOT})"
    )
    parser.add_argument(
        "--json", action="store_true", help="end the output with the frontier as one JSON object"
    )
    parser.add_argument(
        "--title", help="with --merge: the plot's title (default: the merged files' names)"
    )
    parser.add_argument(
        "--minutes",
        action="store_true",
        help="with --frontier: for each goal the operator misses on a trace, a per-minute "
        "breakdown of its run against the point it is compared with (late requests, replicas)",
    )
    parser.add_argument(
        "--across",
        nargs="+",
        type=Path,
        help="no simulation: the goals of whole --frontier --json runs (one per file, e.g. a seed "
        "and arrival mode each, labelled by the file's name) side by side, and how many meet each",
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        help="no simulation: merge the JSON objects of earlier --frontier --json runs (a point "
        "of a later file replaces the same scaler and setting of an earlier one) and print their "
        "tables and goals",
    )
    return parser


def _traces(
    args: argparse.Namespace, conv: float, code: float
) -> list[tuple[Trace, float, Lengths]]:
    quick = 1200.0 if args.quick else None
    wanted = args.trace
    traces: list[tuple[Trace, float, Lengths]] = []
    if wanted in ("all", "diurnal"):
        traces.append((diurnal(4.0 * conv, quick or 5400.0, args.seed), conv, conversation_lengths))
    if wanted in ("all", "azure-code"):
        trace = azure_code(4.0 * code, args.seed, quick or AZURE_CODE_DURATION_S)
        traces.append((trace, code, coding_lengths))
    if wanted == "azure-conv":
        trace = azure_conv(4.0 * conv, args.seed, quick or AZURE_CONV_DURATION_S)
        traces.append((trace, conv, conversation_lengths))
    if wanted == "day" or (wanted == "all" and args.frontier):
        trace = day(DAY_PEAK_REPLICAS * conv, quick or args.day_hours * 3600.0, args.seed)
        traces.append((trace, conv, conversation_lengths))
    return traces


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.merge:
        return merge(args.merge, args)
    if args.across:
        return across(args.across)
    router: Router = "least" if args.router == "least" else "p2c"

    started = time.perf_counter()
    dep = deployment(args.token_scale)
    conv = replica_capacity_rps(dep, args.seed, conversation_lengths)
    code = replica_capacity_rps(dep, args.seed, coding_lengths)
    print(
        f"replica: {dep.summary}, max_num_seqs {dep.max_num_seqs}, target queue depth "
        f"{default_target_queue_depth(dep.max_num_seqs):g}; saturated it completes "
        f"{conv:.2f} req/s of the conversation mix, {code:.2f} of the coding mix; start-up "
        f"{STARTUP_S[0]:.0f}-{STARTUP_S[1]:.0f} s; token scale {dep.token_scale}; router "
        f"{router}"
    )
    rows: list[tuple[str, FleetResult]] = []
    frontier: dict[str, list[Point]] = {}
    for trace, capacity, lengths in _traces(args, conv, code):
        cold = args.cold or args.no_prior
        warm = ScaleHistory() if cold else warm_history(dep, lengths, capacity, args.seed)
        prompt_median, output_median = trace.median_lengths()
        print(
            f"trace {trace.name}: {trace.description}; {len(trace.requests)} requests, "
            f"peak minute {trace.peak_rate():.1f} req/s, mean {trace.mean_rate():.1f} "
            f"(peak to mean {trace.peak_to_mean():.2f}), median prompt {prompt_median} / "
            f"output {output_median} tokens"
        )
        print(f"  the operator starts knowing {describe_learned(warm, dep)}")
        gateway_rate = args.arrivals == "gateway"
        if args.frontier:
            frontier[trace.name] = run_frontier(
                trace, dep, capacity, args, warm, lengths, gateway_rate, router, started
            )
            continue
        runs = run_trace(
            trace,
            dep,
            capacity,
            args.seed,
            args.only,
            warm,
            lengths,
            gateway_rate,
            router,
            prior=not args.no_prior,
        )
        for result, _ in runs:
            rows.append((trace.name, result))
            _progress(result.scaler, result, started)
    print()
    if args.frontier:
        report_frontier(frontier, args, f"seed {args.seed}, arrivals {args.arrivals}, {router}")
    else:
        print(table(rows))
    print(f"\n{time.perf_counter() - started:.1f} s", file=sys.stderr)
    if args.json and args.frontier:
        print(dump(frontier_json(frontier)))
    return 0


def _progress(label: str, result: FleetResult, started: float) -> None:
    shares = "  ".join(f"<={slo:g}s {result.slo_attainment(slo):7.2%}" for slo in TTFT_SLOS_S)
    print(
        f"  {label:<24} {shares}  "
        f"p99 {result.ttft_percentile(0.99):7.2f} s  "
        f"GPU-h {result.gpu_seconds / 3600:6.2f}  max {result.max_replicas():3d}  "
        f"({time.perf_counter() - started:.0f} s)",
        flush=True,
    )


def run_frontier(
    trace: Trace,
    dep: Deployment,
    capacity: float,
    args: argparse.Namespace,
    warm: ScaleHistory,
    lengths: Lengths,
    gateway_rate: bool,
    router: Router,
    started: float,
) -> list[Point]:
    """Every setting of every scaler through ``trace``: its points."""
    b = bench(trace, dep, capacity, args.seed, lengths)
    context = BaselineContext(
        min_replicas=1,
        max_replicas=b.max_replicas,
        peak_replicas=b.peak_replicas,
        target_queue_depth=b.target_queue_depth,
        kv_capacity_tokens=dep.kv_pool_tokens,
        max_num_seqs=dep.max_num_seqs,
        wall_time=dep.wall_time,
    )
    config = operator_config(dep, b.max_replicas, prior=not args.no_prior)

    def operator(history: ScaleHistory) -> Callable[[PolicyConfig], OperatorScaler]:
        return lambda c: OperatorScaler(c, history=history, gateway_rate=gateway_rate)

    settings = [
        *operator_settings(config, operator(warm)),
        *operator_settings(
            config, operator(ScaleHistory()), OPERATOR_VARIANTS[:1], scaler=OPERATOR_COLD
        ),
        *baseline_settings(context),
    ]
    chosen = [
        setting
        for setting in settings
        if (not args.only or any(word.lower() in setting.scaler.lower() for word in args.only))
        and (not args.settings or any(w.lower() in setting.setting.lower() for w in args.settings))
    ]
    points = []
    buckets: dict[tuple[str, str], list[Minute]] = {}
    for setting, result in zip(chosen, _run_all(b, dep, chosen, router, args.jobs), strict=True):
        points.append(
            Point(
                setting.scaler,
                setting.setting,
                result.gpu_seconds / 3600,
                result.slo_attainment(2.0),
            )
        )
        _progress(f"{setting.scaler}: {setting.setting}"[:48], result, started)
        if args.minutes:
            buckets[(setting.scaler, setting.setting)] = minutes(
                result, PREROLL_S, trace.duration_s
            )
    if args.minutes:
        print_misses(trace.name, points, buckets)
    return points


#: What the worker processes of ``--jobs`` run: set before they fork, so nothing is pickled
#: but the results (the settings hold closures).
_WORK: tuple[Bench, Deployment, Sequence[Setting], Router] | None = None


def _run_one(index: int) -> FleetResult:
    assert _WORK is not None
    b, dep, settings, router = _WORK
    return run_scaler(b, dep, settings[index].make(), router)


def _run_all(
    b: Bench, dep: Deployment, settings: Sequence[Setting], router: Router, jobs: int
) -> Iterator[FleetResult]:
    """Each setting's run, in order; ``jobs`` processes at a time (every run is seeded alike,
    so the results are those of one process)."""
    global _WORK
    if jobs <= 1:
        yield from (run_scaler(b, dep, s.make(), router) for s in settings)
        return
    _WORK = (b, dep, settings, router)
    try:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            yield from pool.imap(_run_one, range(len(settings)))
    finally:
        _WORK = None


def print_misses(
    trace: str, points: Sequence[Point], buckets: Mapping[tuple[str, str], list[Minute]]
) -> None:
    """For each goal the operator misses on ``trace``, the per-minute breakdown of its run
    against the point it is compared with (its default where it has no point at the goal)."""
    if not any(p.scaler == STATIC for p in points) or not any(p.scaler == OPERATOR for p in points):
        return
    s = summarize(points)
    default = OPERATOR_VARIANTS[0].label
    pairs: list[tuple[str, tuple[str, str], tuple[str, str]]] = []
    if not s.baseline_goal_met:
        if s.best_baseline_at_99 is not None:
            op, other, goal = s.operator_at_99, s.best_baseline_at_99, "<= 0.8x the best at 99%"
        else:
            op, other = s.operator_at_baseline_best, s.cheapest_baseline_best
            goal = "<= the best baseline's GPU-hours at its attainment"
        mine = (OPERATOR, op.setting if op else default)
        pairs.append((goal, mine, (other.scaler, other.setting)))
    if not s.static_goal_met:
        op = s.operator_at_static
        mine = (OPERATOR, op.setting if op else default)
        pairs.append(("<= static at >= its attainment", mine, (STATIC, s.static.setting)))
    cold = (OPERATOR_COLD, default)
    warm = (OPERATOR, default)
    by_key = {(p.scaler, p.setting): p for p in points}
    gap = (
        (by_key[warm].attainment - by_key[cold].attainment) * 100
        if cold in by_key and warm in by_key
        else 0.0
    )
    if gap > 0.5 + 1e-9:
        pairs.append(("cold within 0.5 points of warm", cold, warm))
    for goal, a, b in pairs:
        if a in buckets and b in buckets:
            print(f"\n{trace}: missed ({goal}), per minute:")
            print(compare_minutes(f"{a[0]}: {a[1]}", buckets[a], f"{b[0]}: {b[1]}", buckets[b]))


def report_frontier(
    frontier: Mapping[str, Sequence[Point]], args: argparse.Namespace, title: str
) -> None:
    for name, points in frontier.items():
        print(points_table(name, points))
        print()
    print(frontier_table(frontier))
    print()
    if all(any(p.scaler == STATIC for p in points) for points in frontier.values()):
        for line in goal_lines(frontier):
            print(line)
        if args.plot:
            plot_frontier(frontier, args.plot, f"Cost-SLO frontier ({title})")
            print(f"plot: {args.plot}")


def _read_frontier(path: Path) -> dict[str, list[Point]]:
    """The points of a --frontier --json run's output (the JSON object ends it)."""
    text = path.read_text()
    return points_from_json(json.loads(text[text.index('{"traces"') :]))


def across(paths: Sequence[Path]) -> int:
    """The goals of whole --frontier --json runs side by side, a row per run and trace."""
    print(across_table({path.stem: _read_frontier(path) for path in paths}))
    return 0


def merge(paths: Sequence[Path], args: argparse.Namespace) -> int:
    """The tables and goals of earlier --frontier --json runs, merged."""
    merged: dict[str, dict[tuple[str, str], Point]] = {}
    for path in paths:
        for trace, points in _read_frontier(path).items():
            for p in points:
                merged.setdefault(trace, {})[(p.scaler, p.setting)] = p
    frontier = {trace: list(points.values()) for trace, points in merged.items()}
    report_frontier(frontier, args, args.title or ", ".join(p.name for p in paths))
    if args.json:
        print(dump(frontier_json(frontier)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
