"""The controller as a controller: quiet at rest, failures shown on the service, due times
kept without the resync, and slow network I/O that never holds up other services. Every
operator here is the chart-installed one with the chart's resync (minutes)."""

from __future__ import annotations

import json
import time
import urllib.request
from collections import Counter
from datetime import datetime
from typing import Any

import pytest
from kubernetes import config
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from llmservice_dev.localcluster import ClusterInfo
from llmservice_dev.localcluster.cluster import OPERATOR_NAMESPACE
from llmservice_operator.adapters.kube import KubeAdapter, version_number
from llmservice_operator.handlers import SWEEP_AFTER_LIST_S
from llmservice_operator.reconcile import namespace_gone, namespace_terminating

from .conftest import Kubectl
from .operator_fixtures import (
    OperatorFactory,
    OperatorRelease,
    audit_offset,
    audit_records,
    wait_for,
)

pytestmark = pytest.mark.cluster

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
#: The issue's goal: at most this many API requests per second per idle service.
IDLE_REQUESTS_PER_SERVICE_S = 0.02


def service(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": {"id": MODEL},
        "engine": {
            "maxModelLen": 4096,
            "env": [{"name": "LLMSERVICE_SIM_NO_PROCESS", "value": "1"}],
        },
        "resources": {"gpu": "H100-80GB"},
    }
    body.update(spec)
    return {
        "apiVersion": "serving.llmservice.dev/v1alpha1",
        "kind": "LLMService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


def apply(kubectl: Kubectl, *objs: dict[str, Any]) -> None:
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                   "items": list(objs)}))  # fmt: skip


def status(kubectl_json: Any, namespace: str, name: str) -> dict[str, Any]:
    return dict(kubectl_json("-n", namespace, "llmservice", name).get("status") or {})


def condition(kubectl_json: Any, namespace: str, name: str, type_: str) -> dict[str, Any]:
    for cond in status(kubectl_json, namespace, name).get("conditions") or []:
        if cond["type"] == type_:
            return dict(cond)
    return {}


def all_ready(kubectl_json: Any, namespace: str) -> bool:
    items = kubectl_json("-n", namespace, "llmservices")["items"]
    return bool(items) and all(
        any(c["type"] == "Ready" and c["status"] == "True"
            for c in (i.get("status") or {}).get("conditions") or [])
        for i in items
    )  # fmt: skip


def operator_metric(kubectl: Kubectl, op: OperatorRelease, name: str) -> float:
    [pod] = op.pod_names()
    ports = json.loads(
        kubectl(
            "-n", OPERATOR_NAMESPACE, "exec", pod, "--", "cat",
            "/tmp/llmservice-operator-ports.json",
        ).stdout
    )  # fmt: skip
    url = f"http://127.0.0.1:{ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"no {name}")


def test_twenty_services_at_rest_make_almost_no_api_requests(
    cluster: ClusterInfo, namespace: str, kubectl: Kubectl, kubectl_json: Any,
    operators: OperatorFactory,
) -> None:  # fmt: skip
    """Twenty Available services (operator-mode autoscaling evaluating every 15 s): over a
    minute at rest the operator reads from its watch caches, writes nothing that did not
    change, and makes at most 0.02 API requests per second per service (its leader-election
    Lease renewals, one per process, are counted apart)."""
    op = operators.start(namespace, LLMSERVICE_PROMETHEUS_URL=cluster.prometheus_url)
    # kopf's first listing is followed SWEEP_AFTER_LIST_S later by one LIST of the services
    # (deletions not seen): part of the start, not of the rest measured below.
    startup_sweep_done = time.monotonic() + SWEEP_AFTER_LIST_S + 5
    count = 20
    apply(kubectl, *(service(namespace, f"idle-{i:02d}") for i in range(count)))
    wait_for("twenty Ready services", lambda: all_ready(kubectl_json, namespace), 240)
    time.sleep(20)  # the last status writes and their watch events settle
    time.sleep(max(0.0, startup_sweep_done - time.monotonic()))
    started = datetime.now().astimezone()
    offset = audit_offset(cluster)
    time.sleep(60)
    ended = datetime.now().astimezone()
    records = [
        r
        for r in audit_records(cluster, op.service_account, offset)
        if started <= datetime.fromisoformat(r.time.replace("Z", "+00:00")) <= ended
    ]
    leases = [r for r in records if r.resource == "leases"]
    rest = [r for r in records if r.resource != "leases"]
    kinds = Counter(f"{r.verb} {r.resource or r.uri}" for r in rest)
    rate = len(rest) / count / (ended - started).total_seconds()
    print(f"at rest: {len(rest)} requests in 60 s for {count} services ({rate:.4f}/s per "
          f"service) {dict(kinds)}; lease renewals {len(leases)}")  # fmt: skip
    assert rate <= IDLE_REQUESTS_PER_SERVICE_S, dict(kinds)
    assert not any(r.verb == "list" for r in rest), dict(kinds)


def test_a_quota_refusal_shows_on_the_service_and_clears_when_raised(
    namespace: str, kubectl: Kubectl, kubectl_json: Any, operators: OperatorFactory
) -> None:
    """A ResourceQuota refuses the service's Deployment: the API server's message is in a
    ReconcileError condition (Ready False) and a Warning Event; raised, both clear and the
    service becomes Available."""
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "deployments", "namespace": namespace},
        "spec": {"hard": {"count/deployments.apps": "0"}},
    }
    apply(kubectl, quota)
    operators.start(namespace)
    apply(kubectl, service(namespace, "quota", scaling={"mode": "manual", "minReplicas": 1,
                                                        "maxReplicas": 1}, replicas=1))  # fmt: skip

    def refused() -> dict[str, Any] | None:
        cond = condition(kubectl_json, namespace, "quota", "ReconcileError")
        return cond if cond.get("status") == "True" else None

    error = wait_for("the ReconcileError condition", refused, 60)
    assert "exceeded quota" in error["message"], error
    ready = condition(kubectl_json, namespace, "quota", "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ReconcileError")
    events = kubectl_json("-n", namespace, "events")["items"]
    warnings = [e for e in events if e["reason"] == "ReconcileError"]
    assert warnings and "exceeded quota" in warnings[0]["message"]
    assert warnings[0]["type"] == "Warning"

    quota["spec"]["hard"]["count/deployments.apps"] = "5"
    apply(kubectl, quota)

    def cleared() -> bool:
        cond = condition(kubectl_json, namespace, "quota", "ReconcileError")
        return cond.get("status") == "False" and all_ready(kubectl_json, namespace)

    wait_for("the condition cleared and the service Ready", cleared, 180)


def test_the_autoscaler_evaluates_on_its_own_interval_with_the_default_resync(
    cluster: ClusterInfo, namespace: str, kubectl: Kubectl, kubectl_json: Any,
    operators: OperatorFactory,
) -> None:  # fmt: skip
    """The resync is the chart's five minutes; a service evaluating every 5 s is evaluated
    every 5 s all the same (its own due time wakes it), by the operator's own counter."""
    op = operators.start(namespace, LLMSERVICE_PROMETHEUS_URL=cluster.prometheus_url)
    scaling = {"mode": "operator", "minReplicas": 1, "maxReplicas": 2,
               "evaluationIntervalSeconds": 5}  # fmt: skip
    apply(kubectl, service(namespace, "eval", scaling=scaling))
    wait_for("Ready", lambda: all_ready(kubectl_json, namespace), 120)
    first = operator_metric(kubectl, op, "llmservice_autoscaler_evaluations_total")
    time.sleep(30)
    evaluations = operator_metric(kubectl, op, "llmservice_autoscaler_evaluations_total") - first
    print(f"{evaluations:.0f} evaluations in 30 s (interval 5 s, resync 300 s)")
    assert 5 <= evaluations <= 7


def test_a_hanging_smoke_test_does_not_hold_up_another_service(
    cluster: ClusterInfo, namespace: str, kubectl: Kubectl, kubectl_json: Any,
    operators: OperatorFactory,
) -> None:  # fmt: skip
    """One worker only. A candidate whose pod accepts requests and never answers keeps its
    smoke test waiting (120 s timeout); meanwhile a new service is created and becomes
    Available on time, because the smoke test runs off the worker."""
    operators.start(namespace, LLMSERVICE_WORKERS="1")
    rollout = {"strategy": "canary", "steps": [{"setWeight": 50}],
               "smokeTest": {"enabled": True, "timeoutSeconds": 120}}  # fmt: skip
    manual = {"mode": "manual", "minReplicas": 1, "maxReplicas": 1}
    hung = service(namespace, "hung", rollout=rollout, scaling=manual, replicas=1)
    hung["spec"]["engine"]["env"] = []  # a live simulator: the smoke test talks to it
    apply(kubectl, hung)
    wait_for("hung Available", lambda: status(kubectl_json, namespace, "hung").get("phase")
             == "Available", 120)  # fmt: skip
    hung["spec"]["engine"]["env"] = [{"name": "LLMSERVICE_SIM_EXTRA_TTFT_MS", "value": "1e9"}]
    apply(kubectl, hung)

    def smoke_testing() -> bool:
        revisions = status(kubectl_json, namespace, "hung").get("revisions") or {}
        pods = kubectl_json("-n", namespace, "pods", "-l",
                            f"llmservice.dev/revision={revisions.get('candidate')}")["items"]  # fmt: skip
        return bool(revisions.get("candidate")) and any(
            c["type"] == "Ready" and c["status"] == "True"
            for p in pods for c in (p.get("status") or {}).get("conditions") or []
        )  # fmt: skip

    wait_for("the candidate Ready (its smoke test starts)", smoke_testing, 120)
    time.sleep(3)
    started = time.monotonic()
    apply(kubectl, service(namespace, "other", scaling=manual, replicas=1))
    wait_for("the other service Available",
             lambda: status(kubectl_json, namespace, "other").get("phase") == "Available", 60)  # fmt: skip
    took = time.monotonic() - started
    print(f"another service Available in {took:.1f}s while a smoke test hung")
    revisions = status(kubectl_json, namespace, "hung").get("revisions") or {}
    assert revisions.get("candidate"), "the hung smoke test ended early"
    assert "SmokeTestPassed" not in json.dumps(kubectl_json("-n", namespace, "events"))


def test_the_operators_account_can_tell_a_deleted_service_from_a_present_one(
    cluster: ClusterInfo, namespace: str, kubectl: Kubectl, operators: OperatorFactory
) -> None:
    """What forgets a service whose deletion kopf's listing never told (handlers.py): a LIST
    of every LLMService with the list's resourceVersion, metadata only, as the chart's account
    (a 403 here would keep every ghost)."""
    op = operators.start(namespace)
    api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig))  # type: ignore[no-untyped-call]
    api_client.default_headers["Impersonate-User"] = op.service_account
    adapter = KubeAdapter(api_client, namespaces=[namespace])
    apply(kubectl, service(namespace, "present"), service(namespace, "deleted"))
    kubectl("-n", namespace, "delete", "llmservice", "deleted")
    found, listed_at = adapter.llmservice_versions()
    assert set(found) == {(namespace, "present")}
    assert version_number(listed_at) >= version_number(found[(namespace, "present")]) > 0
    assert not op.denials()


def test_a_create_in_a_namespace_being_deleted_is_told_from_other_refusals(
    namespace: str, kubectl: Kubectl, kube_api_client: Any
) -> None:
    """The real API server's refusals of a create in a terminating namespace (its
    NamespaceTerminating cause) and in one that is gone, which the operator does not show as
    ReconcileErrors (reconcile.py) nor retry (handlers.py)."""
    held = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "hold", "namespace": namespace,
                         "finalizers": ["llmservice.dev/test-hold"]}}  # fmt: skip
    apply(kubectl, held)
    kubectl("delete", "namespace", namespace, "--wait=false")
    adapter = KubeAdapter(kube_api_client, namespaces=[namespace])
    fresh = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "new", "namespace": namespace}, "data": {"a": "1"}}  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:  # the namespace controller marks it Terminating
            try:
                adapter.apply(fresh)
            except ApiException as err:
                refusal = err
                break
            assert time.monotonic() < deadline, "creates in the deleted namespace still succeed"
            kubectl("-n", namespace, "delete", "configmap", "new", "--ignore-not-found")
            time.sleep(0.2)
        assert refusal.status == 403 and namespace_terminating(refusal), refusal.body
    finally:
        kubectl("-n", namespace, "patch", "configmap", "hold", "--type=merge", "-p",
                '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
    kubectl("wait", "--for=delete", f"namespace/{namespace}", "--timeout=60s")
    with pytest.raises(ApiException) as gone:
        adapter.apply(fresh)
    assert gone.value.status == 404 and namespace_gone(gone.value), gone.value.body
