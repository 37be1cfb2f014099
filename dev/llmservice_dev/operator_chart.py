"""The shipped operator on the local cluster: its image on the real node, its chart by helm.

Tests, the demo and the benchmarks install the operator exactly as a user does, with
``helm install`` of ``charts/llmservice-operator``, plus the values this cluster needs: the
locally built image (``pullPolicy: Never``), hostNetwork (no pod network here), the API server's
loopback address (no kube-proxy) and the real node's selector and toleration. The operator then
runs under the chart's ServiceAccount and ClusterRole only.
"""

from __future__ import annotations

import fcntl
import json
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from .images import OPERATOR_REPOSITORY, ensure_images, images_dir
from .localcluster.binaries import repo_root
from .localcluster.cluster import OPERATOR_NAMESPACE, ClusterError, ClusterInfo
from .localcluster.realnode import real_node_scheduling

__all__ = [
    "OPERATOR_NAMESPACE",
    "chart_path",
    "chart_values",
    "helm_install",
    "helm_uninstall",
    "load_operator_image",
]


def chart_path() -> Path:
    root = repo_root()
    if root is None:
        raise ClusterError("the chart is installed from a source checkout")
    return root / "charts" / "llmservice-operator"


def load_operator_image(info: ClusterInfo) -> str:
    """The operator image of the source tree as it is now, built if missing and imported into
    the real node's containerd if it has not got it; returns the image name. Test workers that
    run side by side take turns (a file lock), so the image is built and imported once."""
    lock = images_dir() / ".load-operator.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        return _load_operator_image(info)


def _load_operator_image(info: ClusterInfo) -> str:
    built = ensure_images(with_vllm=False)["operator"]
    node = info.real_node
    wanted = f"docker.io/library/{built.name}"
    present = node.image_names()
    if wanted not in present and built.tar is not None:
        node.import_image(built.tar)
        stale = [n for n in present if n.startswith(f"docker.io/library/{OPERATOR_REPOSITORY}:")]
        if stale:
            node.ctr("images", "rm", *stale)
    return built.name


def chart_values(
    info: ClusterInfo,
    image: str,
    *,
    namespaces: Sequence[str] = (),
    prometheus_url: str | None = None,
    replicas: int = 1,
    lease_name: str = "",
    lease_duration_seconds: float = 15,
    reconcile_interval_seconds: float | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    repository, tag = image.rsplit(":", 1)
    values: dict[str, Any] = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "replicaCount": replicas,
        "hostNetwork": True,
        "apiServer": {"host": "127.0.0.1", "port": str(info.api_port)},
        "watchNamespaces": list(namespaces),
        "prometheusUrl": prometheus_url or info.prometheus_url,
        "logFormat": "text",
        "leaderElection": {
            "leaseName": lease_name,
            "leaseDurationSeconds": lease_duration_seconds,
        },
        "extraEnv": [{"name": k, "value": v} for k, v in (extra_env or {}).items()],
        **real_node_scheduling(),
    }
    if reconcile_interval_seconds is not None:
        values["reconcileIntervalSeconds"] = reconcile_interval_seconds
    return values


def _helm(info: ClusterInfo, *args: str, timeout: float = 300) -> str:
    result = subprocess.run(
        [str(info.helm), *args],
        env=info.env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise ClusterError(f"helm {' '.join(args[:2])} failed: {result.stdout}{result.stderr}")
    return result.stdout


def helm_install(
    info: ClusterInfo,
    release: str,
    values: Mapping[str, Any],
    *,
    namespace: str = OPERATOR_NAMESPACE,
    wait: bool = False,
    timeout_s: int = 180,
) -> None:
    """``helm upgrade --install`` of the chart (its CRDs are applied separately: ``--skip-crds``
    leaves a CRD that is already served alone)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        yaml.safe_dump(dict(values), handle)
        values_file = handle.name
    try:
        args = [
            "upgrade",
            "--install",
            release,
            str(chart_path()),
            "--namespace",
            namespace,
            "--create-namespace",
            "--skip-crds",
            "--values",
            values_file,
        ]
        if wait:
            args += ["--wait", f"--timeout={timeout_s}s"]
        _helm(info, *args, timeout=timeout_s + 30)
    finally:
        Path(values_file).unlink(missing_ok=True)


def helm_uninstall(
    info: ClusterInfo, release: str, *, namespace: str = OPERATOR_NAMESPACE, wait: bool = True
) -> None:
    args = ["uninstall", release, "--namespace", namespace, "--ignore-not-found"]
    if wait:
        args += ["--wait", "--timeout=120s"]
    _helm(info, *args, timeout=150)


def release_pods(info: ClusterInfo, release: str, namespace: str = OPERATOR_NAMESPACE) -> Any:
    """The release's pods as the API server has them (``kubectl get pods -o json``)."""
    out = info.run_kubectl(
        "-n", namespace, "get", "pods", "-l", f"app.kubernetes.io/instance={release}", "-o", "json"
    )
    return json.loads(out)["items"]
