"""`llmservice`: one command, one subcommand per job. Each subcommand lives in commands/."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from .commands.errors import OneLineParser

__all__ = ["main"]

#: Each subcommand is the module of that name under llmservice_operator.commands: its
#: add_parser() declares the flags and the help, its run() does the work.
SUBCOMMANDS: tuple[str, ...] = (
    "size", "plan", "crd", "run", "sim", "load", "probe", "cache-model", "cache-prune",
)  # fmt: skip


def _module(command: str) -> str:
    return f"llmservice_operator.commands.{command.replace('-', '_')}"


def _parser(only: str | None) -> tuple[OneLineParser, dict[str, OneLineParser]]:
    """The top-level parser, and each subcommand's by name."""
    parser = OneLineParser(
        prog="llmservice",
        description="Size, render, roll out and autoscale vLLM services on Kubernetes.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        if only is not None and name != only:
            continue  # importing every command (kopf, aiohttp) would slow down `size`
        module = importlib.import_module(_module(name))
        module.add_parser(subparsers)
    return parser, subparsers.choices


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    only = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    parser, commands = _parser(only)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the subcommand's parser: `llmservice size: error: ...`
        commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    module = importlib.import_module(_module(args.command))
    code: int = module.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
