"""`llmservice cache-model`: the model cache's download Job (docs/model-cache.md).

Fills one directory of the cache PVC with one pinned revision of a model repo, with
``huggingface_hub`` (``snapshot_download``; ``HF_ENDPOINT`` and ``HF_TOKEN`` as the library
reads them, or ``--endpoint``), then checks every file against the hub's own metadata
(``model_info(files_metadata=True)``): the sha256 and size of each LFS file, the size and git
blob id of every other file. Only then does it write the manifest (``MANIFEST``: the repo, the
revision, its commit, and each file's size and sha256) next to the weights: a directory with a
manifest is complete and verified, one without is not.

The result goes to the container's termination message (``--result``, default
``/dev/termination-log``) as one JSON line, which the operator reads from the Job's pod into the
``ModelCached`` condition: ``{"ok": true, "commit", "files", "bytes", "seconds", "path"}`` or
``{"ok": false, "reason", "message"}``. The exit status says whether a retry can help: 0 done,
``EXIT_PERMANENT`` (3) for what only a spec change fixes (an unknown revision or repo, a 401 or
403, a file that does not match the hub's hash), 1 for the rest (the hub unreachable, a 5xx).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..render.cache_layout import CACHE_MANIFEST, CACHE_PERMANENT_EXIT
from .errors import report

__all__ = [
    "EXIT_PERMANENT",
    "MANIFEST",
    "CacheFailure",
    "CachedModel",
    "add_parser",
    "cache_model",
    "run",
]

#: The manifest's file name, in the revision's directory next to the weights.
MANIFEST = CACHE_MANIFEST
#: Exit status for failures that a retry of the same spec cannot fix (the Job's
#: podFailurePolicy fails the Job at once on it).
EXIT_PERMANENT = CACHE_PERMANENT_EXIT
_CHUNK = 8 * 1024 * 1024
#: A termination message holds 4096 bytes at most; the hub's message is cut well before.
_MESSAGE_MAX = 1500


@dataclass(frozen=True)
class CachedFile:
    path: str
    size: int
    sha256: str
    lfs: bool


@dataclass(frozen=True)
class CachedModel:
    """A revision downloaded, checked and written down."""

    repo_id: str
    revision: str
    commit: str
    directory: Path
    files: tuple[CachedFile, ...]
    seconds: float

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    def result(self) -> dict[str, Any]:
        return {
            "ok": True,
            "commit": self.commit,
            "files": len(self.files),
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "path": str(self.directory),
        }


class CacheFailure(Exception):
    """Why the cache was not filled; `permanent`: only a spec change can fix it."""

    def __init__(self, reason: str, message: str, *, permanent: bool) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message[:_MESSAGE_MAX]
        self.permanent = permanent

    def result(self) -> dict[str, Any]:
        return {"ok": False, "reason": self.reason, "message": self.message}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _git_blob_id(path: Path, size: int) -> str:
    """The git object id of the file's content (what the hub calls a sibling's blobId)."""
    digest = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _hub_failure(err: Exception, repo_id: str, revision: str) -> CacheFailure:
    """The hub's own words (its X-Error-Message or JSON error), kind by kind."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    said = getattr(err, "server_message", None) or str(err).strip().splitlines()[0]
    response = getattr(err, "response", None)
    status = getattr(response, "status_code", None)
    prefix = f"{status} from the hub: " if status else ""
    if isinstance(err, RevisionNotFoundError):
        return CacheFailure(
            "RevisionNotFound",
            f"{prefix}revision {revision!r} of {repo_id!r} not found: {said}",
            permanent=True,
        )
    if isinstance(err, GatedRepoError):
        return CacheFailure(
            "GatedRepo", f"{prefix}{repo_id!r} is gated for this token: {said}", permanent=True
        )
    if status == 401:
        return CacheFailure(
            "Unauthorized",
            f"{prefix}{said} (check the token Secret, spec.engine.hfTokenSecretRef)",
            permanent=True,
        )
    if isinstance(err, RepositoryNotFoundError):
        return CacheFailure(
            "RepositoryNotFound", f"{prefix}{repo_id!r} not found: {said}", permanent=True
        )
    if isinstance(err, HfHubHTTPError) and status in (403, 404):
        return CacheFailure("HubRefused", f"{prefix}{said}", permanent=True)
    return CacheFailure("HubUnavailable", f"{prefix}{said}", permanent=False)


def _verify(directory: Path, siblings: Sequence[Any]) -> tuple[CachedFile, ...]:
    """Every file the hub lists, checked; a mismatching file is removed (a rerun fetches it
    again) and named."""
    checked: list[CachedFile] = []
    for sibling in sorted(siblings, key=lambda s: str(s.rfilename)):
        name = str(sibling.rfilename)
        path = directory / name
        if not path.is_file():
            raise CacheFailure("FileMissing", f"{name}: not downloaded", permanent=False)
        size = path.stat().st_size
        sha256 = _sha256(path)
        lfs = sibling.lfs
        problem = None
        if lfs is not None:
            if size != lfs.size:
                problem = f"size {size} bytes, the hub says {lfs.size}"
            elif sha256 != lfs.sha256:
                problem = f"sha256 {sha256}, the hub says {lfs.sha256}"
        elif sibling.size is not None and size != sibling.size:
            problem = f"size {size} bytes, the hub says {sibling.size}"
        elif sibling.blob_id is not None and _git_blob_id(path, size) != sibling.blob_id:
            problem = f"git blob id {_git_blob_id(path, size)}, the hub says {sibling.blob_id}"
        if problem is not None:
            path.unlink()
            metadata = directory / ".cache" / "huggingface" / "download" / f"{name}.metadata"
            metadata.unlink(missing_ok=True)
            raise CacheFailure("HashMismatch", f"{name}: {problem}", permanent=True)
        checked.append(CachedFile(name, size, sha256, lfs is not None))
    return tuple(checked)


def cache_model(
    repo_id: str,
    revision: str,
    directory: Path,
    *,
    endpoint: str | None = None,
    token: str | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> CachedModel:
    """Download ``revision`` of ``repo_id`` into ``directory``, verify it, write the manifest.

    Raises CacheFailure. The manifest is removed first and written last, so that a directory
    with one is always a verified copy."""
    import httpx2
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    started = clock()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MANIFEST).unlink(missing_ok=True)
    api = HfApi(endpoint=endpoint, token=token)
    try:
        info = api.model_info(repo_id, revision=revision, files_metadata=True)
        commit = info.sha or revision
        snapshot_download(
            repo_id, revision=commit, local_dir=directory, endpoint=endpoint, token=token
        )
    except (HfHubHTTPError, LocalEntryNotFoundError) as err:
        raise _hub_failure(err, repo_id, revision) from err
    except httpx2.TransportError as err:
        raise CacheFailure("HubUnavailable", str(err), permanent=False) from err
    files = _verify(directory, info.siblings or [])
    cached = CachedModel(repo_id, revision, commit, directory, files, clock() - started)
    manifest = {
        "repo": repo_id,
        "revision": revision,
        "commit": commit,
        "files": [
            {"path": f.path, "size": f.size, "sha256": f.sha256, "lfs": f.lfs} for f in files
        ],
    }
    partial = directory / f".{MANIFEST}.partial"
    partial.write_text(json.dumps(manifest, indent=2) + "\n")
    partial.replace(directory / MANIFEST)
    return cached


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "cache-model",
        help="download a model revision into a directory and verify it (the cache Job)",
    )
    parser.add_argument("--repo", required=True, help="model repo id, e.g. org/name")
    parser.add_argument("--revision", required=True, help="the pinned revision (a commit)")
    parser.add_argument("--dir", type=Path, required=True, help="the revision's directory")
    parser.add_argument("--endpoint", help="the hub's URL (default: $HF_ENDPOINT, or the hub)")
    parser.add_argument(
        "--result",
        type=Path,
        default=Path("/dev/termination-log"),
        help="where to write the JSON result (default: the termination message)",
    )


def _write_result(path: Path, result: dict[str, Any]) -> None:
    line = json.dumps(result, separators=(",", ":"))
    print(line)
    try:
        path.write_text(line + "\n")
    except OSError as err:
        print(f"llmservice cache-model: cannot write {path}: {err.strerror}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    token = os.environ.get("HF_TOKEN") or None
    try:
        cached = cache_model(
            args.repo, args.revision, args.dir, endpoint=args.endpoint, token=token
        )
    except CacheFailure as failure:
        _write_result(args.result, failure.result())
        report("cache-model", f"{failure.reason}: {failure.message}")
        return EXIT_PERMANENT if failure.permanent else 1
    except OSError as err:  # the volume: full, read-only, not mounted
        volume = CacheFailure("VolumeError", f"{args.dir}: {err}", permanent=False)
        _write_result(args.result, volume.result())
        report("cache-model", volume.message)
        return 1
    _write_result(args.result, cached.result())
    return 0
