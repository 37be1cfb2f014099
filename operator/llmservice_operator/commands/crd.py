"""`llmservice crd`: print (or write) the generated CustomResourceDefinition."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..api.crd import crd_yaml
from .errors import report

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("crd", help="print the LLMService CRD")
    parser.add_argument("-o", "--output", type=Path, help="write to this file instead of stdout")


def run(args: argparse.Namespace) -> int:
    text = crd_yaml()
    if args.output is None:
        print(text, end="")
        return 0
    try:
        args.output.write_text(text)
    except OSError as err:
        return report("crd", f"cannot write {args.output}: {err.strerror}")
    return 0
