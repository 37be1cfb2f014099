"""Container images for the local cluster's real node, built with no registry in reach.

- **dockerd**: Debian's ``docker.io`` daemon, started here when it is not running, with no
  bridge network and no iptables rules (``--bridge=none --iptables=false``); builds use the
  host's network (``--network host``) to reach PyPI.
- **The base**: a Debian bookworm rootfs with python3.11 made by ``mmdebstrap`` from Debian's
  packages and ``docker import``-ed, cached as a tar outside the repo.
- **The images**: ``images/operator/Dockerfile`` and ``images/vllm/Dockerfile`` built on that
  base through their ``BASE_IMAGE`` build argument (their defaults stay the public images users
  pull), and the sandbox image from ``hack/pause`` (a static Go binary in a FROM-scratch image).
- The operator image is tagged by a hash of what goes into it, so a code change gives a new
  tag and an unchanged tree is never rebuilt; ``docker save`` tars land in the cache for the
  real node's containerd to import.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from .localcluster.binaries import cache_dir, repo_root

__all__ = [
    "BASE_IMAGE",
    "OPERATOR_REPOSITORY",
    "PAUSE_IMAGE",
    "BuiltImage",
    "ImageError",
    "ensure_docker",
    "ensure_images",
    "operator_image",
]

BASE_IMAGE = "llmservice-local/debian-base:bookworm"
PAUSE_IMAGE = "llmservice-local/pause:1"
OPERATOR_REPOSITORY = "llmservice-operator"
VLLM_REPOSITORY = "llmservice-vllm"
#: The base's packages: python3.11 with its venv module; ca-certificates for pip's TLS.
BASE_PACKAGES = ("ca-certificates", "python3.11", "python3.11-venv")
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
_DOCKER_START_TIMEOUT_S = 60.0
#: What goes into the operator image (see images/operator/Dockerfile and .dockerignore).
_OPERATOR_INPUTS = ("pyproject.toml", "README.md", "images/operator/Dockerfile", ".dockerignore")


class ImageError(RuntimeError):
    """An image could not be built (the message carries the tool's output)."""


@dataclass(frozen=True)
class BuiltImage:
    name: str
    tar: Path | None
    size_bytes: int
    build_seconds: float
    rebuilt: bool


def images_dir() -> Path:
    return cache_dir() / "images"


def _docker() -> str:
    # Debian's client matches Debian's daemon; another docker on PATH may be newer.
    for candidate in ("/usr/bin/docker", shutil.which("docker")):
        if candidate and Path(candidate).is_file():
            return candidate
    raise ImageError("no docker client: install Debian's docker.io (make install does)")


def _run(*args: str, cwd: Path | None = None, quiet: bool = True) -> str:
    result = subprocess.run(
        list(args), cwd=cwd, capture_output=quiet, text=True, check=False, stdin=subprocess.DEVNULL
    )
    if result.returncode != 0:
        output = ((result.stdout or "") + (result.stderr or ""))[-4000:]
        raise ImageError(f"{' '.join(args[:3])} ... failed ({result.returncode}):\n{output}")
    return result.stdout or ""


def _docker_ok(docker: str) -> bool:
    return (
        subprocess.run(
            [docker, "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            check=False,
            stdin=subprocess.DEVNULL,
        ).returncode
        == 0
    )


def ensure_docker() -> str:
    """The docker client, with a daemon answering (started here when none runs)."""
    docker = _docker()
    if _docker_ok(docker):
        return docker
    dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
    if not Path(dockerd).is_file():
        raise ImageError("no dockerd: install Debian's docker.io (make install does)")
    log = cache_dir() / "dockerd.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        subprocess.Popen(
            [
                dockerd,
                "--bridge=none",  # no docker0, no Docker bridge network
                "--iptables=false",
                "--ip6tables=false",
                "--ip-masq=false",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + _DOCKER_START_TIMEOUT_S
    while not _docker_ok(docker):
        if time.monotonic() > deadline:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            raise ImageError(
                f"dockerd did not start within {_DOCKER_START_TIMEOUT_S:.0f}s:\n{tail}"
            )
        time.sleep(0.5)
    return docker


def _image_exists(docker: str, name: str) -> bool:
    return (
        subprocess.run(
            [docker, "image", "inspect", name], capture_output=True, check=False
        ).returncode
        == 0
    )


def _image_size(docker: str, name: str) -> int:
    return int(_run(docker, "image", "inspect", "--format", "{{.Size}}", name).strip())


def _source_root() -> Path:
    root = repo_root()
    if root is None:
        raise ImageError("the images are built from a source checkout (hack/versions.env)")
    return root


def operator_image_tag(root: Path | None = None) -> str:
    """``dev-<hash of the files the operator image is built from>``."""
    root = root or _source_root()
    digest = hashlib.sha256()
    files = [root / p for p in _OPERATOR_INPUTS]
    package = root / "operator"
    files += sorted(
        p
        for p in package.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and ".egg-info" not in str(p)
    )
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return f"dev-{digest.hexdigest()[:12]}"


def operator_image(root: Path | None = None) -> str:
    return f"{OPERATOR_REPOSITORY}:{operator_image_tag(root)}"


def _timed(build: Callable[[], None], docker: str, name: str, tar: Path | None) -> BuiltImage:
    if _image_exists(docker, name) and (tar is None or tar.is_file()):
        return BuiltImage(name, tar, _image_size(docker, name), 0.0, rebuilt=False)
    started = time.monotonic()
    build()
    if tar is not None:
        tar.parent.mkdir(parents=True, exist_ok=True)
        partial = tar.with_suffix(".partial")
        _run(docker, "save", "-o", str(partial), name)
        partial.replace(tar)
    return BuiltImage(name, tar, _image_size(docker, name), time.monotonic() - started, True)


def _base(docker: str) -> BuiltImage:
    rootfs = images_dir() / f"debian-{DEBIAN_SUITE}-rootfs.tar"

    def build() -> None:
        if not rootfs.is_file():
            if shutil.which("mmdebstrap") is None:
                raise ImageError("no mmdebstrap: install Debian's mmdebstrap (make install does)")
            rootfs.parent.mkdir(parents=True, exist_ok=True)
            partial = rootfs.with_name(f"partial-{rootfs.name}")  # mmdebstrap reads the suffix
            _run(
                "mmdebstrap",
                "--variant=essential",
                f"--include={','.join(BASE_PACKAGES)}",
                # The local base trusts what this machine trusts: its CA bundle (PyPI may be
                # reached through a TLS proxy), also for pip, which has its own bundle.
                f'--customize-hook=cp {HOST_CA_BUNDLE} "$1{HOST_CA_BUNDLE}"',
                f"--customize-hook=printf '[global]\\ncert = {HOST_CA_BUNDLE}\\n' "
                '> "$1/etc/pip.conf"',
                DEBIAN_SUITE,
                str(partial),
                DEBIAN_MIRROR,
            )
            partial.replace(rootfs)
        _run(docker, "import", str(rootfs), BASE_IMAGE)

    return _timed(build, docker, BASE_IMAGE, None)


def _pause(docker: str) -> BuiltImage:
    tar = images_dir() / "pause.tar"
    source = _source_root() / "hack" / "pause"

    def build() -> None:
        go = shutil.which("go")
        if go is None:
            raise ImageError("no Go toolchain to build the pause image")
        with tempfile.TemporaryDirectory() as tmp:
            rootfs = Path(tmp) / "rootfs"
            rootfs.mkdir()
            env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -buildvcs=false"}
            subprocess.run(
                [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(rootfs / "pause"), "."],
                cwd=source,
                env=env,
                check=True,
                capture_output=True,
            )
            layer = Path(tmp) / "pause.tar"
            _run("tar", "-C", str(rootfs), "-cf", str(layer), ".")
            _run(
                docker,
                "import",
                "-c",
                'ENTRYPOINT ["/pause"]',
                "-c",
                "USER 65535:65535",
                str(layer),
                PAUSE_IMAGE,
            )

    return _timed(build, docker, PAUSE_IMAGE, tar)


def _dockerfile_image(
    docker: str, name: str, dockerfile: str, tar: Path | None, context: Path
) -> BuiltImage:
    def build() -> None:
        _run(
            docker,
            "build",
            "--network",
            "host",
            "--build-arg",
            f"BASE_IMAGE={BASE_IMAGE}",
            "-f",
            str(context / dockerfile),
            "-t",
            name,
            str(context),
        )

    return _timed(build, docker, name, tar)


def ensure_images(*, with_vllm: bool = True) -> dict[str, BuiltImage]:
    """Build what is missing (the base, pause, operator and vLLM images); tars for the node."""
    docker = ensure_docker()
    root = _source_root()
    built = {"base": _base(docker), "pause": _pause(docker)}
    name = operator_image(root)
    tar = images_dir() / f"{name.replace(':', '-')}.tar"
    built["operator"] = _dockerfile_image(docker, name, "images/operator/Dockerfile", tar, root)
    if with_vllm:
        # Never run locally (the pod runner plays the kubelet for GPU pods): built to prove
        # the Dockerfile builds on a base given by BASE_IMAGE.
        dockerfile = root / "images" / "vllm" / "Dockerfile"
        vllm = f"{VLLM_REPOSITORY}:dev-{hashlib.sha256(dockerfile.read_bytes()).hexdigest()[:12]}"
        built["vllm"] = _dockerfile_image(docker, vllm, "images/vllm/Dockerfile", None, root)
    if built["operator"].rebuilt:
        _prune_old(docker, keep=built["operator"])
    report = images_dir() / "build-report.json"
    report.write_text(
        json.dumps({k: {**asdict(v), "tar": str(v.tar)} for k, v in built.items()}, indent=2)
    )
    return built


def _prune_old(docker: str, keep: BuiltImage) -> None:
    """Earlier builds of the operator image (tags and tars) and dangling build stages."""
    for tar in images_dir().glob(f"{OPERATOR_REPOSITORY}-dev-*.tar"):
        if tar != keep.tar:
            tar.unlink(missing_ok=True)
    tags = _run(docker, "images", "--format", "{{.Repository}}:{{.Tag}}", OPERATOR_REPOSITORY)
    old = [t for t in tags.split() if t != keep.name and ":dev-" in t]
    if old:
        _run(docker, "rmi", *old)
    _run(docker, "image", "prune", "--force")


def describe(built: dict[str, BuiltImage]) -> str:
    lines = [f"{'image':<48} {'size':>10} {'build':>9}"]
    for image in built.values():
        took = f"{image.build_seconds:.1f} s" if image.rebuilt else "cached"
        lines.append(f"{image.name:<48} {image.size_bytes / 2**20:>6.1f} MiB {took:>9}")
    return "\n".join(lines)
