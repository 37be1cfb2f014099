"""A model hub on loopback, for the model cache's tests (there is no hub here).

It answers the endpoints ``huggingface_hub`` calls for ``model_info`` and ``snapshot_download``,
with the headers the real hub sends:

- ``GET /api/models/{repo}/revision/{rev}`` (``?blobs=true``: each sibling's size, git blob id
  and, for LFS files, sha256 and size),
- ``GET /api/models/{repo}/tree/{rev}`` (the recursive listing ``snapshot_download`` reads),
- ``HEAD`` / ``GET /{repo}/resolve/{rev}/{file}`` (``X-Repo-Commit``, ``ETag``, and for LFS
  files ``X-Linked-Etag`` / ``X-Linked-Size``).

It serves each repo from a directory. Files named ``*.safetensors`` or larger than
``LFS_THRESHOLD`` are LFS files (as on the hub). Knobs for bad input: ``corrupt`` (file names
served with one byte flipped, same size, while the metadata keeps the true hashes), ``token``
(a request without it gets the hub's 401), and any revision other than the repo's commit or
``main`` gets the hub's 404 ``RevisionNotFound``. Binds 127.0.0.1 only.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = ["COMMIT", "LFS_THRESHOLD", "FakeHub", "HubFile"]

COMMIT = "3f1d2c4b5a6978e0d1c2b3a4958677e6f5d4c3b2"
LFS_THRESHOLD = 100 * 1024
_POINTER_SIZE = 134


@dataclass(frozen=True)
class HubFile:
    path: str
    content: bytes

    @property
    def size(self) -> int:
        return len(self.content)

    @property
    def lfs(self) -> bool:
        return self.path.endswith(".safetensors") or self.size > LFS_THRESHOLD

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()

    @property
    def blob_id(self) -> str:
        """The git object id: of the content, or of the LFS pointer for an LFS file."""
        data = self.content
        if self.lfs:
            data = (
                "version https://git-lfs.github.com/spec/v1\n"
                f"oid sha256:{self.sha256}\nsize {self.size}\n"
            ).encode()
        return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


@dataclass
class FakeHub:
    """``with FakeHub({"org/name": directory}) as hub: hub.url``."""

    repos: dict[str, Path]
    commit: str = COMMIT
    token: str | None = None
    corrupt: set[str] = field(default_factory=set)
    requests: list[tuple[str, str]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "the hub is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def files(self, repo: str) -> list[HubFile]:
        root = self.repos[repo]
        return [
            HubFile(p.relative_to(root).as_posix(), p.read_bytes())
            for p in sorted(root.rglob("*"))
            if p.is_file()
        ]

    def __enter__(self) -> FakeHub:
        hub = self

        class Handler(_Handler):
            owner = hub

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _Handler(BaseHTTPRequestHandler):
    owner: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    # ------------------------------------------------------------------ answers
    def _send(
        self, status: int, data: bytes, headers: dict[str, str], body: bool, kind: str
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if body:
            self.wfile.write(data)

    def _error(self, status: int, message: str, body: bool, code: str | None = None) -> None:
        headers = {"X-Error-Message": message}
        if code is not None:
            headers["X-Error-Code"] = code
        data = json.dumps({"error": message}).encode()
        self._send(status, data, headers, body, "application/json")

    def _json(self, value: Any, body: bool) -> None:
        self._send(200, json.dumps(value).encode(), {}, body, "application/json")

    def _answer(self, body: bool) -> None:
        hub = self.owner
        url = urlsplit(self.path)
        path = unquote(url.path)
        hub.requests.append((self.command, path))
        if hub.token is not None and self.headers.get("Authorization") != f"Bearer {hub.token}":
            self._error(401, "Invalid credentials in Authorization header", body)
            return
        if path.startswith("/api/models/"):
            self._api(path.removeprefix("/api/models/"), "blobs=" in url.query, body)
            return
        for repo in hub.repos:
            prefix = f"/{repo}/resolve/"
            if path.startswith(prefix):
                revision, _, name = path.removeprefix(prefix).partition("/")
                self._resolve(repo, revision, name, body)
                return
        self._error(404, "Repository not found", body, "RepoNotFound")

    def _known(self, revision: str, body: bool) -> bool:
        if revision in (self.owner.commit, "main"):
            return True
        self._error(404, f"Invalid rev id: {revision}", body, "RevisionNotFound")
        return False

    def _api(self, rest: str, blobs: bool, body: bool) -> None:
        hub = self.owner
        repo = next((r for r in hub.repos if rest.startswith(f"{r}/")), None)
        if repo is None:
            self._error(404, "Repository not found", body, "RepoNotFound")
            return
        what, _, revision = rest.removeprefix(f"{repo}/").partition("/")
        revision = revision.split("/", 1)[0]
        if not self._known(revision, body):
            return
        files = hub.files(repo)
        if what == "tree":
            self._json([_tree_entry(f) for f in files], body)
        elif what == "revision":
            siblings = [_sibling(f, blobs) for f in files]
            self._json(
                {
                    "_id": "0" * 24,
                    "id": repo,
                    "modelId": repo,
                    "sha": hub.commit,
                    "private": False,
                    "disabled": False,
                    "gated": False,
                    "tags": [],
                    "siblings": siblings,
                    "lastModified": "2026-01-01T00:00:00.000Z",
                    "createdAt": "2026-01-01T00:00:00.000Z",
                },
                body,
            )
        else:
            self._error(404, f"no endpoint {what}", body)

    def _resolve(self, repo: str, revision: str, name: str, body: bool) -> None:
        hub = self.owner
        if not self._known(revision, body):
            return
        found = next((f for f in hub.files(repo) if f.path == name), None)
        if found is None:
            self._error(404, f"Entry not found: {name}", body, "EntryNotFound")
            return
        content = found.content
        if name in hub.corrupt and content:
            content = bytes([content[0] ^ 0x01]) + content[1:]
        headers = {"X-Repo-Commit": hub.commit, "Accept-Ranges": "bytes"}
        if found.lfs:
            headers["ETag"] = f'"{found.sha256}"'
            headers["X-Linked-Etag"] = f'"{found.sha256}"'
            headers["X-Linked-Size"] = str(found.size)
        else:
            headers["ETag"] = f'"{found.blob_id}"'
        self._send(200, content, headers, body, "application/octet-stream")


def _sibling(found: HubFile, blobs: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"rfilename": found.path}
    if blobs:
        entry["size"] = found.size
        entry["blobId"] = found.blob_id
        if found.lfs:
            entry["lfs"] = {
                "sha256": found.sha256,
                "size": found.size,
                "pointerSize": _POINTER_SIZE,
            }
    return entry


def _tree_entry(found: HubFile) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "type": "file",
        "oid": found.blob_id,
        "size": found.size,
        "path": found.path,
    }
    if found.lfs:
        entry["lfs"] = {"oid": found.sha256, "size": found.size, "pointerSize": _POINTER_SIZE}
    return entry


def tiny_model_repo(out: Path) -> Path:
    """The repo's tiny model as a hub repo in ``out``: the files ``make install`` wrote
    (hack/vllm-cpu/make_tiny_model.py, in the cache) when they are there, else the ones that
    need no tokenizer training (its config.json and the rest), plus ``model.safetensors``: one
    small tensor in the safetensors format, so that an LFS file (sha256) is checked too (the
    tiny model itself has no weights; the engine runs it with random ones)."""
    import importlib.util
    import shutil
    import struct

    out.mkdir(parents=True, exist_ok=True)
    built: Path | None = None
    try:
        from llmservice_dev.engine import engine_paths

        built = engine_paths().model_dir
    except (FileNotFoundError, KeyError):
        built = None
    if built is not None and (built / "tokenizer.json").is_file():
        for path in sorted(built.iterdir()):
            if path.is_file() and not path.name.startswith("."):
                shutil.copyfile(path, out / path.name)
    else:
        source = Path(__file__).resolve().parents[1] / "hack" / "vllm-cpu" / "make_tiny_model.py"
        spec = importlib.util.spec_from_file_location("make_tiny_model", source)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        ids = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3}
        tokens = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
        for name, value in (
            ("config.json", {**module.CONFIG, "vocab_size": module.VOCAB, **ids}),
            ("generation_config.json", ids),
            ("special_tokens_map.json", tokens),
            ("tokenizer_config.json", {**tokens, "chat_template": module.CHAT_TEMPLATE}),
        ):
            (out / name).write_text(json.dumps(value, indent=2) + "\n")
    rows, cols = 256, 256
    data = struct.pack(f"<{rows * cols}f", *((i % 97) / 97.0 for i in range(rows * cols)))
    header = json.dumps(
        {
            "cache_test.weight": {
                "dtype": "F32",
                "shape": [rows, cols],
                "data_offsets": [0, len(data)],
            }
        }
    ).encode()
    header += b" " * (-len(header) % 8)
    (out / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + data)
    return out
