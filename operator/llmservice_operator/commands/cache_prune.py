"""`llmservice cache-prune`: the model cache's clean-up Job (docs/model-cache.md).

After a rollout, the operator runs it on the PVC it made to remove every revision directory
(``<root>/<repo>/<revision>``) but the one that serves (``--keep``). It removes only what the
download Job wrote (a directory holding its manifest or huggingface_hub's ``.cache``), and
nothing written after it started: a download that began or finished meanwhile is kept. Its
result, ``{"ok": true, "removed": [...], "freed": bytes}``, is the termination message.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from ..render.cache_layout import CACHE_MANIFEST
from .errors import report

__all__ = ["add_parser", "prune_cache", "run"]


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def prune_cache(root: Path, keep: str, started: float | None = None) -> tuple[list[str], int]:
    """Remove the revision directories under ``root`` other than ``keep`` (``repo/revision``)
    that the download Job wrote; (what was removed, the bytes freed)."""
    started = time.time() if started is None else started
    removed: list[str] = []
    freed = 0
    for repo in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for revision in sorted(p for p in repo.iterdir() if p.is_dir()):
            name = f"{repo.name}/{revision.name}"
            manifest = revision / CACHE_MANIFEST
            ours = manifest.is_file() or (revision / ".cache" / "huggingface").is_dir()
            # Written since it started (a download that began or ended meanwhile): kept.
            fresh = revision.stat().st_mtime >= started or (
                manifest.is_file() and manifest.stat().st_mtime >= started
            )
            if name == keep or not ours or fresh:
                continue
            freed += _size(revision)
            shutil.rmtree(revision)
            removed.append(name)
        if not any(repo.iterdir()):
            repo.rmdir()
    return removed, freed


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "cache-prune", help="remove the model cache's revisions but one (the clean-up Job)"
    )
    parser.add_argument("--root", type=Path, required=True, help="the mounted cache volume")
    parser.add_argument("--keep", required=True, help="the serving revision: <repo>/<revision>")
    parser.add_argument(
        "--result",
        type=Path,
        default=Path("/dev/termination-log"),
        help="where to write the JSON result (default: the termination message)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        removed, freed = prune_cache(args.root, args.keep)
    except OSError as err:
        result: dict[str, Any] = {"ok": False, "reason": "VolumeError", "message": str(err)}
        code = report("cache-prune", err)
    else:
        result = {"ok": True, "removed": removed[:50], "freed": freed}
        code = 0
    line = json.dumps(result, separators=(",", ":"))
    print(line)
    try:
        args.result.write_text(line + "\n")
    except OSError as err:
        print(
            f"llmservice cache-prune: cannot write {args.result}: {err.strerror}", file=sys.stderr
        )
    return code
