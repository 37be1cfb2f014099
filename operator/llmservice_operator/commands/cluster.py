"""`llmservice cluster up|down|status|build`: the local control plane (see localcluster)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "cluster", help="build/start/stop the local control plane (etcd, apiserver, kwok)"
    )
    parser.add_argument("action", nargs=argparse.REMAINDER, help="up | down | status | build")


def run(args: argparse.Namespace) -> int:
    from ..localcluster.cli import main

    return main(args.action)
