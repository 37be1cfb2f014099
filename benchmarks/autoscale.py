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
import math
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from llmservice_operator import sizing
from llmservice_operator.autoscale import (
    PolicyConfig,
    ScaleHistory,
    default_target_queue_depth,
)
from llmservice_operator.sim.engine import Arrival, simulate
from llmservice_operator.sim.profile import EngineProfile

from .fleet import FleetResult, Request, Router, Scaler, simulate_fleet
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


@dataclass(frozen=True)
class Deployment:
    profile: EngineProfile
    gpus_per_replica: int
    max_num_seqs: int
    token_scale: int
    summary: str


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
    return Deployment(profile, result.gpus_per_replica, result.max_num_seqs, k, profile.description)


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
    scaler = OperatorScaler(
        PolicyConfig(
            min_replicas=1,
            max_replicas=1,
            max_num_seqs=dep.max_num_seqs,
            target_queue_depth=default_target_queue_depth(dep.max_num_seqs),
        )
    )
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
    if scaler.history.throughput is None:
        return ScaleHistory()
    return ScaleHistory(throughput=(0.0, scaler.history.throughput[1]))


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
) -> list[tuple[FleetResult, Scaler]]:
    # Static: the peak minute at 90% of a replica's throughput.
    peak_replicas = math.ceil(trace.peak_rate() / (0.9 * capacity))
    max_replicas = math.ceil(peak_replicas * 1.25) + 1
    initial = max(1, math.ceil(trace.rate_at(0.0) / capacity * 1.2))
    target = default_target_queue_depth(dep.max_num_seqs)
    delays = startup_delays(seed + 1)
    policy = PolicyConfig(
        min_replicas=1,
        max_replicas=max_replicas,
        max_num_seqs=dep.max_num_seqs,
        target_queue_depth=target,
    )
    operator = OperatorScaler(policy, history=warm, gateway_rate=gateway_rate)
    static = StaticScaler(peak_replicas)
    scalers: list[Scaler] = [
        operator,
        HpaScaler(target=target, min_replicas=1, max_replicas=max_replicas),
        KedaScaler(target=target, min_replica_count=0, max_replicas=max_replicas),
        static,
    ]
    # Every dynamic scaler starts from the same fleet (1.2x what the opening rate needs), warm
    # or cold, PREROLL_S before the trace, with the opening rate arriving: each settles into
    # its own steady state (HPA and KEDA shrink on an empty queue, the operator grows to its
    # plan) before anything is counted. The static fleet is its peak size throughout.
    start = {static.name: peak_replicas}
    before = preroll(trace, lengths, seed, PREROLL_S)
    shifted = [
        Request(r.time + PREROLL_S, r.prompt_tokens, r.output_tokens)
        for r in (*before, *trace.requests)
    ]
    requests = scaled(shifted, dep.token_scale)
    out = []
    for scaler in scalers:
        if only and not any(word in scaler.name.lower() for word in only):
            continue
        result = simulate_fleet(
            requests,
            PREROLL_S + trace.duration_s,
            scaler,
            dep.profile,
            initial_replicas=start.get(scaler.name, initial),
            startup_delays=delays.__getitem__,
            gpus_per_replica=dep.gpus_per_replica,
            token_scale=dep.token_scale,
            measure_from=PREROLL_S,
            router=router,
        )
        out.append((result, scaler))
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.autoscale", description=__doc__)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--token-scale", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="20-minute traces (a smoke run)")
    parser.add_argument(
        "--trace", choices=["all", "diurnal", "azure-code", "azure-conv"], default="all"
    )
    parser.add_argument("--only", nargs="*", default=[], help="scalers whose name has a word")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="start the operator with an empty status (it learns at its first saturation)",
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
    args = parser.parse_args(argv)
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
    quick = 1200.0 if args.quick else None
    traces: list[tuple[Trace, float, Lengths]] = []
    if args.trace in ("all", "diurnal"):
        traces.append((diurnal(4.0 * conv, quick or 5400.0, args.seed), conv, conversation_lengths))
    if args.trace in ("all", "azure-code"):
        traces.append(
            (
                azure_code(4.0 * code, args.seed, quick or AZURE_CODE_DURATION_S),
                code,
                coding_lengths,
            )
        )
    if args.trace == "azure-conv":
        traces.append(
            (
                azure_conv(4.0 * conv, args.seed, quick or AZURE_CONV_DURATION_S),
                conv,
                conversation_lengths,
            )
        )
    rows: list[tuple[str, FleetResult]] = []
    for trace, capacity, lengths in traces:
        warm = ScaleHistory() if args.cold else warm_history(dep, lengths, capacity, args.seed)
        prompt_median, output_median = trace.median_lengths()
        print(
            f"trace {trace.name}: {trace.description}; {len(trace.requests)} requests, "
            f"peak minute {trace.peak_rate():.1f} req/s, median prompt {prompt_median} / "
            f"output {output_median} tokens"
        )
        learned = f"{warm.throughput[1]:.2f} req/s" if warm.throughput else "nothing (cold)"
        print(f"  the operator starts knowing a full replica completes {learned}")
        gateway_rate = args.arrivals == "gateway"
        runs = run_trace(
            trace, dep, capacity, args.seed, args.only, warm, lengths, gateway_rate, router
        )
        for result, _ in runs:
            rows.append((trace.name, result))
            shares = "  ".join(
                f"<={slo:g}s {result.slo_attainment(slo):7.2%}" for slo in TTFT_SLOS_S
            )
            print(
                f"  {result.scaler:<24} {shares}  "
                f"p99 {result.ttft_percentile(0.99):7.2f} s  "
                f"GPU-h {result.gpu_seconds / 3600:6.2f}  max {result.max_replicas():3d}  "
                f"({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
    print()
    print(table(rows))
    print(f"\n{time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
