"""`llmservice sim`: a vLLM stand-in that speaks vLLM's HTTP API and exposes vLLM's metrics.

Launch it with a pod's vLLM container args verbatim (``vllm serve`` style)::

    llmservice sim meta-llama/Llama-3.1-8B-Instruct --served-model-name chat --port 8000 \\
        --max-model-len 16384 --max-num-seqs 128 --tensor-parallel-size 1 --sim-gpu H100-80GB

Flags vLLM has and the simulator does not need are accepted and ignored (a note on stderr
lists them). The KV pool and step times come from the operator's sizing package for the model
(its carried config.json), the GPU (``--sim-gpu``) and the parallelism, so the simulated
replica holds as many sequences as ``llmservice size`` predicts; an unknown model falls back to
a fixed profile (about Llama-3.1-8B on one H100).

Sim-only settings are flags or environment variables (a pod template's env injects them;
a flag wins over its variable):

  --sim-gpu NAME            LLMSERVICE_SIM_GPU             GPU catalog name (H100-80GB)
  --sim-seed N              LLMSERVICE_SIM_SEED            seed of every random draw (0)
  --sim-time-scale S        LLMSERVICE_SIM_TIME_SCALE      run S x faster than the wall clock
  --sim-vllm-version V      LLMSERVICE_SIM_VLLM_VERSION    metric names of this vLLM release
  --sim-kv-capacity-tokens  LLMSERVICE_SIM_KV_CAPACITY_TOKENS  override the KV pool size
                            LLMSERVICE_SIM_EXTRA_TTFT_MS   fault: added to every TTFT
                            LLMSERVICE_SIM_DECODE_SLOWDOWN fault: decode steps take S x longer
                            LLMSERVICE_SIM_ERROR_RATE      fault: fraction answered 500
                            LLMSERVICE_SIM_STARTUP_DELAY_S fault: seconds until /health is 200
                            LLMSERVICE_SIM_NEVER_READY     fault: /health never 200 (1/true)
                            LLMSERVICE_SIM_CRASH_AFTER_REQUESTS  fault: exit after N requests

Times (latencies on /metrics, EXTRA_TTFT_MS, STARTUP_DELAY_S) are simulated seconds: with
a time scale S they pass S times faster on the wall clock.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from llmservice_operator.sim.engine import EngineFaults, SchedulingPolicy
from llmservice_operator.sim.profile import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    EngineProfile,
    fallback_profile,
    from_sizing,
)
from llmservice_operator.sim.server import KEEPALIVE_TIMEOUT_S, ServerFaults, SimConfig, SimServer
from llmservice_operator.vllm.metrics import LATEST_KNOWN_VLLM_VERSION, metric_names

from .errors import OneLineParser, report

__all__ = [
    "ENV_PREFIX",
    "SimOptions",
    "add_parser",
    "build_parser",
    "build_profile",
    "options_from",
    "run",
]

ENV_PREFIX = "LLMSERVICE_SIM_"
DEFAULT_GPU = "H100-80GB"

#: vLLM serve flags that take a value and that the simulator ignores; declared so that their
#: values are never mistaken for the positional model.
_IGNORED_VALUE_FLAGS = (
    "--revision", "--code-revision", "--tokenizer", "--tokenizer-revision", "--tokenizer-mode",
    "--download-dir", "--load-format", "--seed", "--swap-space", "--cpu-offload-gb",
    "--max-num-partial-prefills", "--max-long-partial-prefills", "--api-key", "--chat-template",
    "--uvicorn-log-level", "--distributed-executor-backend", "--data-parallel-size",
    "--hf-overrides", "--limit-mm-per-prompt", "--max-logprobs", "--generation-config",
    "--override-generation-config", "--reasoning-parser", "--tool-call-parser", "--root-path",
    "--max-loras", "--max-lora-rank", "--speculative-config", "--compilation-config",
    "--kv-transfer-config", "--max-seq-len-to-capture",
    "--show-hidden-metrics-for-version", "--otlp-traces-endpoint", "--ssl-keyfile",
    "--ssl-certfile", "--response-role", "--api-server-count", "--config",
    "--long-prefill-token-threshold", "--kv-cache-memory-bytes",
)  # fmt: skip
_IGNORED_BOOLEAN_FLAGS = (
    "--trust-remote-code", "--enforce-eager", "--disable-log-requests", "--disable-log-stats",
    "--enable-auto-tool-choice", "--enable-lora", "--disable-custom-all-reduce",
    "--disable-frontend-multiprocessing", "--enable-expert-parallel", "--async-scheduling",
    "--disable-fastapi-docs", "--enable-prompt-tokens-details", "--enable-force-include-usage",
    "--disable-uvicorn-access-log", "--enable-server-load-tracking", "--enable-log-requests",
)  # fmt: skip
_VLLM_DTYPES = {
    "auto": "auto",
    "bfloat16": "bfloat16",
    "float16": "float16",
    "half": "float16",
    "float32": "float32",
    "float": "float32",
}
_VLLM_QUANTIZATIONS = {"fp8": "fp8", "awq": "awq", "awq_marlin": "awq", "gptq": "gptq",
                       "gptq_marlin": "gptq", "int8": "int8", "bitsandbytes": "int8"}  # fmt: skip


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    # The real parsing happens in run(): vLLM's flags must pass through untouched (the
    # top-level parser rejects unknown flags), so this subparser swallows every argument.
    parser = subparsers.add_parser(
        "sim",
        help="run the vLLM engine simulator",
        prefix_chars="+",
        add_help=False,
        description="run the vLLM engine simulator (see `llmservice sim --help`)",
    )
    parser.add_argument("argv", nargs="*", help=argparse.SUPPRESS)


def _length(text: str) -> int:
    """vLLM's human-readable ints: 1k = 1000, 1K = 1024, 25.6k = 25600 (also m/M, g/G)."""
    text = text.strip()
    units = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}
    multiplier = units.get(text[-1:], 1)
    number = text[:-1] if multiplier != 1 else text
    try:
        return int(float(number) * multiplier)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a length (a number, optionally with k, K, m, M, g or G)"
        ) from None


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="llmservice sim",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model_tag", nargs="?", help="model id (vllm serve's positional)")
    parser.add_argument("--model", help="model id (the older --model form)")
    parser.add_argument("--served-model-name", nargs="+", help="names the API answers to")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    parser.add_argument(
        "--max-model-len",
        type=_length,
        help="context limit, tokens (1k = 1000, 1K = 1024; default: the model's)",
    )
    parser.add_argument(
        "--max-num-seqs", type=int, help="sequences in a batch (default: what sizing derives)"
    )
    parser.add_argument(
        "--max-num-batched-tokens", type=int, help="tokens per engine step (default 8192)"
    )
    parser.add_argument(
        "--tensor-parallel-size", "-tp", type=int, default=1, help="GPUs per stage (default 1)"
    )
    parser.add_argument(
        "--pipeline-parallel-size", "-pp", type=int, default=1, help="stages (default 1)"
    )
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.92,
        help="share of GPU memory the engine may use, sizes the KV pool (default 0.92)",
    )
    parser.add_argument("--dtype", default="auto", help="weights' dtype, as vLLM (default auto)")
    parser.add_argument("--quantization", "-q", help="fp8, int8, awq, gptq (or their variants)")
    parser.add_argument(
        "--kv-cache-dtype", default="auto", help="auto, or fp8* for a KV cache of one byte"
    )
    parser.add_argument(
        "--block-size", type=int, default=16, help="KV block size, tokens (default 16)"
    )
    parser.add_argument(
        "--scheduling-policy",
        choices=("fcfs", "priority"),
        default="fcfs",
        help="fcfs (default) or priority: a request's `priority` (lower first), as vLLM",
    )
    parser.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        help="accepted; prefix caching is not simulated",
    )
    parser.add_argument(
        "--enable-chunked-prefill",
        action=argparse.BooleanOptionalAction,
        help="accepted; the simulator always chunks prefills",
    )
    ignored = parser.add_argument_group("vLLM flags accepted and ignored")
    for flag in _IGNORED_VALUE_FLAGS:
        ignored.add_argument(flag, help=argparse.SUPPRESS)
    for flag in _IGNORED_BOOLEAN_FLAGS:
        ignored.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    sim = parser.add_argument_group("simulator (flags win over LLMSERVICE_SIM_* variables)")
    sim.add_argument("--sim-gpu", help=f"GPU catalog name (default {DEFAULT_GPU})")
    sim.add_argument("--sim-seed", type=int, help="seed of every random draw (default 0)")
    sim.add_argument("--sim-time-scale", type=float, help="run S x faster than the wall clock")
    sim.add_argument(
        "--sim-vllm-version",
        help=f"expose this vLLM's metrics (default {LATEST_KNOWN_VLLM_VERSION})",
    )
    sim.add_argument("--sim-kv-capacity-tokens", type=int, help="override the KV pool size")
    sim.add_argument(
        "--sim-output-len-median",
        type=int,
        default=128,
        help="median answer length without ignore_eos (default 128)",
    )
    return parser


@dataclass(frozen=True)
class SimOptions:
    """Everything `llmservice sim` was asked for, after flags and environment are merged."""

    model: str
    served_model_names: tuple[str, ...]
    host: str
    port: int
    max_model_len: int | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    tensor_parallel_size: int
    pipeline_parallel_size: int
    gpu_memory_utilization: float
    dtype: str
    quantization: str | None
    kv_cache_dtype: str
    block_size: int
    gpu: str
    scheduling_policy: SchedulingPolicy
    seed: int
    time_scale: float
    vllm_version: str
    kv_capacity_tokens: int | None
    output_len_median: int
    engine_faults: EngineFaults
    server_faults: ServerFaults
    ignored: tuple[str, ...] = ()


def _env(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(ENV_PREFIX + name, "").strip()
    return value or None


def _env_number(env: Mapping[str, str], name: str, kind: type[float] | type[int]) -> Any:
    raw = _env(env, name)
    if raw is None:
        return None
    try:
        value = kind(raw)
    except ValueError:
        raise ValueError(f"{ENV_PREFIX}{name}={raw!r} is not a valid {kind.__name__}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{ENV_PREFIX}{name}={raw!r} is not a finite number")
    return value


def _env_bool(env: Mapping[str, str], name: str) -> bool:
    raw = _env(env, name)
    if raw is None:
        return False
    lowered = raw.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{ENV_PREFIX}{name}={raw!r}: use 1/true/yes/on or 0/false/no/off")


def options_from(argv: Sequence[str], env: Mapping[str, str]) -> SimOptions:
    """Parse vLLM-style ``argv`` and the ``LLMSERVICE_SIM_*`` variables of ``env``.

    Raises ValueError (with the flag or variable named) for anything unusable.
    """
    args_list = list(argv)
    if args_list[:1] == ["serve"]:  # `vllm serve MODEL ...` with the `vllm` stripped
        args_list = args_list[1:]
    parser = build_parser()
    args, unknown = parser.parse_known_args(args_list)
    model = args.model_tag or args.model
    if not model:
        raise ValueError("no model given: pass it as the first argument (as to `vllm serve`)")
    if args.model_tag and args.model and args.model_tag != args.model:
        raise ValueError(f"two models given: {args.model_tag!r} and --model {args.model!r}")

    extra_ttft_ms = _env_number(env, "EXTRA_TTFT_MS", float) or 0.0
    slowdown = _env_number(env, "DECODE_SLOWDOWN", float)
    engine_faults = EngineFaults(
        extra_ttft_s=extra_ttft_ms / 1000.0,
        decode_slowdown=1.0 if slowdown is None else slowdown,
    )
    server_faults = ServerFaults(
        error_rate=_env_number(env, "ERROR_RATE", float) or 0.0,
        startup_delay_s=_env_number(env, "STARTUP_DELAY_S", float) or 0.0,
        never_ready=_env_bool(env, "NEVER_READY"),
        crash_after_requests=_env_number(env, "CRASH_AFTER_REQUESTS", int),
    )

    def pick(flag: Any, name: str, kind: type[float] | type[int] | type[str], default: Any) -> Any:
        if flag is not None:
            return flag
        value = _env(env, name) if kind is str else _env_number(env, name, kind)  # type: ignore[arg-type]
        return default if value is None else value

    time_scale = float(pick(args.sim_time_scale, "TIME_SCALE", float, 1.0))
    if not (time_scale > 0 and math.isfinite(time_scale)):
        raise ValueError(f"the time scale must be a positive number, got {time_scale}")
    vllm_version = str(pick(args.sim_vllm_version, "VLLM_VERSION", str, LATEST_KNOWN_VLLM_VERSION))
    metric_names(vllm_version)  # refuse an unknown version now, not at the first scrape
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "block_size", "port"):
        if getattr(args, name) < (0 if name == "port" else 1):
            raise ValueError(f"--{name.replace('_', '-')} must be positive")
    return SimOptions(
        model=model,
        served_model_names=tuple(args.served_model_name or ()),
        host=args.host,
        port=args.port,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        tensor_parallel_size=args.tensor_parallel_size,
        pipeline_parallel_size=args.pipeline_parallel_size,
        gpu_memory_utilization=args.gpu_memory_utilization,
        dtype=args.dtype,
        quantization=args.quantization,
        kv_cache_dtype=args.kv_cache_dtype,
        block_size=args.block_size,
        scheduling_policy=args.scheduling_policy,
        gpu=str(pick(args.sim_gpu, "GPU", str, DEFAULT_GPU)),
        seed=int(pick(args.sim_seed, "SEED", int, 0)),
        time_scale=time_scale,
        vllm_version=vllm_version,
        kv_capacity_tokens=pick(args.sim_kv_capacity_tokens, "KV_CAPACITY_TOKENS", int, None),
        output_len_median=args.sim_output_len_median,
        engine_faults=engine_faults,
        server_faults=server_faults,
        ignored=tuple(unknown),
    )


def build_profile(options: SimOptions) -> tuple[EngineProfile, str]:
    """The engine profile for ``options`` and a line saying where it came from.

    Raises ValueError when the model does not fit the GPU and parallelism (vLLM would fail
    to start too).
    """
    from llmservice_operator import sizing  # only `sim` needs sizing

    config = sizing.load_builtin_model(options.model)
    if config is None:
        profile = fallback_profile(
            max_model_len=options.max_model_len or 8192,
            kv_capacity_tokens=options.kv_capacity_tokens or 400_000,
            max_num_seqs=options.max_num_seqs or 256,
            max_num_batched_tokens=options.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS,
        )
        note = (
            f"{options.model} is not a model the sizing package carries; using the "
            f"{profile.description} profile"
        )
        return profile, note
    arch = sizing.parse_hf_config(config)
    dtype = _VLLM_DTYPES.get(options.dtype)
    if dtype is None:
        raise ValueError(f"--dtype {options.dtype} is not one the simulator can size")
    quantization = "none"
    if options.quantization:
        quantization = _VLLM_QUANTIZATIONS.get(options.quantization, "")
        if not quantization:
            raise ValueError(f"--quantization {options.quantization} cannot be sized")
    kv_cache_dtype = "fp8" if options.kv_cache_dtype.startswith("fp8") else "auto"
    max_model_len = options.max_model_len or arch.max_model_len_limit
    request = sizing.SizingRequest(
        architecture=arch,
        dtype=dtype,
        quantization=quantization,
        kv_cache_dtype=kv_cache_dtype,
        max_model_len=max_model_len,
        gpu_memory_utilization=options.gpu_memory_utilization,
        max_num_seqs=options.max_num_seqs,
        max_num_batched_tokens=options.max_num_batched_tokens,
    )
    gpu = sizing.builtin_catalog().get(options.gpu, field="--sim-gpu")
    result = _size_at(request, gpu, options.tensor_parallel_size, options.pipeline_parallel_size)
    perf = sizing.performance_for(request, gpu, options.tensor_parallel_size)
    kv_tokens = options.kv_capacity_tokens or result.kv_pool_tokens
    profile = from_sizing(
        kv_capacity_tokens=kv_tokens,
        max_model_len=max_model_len,
        decode_step_ms=perf.decode_step_ms,
        prefill_ms=perf.prefill_ms,
        max_num_seqs=options.max_num_seqs or result.max_num_seqs,
        max_num_batched_tokens=options.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS,
        block_size=options.block_size,
        description=f"{options.model} on {result.to_summary()}",
    )
    return profile, f"sized {result.to_summary()}, KV pool {kv_tokens} tokens"


def _size_at(request: Any, gpu: Any, tp: int, pp: int) -> Any:
    """Sizing's answer at exactly ``tp`` x ``pp`` (sizing itself picks the smallest that fits).

    Walks sizing's options in its own order by asking for one more sequence than the last
    answer held, until the answer has the wanted parallelism.
    """
    from llmservice_operator import sizing

    required = 1
    first = None
    for _ in range(64):
        result = sizing.size_for_gpu(request.model_copy(update={"min_concurrency": required}), gpu)
        first = first or result
        if (result.tensor_parallel_size, result.pipeline_parallel_size) == (tp, pp):
            if result.kv_pool_tokens <= 0 or result.max_concurrent_sequences_at_max_len < 1:
                raise ValueError(f"the model does not fit: {result.reason}")
            return result
        if not result.fits:
            break
        required = result.max_concurrent_sequences_at_max_len + 1
    wanted = f"TP={tp}" + (f", PP={pp}" if pp > 1 else "")
    if first is not None and first.fits:
        raise ValueError(
            f"{wanted} on {gpu.name} is not a parallelism that holds this model at "
            f"max_model_len={request.max_model_len}; the smallest that does is "
            f"{first.to_summary()}"
        )
    reason = first.reason if first is not None else "sizing gave no answer"
    raise ValueError(f"{wanted} on {gpu.name}: {reason}")


def run(args: argparse.Namespace) -> int:
    argv: list[str] = list(args.argv)
    if "-h" in argv or "--help" in argv:
        build_parser().print_help()
        return 0
    try:
        options = options_from(argv, os.environ)
        profile, note = build_profile(options)
    except ValueError as exc:
        return report("sim", exc)
    if options.ignored:
        print(f"llmservice sim: ignoring {' '.join(options.ignored)}", file=sys.stderr)
    config = SimConfig(
        model=options.model,
        served_model_names=options.served_model_names,
        vllm_version=options.vllm_version,
        seed=options.seed,
        time_scale=options.time_scale,
        output_len_median=options.output_len_median,
        scheduling_policy=options.scheduling_policy,
        engine_faults=options.engine_faults,
        server_faults=options.server_faults,
    )
    server = SimServer(profile, config)
    print(
        f"llmservice sim: {note}; max_model_len={profile.max_model_len}, "
        f"max_num_seqs={profile.max_num_seqs}, {options.scheduling_policy} scheduling, "
        f"vLLM {options.vllm_version} metrics, "
        f"time scale {options.time_scale:g}; listening on {options.host}:{options.port}",
        file=sys.stderr,
        flush=True,
    )
    web.run_app(
        server.app(),
        host=options.host,
        port=options.port,
        access_log=None,
        print=None,
        keepalive_timeout=KEEPALIVE_TIMEOUT_S,
    )
    return 0
