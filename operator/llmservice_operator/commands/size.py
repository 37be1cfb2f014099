"""`llmservice size`: weights, KV cache, parallelism and roofline for a model on a GPU.

    llmservice size --model-config PATH --gpu NAME --max-model-len N
        [--dtype auto|bfloat16|float16|float32] [--quantization none|fp8|int8|awq|gptq]
        [--kv-cache-dtype auto|fp8] [--min-concurrency N] [--gpu-memory-utilization F]
        [--output json|text]

Conveniences: ``--model HF_ID`` (a carried config.json) instead of --model-config, ``--gpu
auto`` with ``--allowed-gpus A,B``, ``--architecture JSON`` (keys merged over config.json, like
spec.model.architecture), ``--gpu-catalog PATH``, ``--max-num-seqs``, ``--ttft-p99-ms``,
``--tpot-p99-ms``.

Exit status: 0 fits, 2 does not fit (the JSON or table is still printed), 1 bad input (one
line on stderr). Values are validated here rather than by argparse so that bad input exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from llmservice_operator.sizing import (
    GpuCatalog,
    SizingError,
    SizingRequest,
    SizingResult,
    builtin_model_ids,
    choose_gpu,
    load_builtin_model,
    load_catalog,
    parse_hf_config,
)

from .errors import EXIT_DOES_NOT_FIT, CommandError, OneLineParser, read_utf8, report

__all__ = ["add_parser", "run"]

_DTYPES = ("auto", "bfloat16", "float16", "float32")
_QUANTIZATIONS = ("none", "fp8", "int8", "awq", "gptq")
_KV_DTYPES = ("auto", "fp8")
_OUTPUTS = ("json", "text")


class _InputError(Exception):
    """Bad command-line input: reported on one line, exit status 1."""


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "size",
        help="size GPUs for a model: weights, KV cache, parallelism, roofline",
        description=(
            "Size a model on a GPU: parameter count, weight and KV-cache bytes, tensor/pipeline "
            "parallelism, full-length sequences that fit, decode/prefill estimates. "
            "Exit 0 fits, 2 does not fit, 1 bad input."
        ),
    )
    source = parser.add_argument_group("model")
    source.add_argument(
        "--model-config", metavar="PATH", help="config.json (or a directory holding one)"
    )
    source.add_argument(
        "--model",
        metavar="HF_ID",
        help="a model with a carried config.json, e.g. meta-llama/Llama-3.1-8B-Instruct",
    )
    source.add_argument(
        "--architecture",
        metavar="JSON",
        help="JSON object of config.json keys merged over the config (spec.model.architecture)",
    )
    parser.add_argument(
        "--gpu",
        default="auto",
        metavar="NAME|auto",
        help="GPU catalog name, or auto for the cheapest that fits (default)",
    )
    parser.add_argument("--allowed-gpus", metavar="A,B,...", help="limit --gpu auto to these")
    parser.add_argument("--gpu-catalog", metavar="PATH", help="YAML laid over the built-in catalog")
    parser.add_argument("--max-model-len", metavar="N", help="context length, tokens (required)")
    parser.add_argument(
        "--dtype",
        default="auto",
        metavar="{" + ",".join(_DTYPES) + "}",
        help="weights' dtype (default auto: the config's)",
    )
    parser.add_argument(
        "--quantization",
        default="none",
        metavar="{" + ",".join(_QUANTIZATIONS) + "}",
        help="weight quantization (default none)",
    )
    parser.add_argument(
        "--kv-cache-dtype",
        default="auto",
        metavar="{" + ",".join(_KV_DTYPES) + "}",
        help="KV cache dtype (default auto: the weights')",
    )
    parser.add_argument(
        "--min-concurrency",
        default="1",
        metavar="N",
        help="full-length sequences the KV pool must hold (default 1)",
    )
    parser.add_argument(
        "--gpu-memory-utilization",
        default="0.92",
        metavar="F",
        help="fraction of GPU memory vLLM may use (default 0.92)",
    )
    parser.add_argument("--max-num-seqs", metavar="N", help="check this batch cap")
    parser.add_argument(
        "--max-num-batched-tokens", metavar="N", help="tokens per step (default 8192)"
    )
    parser.add_argument("--ttft-p99-ms", metavar="MS", help="warn when the estimate misses it")
    parser.add_argument("--tpot-p99-ms", metavar="MS", help="warn when the estimate misses it")
    parser.add_argument(
        "--output", default="text", metavar="{json,text}", help="report format (default text)"
    )


def _choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise _InputError(f"--{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _int(name: str, value: str | None, *, minimum: int) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise _InputError(f"--{name} must be an integer, got {value!r}") from None
    if number < minimum:
        raise _InputError(f"--{name} must be at least {minimum}, got {number}")
    return number


def _float(name: str, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        raise _InputError(f"--{name} must be a number, got {value!r}") from None
    if not number > 0:
        raise _InputError(f"--{name} must be positive, got {value}")
    return number


def _config(args: argparse.Namespace) -> dict[str, Any] | None:
    if args.model_config and args.model:
        raise _InputError("give --model-config or --model, not both")
    if args.model_config:
        path = Path(args.model_config)
        if path.is_dir():
            path = path / "config.json"
        try:
            data = json.loads(read_utf8(path))
        except CommandError as err:
            raise _InputError(str(err)) from None
        except json.JSONDecodeError as err:
            raise _InputError(f"{path} is not JSON: {err.msg} (line {err.lineno})") from None
        except ValueError as err:  # JSON that Python refuses: an integer of 5,000 digits
            raise _InputError(f"{path}: {err}") from None
        if not isinstance(data, dict):
            raise _InputError(f"{path} must hold a JSON object")
        return data
    if args.model:
        config = load_builtin_model(args.model)
        if config is None:
            raise _InputError(
                f"no carried config.json for {args.model!r}; pass --model-config PATH "
                f"(carried: {', '.join(builtin_model_ids())})"
            )
        return config
    if not args.architecture:
        raise _InputError("give --model-config PATH or --model HF_ID")
    return None


def _override(args: argparse.Namespace) -> dict[str, Any] | None:
    if not args.architecture:
        return None
    try:
        data = json.loads(args.architecture)
    except json.JSONDecodeError as err:
        raise _InputError(f"--architecture is not JSON: {err.msg}") from None
    except ValueError as err:
        raise _InputError(f"--architecture: {err}") from None
    if not isinstance(data, dict):
        raise _InputError("--architecture must be a JSON object")
    return data


def _request(args: argparse.Namespace) -> SizingRequest:
    if args.max_model_len is None:
        raise _InputError("--max-model-len is required")
    architecture = parse_hf_config(_config(args), _override(args))
    utilization = _float("gpu-memory-utilization", args.gpu_memory_utilization)
    if utilization is not None and utilization > 1:
        raise _InputError(f"--gpu-memory-utilization must be at most 1, got {utilization:g}")
    return SizingRequest(
        architecture=architecture,
        dtype=_choice("dtype", args.dtype, _DTYPES),
        quantization=_choice("quantization", args.quantization, _QUANTIZATIONS),
        kv_cache_dtype=_choice("kv-cache-dtype", args.kv_cache_dtype, _KV_DTYPES),
        max_model_len=_int("max-model-len", args.max_model_len, minimum=1) or 1,
        min_concurrency=_int("min-concurrency", args.min_concurrency, minimum=0) or 0,
        gpu_memory_utilization=utilization if utilization is not None else 0.92,
        max_num_seqs=_int("max-num-seqs", args.max_num_seqs, minimum=1),
        max_num_batched_tokens=_int(
            "max-num-batched-tokens", args.max_num_batched_tokens, minimum=1
        ),
        ttft_p99_ms=_float("ttft-p99-ms", args.ttft_p99_ms),
        tpot_p99_ms=_float("tpot-p99-ms", args.tpot_p99_ms),
    )


def _gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):,.2f} GiB"


def _table(result: SizingResult) -> str:
    parallel = f"TP={result.tensor_parallel_size}, PP={result.pipeline_parallel_size}"
    quant = "no quantization" if result.quantization == "none" else result.quantization
    rows = [
        ("Fits", "yes" if result.fits else "NO"),
        ("Summary", result.to_summary() if result.fits else "-"),
        (
            "Model",
            f"{result.family}, {result.parameter_count:,} parameters "
            f"({result.active_parameter_count:,} active), {result.dtype}, {quant}",
        ),
        (
            "GPUs",
            f"{result.gpus_per_replica}x {result.gpu_type} ({parallel}, "
            f"{result.nodes_per_replica} node{'s' if result.nodes_per_replica != 1 else ''})",
        ),
        (
            "Weights",
            f"{_gib(result.weight_bytes)} total, {_gib(result.weight_bytes_per_gpu)} per GPU",
        ),
        ("Overhead", f"{_gib(result.overhead_bytes_per_gpu)} per GPU"),
        (
            "KV cache",
            f"{result.kv_cache_bytes_per_token:,} bytes per token "
            f"(kv {result.kv_cache_dtype}); pool {_gib(result.kv_pool_bytes_per_gpu)} "
            f"per GPU, {result.kv_pool_tokens:,} tokens",
        ),
        (
            "Sequences",
            f"{result.max_concurrent_sequences_at_max_len} of {result.max_model_len:,} "
            f"tokens at once; max_num_seqs {result.max_num_seqs}",
        ),
        (
            "Decode",
            f"{result.decode_ms_per_token_at_batch1:.2f} ms per token "
            "(batch 1, 1,024-token context)",
        ),
        ("Prefill", f"{result.prefill_ms_per_1k_tokens:.1f} ms per 1,024 prompt tokens"),
        ("/dev/shm", _gib(result.shm_bytes)),
        ("Reason", result.reason),
    ]
    rows.extend(("Warning", warning) for warning in result.warnings)
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


def run(args: argparse.Namespace) -> int:
    try:
        output = _choice("output", args.output, _OUTPUTS)
        request = _request(args)
        catalog: GpuCatalog = load_catalog(Path(args.gpu_catalog) if args.gpu_catalog else None)
        allowed = [n.strip() for n in (args.allowed_gpus or "").split(",") if n.strip()]
        result = choose_gpu(request, catalog, args.gpu, allowed)
    except (_InputError, SizingError) as err:
        return report("size", err)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return report("size", f"{where}: {first['msg']}")
    if output == "json":
        print(json.dumps(result.to_json_dict(), indent=2))
    else:
        print(_table(result))
    return 0 if result.fits else EXIT_DOES_NOT_FIT


def _main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="llmservice")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["size", *(sys.argv[1:] if argv is None else argv)])
    return run(args)


if __name__ == "__main__":
    sys.exit(_main())
