"""The shipped operator on the local cluster: its image, installed by its Helm chart on the real
kubelet node, under the chart's ServiceAccount and RBAC (never the admin kubeconfig): its
namespaced mode, a Role in the watched namespace and only cluster-scoped reads cluster-wide.

Each ``operators.start(namespace)`` is one Helm release watching that namespace. Releases of
one namespace share a Lease, so a restart is a new release that takes over where the last one
left off. At teardown every release's requests are read from the API server's audit log: any
403 answer fails the test (the chart's RBAC must cover what the code does).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import config

from llmservice_dev.localcluster import ClusterInfo
from llmservice_dev.localcluster.cluster import OPERATOR_NAMESPACE
from llmservice_dev.operator_chart import (
    chart_values,
    helm_install,
    helm_uninstall,
    load_operator_image,
    release_pods,
)

from .health_check import StatusRecorder, check_recorded, recorded

ROOT = Path(__file__).parents[2]
#: Settings given as LLMSERVICE_* environment in tests that map to chart values.
#: Test defaults: a short lease and a Prometheus that does not answer. The resync is the
#: chart's (minutes): what a service needs must wake it (changes, due times), not the resync.
_DEFAULTS = {"LLMSERVICE_PROMETHEUS_URL": "http://127.0.0.1:9"}
LEASE_DURATION_S = 6


@dataclass(frozen=True)
class AuditRecord:
    verb: str
    group: str
    resource: str
    code: int
    uri: str
    time: str = ""
    """requestReceivedTimestamp (RFC 3339, microseconds)."""
    authorization: str = ""
    """The authorizer's decision (allow, forbid): a 403 for exceeding a ResourceQuota was
    authorized, and refused by admission."""


def audit_records(cluster: ClusterInfo, user: str, offset: int = 0) -> list[AuditRecord]:
    """The API server's answers to ``user`` from byte ``offset`` of the audit log on."""
    records: list[AuditRecord] = []
    with cluster.audit_log.open("rb") as handle:
        handle.seek(offset)
        for line in handle:
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line being written
            if entry.get("stage") != "ResponseComplete" or entry["user"]["username"] != user:
                continue
            ref = entry.get("objectRef") or {}
            resource = ref.get("resource", "")
            if ref.get("subresource"):
                resource += "/" + ref["subresource"]
            records.append(
                AuditRecord(
                    entry["verb"],
                    ref.get("apiGroup", ""),
                    resource,
                    int((entry.get("responseStatus") or {}).get("code", 0)),
                    entry.get("requestURI", ""),
                    entry.get("requestReceivedTimestamp", ""),
                    (entry.get("annotations") or {}).get("authorization.k8s.io/decision", ""),
                )
            )
    return records


def _optional_float(value: str | None) -> float | None:
    return None if value is None else float(value)


def audit_offset(cluster: ClusterInfo) -> int:
    try:
        return cluster.audit_log.stat().st_size
    except FileNotFoundError:
        return 0


@dataclass
class OperatorRelease:
    """One chart release of the operator (1 or more replicas)."""

    cluster: ClusterInfo
    release: str
    watched: str
    audit_from: int
    logs: dict[str, str] = field(default_factory=dict)
    stopped: bool = False

    @property
    def service_account(self) -> str:
        return f"system:serviceaccount:{OPERATOR_NAMESPACE}:{self.release}"

    def pods(self) -> list[dict[str, Any]]:
        pods: list[dict[str, Any]] = release_pods(self.cluster, self.release)
        return pods

    def pod_names(self) -> list[str]:
        """The release's pods that are not being deleted."""
        return [
            p["metadata"]["name"] for p in self.pods() if not p["metadata"].get("deletionTimestamp")
        ]

    def pod_log(self, pod: str, previous: bool = False) -> str:
        args = ["-n", OPERATOR_NAMESPACE, "logs", pod] + (["--previous"] if previous else [])
        try:
            return self.cluster.run_kubectl(*args)
        except subprocess.CalledProcessError:
            return ""

    def output(self) -> str:
        """Every replica's log (kept from before the release was stopped)."""
        if not self.stopped:
            self._collect_logs()
        return "\n".join(f"--- pod {name} ---\n{text}" for name, text in self.logs.items())

    def _collect_logs(self) -> None:
        for pod in self.pods():
            name = pod["metadata"]["name"]
            restarted = any(
                (s.get("restartCount") or 0) > 0
                for s in (pod.get("status") or {}).get("containerStatuses") or []
            )
            previous = self.pod_log(name, previous=True) if restarted else ""
            self.logs[name] = previous + self.pod_log(name)

    def kill(self, pod: str) -> None:
        """SIGKILL the operator process in ``pod`` from the host (PID 1 of its container
        ignores signals sent from inside); the kubelet then restarts the container."""
        pid = container_pid(self.cluster, pod)
        subprocess.run(["kill", "-9", str(pid)], check=True)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """SIGTERM: the chart is uninstalled (the pods stop gracefully and give the Lease up).
        SIGKILL: every replica is killed hard first, then the release is removed."""
        if self.stopped:
            return
        self._collect_logs()
        if sig == signal.SIGKILL:
            for pod in self.pods():
                self.kill(pod["metadata"]["name"])
        # The pods go first: `helm uninstall` removes the RBAC at the same time as the
        # Deployment, and a replica still shutting down would be refused (403).
        self.cluster.run_kubectl(
            "-n", OPERATOR_NAMESPACE, "delete", "deployment", self.release, "--ignore-not-found"
        )
        wait_for(f"release {self.release}'s pods gone", lambda: not self.pods(), 60)
        helm_uninstall(self.cluster, self.release)
        self.stopped = True

    def denials(self) -> list[AuditRecord]:
        """What the authorizer refused the release's ServiceAccount (RBAC)."""
        return [
            r
            for r in audit_records(self.cluster, self.service_account, self.audit_from)
            if r.code == 403 and r.authorization != "allow"
        ]


def container_pid(cluster: ClusterInfo, pod: str, namespace: str = OPERATOR_NAMESPACE) -> int:
    """The host PID of the first container of ``pod`` on the real node (containerd's view)."""
    obj = json.loads(cluster.run_kubectl("-n", namespace, "get", "pod", pod, "-o", "json"))
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    container_id = statuses[0]["containerID"].split("://", 1)[1]
    info = cluster.real_node.ctr("tasks", "ls")
    for line in info.splitlines()[1:]:
        parts = line.split()
        if parts and parts[0] == container_id:
            return int(parts[1])
    raise AssertionError(f"no running task for {pod} ({container_id}) on the real node")


@dataclass
class OperatorFactory:
    cluster: ClusterInfo
    image: str
    started: list[OperatorRelease] = field(default_factory=list)
    recorders: dict[str, StatusRecorder] = field(default_factory=dict)

    def start(
        self,
        namespace: str,
        lease_namespace: str | None = None,
        *,
        replicas: int = 1,
        wait: bool = True,
        **env: str,
    ) -> OperatorRelease:
        """Install a release watching ``namespace`` (``env``: LLMSERVICE_* settings)."""
        del lease_namespace  # every release's Lease lives in the chart's namespace
        settings = {**_DEFAULTS, **env}
        release = f"op-{uuid.uuid4().hex[:8]}"
        values = chart_values(
            self.cluster,
            self.image,
            namespaces=[namespace],
            prometheus_url=settings.pop("LLMSERVICE_PROMETHEUS_URL"),
            replicas=replicas,
            lease_name=f"lease-{namespace}"[:63],
            lease_duration_seconds=LEASE_DURATION_S,
            reconcile_interval_seconds=_optional_float(
                settings.pop("LLMSERVICE_RECONCILE_INTERVAL_SECONDS", None)
            ),
            extra_env=settings,
        )
        op = OperatorRelease(self.cluster, release, namespace, audit_offset(self.cluster))
        if namespace not in self.recorders:  # for the Argo CD health check (health_check.py)
            api_client = config.new_client_from_config(config_file=str(self.cluster.kubeconfig))  # type: ignore[no-untyped-call]
            self.recorders[namespace] = StatusRecorder(api_client, namespace).start()
        helm_install(self.cluster, release, values, wait=wait)
        self.started.append(op)
        return op

    def stop_all(self) -> None:
        for op in self.started:
            op.stop()
        for recorder in self.recorders.values():
            recorder.stop()


@pytest.fixture(scope="session", autouse=True)
def argocd_health_check() -> Iterator[None]:
    """At the end of the session: docs/gitops.md's Lua health check, run by a real Lua, agrees
    with Ready on every distinct LLMService status the suite went through."""
    yield
    if recorded():
        count, by_health = check_recorded()
        print(f"Argo CD health check: {count} distinct statuses, {by_health}")


@pytest.fixture(scope="session")
def crd_installed(cluster: ClusterInfo, kubectl: Any) -> None:
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds" / "llmservice.yaml"))
    cluster.wait_crd_established("llmservices.serving.llmservice.dev")


@pytest.fixture(scope="session")
def operator_image(cluster: ClusterInfo) -> str:
    """The operator image of this source tree, on the real node (built when missing)."""
    return load_operator_image(cluster)


@pytest.fixture
def operators(
    cluster: ClusterInfo, crd_installed: None, operator_image: str
) -> Iterator[OperatorFactory]:
    factory = OperatorFactory(cluster, operator_image)
    yield factory
    factory.stop_all()
    for op in factory.started:  # pytest shows this only when the test failed
        print(f"--- release {op.release} ---\n{op.output()[-6000:]}")
    denied = Counter(
        (op.release, d.verb, d.group, d.resource) for op in factory.started for d in op.denials()
    )
    assert not denied, f"the API server refused the chart's ServiceAccount: {dict(denied)}"


def wait_for(
    what: str,
    check: Callable[[], Any],
    timeout: float = 90,
    interval: float = 0.5,
    explain: Callable[[], Any] | None = None,
) -> Any:
    """Poll until check() returns something truthy; fail with the last value otherwise, and
    with what ``explain()`` says then (the state that tells why)."""
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
    why = ""
    if explain is not None:
        try:
            why = f"; {explain()!r}"
        except Exception as err:  # noqa: BLE001 - the timeout is the failure to report
            why = f"; explaining failed: {err!r}"
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}{why}")
