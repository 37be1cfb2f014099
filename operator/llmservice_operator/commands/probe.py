"""`llmservice probe healthz|readyz`: the operator's own health, asked by a person.

The chart's exec probes run `llmservice-probe` (adapters/health_probe.py) instead: the same
check without the CLI's imports, since the kubelet runs it every few seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from ..adapters.health_probe import ENDPOINTS, probe

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "probe",
        help="ask the running operator's /healthz or /readyz (for exec probes)",
        description="Exit 0 when the operator in this container answers 200.",
    )
    parser.add_argument("endpoint", choices=ENDPOINTS, help="which endpoint to ask")
    parser.add_argument(
        "--runtime-dir",
        type=Path,
        default=Path(os.environ.get("LLMSERVICE_RUNTIME_DIR") or "/tmp"),
        help="where the operator wrote its ports (default: $LLMSERVICE_RUNTIME_DIR or /tmp)",
    )
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for an answer")


def run(args: argparse.Namespace) -> int:
    ok, message = probe(args.endpoint, str(args.runtime_dir), args.timeout)
    if ok:
        print(message)
        return 0
    print(f"llmservice probe: {message}", file=sys.stderr)
    return 1
