"""Run the real operator (`llmservice run`) against the local control plane."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from llmservice_dev.localcluster import ClusterInfo

ROOT = Path(__file__).parents[2]


@dataclass
class OperatorProcess:
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class OperatorFactory:
    cluster: ClusterInfo
    tmp: Path
    started: list[OperatorProcess] = field(default_factory=list)

    def start(
        self, namespace: str, lease_namespace: str | None = None, **env: str
    ) -> OperatorProcess:
        log = self.tmp / f"operator-{len(self.started)}.log"
        environment = {
            **os.environ,
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "LLMSERVICE_NAMESPACES": namespace,
            "LLMSERVICE_RECONCILE_INTERVAL_SECONDS": "2",
            "LLMSERVICE_LEASE_NAMESPACE": lease_namespace or namespace,
            "LLMSERVICE_LEASE_DURATION_SECONDS": "6",
            "LLMSERVICE_HEALTH_PORT": "0",
            "LLMSERVICE_METRICS_PORT": "0",
            "LLMSERVICE_PROMETHEUS_URL": "http://127.0.0.1:9",
            **env,
        }
        handle = log.open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "llmservice_operator", "run"],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=environment,
            cwd=ROOT,
        )
        op = OperatorProcess(proc, log)
        self.started.append(op)
        return op

    def stop_all(self) -> None:
        for op in self.started:
            op.stop()


@pytest.fixture(scope="session")
def crd_installed(cluster: ClusterInfo, kubectl: Any) -> None:
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds" / "llmservice.yaml"))
    cluster.wait_crd_established("llmservices.serving.llmservice.dev")


@pytest.fixture
def operators(
    cluster: ClusterInfo, crd_installed: None, tmp_path: Path
) -> Iterator[OperatorFactory]:
    factory = OperatorFactory(cluster, tmp_path)
    yield factory
    factory.stop_all()
    for op in factory.started:  # pytest shows this only when the test failed
        print(f"--- {op.log} ---\n{op.output()[-6000:]}")


def wait_for(
    what: str, check: Callable[[], Any], timeout: float = 90, interval: float = 0.5
) -> Any:
    """Poll until check() returns something truthy; fail with the last value otherwise."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (AssertionError, KeyError, IndexError, json.JSONDecodeError) as err:
            last = err
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
