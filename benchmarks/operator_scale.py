"""The controller at N services: apply N LLMServices at once to the local cluster and measure
the chart-installed operator. Printed figures, never asserted.

    python -m benchmarks.operator_scale --count 1000 [--json]

- apply -> Deployment and apply -> Available (p50/p99, from watch events);
- the operator's peak RSS, and at rest (2 minutes after every service is Available) its CPU
  (cores) and its API requests per second per service (from the API server's audit log; its
  leader-election Lease renewals, one per process, are left out);
- 20 single applies while the N services are at rest (apply -> Deployment p99);
- the baseline: the same Deployments (with the replicas the operator gave them), Services,
  PodDisruptionBudgets and NetworkPolicies the operator made, applied by one `kubectl apply`
  in a new namespace, until the last Deployment exists; its pods are scheduled and made Ready
  as the operator's are. The same apply with the Deployments at 0 replicas (no pods: a quiet
  control plane) is printed beside it, as are the `kubectl apply` of the LLMServices
  themselves, the operator's requests during the first apply by verb and resource, and the
  cores each component of the cluster used meanwhile. The baselines run after the
  operator's services are deleted, from a cluster as empty as the first apply found it.

Pods are Ready without simulator processes (the runner's LLMSERVICE_SIM_NO_PROCESS), so the
control plane and the operator are what is measured. It runs in its own local cluster
(``<cache>/bench-cluster``, with as many kwok H100 nodes as N needs), left up with --keep.
With ``--json`` the last line of stdout is one JSON object with exactly the keys below.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psutil
from kubernetes import client, config, watch
from prometheus_client.parser import text_string_to_metric_families

from llmservice_dev.localcluster import ClusterInfo, LocalCluster
from llmservice_dev.localcluster.binaries import cache_dir
from llmservice_dev.localcluster.cluster import OPERATOR_NAMESPACE
from llmservice_dev.localcluster.nodes import DEFAULT_NODES, H100, FakeNodeSpec, node_manifest
from llmservice_dev.operator_chart import (
    chart_values,
    helm_install,
    load_operator_image,
    release_pods,
)
from llmservice_operator.adapters.ports_file import PORTS_FILE_NAME
from llmservice_operator.api import GROUP, PLURAL, VERSION
from llmservice_operator.render.labels import SERVICE

RELEASE = "bench"
SINGLE_APPLIES = 20
IDLE_S = 120.0
JSON_KEYS = (
    "applyToDeploymentP50S",
    "applyToDeploymentP99S",
    "applyToAvailableP99S",
    "operatorPeakRssMiB",
    "idleOperatorCores",
    "idleApiRequestsPerSecondPerService",
    "singleApplyToDeploymentP99S",
    "kubectlBaselineSeconds",
)


def llmservice(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "serving.llmservice.dev/v1alpha1",
        "kind": "LLMService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"id": "meta-llama/Llama-3.1-8B-Instruct"},
            "engine": {
                "maxModelLen": 4096,
                "env": [{"name": "LLMSERVICE_SIM_NO_PROCESS", "value": "1"}],
            },
            "resources": {"gpu": "H100-80GB"},
        },
    }


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


class FirstSeen:
    """Watches a list call; the monotonic time each name was first seen meeting ``name_of``."""

    def __init__(self, call: Callable[..., Any], args: tuple[Any, ...],
                 name_of: Callable[[Any], str | None]) -> None:  # fmt: skip
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(call, args, name_of), daemon=True, name="bench watch"
        )
        self._thread.start()

    def _run(self, call: Callable[..., Any], args: tuple[Any, ...],
             name_of: Callable[[Any], str | None]) -> None:  # fmt: skip
        while not self._stop.is_set():
            try:
                for event in watch.Watch().stream(call, *args, timeout_seconds=30):  # type: ignore[no-untyped-call]
                    name = name_of(event["object"])
                    if name:
                        self.seen.setdefault(name, time.monotonic())
                    if self._stop.is_set():
                        return
            except Exception:  # noqa: BLE001 - a broken watch is watched again
                time.sleep(0.5)

    def stop(self) -> None:
        self._stop.set()


def _service_of(deployment: Any) -> str | None:
    return (deployment.metadata.labels or {}).get(SERVICE)


def _available(body: dict[str, Any]) -> str | None:
    ok = (body.get("status") or {}).get("phase") == "Available"
    return str(body["metadata"]["name"]) if ok else None


def _name(body: dict[str, Any]) -> str:
    return str(body["metadata"]["name"])


def _deployment_name(deployment: Any) -> str:
    return str(deployment.metadata.name)


def bench_cluster(count: int) -> ClusterInfo:
    """The benchmark's own cluster, with H100 nodes for ``count`` services (one GPU each)."""
    needed = math.ceil(count / 8) + 1
    extra = [
        FakeNodeSpec(f"bench-h100-{i}", H100, 8, 81559, "192", "2048Gi", 110, "p5.48xlarge")
        for i in range(max(0, needed - 4))
    ]
    # Prometheus scrapes every 15 s, as a production one does: the tests' 1 s serves the
    # simulator's 10x clock, and these pods have no engine to scrape (at 1 s, Prometheus and
    # the runner's service discovery took a third of the two cores at N = 1,000).
    local = LocalCluster(cache_dir() / "bench-cluster", nodes=(*DEFAULT_NODES, *extra),
                         startup_timeout=300, scrape_interval="15s")  # fmt: skip
    info = local.up()
    existing = {n["metadata"]["name"] for n in json.loads(info.run_kubectl("get", "nodes", "-o",
                                                                           "json"))["items"]}  # fmt: skip
    nodes = [
        node_manifest(spec, len(DEFAULT_NODES) + i)
        for i, spec in enumerate(extra)
        if spec.name not in existing
    ]
    if nodes:
        info.run_kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1",
                         "kind": "List", "items": nodes}))  # fmt: skip
    _wait_for_namespaces_gone(info, "bench-")  # an earlier run's, deleted without waiting
    return info


def _wait_for_namespaces_gone(info: ClusterInfo, prefix: str, timeout_s: float = 900) -> None:
    """Delete every namespace named ``prefix``... and wait until they are gone: a namespace
    still being emptied would load the control plane the next measurement times."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        listed = json.loads(info.run_kubectl("get", "namespaces", "-o", "json"))["items"]
        left = [n["metadata"]["name"] for n in listed
                if n["metadata"]["name"].startswith(prefix)]  # fmt: skip
        if not left:
            return
        print(f"waiting for namespaces to go: {left}", file=sys.stderr)
        for name in left:
            info.run_kubectl("delete", "namespace", name, "--wait=false")
        time.sleep(5)


def operator_process(info: ClusterInfo) -> psutil.Process:
    [pod] = release_pods(info, RELEASE)
    container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    for line in info.real_node.ctr("tasks", "ls").splitlines()[1:]:
        parts = line.split()
        if parts and parts[0] == container_id:
            return psutil.Process(int(parts[1]))
    raise RuntimeError("the operator's container is not running")


def gc_pauses(info: ClusterInfo) -> str:
    """The operator's garbage-collection pauses so far, per generation, from its /metrics
    (on the host's loopback: the chart runs it in the host's network, on a port it writes to
    its ports file): how many, their total, and the longest's bucket."""
    [pod] = release_pods(info, RELEASE)
    ports = json.loads(info.run_kubectl("-n", OPERATOR_NAMESPACE, "exec", pod["metadata"]["name"],
                                        "--", "cat", f"/tmp/{PORTS_FILE_NAME}"))  # fmt: skip
    with urllib.request.urlopen(f"http://127.0.0.1:{ports['metrics']}/metrics", timeout=10) as r:
        text = r.read().decode()
    count: dict[str, float] = {}
    total: dict[str, float] = {}
    buckets: dict[str, list[tuple[float, float]]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "llmservice_gc_pause_seconds":
            continue
        for sample in family.samples:
            generation = sample.labels["generation"]
            if sample.name.endswith("_count"):
                count[generation] = sample.value
            elif sample.name.endswith("_sum"):
                total[generation] = sample.value
            elif sample.name.endswith("_bucket"):
                bound = float(sample.labels["le"])
                buckets.setdefault(generation, []).append((bound, sample.value))
    lines = []
    for generation in sorted(count):
        # The smallest bucket holding every pause bounds the longest one.
        longest = min(b for b, n in buckets[generation] if n >= count[generation])
        lines.append(f"generation {generation}: {count[generation]:.0f} in "
                     f"{total[generation]:.2f}s, the longest <= {longest:g}s")  # fmt: skip
    return "; ".join(lines)


def _gc_pauses_or_why(info: ClusterInfo) -> str:
    try:
        return gc_pauses(info)
    except (subprocess.CalledProcessError, OSError, KeyError, ValueError) as err:
        return f"not read ({err})"


def slow_reconciles(info: ClusterInfo, namespace: str, prefix: str) -> str:
    """The operator's log lines for slow reconciles of services named ``prefix``... (each says
    where its time went)."""
    [pod] = release_pods(info, RELEASE)
    try:
        logs = info.run_kubectl("-n", OPERATOR_NAMESPACE, "logs", pod["metadata"]["name"])
    except subprocess.CalledProcessError as err:
        return f"  not read ({err})"
    lines = [line for line in logs.splitlines()
             if f"{namespace}/{prefix}" in line and "reconciled in" in line]  # fmt: skip
    return "\n".join(f"  {line}" for line in lines) or "  none"


def _audit_time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _operator_requests(info: ClusterInfo, since: datetime, until: datetime) -> list[dict[str, Any]]:
    """Audited requests of the release's ServiceAccount in [since, until], its Lease renewals
    aside."""
    user = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{RELEASE}"
    found = []
    with info.audit_log.open() as handle:
        for line in handle:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("stage") != "ResponseComplete" or entry["user"]["username"] != user:
                continue
            if (entry.get("objectRef") or {}).get("resource") == "leases":
                continue
            at = _audit_time(entry["requestReceivedTimestamp"])
            if since <= at <= until:
                found.append(entry)
    return found


def request_breakdown(info: ClusterInfo, since: datetime, until: datetime, services: int) -> str:
    """The operator's requests per service by verb and resource, with their mean latency."""
    rows: dict[str, list[float]] = {}
    for entry in _operator_requests(info, since, until):
        ref = entry.get("objectRef") or {}
        resource = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get(
            "subresource") else "")  # fmt: skip
        took = _audit_time(entry["stageTimestamp"]) - _audit_time(entry["requestReceivedTimestamp"])
        rows.setdefault(f"{entry['verb']} {resource}", []).append(took.total_seconds())
    lines = [f"  {name:<40} {len(took) / services:6.2f}/service  mean {sum(took) / len(took) * 1000:6.0f} ms"
             for name, took in sorted(rows.items(), key=lambda kv: -len(kv[1]))]  # fmt: skip
    return "\n".join(lines)


#: The processes whose CPU is shared out during the first apply.
COMPONENTS = ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok",
              "simrunner", "prometheus", "operator", "kubectl")  # fmt: skip


def _component(argv: list[str]) -> str | None:
    """Which of COMPONENTS a command line is: its executable, or the Python program it runs."""
    if not argv:
        return None
    words = [os.path.basename(a) for a in argv[:3]]
    if "llmservice_dev.simrunner" in argv[:3]:
        return "simrunner"
    if words[0].startswith("python") and words[1:2] == ["llmservice"] and argv[2:3] == ["run"]:
        return "operator"
    return words[0] if words[0] in COMPONENTS else None


def component_cpu() -> dict[str, float]:
    """CPU seconds (user + system) so far of the local cluster's processes, by component."""
    found: dict[str, float] = dict.fromkeys(COMPONENTS, 0.0)
    for proc in psutil.process_iter(["cmdline", "cpu_times"]):
        name = _component(proc.info["cmdline"] or [])
        if name is not None and proc.info["cpu_times"] is not None:
            found[name] += proc.info["cpu_times"].user + proc.info["cpu_times"].system
    return found


def run(count: int, workers: int, timeout: float) -> dict[str, float]:
    info = bench_cluster(count + SINGLE_APPLIES)
    api = config.new_client_from_config(config_file=str(info.kubeconfig))  # type: ignore[no-untyped-call]
    kubectl = info.run_kubectl
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "--server-side", "-f", "crds/llmservice.yaml")
    info.wait_crd_established("llmservices.serving.llmservice.dev")
    kubectl("create", "namespace", namespace)
    image = load_operator_image(info)
    values = chart_values(info, image, namespaces=[namespace], replicas=1)
    values["workers"] = workers
    values["resources"] = {"requests": {"cpu": "100m", "memory": "256Mi"},
                           "limits": {"memory": "2Gi"}}  # fmt: skip
    helm_install(info, RELEASE, values, wait=True)
    process = operator_process(info)
    peak_rss = [process.memory_info().rss]
    sampling = threading.Event()

    def sample_rss() -> None:
        while not sampling.is_set():
            try:
                peak_rss.append(process.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.2)

    threading.Thread(target=sample_rss, daemon=True).start()
    apps, custom = client.AppsV1Api(api), client.CustomObjectsApi(api)
    created = FirstSeen(apps.list_namespaced_deployment, (namespace,), _service_of)
    available = FirstSeen(custom.list_namespaced_custom_object,
                          (GROUP, VERSION, namespace, PLURAL), _available)  # fmt: skip
    stored = FirstSeen(custom.list_namespaced_custom_object,
                       (GROUP, VERSION, namespace, PLURAL), _name)  # fmt: skip
    time.sleep(2)
    names = [f"svc-{i:04d}" for i in range(count)]
    docs = {"apiVersion": "v1", "kind": "List",
            "items": [llmservice(namespace, n) for n in names]}  # fmt: skip
    cpu_before = component_cpu()
    applied_at, burst_since = time.monotonic(), datetime.now().astimezone()
    kubectl("apply", "-f", "-", stdin=json.dumps(docs))
    llmservices_applied = time.monotonic() - applied_at
    deadline = applied_at + timeout
    while len(available.seen) < count and time.monotonic() < deadline:
        time.sleep(0.2)
    to_deployment = [created.seen[n] - applied_at for n in names if n in created.seen]
    to_available = [available.seen[n] - applied_at for n in names if n in available.seen]
    print(f"{len(to_available)} of {count} Available in {max(to_available, default=0):.1f}s; "
          f"kubectl applied the {count} LLMServices in {llmservices_applied:.1f}s",
          file=sys.stderr)  # fmt: skip
    burst_s = time.monotonic() - applied_at
    cpu_after = component_cpu()
    print("cores used until the last was Available: " + ", ".join(
        f"{name} {(cpu_after[name] - cpu_before[name]) / burst_s:.2f}" for name in COMPONENTS),
        file=sys.stderr)  # fmt: skip
    print("the operator's requests until the last was Available:\n" + request_breakdown(
        info, burst_since, datetime.now().astimezone(), count), file=sys.stderr)  # fmt: skip

    time.sleep(20)  # the last writes settle
    pauses_before_rest = _gc_pauses_or_why(info)
    since, cpu0 = datetime.now().astimezone(), sum(process.cpu_times()[:2])
    time.sleep(IDLE_S)
    until, cpu1 = datetime.now().astimezone(), sum(process.cpu_times()[:2])
    idle_cores = (cpu1 - cpu0) / IDLE_S
    idle_rate = len(_operator_requests(info, since, until)) / count / IDLE_S
    print(f"the operator's garbage-collection pauses before the {IDLE_S:g}s at rest: "
          f"{pauses_before_rest}; after: {_gc_pauses_or_why(info)}", file=sys.stderr)  # fmt: skip
    print(f"the operator's requests in the {IDLE_S:g}s at rest:\n"
          + request_breakdown(info, since, until, count), file=sys.stderr)  # fmt: skip

    singles: list[float] = []
    kubectl_alone: list[float] = []
    operator_part: list[float] = []
    for i in range(SINGLE_APPLIES):
        name = f"single-{i:02d}"
        started = time.monotonic()
        kubectl("apply", "-f", "-", stdin=json.dumps(llmservice(namespace, name)))
        kubectl_alone.append(time.monotonic() - started)
        while name not in created.seen and time.monotonic() < started + 60:
            time.sleep(0.02)
        singles.append(created.seen.get(name, float("inf")) - started)
        operator_part.append(created.seen.get(name, float("inf")) - stored.seen.get(name, started))
        time.sleep(1)
    print(f"single applies -> Deployment: p50 {percentile(singles, 50):.2f}s, max "
          f"{max(singles):.2f}s; the kubectl apply alone: p50 "
          f"{percentile(kubectl_alone, 50):.2f}s, max {max(kubectl_alone):.2f}s; the "
          f"LLMService's watch event -> its Deployment's: p50 "
          f"{percentile(operator_part, 50):.2f}s, max {max(operator_part):.2f}s",
          file=sys.stderr)  # fmt: skip
    print(f"the operator's garbage-collection pauses: {_gc_pauses_or_why(info)}", file=sys.stderr)
    print("the single applies' slow reconciles:\n" + slow_reconciles(info, namespace, "single-"),
          file=sys.stderr)  # fmt: skip
    sampling.set()
    created.stop()
    available.stop()
    stored.stop()
    made = operator_objects(info, namespace)
    # The baselines start, as the operator's run did, from a cluster without these services.
    _wait_for_namespaces_gone(info, namespace)
    baseline = kubectl_baseline(info, apps, made, f"{namespace}-kubectl", with_pods=True)
    quiet = kubectl_baseline(info, apps, made, f"{namespace}-quiet", with_pods=False)
    print(f"kubectl baseline: {baseline:.1f}s with the Deployments' pods, {quiet:.1f}s at 0 "
          "replicas", file=sys.stderr)  # fmt: skip
    return {
        "applyToDeploymentP50S": round(percentile(to_deployment, 50), 3),
        "applyToDeploymentP99S": round(percentile(to_deployment, 99), 3),
        "applyToAvailableP99S": round(percentile(to_available, 99), 3),
        "operatorPeakRssMiB": round(max(peak_rss) / 2**20, 1),
        "idleOperatorCores": round(idle_cores, 4),
        "idleApiRequestsPerSecondPerService": round(idle_rate, 5),
        "singleApplyToDeploymentP99S": round(percentile(singles, 99), 3),
        "kubectlBaselineSeconds": round(baseline, 3),
        "_allDeploymentsS": round(max(to_deployment, default=float("nan")), 3),
    }


def operator_objects(info: ClusterInfo, namespace: str) -> list[dict[str, Any]]:
    """The Deployments, Services, PodDisruptionBudgets and NetworkPolicies the operator made,
    as a user would write them (no status, no server-set fields)."""
    items = []
    for kind in ("deployments", "services", "poddisruptionbudgets", "networkpolicies"):
        listed = json.loads(info.run_kubectl("-n", namespace, "get", kind, "-l", SERVICE, "-o",
                                             "json"))["items"]  # fmt: skip
        for obj in listed:
            meta = obj["metadata"]
            obj["metadata"] = {"name": meta["name"], "labels": meta.get("labels", {})}
            obj.pop("status", None)
            if kind == "services":
                obj["spec"].pop("clusterIP", None)
                obj["spec"].pop("clusterIPs", None)
            items.append(obj)
    return items


def kubectl_baseline(
    info: ClusterInfo,
    apps: client.AppsV1Api,
    objects: list[dict[str, Any]],
    target: str,
    *,
    with_pods: bool,
) -> float:
    """``objects`` applied by one kubectl apply in the new namespace ``target``; with_pods: the
    Deployments keep their replicas (else 0). Seconds until the last Deployment exists; returns
    once the namespace is gone again."""
    info.run_kubectl("create", "namespace", target)
    items = []
    for original in objects:
        obj = json.loads(json.dumps(original))
        obj["metadata"]["namespace"] = target
        if obj["kind"] == "Deployment" and not with_pods:
            obj["spec"]["replicas"] = 0
        items.append(obj)
    deployments = sum(1 for o in items if o["kind"] == "Deployment")
    seen = FirstSeen(apps.list_namespaced_deployment, (target,), _deployment_name)
    time.sleep(2)
    started = time.monotonic()
    info.run_kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                           "items": items}))  # fmt: skip
    while len(seen.seen) < deployments and time.monotonic() < started + 600:
        time.sleep(0.1)
    seen.stop()
    took = max(seen.seen.values(), default=started) - started
    _wait_for_namespaces_gone(info, target)
    return took


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.operator_scale")
    parser.add_argument("--count", type=int, default=50, help="LLMServices applied at once")
    parser.add_argument("--workers", type=int, default=4, help="the operator's workers")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to convergence")
    parser.add_argument("--json", action="store_true", help="end with one JSON object")
    parser.add_argument("--keep", action="store_true", help="leave the bench cluster up")
    args = parser.parse_args()
    try:
        figures = run(args.count, args.workers, args.timeout)
    finally:
        if not args.keep:
            LocalCluster(cache_dir() / "bench-cluster").down()
    all_deployments = figures.pop("_allDeploymentsS")
    for key in JSON_KEYS:
        print(f"{key:<40} {figures[key]}", file=sys.stderr if args.json else sys.stdout)
    ratio = all_deployments / figures["kubectlBaselineSeconds"]
    print(f"all {args.count} Deployments in {all_deployments:.1f}s: {ratio:.2f}x the kubectl "
          "baseline", file=sys.stderr if args.json else sys.stdout)  # fmt: skip
    if args.json:
        print(json.dumps({k: figures[k] for k in JSON_KEYS}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
