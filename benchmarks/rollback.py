"""Rollback benchmark: how long a bad canary serves traffic, and what it costs, per interval.

    python -m benchmarks.rollback                     # intervals 5s, 10s, 20s (~2 min)
    python -m benchmarks.rollback --intervals 5s 10s  # fewer

On the local cluster (started if needed) with the real operator, live simulator pods and
Prometheus: per analysis interval, two LLMServices at one replica are rolled out to a bad
revision under steady load (the load generator, in the background, against each service's
Ready pods): one whose simulator answers 30% of requests with 500, one that adds 8 s
(simulated) to every time to first token. The rollout is a canary
``setWeight 50 -> analysis -> promote``, one measurement per interval over a window of the
same length, failureLimit 0; the error-rate canary skips the smoke test (its 500s would fail
it before any traffic, which is the cheap case).

Printed per interval and fault, not asserted: the time from the canary's first traffic (the
first moment the load generator's target list holds a candidate pod) to the rollback being
complete (the operator's status has no candidate, the client-facing Service selects only the
stable revision, and the candidate's Deployment is gone); the requests sent to the service
meanwhile, how many went to the canary (each of them slow, for the TTFT fault), how many
failed, and how many the stable revision failed over the whole run (traffic dropped: 0). With
failureLimit 0 the canary serves about one interval of its share of the traffic. Requests
"cut at removal" were in flight to the canary's pod when it was deleted: the local cluster
has no preStop drain. A rollout that pauses instead (an inconclusive measurement: too few
requests in the window) is reported as such.

Times are wall seconds; the simulators run at the cluster's time scale (10x by default), so
the load (rates, latencies) is in simulated seconds.

:class:`BackgroundLoad` is also what the rollout integration tests use.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, cast

import aiohttp
import urllib3
from kubernetes.client.exceptions import ApiException

from llmservice_dev.localcluster import ClusterInfo, LocalCluster
from llmservice_operator.api.base import parse_duration_seconds
from llmservice_operator.loadgen.client import LoadConfig, load_session, run_load
from llmservice_operator.loadgen.distributions import LengthDist
from llmservice_operator.loadgen.report import LoadReport, TargetCounts
from llmservice_operator.loadgen.schedule import RateSchedule
from llmservice_operator.loadgen.targets import PodTargets
from llmservice_operator.render.labels import REVISION, SERVICE

ROOT = Path(__file__).resolve().parents[1]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SLO = {"ttftP99Ms": 5000, "maxErrorRate": 0.05}
#: Requests per simulated second to each service (x10 per wall second at time scale 10).
RATE = 0.5
FAULTS: dict[str, dict[str, str]] = {
    "errors 30%": {"LLMSERVICE_SIM_ERROR_RATE": "0.3"},
    "TTFT +8 s": {"LLMSERVICE_SIM_EXTRA_TTFT_MS": "8000"},
}


# --------------------------------------------------------------------------- the load


class RevisionTargets(PodTargets):
    """:class:`PodTargets` that also remembers which revision each endpoint's pod belongs to.

    An endpoint is a pod IP, and kwok hands a deleted pod's IP to the next pod it starts on
    that node at once: the same URL can be a removed stable pod, then a new candidate pod. So
    each URL keeps the revisions it served, with the wall time each was first seen Ready.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.history: dict[str, list[tuple[float, str]]] = {}
        """Endpoint -> (wall time first seen Ready, revision), oldest first."""
        self.first_seen: dict[tuple[str, str], float] = {}
        """(endpoint, revision) -> the wall time the load generator first got it as a target."""

    def refresh(self) -> tuple[str, ...]:
        urls = super().refresh()
        response = self._api.list_namespaced_pod(
            self.namespace, label_selector=f"{SERVICE}={self.service}", _preload_content=False
        )
        pods = json.loads(cast(Any, response).data)
        now = time.time()
        for pod in pods.get("items") or []:
            ip = (pod.get("status") or {}).get("podIP")
            revision = (pod["metadata"].get("labels") or {}).get(REVISION)
            if ip and revision:
                for url in urls:
                    if url.split("//", 1)[1].rsplit(":", 1)[0] == ip:
                        served = self.history.setdefault(url, [])
                        if not served or served[-1][1] != revision:
                            served.append((now, revision))
        return urls

    def revision_at(self, url: str, moment: float) -> str | None:
        """The revision behind ``url`` at ``moment`` (its first one if it was not known yet)."""
        served = self.history.get(url)
        if not served:
            return None
        current = served[0][1]
        for since, revision in served:
            if since <= moment:
                current = revision
        return current

    @property
    def revisions(self) -> dict[str, str]:
        """Endpoint -> the revision it serves now."""
        return {url: served[-1][1] for url, served in self.history.items()}

    def __call__(self) -> Sequence[str]:
        urls = super().__call__()
        now = time.time()
        for url in urls:
            revision = self.revision_at(url, now)
            if revision is not None:
                self.first_seen.setdefault((url, revision), now)
        return urls


@dataclass
class Chunk:
    started: float
    ended: float
    report: LoadReport | None
    """None: there was no Ready pod to send to (the service dropped traffic)."""


@dataclass
class BackgroundLoad:
    """The load generator in a thread of its own: open-loop (Poisson) requests to an
    LLMService's Ready pods, re-read every ``refresh_s``, until :meth:`stop`.

    It runs as back-to-back chunks of ``chunk_s`` wall seconds, so reports come in while it
    runs; per endpoint it knows the revision, the requests and the errors.
    """

    cluster: ClusterInfo
    service: str
    namespace: str
    rate: float = 0.3
    """Requests per simulated second (x time scale per wall second)."""
    chunk_s: float = 2.0
    refresh_s: float = 1.0
    prompt_tokens: int = 256
    output_tokens: int = 16
    time_scale: float | None = None
    """The engines' clock: the cluster's simulators by default; 1 for real engines."""
    chunks: list[Chunk] = field(default_factory=list)
    targets: RevisionTargets = field(init=False)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        api_client = _api_client(self.cluster)
        self.targets = RevisionTargets(
            api_client, self.service, self.namespace, refresh_s=self.refresh_s
        )

    def start(self, ready_timeout_s: float = 60) -> BackgroundLoad:
        deadline = time.monotonic() + ready_timeout_s
        while True:  # an API server busy for a moment is not a reason to give up
            try:
                self.targets.wait_ready(max(1.0, deadline - time.monotonic()))
                break
            except (ApiException, urllib3.exceptions.HTTPError, OSError):
                if time.monotonic() >= deadline:
                    raise
                time.sleep(1)
        self.targets.start()
        self._thread = threading.Thread(target=self._main, name=f"load {self.service}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        self.targets.stop()

    def __enter__(self) -> BackgroundLoad:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _main(self) -> None:
        asyncio.run(self._loop())

    async def _loop(self) -> None:
        """A chunk starts every ``chunk_s`` whatever the previous ones are waiting for, so
        slow answers do not slow the arrivals down (open loop across chunks too)."""
        async with load_session() as session:
            running: set[asyncio.Task[None]] = set()
            seed = 0
            next_start = time.monotonic()
            while not self._stop.is_set():
                seed += 1
                task = asyncio.create_task(self._chunk(session, seed))
                running.add(task)
                task.add_done_callback(running.discard)
                next_start += self.chunk_s
                await asyncio.sleep(max(0.0, next_start - time.monotonic()))
            if running:
                await asyncio.wait(running)

    async def _chunk(self, session: aiohttp.ClientSession, seed: int) -> None:
        scale = self.time_scale or self.cluster.sim_time_scale
        started = time.time()
        if not self.targets():
            self.chunks.append(Chunk(started, time.time(), None))
            return
        config = LoadConfig(
            schedule=RateSchedule.constant(self.rate, self.chunk_s * scale),
            prompt_tokens=LengthDist("fixed", self.prompt_tokens),
            output_tokens=LengthDist("fixed", self.output_tokens),
            model=self.service,
            seed=seed,
            time_scale=scale,
            request_timeout_s=120 * scale,
            drain_timeout_s=120 * scale,
        )
        try:
            report: LoadReport | None = await run_load(config, self.targets, session)
        except ValueError:  # the last Ready pod went away just now
            report = None
        self.chunks.append(Chunk(started, time.time(), report))

    # ----------------------------------------------------------------- what it saw

    def _answered(self, since: float, until: float) -> list[tuple[Chunk, LoadReport]]:
        """The chunks that sent requests between ``since`` and ``until``, with their reports."""
        return [
            (c, c.report)
            for c in list(self.chunks)
            if c.report is not None and c.ended >= since and c.started <= until
        ]

    def reports(self, since: float = 0.0, until: float = float("inf")) -> list[LoadReport]:
        return [report for _, report in self._answered(since, until)]

    def gaps(self) -> list[Chunk]:
        """Times the service had no Ready pod behind its Service."""
        return [c for c in list(self.chunks) if c.report is None]

    def per_revision(self, since: float = 0.0, until: float = float("inf")) -> dict[str, Counts]:
        totals: dict[str, Counts] = {}
        for chunk, report in self._answered(since, until):
            for url, counts in report.per_target.items():
                # As of the chunk's start: its requests went to the pods Ready then.
                revision = self.targets.revision_at(url, chunk.started) or f"? {url}"
                totals.setdefault(revision, Counts()).add(counts)
        return totals

    def errors_by_kind(self) -> dict[str, int]:
        kinds: dict[str, int] = {}
        for report in self.reports():
            for kind, n in report.errors_by_kind.items():
                kinds[kind] = kinds.get(kind, 0) + n
        return kinds

    def first_traffic(self, revision: str) -> float | None:
        times = [t for (_, seen), t in self.targets.first_seen.items() if seen == revision]
        return min(times) if times else None


@dataclass
class Counts:
    requests: int = 0
    ok: int = 0
    errors: int = 0

    def add(self, other: TargetCounts) -> None:
        self.requests += other.requests
        self.ok += other.ok
        self.errors += other.errors


def _api_client(cluster: ClusterInfo) -> Any:
    from kubernetes import config

    return config.new_client_from_config(config_file=str(cluster.kubeconfig))  # type: ignore[no-untyped-call]


# --------------------------------------------------------------------------- the cluster


def llmservice(
    name: str,
    namespace: str,
    *,
    env: Mapping[str, str] | None = None,
    rollout: Mapping[str, Any] | None = None,
    slo: Mapping[str, Any] | None = None,
    replicas: int = 1,
    gpu: str = "H100-80GB",
) -> dict[str, Any]:
    """An LLMService at a fixed replica count (scaling.mode manual); ``env`` goes to the engine
    (``LLMSERVICE_SIM_*`` faults reach the simulator), so changing it is a new revision."""
    spec: dict[str, Any] = {
        "model": {"id": MODEL},
        "engine": {
            "maxModelLen": 4096,
            "maxNumSeqs": 16,
            "env": [{"name": k, "value": v} for k, v in sorted((env or {}).items())],
        },
        "resources": {"gpu": gpu, "minConcurrency": 1},
        "scaling": {"mode": "manual", "minReplicas": 1, "maxReplicas": max(1, replicas)},
        "replicas": replicas,
    }
    if slo is not None:
        spec["slo"] = dict(slo)
    if rollout is not None:
        spec["rollout"] = dict(rollout)
    return {
        "apiVersion": "serving.llmservice.dev/v1alpha1",
        "kind": "LLMService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def canary(interval: str, *, smoke: bool = True, **analysis: Any) -> dict[str, Any]:
    """``setWeight 50 -> analysis -> promote``, one measurement per ``interval``."""
    return {
        "strategy": "canary",
        "steps": [{"setWeight": 50}, {"analysis": {}}],
        "analysis": {"interval": interval, "count": 2, "minSamples": 3, **analysis},
        "smokeTest": {"enabled": smoke, "timeoutSeconds": 30},
        "progressDeadlineSeconds": 120,
    }


class Kube:
    """kubectl against the local cluster."""

    def __init__(self, cluster: ClusterInfo) -> None:
        self.cluster = cluster

    def __call__(self, *args: str, input: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            [str(self.cluster.kubectl), f"--kubeconfig={self.cluster.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self("get", *args, "-o", "json"))

    def apply(self, obj: Mapping[str, Any]) -> None:
        self("apply", "-f", "-", input=json.dumps(obj))


def rollback_complete(get: Callable[..., Any], namespace: str, name: str, candidate: str) -> bool:
    """No candidate in the status, the Service selects the stable only, the Deployment gone.

    ``get(*args)``: ``kubectl get *args -o json``, parsed.
    """
    obj = get("-n", namespace, "llmservice", name)
    revisions = (obj.get("status") or {}).get("revisions") or {}
    if revisions.get("candidate") is not None or revisions.get("failed") != candidate:
        return False
    selector = get("-n", namespace, "service", name)["spec"]["selector"]
    if selector.get(REVISION) != revisions.get("stable"):
        return False
    deployments = get("-n", namespace, "deployments", "-l", f"{REVISION}={candidate}")
    return not deployments["items"]


def wait(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = check()
        except (RuntimeError, KeyError, ValueError):
            got = None
        if got:
            return got
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def start_operator(cluster: ClusterInfo, namespace: str, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "llmservice_operator", "run", "--no-leader-election"],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env={
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig),
            "LLMSERVICE_NAMESPACES": namespace,
            "LLMSERVICE_PROMETHEUS_URL": cluster.prometheus_url,
            "LLMSERVICE_RECONCILE_INTERVAL_SECONDS": "2",
            "LLMSERVICE_HEALTH_PORT": "0",
            "LLMSERVICE_METRICS_PORT": "0",
        },
        cwd=ROOT,
    )


# --------------------------------------------------------------------------- the benchmark


@dataclass(frozen=True)
class Trial:
    interval: str
    fault: str
    seconds: float
    """The canary's first traffic to the rollback complete."""
    requests: int
    """Sent to the service meanwhile."""
    canary: int
    """Of those, sent to the canary."""
    failed: int
    cut: int
    """Of those, cut at the canary's removal (the local cluster has no preStop drain)."""
    stable_failed: int
    """Failed requests the stable revision answered (the whole run): traffic it dropped."""
    reason: str
    measurements: str = ""
    """The analysis measurements' verdicts, in order."""


def _status(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return dict(kube.json("-n", namespace, "llmservice", name).get("status") or {})


def _available(kube: Kube, namespace: str, name: str) -> bool:
    return _status(kube, namespace, name).get("phase") == "Available"


def _measurements(kube: Kube, namespace: str, name: str) -> str:
    events = kube.json(
        "-n", namespace, "events",
        f"--field-selector=involvedObject.kind=LLMService,involvedObject.name={name},"
        "reason=AnalysisMeasurement",
    )["items"]  # fmt: skip
    events.sort(key=lambda e: int(e["metadata"]["resourceVersion"]))
    # "step 2/3 (analysis) measurement 1: Failed: errorRate Failed: 0.31, want <= 0.05"
    return ", ".join(e["message"].split(": ", 2)[1] for e in events)


def _candidate(kube: Kube, namespace: str, name: str) -> str | None:
    return (_status(kube, namespace, name).get("revisions") or {}).get("candidate")


def run_interval(
    cluster: ClusterInfo, kube: Kube, namespace: str, interval: str, index: int
) -> list[Trial]:
    """Both faults at once, each in its own LLMService; a Trial per fault."""
    names = {fault: f"bad-{index}-{i}" for i, fault in enumerate(FAULTS)}
    for fault, name in names.items():
        rollout = canary(interval, smoke=not fault.startswith("errors"))
        kube.apply(llmservice(name, namespace, rollout=rollout, slo=SLO))
    for name in names.values():
        wait(f"{name} Available", partial(_available, kube, namespace, name), 180)
    loads = {
        f: BackgroundLoad(cluster, n, namespace, rate=RATE, refresh_s=0.5).start()
        for f, n in names.items()
    }
    trials: list[Trial] = []
    try:
        candidates: dict[str, str] = {}
        for fault, name in names.items():
            patch = {"spec": {"engine": {"env": [
                {"name": k, "value": v} for k, v in FAULTS[fault].items()
            ]}}}  # fmt: skip
            kube(
                "-n",
                namespace,
                "patch",
                "llmservice",
                name,
                "--type=merge",
                "-p",
                json.dumps(patch),
            )
        for fault, name in names.items():
            candidates[fault] = wait(
                f"{name}'s candidate", partial(_candidate, kube, namespace, name), 60
            )
        done: dict[str, float] = {}
        outcome: dict[str, str] = {}
        deadline = time.monotonic() + 120 + 3 * parse_duration_seconds(interval)
        while len(done) < len(names) and time.monotonic() < deadline:
            for fault, name in names.items():
                if fault in done:
                    continue
                if rollback_complete(kube.json, namespace, name, candidates[fault]):
                    done[fault] = time.time()
                    continue
                rollout = _status(kube, namespace, name).get("rollout") or {}
                if rollout.get("paused"):  # e.g. an inconclusive analysis (too few requests)
                    done[fault] = time.time()
                    outcome[fault] = f"paused: {rollout.get('pauseReason')}"
                    print(f"  {name} ({fault}) paused: {rollout.get('message')}", flush=True)
            time.sleep(0.25)
        time.sleep(2 * loads[next(iter(loads))].chunk_s)  # the chunks in flight report
    finally:
        for load in loads.values():
            load.stop()
    for fault, name in names.items():
        load = loads[fault]
        candidate = candidates[fault]
        first = load.first_traffic(candidate)
        if fault not in done or first is None or fault in outcome:
            why = outcome.get(fault, "did not roll back")
            trials.append(Trial(interval, fault, float("nan"), 0, 0, 0, 0, 0, why))
            continue
        obj = kube.json("-n", namespace, "llmservice", name)
        record = next(
            (
                h
                for h in reversed(obj["status"]["revisions"]["history"])
                if h["revision"] == candidate
            ),
            {"reason": "?"},
        )
        seconds = done[fault] - first
        by_revision = load.per_revision()
        bad = by_revision.get(candidate, Counts())
        trials.append(
            Trial(
                interval=interval,
                fault=fault,
                seconds=seconds,
                requests=round(seconds * load.rate * cluster.sim_time_scale),
                canary=bad.requests,
                failed=sum(c.errors for c in by_revision.values()),
                cut=load.errors_by_kind().get("connection", 0),
                stable_failed=sum(c.errors for r, c in by_revision.items() if r != candidate),
                reason=str(record["reason"]).split(":", 1)[0],
                measurements=_measurements(kube, namespace, name),
            )
        )
    for name in names.values():
        kube("-n", namespace, "delete", "llmservice", name, "--wait=false")
    return trials


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--intervals", nargs="+", default=["5s", "10s", "20s"])
    args = parser.parse_args(argv)

    cluster = LocalCluster().up()
    kube = Kube(cluster)
    kube("apply", "--server-side", "-f", str(ROOT / "crds" / "llmservice.yaml"))
    kube("wait", "--for=condition=Established", "crd/llmservices.serving.llmservice.dev")
    namespace = f"bench-rollback-{uuid.uuid4().hex[:6]}"
    kube("create", "namespace", namespace)
    wait("the default ServiceAccount", lambda: kube("-n", namespace, "get", "sa", "default"), 30)
    log = Path(f"/tmp/{namespace}-operator.log")
    operator = start_operator(cluster, namespace, log)
    trials: list[Trial] = []
    try:
        for index, interval in enumerate(args.intervals):
            print(f"interval {interval} ...", flush=True)
            trials += run_interval(cluster, kube, namespace, interval, index)
    finally:
        operator.terminate()
        operator.wait(timeout=30)
        kube("delete", "namespace", namespace, "--wait=false", check=False)
    print()
    print(
        "| analysis interval | fault | first canary traffic -> rollback complete | requests "
        "meanwhile | to the canary | failed (of which cut at removal) | failed on the stable "
        "| rolled back for | measurements |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for t in trials:
        print(
            f"| {t.interval} | {t.fault} | {t.seconds:.1f} s | ~{t.requests} | {t.canary} | "
            f"{t.failed} ({t.cut}) | {t.stable_failed} | {t.reason} | {t.measurements} |"
        )
    print(f"\n(operator log: {log}; time scale {cluster.sim_time_scale:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
