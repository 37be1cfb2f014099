"""`llmservice probe healthz|readyz`: the operator's own health, for exec probes.

With hostNetwork two replicas on one node cannot share a port, so each binds free ports and
writes them to a file (adapters/health.py); this command reads that file and asks the
endpoint. Exit 0 when it answers 200, else 1 with one line saying why. It imports nothing
heavy: the kubelet runs it every few seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ..adapters.ports_file import PORTS_FILE_NAME, read_ports

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "probe",
        help="ask the running operator's /healthz or /readyz (for exec probes)",
        description="Exit 0 when the operator in this container answers 200.",
    )
    parser.add_argument("endpoint", choices=("healthz", "readyz"), help="which endpoint to ask")
    parser.add_argument(
        "--runtime-dir",
        type=Path,
        default=Path(os.environ.get("LLMSERVICE_RUNTIME_DIR") or "/tmp"),
        help="where the operator wrote its ports (default: $LLMSERVICE_RUNTIME_DIR or /tmp)",
    )
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for an answer")


def run(args: argparse.Namespace) -> int:
    ports_file = args.runtime_dir / PORTS_FILE_NAME
    try:
        port = read_ports(ports_file)["health"]
    except (OSError, ValueError, KeyError) as err:
        print(f"llmservice probe: error: no ports in {ports_file}: {err}", file=sys.stderr)
        return 1
    url = f"http://127.0.0.1:{port}/{args.endpoint}"
    try:
        with urllib.request.urlopen(url, timeout=args.timeout) as response:
            print(response.read().decode(errors="replace").strip())
            return 0
    except urllib.error.HTTPError as err:
        print(f"llmservice probe: {url}: {err.code} {err.read().decode(errors='replace').strip()}")
    except (urllib.error.URLError, OSError) as err:
        print(f"llmservice probe: error: {url}: {err}", file=sys.stderr)
    return 1
