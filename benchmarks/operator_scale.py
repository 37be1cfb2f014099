"""The controller at N services: apply N LLMServices at once to the local cluster and measure
the chart-installed operator. Printed figures, never asserted.

    python -m benchmarks.operator_scale --count 1000 [--json]

- apply -> Deployment and apply -> Available (p50/p99, from watch events);
- the operator's peak RSS, and at rest (2 minutes after every service is Available) its CPU
  (cores, in user space and in the kernel, and its threads' context switches) and its API
  requests per second per service (from the API server's audit log; its leader-election Lease
  renewals, one per process, are left out);
- 20 single applies while the N services are at rest (apply -> Deployment p99), the slowest
  five with the cores each component of the cluster used while they ran;
- the baseline: the same Deployments (with the replicas the operator gave them), Services,
  PodDisruptionBudgets and NetworkPolicies the operator made, applied by one `kubectl apply`
  in a new namespace, in the operator's order (each service's objects together, service after
  service), until the last Deployment exists; its pods are scheduled and made Ready as the
  operator's are. Printed beside it: the same apply with every Deployment first (so the last
  Deployment exists about when a quarter of the objects do; the runs before 4 December 2026
  took this one as the baseline), and with the Deployments at 0 replicas (no pods: a quiet
  control plane); the `kubectl apply` of the LLMServices themselves, with the API server's
  own time for each kind of request meanwhile; the operator's requests during the first
  apply by verb and resource, and the cores each component of the cluster used meanwhile.
  The baselines run after the operator's services are deleted, from a cluster as empty as
  the first apply found it.
- --trials T (3 by default): T-1 more bursts by the same operator, each to its last Deployment
  only and each followed by its own kubectl baseline; the burst ratio is the median of the T
  (each burst over its own baseline). One burst took 35 s to 86 s on the same cluster within
  half an hour (6 December 2026), and a single ratio swung with it.

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
import resource
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
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


def llmservice_list(namespace: str, names: list[str]) -> dict[str, Any]:
    """One `kubectl apply` of the LLMServices ``names`` in ``namespace``."""
    return {"apiVersion": "v1", "kind": "List",
            "items": [llmservice(namespace, n) for n in names]}  # fmt: skip


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


class _RawWatch(watch.Watch):
    """The client's watch without its model of every event's object (``raw_object`` only):
    deserializing each Deployment into a V1Deployment made this process lag its own events."""

    def get_return_type(self, func: Callable[..., Any]) -> None:
        return None


class FirstSeen:
    """Watches a list call; for each criterion (a function of the raw object: the name it
    counts the object under, or None), the monotonic time each name was first seen meeting it.
    One watch for several criteria: every watcher costs the API server a copy of each event.
    The watch resumes from the last version it saw: one that started over with no version
    would replay every object as ADDED, once a minute, and the events behind them would be
    timed late."""

    def __init__(self, call: Callable[..., Any], args: tuple[Any, ...],
                 **criteria: Callable[[dict[str, Any]], str | None]) -> None:  # fmt: skip
        self.seen: dict[str, dict[str, float]] = {name: {} for name in criteria}
        self._criteria = criteria
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(call, args), daemon=True, name="bench watch"
        )
        self._thread.start()

    def _run(self, call: Callable[..., Any], args: tuple[Any, ...]) -> None:
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    listed = json.loads(call(*args, _preload_content=False).data)
                    for item in listed.get("items", []):
                        self._saw(item)
                    version = listed["metadata"]["resourceVersion"]
                stream = _RawWatch()  # type: ignore[no-untyped-call]
                for event in stream.stream(  # type: ignore[no-untyped-call]
                    call, *args, resource_version=version, timeout_seconds=300,
                    allow_watch_bookmarks=True,
                ):  # fmt: skip
                    obj = event["raw_object"]
                    version = obj.get("metadata", {}).get("resourceVersion") or version
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._saw(obj)
                    if self._stop.is_set():
                        return
            except client.ApiException as err:
                if err.status == 410:  # too old: list again
                    version = None
                time.sleep(0.5)
            except Exception:  # noqa: BLE001 - a broken watch is watched again
                time.sleep(0.5)

    def _saw(self, obj: dict[str, Any]) -> None:
        moment = time.monotonic()
        for criterion, name_of in self._criteria.items():
            name = name_of(obj)
            if name:
                self.seen[criterion].setdefault(name, moment)

    def stop(self) -> None:
        self._stop.set()


def _service_of(deployment: dict[str, Any]) -> str | None:
    return (deployment["metadata"].get("labels") or {}).get(SERVICE)


def _available(body: dict[str, Any]) -> str | None:
    ok = (body.get("status") or {}).get("phase") == "Available"
    return str(body["metadata"]["name"]) if ok else None


def _name(body: dict[str, Any]) -> str:
    return str(body["metadata"]["name"])


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
            info.run_kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")
        time.sleep(5)


def operator_process(info: ClusterInfo) -> psutil.Process:
    [pod] = release_pods(info, RELEASE)
    container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    for line in info.real_node.ctr("tasks", "ls").splitlines()[1:]:
        parts = line.split()
        if parts and parts[0] == container_id:
            return psutil.Process(int(parts[1]))
    raise RuntimeError("the operator's container is not running")


def operator_metrics(info: ClusterInfo) -> str:
    """The operator's /metrics (on the host's loopback: the chart runs it in the host's
    network, on a port it writes to its ports file)."""
    [pod] = release_pods(info, RELEASE)
    ports = json.loads(info.run_kubectl("-n", OPERATOR_NAMESPACE, "exec", pod["metadata"]["name"],
                                        "--", "cat", f"/tmp/{PORTS_FILE_NAME}"))  # fmt: skip
    with urllib.request.urlopen(f"http://127.0.0.1:{ports['metrics']}/metrics", timeout=10) as r:
        return str(r.read().decode())


def reconciles_so_far(info: ClusterInfo) -> float:
    """The operator's llmservice_reconciles_total (nan when it cannot be read)."""
    try:
        text = operator_metrics(info)
    except (subprocess.CalledProcessError, OSError, ValueError):
        return float("nan")
    for family in text_string_to_metric_families(text):
        if family.name == "llmservice_reconciles":
            return sum(s.value for s in family.samples if s.name.endswith("_total"))
    return float("nan")


def gc_pauses(info: ClusterInfo) -> str:
    """The operator's garbage-collection pauses so far, per generation (operator_metrics):
    how many, their total, and the longest's bucket."""
    text = operator_metrics(info)
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


def context_switches(pid: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches so far of every thread of ``pid``."""
    found = [0, 0]
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue  # the thread ended
        for line in text.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                found[0] += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                found[1] += int(line.split()[1])
    return found[0], found[1]


def _children_cpu() -> float:
    """CPU seconds of this process's finished children (kubectl) so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


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


def component_processes() -> dict[int, str]:
    """The local cluster's processes by pid, each with its component."""
    found = {}
    for proc in psutil.process_iter(["cmdline"]):
        name = _component(proc.info["cmdline"] or [])
        if name is not None:
            found[proc.pid] = name
    return found


class CpuSampler:
    """Each component's CPU seconds every ``period_s``, so a slow moment can be matched with
    the component that was busy in it."""

    def __init__(self, period_s: float = 0.1) -> None:
        self._procs = {pid: (name, psutil.Process(pid)) for pid, name in
                       component_processes().items()}  # fmt: skip
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._period_s = period_s
        threading.Thread(target=self._run, daemon=True, name="cpu sampler").start()

    def _read(self) -> dict[str, float]:
        found = dict.fromkeys(COMPONENTS, 0.0)
        for name, proc in self._procs.values():
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            found[name] += times.user + times.system
        return found

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self._read()))
            time.sleep(self._period_s)

    def cores_between(self, start: float, end: float) -> dict[str, float]:
        """The cores each component used from ``start`` to ``end`` (the samples around them)."""
        before = [s for s in self.samples if s[0] <= start] or self.samples[:1]
        after = [s for s in self.samples if s[0] >= end] or self.samples[-1:]
        (t0, c0), (t1, c1) = before[-1], after[0]
        span = max(t1 - t0, 1e-6)
        return {name: (c1[name] - c0[name]) / span for name in COMPONENTS}

    def stop(self) -> None:
        self._stop.set()


def _cores_line(cores: dict[str, float]) -> str:
    busy = sorted(cores.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {value:.2f}" for name, value in busy if value >= 0.01)


def apiserver_requests(info: ClusterInfo) -> dict[tuple[str, str], tuple[float, float]]:
    """The API server's own count and total seconds of the requests it served so far, by verb
    and resource (apiserver_request_duration_seconds: every client, as the server timed it)."""
    text = info.run_kubectl("get", "--raw", "/metrics")
    found: dict[tuple[str, str], list[float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request_duration_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith(("_count", "_sum")):
                key = (sample.labels.get("verb", ""), sample.labels.get("resource", ""))
                slot = found.setdefault(key, [0.0, 0.0])
                slot[0 if sample.name.endswith("_count") else 1] += sample.value
    return {key: (count, total) for key, (count, total) in found.items()}


def server_side_line(before: dict[tuple[str, str], tuple[float, float]],
                     after: dict[tuple[str, str], tuple[float, float]], top: int = 12) -> str:  # fmt: skip
    """The requests served between two apiserver_requests readings, the most numerous first,
    with the server's mean time for each."""
    rows = []
    for key, (count, total) in after.items():
        count0, total0 = before.get(key, (0.0, 0.0))
        if count - count0 >= 1:
            rows.append((count - count0, (total - total0) / (count - count0), key))
    rows.sort(reverse=True)
    return "\n".join(f"  {verb} {resource or '-':<28} {n:8.0f}  mean {mean * 1000:7.1f} ms"
                     for n, mean, (verb, resource) in rows[:top])  # fmt: skip


def run(
    count: int, workers: int, timeout: float, trials: int
) -> tuple[dict[str, float], list[float]]:
    """The figures of the first trial (the JSON keys, and _allDeploymentsS), and every trial's
    burst ratio: its seconds to the last Deployment over its own kubectl baseline."""
    info = bench_cluster(count + SINGLE_APPLIES)
    api = config.new_client_from_config(config_file=str(info.kubeconfig))  # type: ignore[no-untyped-call]
    kubectl = info.run_kubectl
    run_id = uuid.uuid4().hex[:6]
    namespace = f"bench-{run_id}"
    # The later trials' namespaces exist and are watched from the start: the same operator,
    # not restarted, serves every trial. Their names do not start with another's: a
    # namespace is deleted with every namespace named after it (its baselines').
    later = [f"bench-t{k}-{run_id}" for k in range(2, trials + 1)]
    kubectl("apply", "--server-side", "-f", "crds/llmservice.yaml")
    info.wait_crd_established("llmservices.serving.llmservice.dev")
    for name in (namespace, *later):
        kubectl("create", "namespace", name)
    image = load_operator_image(info)
    values = chart_values(info, image, namespaces=[namespace, *later], replicas=1)
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
    deployments = FirstSeen(apps.list_namespaced_deployment, (namespace,), created=_service_of)
    llmservices = FirstSeen(custom.list_namespaced_custom_object,
                            (GROUP, VERSION, namespace, PLURAL), stored=_name,
                            available=_available)  # fmt: skip
    created, stored = deployments.seen["created"], llmservices.seen["stored"]
    available = llmservices.seen["available"]
    time.sleep(2)
    names = [f"svc-{i:04d}" for i in range(count)]
    docs = llmservice_list(namespace, names)
    cpu_before = component_cpu()
    reconciles_before = reconciles_so_far(info)
    served_before = apiserver_requests(info)
    kubectl_cpu_before = _children_cpu()
    burst_sampler = CpuSampler(period_s=1.0)
    applied_at, burst_since = time.monotonic(), datetime.now().astimezone()
    kubectl("apply", "-f", "-", stdin=json.dumps(docs))
    llmservices_applied = time.monotonic() - applied_at
    kubectl_cpu = _children_cpu() - kubectl_cpu_before
    print(f"kubectl's apply of the {count} LLMServices: {llmservices_applied:.1f}s, "
          f"{kubectl_cpu:.1f}s of its own CPU; the API server served meanwhile (its own "
          f"times):\n" + server_side_line(served_before, apiserver_requests(info)),
          file=sys.stderr)  # fmt: skip
    deadline = applied_at + timeout
    while len(available) < count and time.monotonic() < deadline:
        time.sleep(0.2)
    to_deployment = [created[n] - applied_at for n in names if n in created]
    to_available = [available[n] - applied_at for n in names if n in available]
    print(f"{len(to_available)} of {count} Available in {max(to_available, default=0):.1f}s; "
          f"kubectl applied the {count} LLMServices in {llmservices_applied:.1f}s",
          file=sys.stderr)  # fmt: skip
    burst_s = time.monotonic() - applied_at
    cpu_after = component_cpu()
    print("cores used until the last was Available: " + ", ".join(
        f"{name} {(cpu_after[name] - cpu_before[name]) / burst_s:.2f}" for name in COMPONENTS),
        file=sys.stderr)  # fmt: skip
    reconciled = reconciles_so_far(info) - reconciles_before
    print(f"the operator reconciled {reconciled / count:.1f} times per service until the last was "
          "Available", file=sys.stderr)  # fmt: skip
    burst_sampler.stop()
    if to_deployment:
        last_deployment = burst_since + timedelta(seconds=max(to_deployment))
        print("cores used until the last Deployment existed: " + _cores_line(
            burst_sampler.cores_between(applied_at, applied_at + max(to_deployment))),
            file=sys.stderr)  # fmt: skip
        print("the operator's requests until the last Deployment existed:\n" + request_breakdown(
            info, burst_since, last_deployment, count), file=sys.stderr)  # fmt: skip
    print("the operator's requests until the last was Available:\n" + request_breakdown(
        info, burst_since, datetime.now().astimezone(), count), file=sys.stderr)  # fmt: skip

    time.sleep(20)  # the last writes settle
    pauses_before_rest = _gc_pauses_or_why(info)
    since, times0 = datetime.now().astimezone(), process.cpu_times()
    switches0 = context_switches(process.pid)
    time.sleep(IDLE_S)
    until, times1 = datetime.now().astimezone(), process.cpu_times()
    switches1 = context_switches(process.pid)
    idle_cores = (times1.user + times1.system - times0.user - times0.system) / IDLE_S
    print(f"the operator at rest: {(times1.user - times0.user) / IDLE_S:.4f} cores in user "
          f"space, {(times1.system - times0.system) / IDLE_S:.4f} in the kernel; "
          f"{(switches1[0] - switches0[0]) / IDLE_S:.0f} voluntary and "
          f"{(switches1[1] - switches0[1]) / IDLE_S:.0f} involuntary context "
          "switches a second", file=sys.stderr)  # fmt: skip
    idle_rate = len(_operator_requests(info, since, until)) / count / IDLE_S
    print(f"the operator's garbage-collection pauses before the {IDLE_S:g}s at rest: "
          f"{pauses_before_rest}; after: {_gc_pauses_or_why(info)}", file=sys.stderr)  # fmt: skip
    print(f"the operator's requests in the {IDLE_S:g}s at rest:\n"
          + request_breakdown(info, since, until, count), file=sys.stderr)  # fmt: skip

    singles: list[float] = []
    kubectl_alone: list[float] = []
    operator_part: list[float] = []
    windows: list[tuple[float, float]] = []
    sampler = CpuSampler()
    served_before = apiserver_requests(info)
    for i in range(SINGLE_APPLIES):
        name = f"single-{i:02d}"
        started = time.monotonic()
        kubectl("apply", "-f", "-", stdin=json.dumps(llmservice(namespace, name)))
        kubectl_alone.append(time.monotonic() - started)
        while name not in created and time.monotonic() < started + 60:
            time.sleep(0.02)
        singles.append(created.get(name, float("inf")) - started)
        operator_part.append(created.get(name, float("inf")) - stored.get(name, started))
        windows.append((started, time.monotonic()))
        time.sleep(1)
    time.sleep(0.3)  # a sample after the last window
    sampler.stop()
    print("the single applies, the slowest first (kubectl's part, the operator's part; the "
          "cores each component used meanwhile):", file=sys.stderr)  # fmt: skip
    for i in sorted(range(SINGLE_APPLIES), key=lambda j: -singles[j])[:5]:
        print(f"  {singles[i]:.2f}s ({kubectl_alone[i]:.2f}s, {operator_part[i]:.2f}s): "
              f"{_cores_line(sampler.cores_between(*windows[i]))}", file=sys.stderr)  # fmt: skip
    print("the API server's requests during the single applies (its own times):\n"
          + server_side_line(served_before, apiserver_requests(info)), file=sys.stderr)  # fmt: skip
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
    deployments.stop()
    llmservices.stop()
    made = operator_objects(info, namespace)
    # The baselines start, as the operator's run did, from a cluster without these services.
    deleting_since, deleting_at = datetime.now().astimezone(), time.monotonic()
    _wait_for_namespaces_gone(info, namespace)
    deleted = datetime.now().astimezone()
    print(f"the namespace of the {count} services went in {time.monotonic() - deleting_at:.0f}s; "
          "the operator's requests meanwhile:\n" + (request_breakdown(
              info, deleting_since, deleted, count) or "  none"), file=sys.stderr)  # fmt: skip
    baseline = kubectl_baseline(info, apps, by_service(made), f"{namespace}-kubectl",
                                with_pods=True)  # fmt: skip
    kinds_first = kubectl_baseline(info, apps, made, f"{namespace}-kinds", with_pods=True)
    quiet = kubectl_baseline(info, apps, by_service(made), f"{namespace}-quiet", with_pods=False)
    print(f"kubectl baseline: {baseline:.1f}s with the Deployments' pods, each service's objects "
          f"together; {kinds_first:.1f}s with every Deployment first (the runs before 4 December "
          f"2026 took this one); {quiet:.1f}s at 0 replicas, each service's objects together",
          file=sys.stderr)  # fmt: skip
    all_deployments = max(to_deployment, default=float("nan"))
    ratios = [all_deployments / baseline]
    for trial, target in enumerate(later, start=2):
        burst, its_baseline = burst_trial(info, apps, target, count, timeout)
        ratios.append(burst / its_baseline)
        print(f"trial {trial}: all {count} Deployments in {burst:.1f}s, the kubectl baseline right "
              f"after it {its_baseline:.1f}s: {ratios[-1]:.2f}x", file=sys.stderr)  # fmt: skip
    figures = {
        "applyToDeploymentP50S": round(percentile(to_deployment, 50), 3),
        "applyToDeploymentP99S": round(percentile(to_deployment, 99), 3),
        "applyToAvailableP99S": round(percentile(to_available, 99), 3),
        "operatorPeakRssMiB": round(max(peak_rss) / 2**20, 1),
        "idleOperatorCores": round(idle_cores, 4),
        "idleApiRequestsPerSecondPerService": round(idle_rate, 5),
        "singleApplyToDeploymentP99S": round(percentile(singles, 99), 3),
        "kubectlBaselineSeconds": round(baseline, 3),
        "_allDeploymentsS": round(all_deployments, 3),
    }
    return figures, ratios


def burst_trial(
    info: ClusterInfo,
    apps: client.AppsV1Api,
    namespace: str,
    count: int,
    timeout: float,
) -> tuple[float, float]:
    """One more burst, to the last Deployment only, in ``namespace`` (watched since the start),
    then its kubectl baseline (each service's objects together, with pods) once the services
    are deleted: (seconds to the last Deployment, the baseline's seconds). The two are taken
    minutes apart, not a quarter of an hour as the first trial's are, so a slow spell of the
    machine weighs on both or neither."""
    deployments = FirstSeen(apps.list_namespaced_deployment, (namespace,), created=_service_of)
    created = deployments.seen["created"]
    time.sleep(2)
    names = [f"svc-{i:04d}" for i in range(count)]
    sampler = CpuSampler(period_s=1.0)
    applied_at = time.monotonic()
    info.run_kubectl("apply", "-f", "-", stdin=json.dumps(llmservice_list(namespace, names)))
    llmservices_applied = time.monotonic() - applied_at
    while len(created) < count and time.monotonic() < applied_at + timeout:
        time.sleep(0.2)
    last = max(created.values(), default=float("inf")) - applied_at
    time.sleep(0.3)  # a sample after the last Deployment
    sampler.stop()
    deployments.stop()
    print(f"{namespace}: kubectl applied the {count} LLMServices in {llmservices_applied:.1f}s; "
          f"{len(created)} Deployments, the last at {last:.1f}s; cores until then: "
          + _cores_line(sampler.cores_between(applied_at, applied_at + last)),
          file=sys.stderr)  # fmt: skip
    made = operator_objects(info, namespace)
    _wait_for_namespaces_gone(info, namespace)
    return last, kubectl_baseline(info, apps, by_service(made), f"{namespace}-kubectl",
                                  with_pods=True)  # fmt: skip


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


def by_service(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``objects`` in the order the operator applies them: each service's Deployment, Service,
    PodDisruptionBudget and NetworkPolicy together, service after service (as a user applying
    each service's manifests would), so the last Deployment comes with the last service."""
    return sorted(objects, key=lambda o: o["metadata"]["labels"].get(SERVICE, ""))


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
    watcher = FirstSeen(apps.list_namespaced_deployment, (target,), created=_name)
    seen = watcher.seen["created"]
    time.sleep(2)
    served_before, kubectl_cpu_before = apiserver_requests(info), _children_cpu()
    since, started = datetime.now().astimezone(), time.monotonic()
    info.run_kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                           "items": items}))  # fmt: skip
    applied = time.monotonic() - started
    kubectl_cpu = _children_cpu() - kubectl_cpu_before
    while len(seen) < deployments and time.monotonic() < started + 600:
        time.sleep(0.1)
    watcher.stop()
    took = max(seen.values(), default=started) - started
    # None expected: its services are gone (a service it kept would load the baseline).
    until = datetime.now().astimezone()
    operator = len(_operator_requests(info, since, until))
    if operator > 20:
        print(f"the operator's requests during baseline {target} (per deleted service):\n"
              + request_breakdown(info, since, until, deployments), file=sys.stderr)  # fmt: skip
    print(f"baseline {target}: kubectl applied {len(items)} objects in {applied:.1f}s, "
          f"{kubectl_cpu:.1f}s of its own CPU; the operator made {operator} requests; the API "
          f"server served meanwhile (its own times):\n"
          + server_side_line(served_before, apiserver_requests(info)),
          file=sys.stderr)  # fmt: skip
    _wait_for_namespaces_gone(info, target)
    return took


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.operator_scale")
    parser.add_argument("--count", type=int, default=50, help="LLMServices applied at once")
    parser.add_argument(
        "--workers", type=int, default=4, help="the operator's workers (the chart's default)"
    )
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to convergence")
    parser.add_argument("--json", action="store_true", help="end with one JSON object")
    parser.add_argument("--keep", action="store_true", help="leave the bench cluster up")
    parser.add_argument(
        "--trials",
        type=int,
        default=3,
        help="bursts, each with its own kubectl baseline (the ratio: their median)",
    )
    args = parser.parse_args()
    try:
        figures, ratios = run(args.count, args.workers, args.timeout, max(1, args.trials))
    finally:
        if not args.keep:
            LocalCluster(cache_dir() / "bench-cluster").down()
    all_deployments = figures.pop("_allDeploymentsS")
    out = sys.stderr if args.json else sys.stdout
    for key in JSON_KEYS:
        print(f"{key:<40} {figures[key]}", file=out)
    ratio = all_deployments / figures["kubectlBaselineSeconds"]
    print(f"all {args.count} Deployments in {all_deployments:.1f}s: {ratio:.2f}x the kubectl "
          "baseline", file=out)  # fmt: skip
    print("all Deployments against each trial's own baseline: "
          + ", ".join(f"{r:.2f}x" for r in ratios) + f"; median {statistics.median(ratios):.2f}x",
          file=out)  # fmt: skip
    if args.json:
        print(json.dumps({k: figures[k] for k in JSON_KEYS}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
