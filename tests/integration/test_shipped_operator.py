"""The shipped operator as users run it: its image, installed by its chart on the real kubelet
node, under its own ServiceAccount. Leadership, failover, start-up that fails fast and the
health endpoints, read from each pod (its metrics, its logs, `kubectl exec`)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from llmservice_dev.images import ensure_docker, ensure_images, operator_image
from llmservice_dev.localcluster import ClusterInfo
from llmservice_dev.localcluster.cluster import OPERATOR_NAMESPACE

from .operator_fixtures import (
    LEASE_DURATION_S,
    ROOT,
    OperatorFactory,
    OperatorRelease,
    wait_for,
)

EXAMPLE = ROOT / "examples" / "llama-3.1-8b.yaml"
PORTS_FILE = "/tmp/llmservice-operator-ports.json"


def _example(namespace: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(Path(EXAMPLE).read_text())
    doc["metadata"]["namespace"] = namespace
    return doc


def _apply(kubectl: Any, obj: dict[str, Any]) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(obj))


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


class Replica:
    """One operator pod, seen from outside: its ports (read with `kubectl exec`) and what its
    own /metrics and /readyz say."""

    def __init__(self, kubectl: Any, pod: str) -> None:
        self.pod = pod
        self._kubectl = kubectl
        self.ports: dict[str, int] = {}

    def refresh_ports(self) -> None:
        out = self._kubectl("-n", OPERATOR_NAMESPACE, "exec", self.pod, "--", "cat", PORTS_FILE)
        self.ports = json.loads(out.stdout)

    def metric(self, name: str) -> float:
        _, text = _get(f"http://127.0.0.1:{self.ports['metrics']}/metrics")
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name:
                    return float(sample.value)
        raise AssertionError(f"{self.pod} exposes no {name}")

    def endpoint(self, path: str) -> tuple[int, str]:
        return _get(f"http://127.0.0.1:{self.ports['health']}{path}")

    def is_leader(self) -> bool:
        try:
            self.refresh_ports()
            return self.metric("llmservice_leader") == 1.0
        except (AssertionError, OSError, ValueError, KeyError):
            return False


def _replicas(kubectl: Any, op: OperatorRelease, count: int) -> list[Replica]:
    def running() -> list[str] | None:
        names = [
            p["metadata"]["name"]
            for p in op.pods()
            if not p["metadata"].get("deletionTimestamp")
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (p.get("status") or {}).get("conditions") or []
            )
        ]
        return names if len(names) == count else None

    replicas = [Replica(kubectl, name) for name in wait_for(f"{count} Ready pods", running, 90)]
    for replica in replicas:
        replica.refresh_ports()
    return replicas


def _max_model_len(kubectl_json: Any, namespace: str) -> list[str]:
    deps = kubectl_json("-n", namespace, "deployments", "-l", "llmservice.dev/service=llama-8b")
    values = []
    for dep in deps["items"]:
        args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        values.append(args[args.index("--max-model-len") + 1])
    return values


def _available(kubectl_json: Any, namespace: str) -> bool:
    obj = kubectl_json("-n", namespace, "llmservice", "llama-8b")
    return bool((obj.get("status") or {}).get("phase") == "Available")


def test_two_replicas_one_leads_failover_and_a_change_without_leader_converges(
    cluster: ClusterInfo,
    namespace: str,
    kubectl: Any,
    kubectl_json: Any,
    operators: OperatorFactory,
) -> None:
    kubectl("-n", namespace, "create", "secret", "generic", "hf-token", "--from-literal=token=x")
    op = operators.start(namespace, replicas=2)
    _apply(kubectl, _example(namespace))
    wait_for("llama-8b Available", lambda: _available(kubectl_json, namespace), 120)

    # Exactly one replica leads and reconciles; the other stands by, answers its probes and
    # has reconciled nothing, by its own metrics.
    replicas = _replicas(kubectl, op, 2)
    leaders = [r for r in replicas if r.metric("llmservice_leader") == 1.0]
    assert len(leaders) == 1, [(r.pod, r.metric("llmservice_leader")) for r in replicas]
    [leader] = leaders
    [standby] = [r for r in replicas if r is not leader]
    assert leader.metric("llmservice_reconciles_total") > 0
    assert standby.metric("llmservice_reconciles_total") == 0
    assert leader.endpoint("/readyz") == (200, "leader\n")
    assert standby.endpoint("/readyz") == (200, "standby\n")
    assert standby.endpoint("/healthz") == (200, "ok\n")
    assert (
        "llmservice_reconcile_duration_seconds_bucket"
        in _get(f"http://127.0.0.1:{leader.ports['metrics']}/metrics")[1]
    )
    assert f"acquired lease {OPERATOR_NAMESPACE}/lease-" in op.pod_log(leader.pod)
    assert "standing by" in op.pod_log(standby.pod)
    # The image holds the product only: no dev tooling (local cluster, pod runner).
    dev = kubectl("-n", OPERATOR_NAMESPACE, "exec", standby.pod, "--", "python3", "-c",
                  "import llmservice_dev", check=False)  # fmt: skip
    assert dev.returncode != 0 and "No module named 'llmservice_dev'" in dev.stderr, dev.stderr

    # Deleting the leader's pod: it stops cleanly and gives the Lease up; another replica (the
    # standby, or the pod that replaces the deleted one, whichever asks first) leads within
    # the lease duration.
    deleted = time.monotonic()
    kubectl("-n", OPERATOR_NAMESPACE, "delete", "pod", leader.pod, "--wait=false")

    def new_leader() -> Replica | None:
        for name in op.pod_names():
            if name != leader.pod and (replica := Replica(kubectl, name)).is_leader():
                return replica
        return None

    successor = wait_for("another replica to lead", new_leader, LEASE_DURATION_S, interval=0.1)
    failover = time.monotonic() - deleted
    print(f"failover after deleting the leader pod: {failover:.1f}s to {successor.pod}")

    # A spec change made while no replica leads: the new leader is killed hard (the Lease
    # stays taken until it expires), the change is applied, and whoever takes over after the
    # expiry converges to exactly the new value.
    wait_for("llama-8b Available", lambda: _available(kubectl_json, namespace), 60)
    [before] = _max_model_len(kubectl_json, namespace)
    killed = time.monotonic()
    op.kill(successor.pod)
    doc = _example(namespace)
    doc["spec"]["engine"]["maxModelLen"] = 12288
    _apply(kubectl, doc)
    assert _max_model_len(kubectl_json, namespace) == [before]  # nobody acted on it yet

    def converged() -> bool:
        return _max_model_len(kubectl_json, namespace) == ["12288"] and _available(
            kubectl_json, namespace
        )

    wait_for("the change converged under a new leader", converged, 120)
    print(f"spec change without a leader converged {time.monotonic() - killed:.1f}s after kill")
    replicas = _replicas(kubectl, op, 2)
    assert sum(r.is_leader() for r in replicas) == 1


def test_bad_settings_crash_loop_with_the_reason_in_the_log(
    namespace: str, kubectl: Any, kubectl_json: Any, operators: OperatorFactory
) -> None:
    op = operators.start(namespace, wait=False, LLMSERVICE_WORKERS="0")

    def exited() -> dict[str, Any] | None:
        for pod in op.pods():
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                terminated = (status.get("lastState") or {}).get("terminated")
                if terminated:
                    return {"pod": pod["metadata"]["name"], **terminated}
        return None

    terminated = wait_for("the operator to exit", exited, 90)
    assert terminated["exitCode"] == 1
    log = op.pod_log(terminated["pod"], previous=True)
    assert "llmservice run: error: bad settings: LLMSERVICE_WORKERS" in log, log
    assert "Traceback" not in log


def test_the_image_runs_read_only_as_its_own_user() -> None:
    """As the chart runs it: a read-only root filesystem, uid 10001, and here no network."""
    ensure_images(with_vllm=False)
    run = subprocess.run(
        [ensure_docker(), "run", "--rm", "--read-only", "--user", "10001", "--network", "none",
         operator_image(), "--help"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: llmservice") and "run the operator" in run.stdout
