"""Pinned versions and the cached control-plane binaries (built by hack/build-binaries.sh)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

#: The LeaderWorkerSet controller (sigs.k8s.io/lws cmd), built from its own module.
LWS_CONTROLLER = "lws-controller"
#: Its CRD, copied from the same module's config/crd/bases into ``<bin dir>/crds/``.
LWS_CRD_FILE = "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
K8S_BINARIES = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kubectl",
)
ALL_BINARIES = (*K8S_BINARIES, "etcd", "kwok", "helm", LWS_CONTROLLER)


class BinariesError(RuntimeError):
    """The control-plane binaries are missing and cannot be built."""


@dataclass(frozen=True)
class Versions:
    """The versions pinned in hack/versions.env."""

    k8s: str
    etcd: str
    kwok: str
    helm: str
    lws: str

    def for_binary(self, name: str) -> str:
        if name == "etcd":
            return self.etcd
        if name == "kwok":
            return self.kwok
        if name == "helm":
            return self.helm
        if name == LWS_CONTROLLER:
            return self.lws
        return self.k8s


def cache_dir() -> Path:
    """``$LLMSERVICE_CACHE`` or ``~/.cache/llmservice-operator``."""
    env = os.environ.get("LLMSERVICE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "llmservice-operator"


def repo_root() -> Path | None:
    """The source checkout this package was imported from (holding hack/versions.env)."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "hack" / "versions.env").is_file():
            return parent
    return None


def _hack_file(name: str) -> Path:
    root = repo_root()
    if root is None:
        raise BinariesError(
            f"hack/{name} not found above {Path(__file__).resolve()}; "
            "the local cluster needs a source checkout (pip install -e .)"
        )
    return root / "hack" / name


def parse_env_file(text: str) -> dict[str, str]:
    """Parse simple ``KEY=VALUE`` lines (comments and blanks ignored, quotes stripped)."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip().removeprefix("export ").strip()] = value.strip().strip("'\"")
    return values


def pinned_versions() -> Versions:
    values = parse_env_file(_hack_file("versions.env").read_text())
    try:
        return Versions(
            k8s=values["K8S_VERSION"],
            etcd=values["ETCD_VERSION"],
            kwok=values["KWOK_VERSION"],
            helm=values["HELM_VERSION"],
            lws=values["LWS_VERSION"],
        )
    except KeyError as exc:
        raise BinariesError(f"hack/versions.env lacks {exc.args[0]}") from exc


def bin_dir(versions: Versions | None = None) -> Path:
    v = versions or pinned_versions()
    return cache_dir() / f"bin-{v.k8s}"


def missing_binaries(directory: Path, versions: Versions) -> list[str]:
    """Binaries (and the kwok stages, the LWS CRD) absent from ``directory`` or built for another version."""
    missing: list[str] = []
    for name in ALL_BINARIES:
        stamp = directory / f".{name}.version"
        exe = directory / name
        ok = exe.is_file() and os.access(exe, os.X_OK) and stamp.is_file()
        if not ok or stamp.read_text().strip() != versions.for_binary(name):
            missing.append(name)
    stages = directory / "stages" / ".version"
    if not stages.is_file() or stages.read_text().strip() != versions.kwok:
        missing.append("stages")
    crd_stamp = directory / "crds" / ".lws.version"
    if not (directory / "crds" / LWS_CRD_FILE).is_file() or (
        not crd_stamp.is_file() or crd_stamp.read_text().strip() != versions.lws
    ):
        missing.append("lws-crd")
    return missing


def ensure_binaries(*, quiet: bool = False) -> Path:
    """Return the directory of the pinned binaries, building them first when needed.

    Building runs ``hack/build-binaries.sh`` (Go toolchain, tens of minutes the first time);
    its progress goes to stderr unless ``quiet``.
    """
    versions = pinned_versions()
    directory = bin_dir(versions)
    if not missing_binaries(directory, versions):
        return directory
    script = _hack_file("build-binaries.sh")
    result = subprocess.run(
        ["bash", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL if quiet else sys.stderr,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise BinariesError(f"{script} failed with exit code {result.returncode}")
    still = missing_binaries(directory, versions)
    if still:
        raise BinariesError(f"{script} finished but {', '.join(still)} missing in {directory}")
    return directory
