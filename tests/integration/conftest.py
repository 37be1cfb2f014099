"""Integration fixtures: a real local control plane (etcd, kube-apiserver, controllers,
scheduler, kwok fake GPU nodes) shared by the whole session.

The cluster is reused when one is already up in the state dir (``make cluster-up``), and
stopped at the end only when this session started it (set LLMSERVICE_KEEP_CLUSTER=1 to keep it).
Under pytest-xdist every worker shares the one cluster (``LocalCluster.up`` holds a file lock,
so the first worker starts it and the others reuse it) and no worker stops it: whoever ran
pytest does (``hack/test-integration.sh``). Building the binaries the first time takes tens of
minutes: run ``llmservice-dev cluster build`` before the tests in CI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pytest

from llmservice_dev.kubeget import for_kubeconfig
from llmservice_dev.localcluster import (
    BinariesError,
    ClusterInfo,
    LocalCluster,
    bin_dir,
)
from llmservice_dev.localcluster.binaries import missing_binaries, pinned_versions


class Kubectl(Protocol):
    def __call__(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]: ...


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that use the ``cluster`` fixture (directly or not) carry the ``cluster`` marker."""
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def cluster() -> Iterator[ClusterInfo]:
    """The running local cluster (started, and built, if needed)."""
    if os.environ.get("LLMSERVICE_SKIP_CLUSTER") == "1":
        pytest.skip("LLMSERVICE_SKIP_CLUSTER=1")
    versions = pinned_versions()
    if missing_binaries(bin_dir(versions), versions) and shutil.which("go") is None:
        pytest.fail("local cluster binaries are not built and no Go toolchain is available")
    local = LocalCluster()
    info = local.info()
    started = info is None
    if info is None:
        try:
            info = local.up()
        except BinariesError as exc:
            pytest.fail(f"cannot build the local cluster binaries: {exc}")
    yield info
    shared = os.environ.get("PYTEST_XDIST_WORKER") is not None
    if started and not shared and os.environ.get("LLMSERVICE_KEEP_CLUSTER") != "1":
        local.down()


@pytest.fixture(scope="session")
def kubectl(cluster: ClusterInfo) -> Kubectl:
    """Run the pinned kubectl against the local cluster; returns the CompletedProcess. A plain
    ``get ... -o json`` is answered in process instead (dev/llmservice_dev/kubeget.py)."""

    def run(
        *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        cmd = [str(cluster.kubectl), f"--kubeconfig={cluster.kubeconfig}", *args]
        answer = None if input is not None else for_kubeconfig(cluster.kubeconfig).get(*args)
        if answer is not None:
            result = subprocess.CompletedProcess(
                cmd, answer.returncode, answer.stdout, answer.stderr
            )
        else:
            result = subprocess.run(
                cmd, input=input, capture_output=True, text=True, timeout=timeout, check=False
            )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({result.returncode}):\n"
                f"{result.stdout}\n{result.stderr}"
            )
        return result

    return run


@pytest.fixture(scope="session")
def kubectl_json(kubectl: Kubectl) -> Callable[..., Any]:
    """``kubectl get ... -o json`` parsed."""

    def get(*args: str) -> Any:
        return json.loads(kubectl("get", *args, "-o", "json").stdout)

    return get


@pytest.fixture
def namespace(kubectl: Kubectl, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test (deleted afterwards, without waiting)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{slug}-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", name)
    # The ServiceAccount admission plugin rejects pods until "default" exists.
    kubectl(
        "wait",
        "--for=create",
        f"--namespace={name}",
        "serviceaccount/default",
        "--timeout=30s",
    )
    yield name
    kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


@pytest.fixture(scope="session")
def kube_api_client(cluster: ClusterInfo) -> Any:
    """A ``kubernetes.client.ApiClient`` for the local cluster."""
    from kubernetes import config

    return config.new_client_from_config(config_file=str(cluster.kubeconfig))  # type: ignore[no-untyped-call]


# The real operator as a subprocess (see operator_fixtures.py), for every integration module.
from .operator_fixtures import (  # noqa: E402, F401
    argocd_health_check,
    crd_installed,
    operator_image,
    operators,
)
