"""`llmservice`: one command, one subcommand per job. Each subcommand lives in commands/."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["main"]

#: subcommand -> (module under llmservice_operator.commands, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "size": ("size", "size GPUs for a model: weights, KV cache, parallelism, roofline"),
    "plan": ("plan", "print the manifests an LLMService renders to (like helm template)"),
    "crd": ("crd", "print the LLMService CustomResourceDefinition"),
    "run": ("run", "run the operator (kopf)"),
    "sim": ("sim", "run the vLLM engine simulator"),
    "load": ("load", "send OpenAI-style load and report TTFT/TPOT percentiles"),
    "probe": ("probe", "ask the running operator's /healthz or /readyz (exec probes)"),
}


def _parser(only: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llmservice",
        description="Size, render, roll out and autoscale vLLM services on Kubernetes.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, _help) in SUBCOMMANDS.items():
        if only is not None and name != only:
            continue  # importing every command (kopf, aiohttp) would slow down `size`
        module = importlib.import_module(f"llmservice_operator.commands.{module_name}")
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    only = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    args = _parser(only).parse_args(argv)
    module = importlib.import_module(f"llmservice_operator.commands.{SUBCOMMANDS[args.command][0]}")
    code: int = module.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
