"""Operator-mode autoscaling end to end: the real operator scales live simulator pods from their
engine gauges (read from a real Prometheus, or scraped from the pods), under load sent from
this process.

Sized for a loaded two-core machine: Llama-3.1-8B on one L4 with ``maxNumSeqs`` 4 and decode
steps slowed 5x (``LLMSERVICE_SIM_DECODE_SLOWDOWN``): a request of 256 + 32 tokens takes about
1.2 wall seconds (the simulators run 10x faster than the wall clock; the load generator
matches them), so one full replica completes about 3 requests per wall second and a handful of
requests saturate it. Evaluation every 2 s, a 30 s stabilization window, 10 s scaling periods,
at most 3 or 4 replicas.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes import client
from prometheus_client import CollectorRegistry, Counter, start_http_server

from llmservice_dev.localcluster import ClusterInfo
from llmservice_dev.localcluster.ports import free_port
from llmservice_dev.localcluster.prometheus import (
    PrometheusServer,
    prometheus_config,
    query,
    targets,
)
from llmservice_operator.loadgen.client import LoadConfig, load_session, resolve_model, run_load
from llmservice_operator.loadgen.distributions import LengthDist
from llmservice_operator.loadgen.report import LoadReport
from llmservice_operator.loadgen.schedule import RateSchedule
from llmservice_operator.loadgen.targets import PodTargets
from llmservice_operator.render.labels import REVISION

from .operator_fixtures import OperatorFactory, OperatorRelease, wait_for
from .test_scalers import _replicas_managers
from .test_sim_e2e import is_ready, runner_pods
from .watching import writes_within

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
NAME = "chat"
PROMPT_TOKENS = 256
OUTPUT_TOKENS = 32
#: Requests per wall second one full replica completes (about 3.5 on an idle machine).
REPLICA_CAPACITY = 3.0
MAX_NUM_SEQS = 4
TARGET_QUEUE = 2
EVALUATION_S = 2
WINDOW_S = 30
PERIOD_S = 10
#: The arrival rate a scaling reason gives ("..., 8.11 req/s arriving").
ARRIVING = re.compile(r"([\d.]+) req/s arriving")


def autoscaled(
    namespace: str,
    *,
    max_replicas: int,
    metrics_source: str = "prometheus",
    env: dict[str, str] | None = None,
    min_replicas: int = 1,
    arrival_rate_query: str | None = None,
) -> dict[str, Any]:
    variables = {"LLMSERVICE_SIM_DECODE_SLOWDOWN": "5", **(env or {})}
    return {
        "apiVersion": "serving.llmservice.dev/v1alpha1",
        "kind": "LLMService",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {
            "model": {"id": MODEL},
            "engine": {
                "maxModelLen": 4096,
                "maxNumSeqs": MAX_NUM_SEQS,
                "env": [{"name": k, "value": v} for k, v in variables.items()],
            },
            "resources": {"gpu": "L4", "minConcurrency": 1},
            "scaling": {
                "mode": "operator",
                # What is tested here is learned from the queue; the sizing's prior (of an L4
                # at the simulator's clock) would plan before the first saturation.
                "capacityPriorScale": 0,
                "minReplicas": min_replicas,
                "maxReplicas": max_replicas,
                "targetQueueDepth": TARGET_QUEUE,
                "evaluationIntervalSeconds": EVALUATION_S,
                "metricsSource": metrics_source,
                "scaleUp": {"maxReplicasPerPeriod": 2, "periodSeconds": PERIOD_S},
                "scaleDown": {
                    "stabilizationWindowSeconds": WINDOW_S,
                    "maxReplicasPerPeriod": 1,
                    "periodSeconds": PERIOD_S,
                },
                **({"arrivalRateQuery": arrival_rate_query} if arrival_rate_query else {}),
            },
        },
    }


def apply(kubectl: Any, obj: dict[str, Any]) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(obj))


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return dict(cond)
    return None


# ------------------------------------------------------------------------------- watching


@dataclass(frozen=True)
class Sample:
    t: float
    replicas: int
    """The Deployment's spec.replicas: what the autoscaler wrote."""
    ready: int
    desired: int | None
    reason: str
    degraded: dict[str, Any] | None
    """The ScalingDegraded condition."""
    autoscaling: dict[str, Any]
    revisions: tuple[tuple[str, int, int], ...] = ()
    """(revision, spec.replicas, ready replicas) of each Deployment, by revision."""

    def revision(self, name: str) -> tuple[int, int]:
        """(replicas, ready) of the revision's Deployment; (0, 0) without one."""
        return next(((r, ready) for rev, r, ready in self.revisions if rev == name), (0, 0))


@dataclass
class Watcher:
    """Samples the LLMService and its Deployment twice a second, in a thread (through the
    Kubernetes client: a kubectl process per sample would load the machine)."""

    api: Any
    namespace: str
    t0: float = field(default_factory=time.monotonic)
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Watcher:
        self._thread = threading.Thread(target=self._loop, name="watcher", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def _loop(self) -> None:
        custom = client.CustomObjectsApi(self.api)
        apps = client.AppsV1Api(self.api)
        while not self._stop.wait(0.5):
            try:
                obj: dict[str, Any] = custom.get_namespaced_custom_object(  # type: ignore[assignment]
                    "serving.llmservice.dev", "v1alpha1", self.namespace, "llmservices", NAME,
                    _request_timeout=10,
                )  # fmt: skip
                deployments = apps.list_namespaced_deployment(
                    self.namespace,
                    label_selector=f"llmservice.dev/service={NAME}",
                    _request_timeout=10,
                ).items
            except Exception as err:  # noqa: BLE001 - a loaded API server may time out
                print(f"[{self.now():6.1f}s] watcher: {err}")
                continue
            auto = (obj.get("status") or {}).get("autoscaling") or {}
            sample = Sample(
                t=self.now(),
                replicas=sum(d.spec.replicas or 0 for d in deployments),
                ready=sum((d.status and d.status.ready_replicas) or 0 for d in deployments),
                desired=auto.get("desiredReplicas"),
                reason=str(auto.get("reason", "")),
                degraded=condition(obj, "ScalingDegraded"),
                autoscaling=auto,
                revisions=tuple(
                    sorted(
                        (
                            (d.metadata.labels or {}).get(REVISION, ""),
                            d.spec.replicas or 0,
                            (d.status and d.status.ready_replicas) or 0,
                        )
                        for d in deployments
                    )
                ),
            )
            if not self.samples or _key(self.samples[-1]) != _key(sample):
                degraded = sample.degraded["status"] if sample.degraded else "-"
                split = " ".join(f"{rev[:6]}={r}/{ready}" for rev, r, ready in sample.revisions)
                print(
                    f"[{sample.t:6.1f}s] replicas {sample.replicas} ready {sample.ready} "
                    f"({split}) desired {sample.desired} ScalingDegraded {degraded}: "
                    f"{sample.reason[:150]}"
                )
            self.samples.append(sample)

    def last(self) -> Sample:
        assert self.samples, "no sample yet"
        return self.samples[-1]

    def between(self, start: float, end: float = float("inf")) -> list[Sample]:
        return [s for s in self.samples if start <= s.t <= end]

    def wait(self, what: str, check: Callable[[Sample], bool], timeout: float) -> Sample:
        seen = len(self.samples)

        def found() -> Sample | None:
            fresh = self.samples[seen:]  # only samples taken after the call
            return next((s for s in fresh if check(s)), None)

        result: Sample = wait_for(what, found, timeout, interval=0.25)
        return result

    def replicas_seen(self, start: float, end: float = float("inf")) -> list[int]:
        """The distinct replica counts in [start, end], in order."""
        seen: list[int] = []
        for s in self.between(start, end):
            if not seen or seen[-1] != s.replicas:
                seen.append(s.replicas)
        return seen


def _key(s: Sample) -> tuple[Any, ...]:
    return (s.replicas, s.ready, s.desired, s.degraded and s.degraded["status"], s.revisions)


# ------------------------------------------------------------------------------- load


class OpenLoop:
    """The load generator (open loop, Poisson) in a thread: ``rate`` wall requests/s."""

    def __init__(
        self, cluster: ClusterInfo, source: PodTargets, rate: float, seconds: float
    ) -> None:
        scale = cluster.sim_time_scale
        self.config = LoadConfig(
            schedule=RateSchedule.constant(rate / scale, seconds * scale),
            prompt_tokens=LengthDist("fixed", PROMPT_TOKENS),
            output_tokens=LengthDist("fixed", OUTPUT_TOKENS),
            time_scale=scale,
            seed=11,
            request_timeout_s=3000,
        )
        self.source = source
        self.report: LoadReport | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)

    def _run(self) -> None:
        try:
            self.report = asyncio.run(run_load(self.config, self.source))
        except BaseException as err:  # noqa: BLE001 - raised again by join()
            self.error = err

    def start(self) -> OpenLoop:
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float) -> LoadReport:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the load did not finish"
        if self.error is not None:
            raise self.error
        assert self.report is not None
        return self.report


class ClosedLoop:
    """``clients`` clients in a thread, each sending its next request as soon as the last one
    is answered, round-robin over the Ready pods: the same number of requests are always in
    the system, so the load neither grows a backlog nor drains while replicas load."""

    def __init__(self, source: PodTargets, clients: int) -> None:
        self.source = source
        self.clients = clients
        self.completed = 0
        self.errors = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="closed loop", daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as err:  # noqa: BLE001 - raised again by stop()
            self.error = err

    async def _run(self) -> None:
        async with load_session() as session:
            model = await resolve_model(session, self.source()[0], 30)
            counter = iter(range(1 << 30))

            async def client_loop() -> None:
                while not self._stop.is_set():
                    urls = self.source()
                    url = urls[next(counter) % len(urls)]
                    body = {
                        "model": model,
                        "prompt": "lorem " * PROMPT_TOKENS,
                        "prompt_token_count": PROMPT_TOKENS,
                        "max_tokens": OUTPUT_TOKENS,
                        "ignore_eos": True,
                    }
                    try:
                        async with session.post(
                            f"{url}/v1/completions", json=body, timeout=aiohttp.ClientTimeout(60)
                        ) as response:
                            await response.read()
                            ok = response.status == 200
                    except (aiohttp.ClientError, TimeoutError):
                        ok = False
                    if ok:
                        self.completed += 1
                    else:
                        self.errors += 1
                        await asyncio.sleep(0.2)

            await asyncio.gather(*(client_loop() for _ in range(self.clients)))

    def start(self) -> ClosedLoop:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=90)
        if self.error is not None:
            raise self.error


# ------------------------------------------------------------------------------- fixtures


@pytest.fixture
def watcher(kube_api_client: Any, namespace: str) -> Iterator[Watcher]:
    w = Watcher(kube_api_client, namespace)
    yield w
    w.stop()


@pytest.fixture
def own_prometheus(
    cluster: ClusterInfo, namespace: str, tmp_path: Path
) -> Iterator[PrometheusServer]:
    """A Prometheus scraping this test's namespace only, which the test may stop: the
    cluster's own serves every other test running meanwhile."""
    server = PrometheusServer(
        tmp_path / "prometheus", runner_url=cluster.simrunner_url, namespaces=[namespace]
    )
    with server:
        yield server
    print(f"--- {server.log} ---\n{server.log.read_text(errors='replace')[-3000:]}")


class GatewayCounter:
    """Stands in for the gateway's request counter (Envoy's, an ingress controller's): requests
    counted ahead of the replicas, all there is to see while the service has none."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "gateway_requests", "Requests routed to a backend.", ["route"], registry=self.registry
        )
        self.requests.labels(NAME).inc(0)  # the series exists, at 0, before the first request
        self.port = free_port()
        self.server, self.thread = start_http_server(self.port, "127.0.0.1", self.registry)

    def count(self, requests: int) -> None:
        self.requests.labels(NAME).inc(requests)


#: The requests/s the gateway routes to the service (a short window for a fast test).
ARRIVALS = f'sum(rate(gateway_requests_total{{route="{NAME}"}}[5s]))'


@pytest.fixture
def gateway() -> Iterator[GatewayCounter]:
    counter = GatewayCounter()
    yield counter
    counter.server.shutdown()


@pytest.fixture
def gateway_prometheus(
    cluster: ClusterInfo, namespace: str, gateway: GatewayCounter, tmp_path: Path
) -> Iterator[PrometheusServer]:
    """Scrapes this test's pods and the gateway's counter."""
    config = yaml.safe_load(
        prometheus_config(runner_url=cluster.simrunner_url, namespaces=[namespace])
    )
    static = {"targets": [f"127.0.0.1:{gateway.port}"]}
    config["scrape_configs"].append({"job_name": "gateway", "static_configs": [static]})
    server = PrometheusServer(tmp_path / "prometheus", config=yaml.safe_dump(config))
    with server:
        yield server


def waiting(prometheus_url: str, namespace: str) -> float | None:
    selector = f'namespace="{namespace}",llmservice="{NAME}"'
    result = query(prometheus_url, f"sum(vllm:num_requests_waiting{{{selector}}})")
    return float(result[0]["value"][1]) if result else None


def live_pods(cluster: ClusterInfo, prometheus_url: str, kubectl_json: Any, namespace: str) -> int:
    """Ready pods that run a ready simulator on their IP and that Prometheus scrapes."""
    items = kubectl_json("-n", namespace, "pods", "-l", f"llmservice.dev/service={NAME}")["items"]
    ready = {p["metadata"]["name"]: p for p in items if is_ready(p)}
    sims = runner_pods(cluster, namespace)
    scraped = {
        t["labels"]["pod"]
        for t in targets(prometheus_url)
        if t["labels"].get("namespace") == namespace and t["health"] == "up"
    }
    return sum(
        1
        for name, pod in ready.items()
        if name in sims
        and sims[name]["ready"]
        and sims[name]["ip"] == pod["status"]["podIP"]
        and name in scraped
    )


def deployment(kubectl_json: Any, namespace: str) -> dict[str, Any]:
    """The service's one Deployment, as read now (to watch it from its version)."""
    [dep] = kubectl_json("-n", namespace, "deployments", "-l", f"llmservice.dev/service={NAME}")[
        "items"
    ]
    return dict(dep)


def spec_writes(api: Any, dep: dict[str, Any], seconds: int) -> list[str]:
    """Writes to the Deployment's spec (replicas: the autoscaler's) within ``seconds`` of the
    version read, seen by a watch; its status follows the pods and is not counted."""
    return writes_within(api, [dep], seconds, under="spec")


def restart(
    operators: OperatorFactory, old: OperatorRelease, namespace: str, **env: str
) -> OperatorRelease:
    old.stop()
    return operators.start(namespace, **env)


# ------------------------------------------------------------------------------- tests


def rescaled(kubectl_json: Any, namespace: str) -> list[str]:
    """The messages of the operator's Rescaled events in ``namespace``."""
    events = kubectl_json("-n", namespace, "events")["items"]
    return [e["message"] for e in events if e.get("reason") == "Rescaled"]


def test_burst_restart_and_prometheus_outage(
    cluster: ClusterInfo,
    namespace: str,
    kubectl: Any,
    kubectl_json: Any,
    kube_api_client: Any,
    operators: OperatorFactory,
    watcher: Watcher,
    own_prometheus: PrometheusServer,
) -> None:
    """A burst above capacity scales 1 -> 3 within a few evaluations, the new pods serve and the
    queue drains. Replicas are the autoscaler's field, not the rendered Deployment's. After the
    load, an operator restart keeps status.autoscaling and scales nothing down; Prometheus then
    goes away for longer than the stabilization window: replicas hold at 3 and ScalingDegraded
    says why; it comes back: the condition clears and the scale-down resumes a whole window
    later, one replica per period, down to minReplicas and no further."""
    prometheus = own_prometheus.url
    env = {"LLMSERVICE_PROMETHEUS_URL": prometheus}
    operator = operators.start(namespace, **env)
    apply(kubectl, autoscaled(namespace, max_replicas=3))
    watcher.start()
    first = watcher.wait("one Ready replica", lambda s: s.ready == 1 and s.desired == 1, 120)
    assert_replicas_owned_by_the_autoscaler(kubectl_json, namespace, 1)

    with PodTargets.from_kubeconfig(NAME, namespace, str(cluster.kubeconfig)) as source:
        source.wait_ready(30)
        wait_for("the pod scraped", lambda: waiting(prometheus, namespace) == 0, 30)
        # 1.8x what a replica completes: 60% of three replicas.
        t_load = watcher.now()
        burst = OpenLoop(cluster, source, rate=1.8 * REPLICA_CAPACITY, seconds=45).start()
        up = watcher.wait("a scale-up", lambda s: s.replicas > 1, 60)
        print(f"scale-up to {up.replicas} {up.t - t_load:.1f}s after the burst began")
        # The burst scaled it, not its end: the scale-up came while the burst still ran (and
        # the queue drains before it ends, below). Seconds would measure this machine's load.
        assert burst.running, "scaled up only after the burst had ended"
        watcher.wait("3 Ready replicas", lambda s: s.ready == 3, 60)
        wait_for(
            "3 live simulators, each scraped",
            lambda: live_pods(cluster, prometheus, kubectl_json, namespace) == 3,
            30,
        )

        def drained() -> tuple[float] | None:
            queue = waiting(prometheus, namespace)
            return (queue,) if queue is not None and queue <= TARGET_QUEUE else None

        [queue] = wait_for("the queue to drain", drained, 45)
        t_drained = watcher.now()
        print(f"queue down to {queue:g} at {t_drained:.1f}s")
        assert burst.running, "the queue drained only because the load ended"
        report = burst.join(120)
    t_stop = watcher.now()
    print(report.to_text())
    assert report.errors == 0
    assert_replicas_owned_by_the_autoscaler(kubectl_json, namespace, 3)

    # Operator restart: the history lives in the status; nothing scales down on restart.
    before = watcher.last().autoscaling
    operator = restart(operators, operator, namespace, **env)
    restarted = datetime.now(UTC)
    t_restart = watcher.now()
    after = watcher.wait(
        "evaluations by the new operator",
        lambda s: (
            _time(s.autoscaling.get("lastEvaluationTime")) > restarted
            and s.t > t_restart + 3 * EVALUATION_S
        ),
        60,
    ).autoscaling
    print(f"status.autoscaling before the restart: {before}\nafter: {after}")
    assert after["desiredReplicas"] == before["desiredReplicas"] == 3
    for key in ("lastScaleTime", "lastScaleUpTime"):
        assert before.get(key) and after.get(key) == before[key], key
    # The throughput, if the burst queued a replica beyond the target long enough to learn
    # it, is the new operator's too.
    learned = [r for r in before["recommendations"] if "=@" in r]
    assert learned == [r for r in after["recommendations"] if "=@" in r]
    assert watcher.replicas_seen(t_stop) == [3], "scaled down right after the restart"

    # Prometheus away for longer than the window: hold, and say why.
    wait_for(
        "ScalingDegraded False",
        lambda: (c := watcher.last().degraded) is not None and c["status"] == "False",
        30,
    )
    own_prometheus.stop()
    t_down = watcher.now()
    degraded = watcher.wait(
        "ScalingDegraded True",
        lambda s: s.degraded is not None and s.degraded["status"] == "True",
        30,
    ).degraded
    print(f"Prometheus stopped at {t_down:.1f}s: {degraded}")
    assert degraded is not None and degraded["reason"] == "MetricsUnavailable"
    assert "holding 3 replicas" in degraded["message"] and prometheus in degraded["message"]
    # Longer than the stabilization window without metrics: not one write to the replicas.
    held = deployment(kubectl_json, namespace)
    writes = spec_writes(kube_api_client, held, WINDOW_S + 5)
    assert not writes, f"replicas changed without metrics: {writes}"
    assert held["spec"]["replicas"] == 3
    assert watcher.replicas_seen(t_down) == [3], "replicas changed without metrics"
    recent = watcher.between(watcher.now() - WINDOW_S / 2)
    assert all(s.degraded is not None and s.degraded["status"] == "True" for s in recent)

    # Back: the condition clears, and scaling resumes one whole window after the data did.
    own_prometheus.start()
    t_back = watcher.now()
    cleared = watcher.wait(
        "ScalingDegraded False",
        lambda s: s.degraded is not None and s.degraded["status"] == "False",
        30,
    )
    print(f"Prometheus back at {t_back:.1f}s, condition cleared at {cleared.t:.1f}s")
    assert cleared.degraded is not None and cleared.degraded["reason"] == "MetricsAvailable"
    down = watcher.wait("a scale-down", lambda s: s.replicas < 3, WINDOW_S + 60)
    bottom = watcher.wait("minReplicas", lambda s: s.replicas == 1, PERIOD_S + 60)
    print(
        f"scale-down to {down.replicas} at {down.t:.1f}s ({down.t - t_back:.1f}s after the "
        f"data came back, {down.t - t_stop:.1f}s after the load), to 1 at {bottom.t:.1f}s"
    )
    assert down.replicas == 2
    # In the operator's own clock: the first scale-down a whole window after the evaluation
    # that had data again (the condition's transition, whole seconds), the next a period on.
    first_down = scale_down_time(watcher, down.t, 2)
    second_down = scale_down_time(watcher, bottom.t, 1)
    assert cleared.degraded is not None
    data_back = _time(cleared.degraded["lastTransitionTime"])
    print(f"scale-downs {first_down - data_back} and {second_down - data_back} after the data")
    assert first_down - data_back >= timedelta(seconds=WINDOW_S - 1)
    assert second_down - first_down >= timedelta(seconds=PERIOD_S - 0.01)
    # At minReplicas, and no further: the replicas are not written again.
    bottomed = deployment(kubectl_json, namespace)
    writes = spec_writes(kube_api_client, bottomed, 3 * EVALUATION_S)
    assert not writes and bottomed["spec"]["replicas"] == 1, writes
    timeline = watcher.replicas_seen(first.t)
    print(f"replicas over time: {timeline}")
    assert timeline in ([1, 3, 2, 1], [1, 2, 3, 2, 1]), timeline


def test_loading_replicas_count_and_a_steady_load_does_not_flap(
    cluster: ClusterInfo,
    namespace: str,
    kubectl: Any,
    kubectl_json: Any,
    kube_api_client: Any,
    operators: OperatorFactory,
    watcher: Watcher,
) -> None:
    """Replicas that take a while to load (start-up delay fault) count as capacity coming: a
    steady load that needs 3 replicas scales 1 -> 3, and nothing is added while two of them
    load although the queue stays over the target; then, with the load just under the
    threshold of a fourth, the count holds: no flapping. The gauges are scraped from the pods
    directly (metricsSource: pods), and so are the completion counters: once every Ready
    replica has a rate, the arrival rate is measured from them."""
    operators.start(namespace)
    apply(
        kubectl,
        autoscaled(
            namespace,
            max_replicas=4,
            metrics_source="pods",
            env={"LLMSERVICE_SIM_STARTUP_DELAY_S": "150"},  # 15 wall seconds
        ),
    )
    watcher.start()
    first = watcher.wait("one Ready replica", lambda s: s.ready == 1, 120)
    with PodTargets.from_kubeconfig(NAME, namespace, str(cluster.kubeconfig)) as source:
        source.wait_ready(30)
        # 10 requests always in the system: 3 replicas hold them under the 90% ceiling of their
        # 4 slots (10 <= 3 x 3.6 = 10.8); 2 would not.
        load = ClosedLoop(source, clients=10).start()
        t_load = watcher.now()
        try:
            up = watcher.wait("3 replicas", lambda s: s.replicas >= 3, 60)
            print(f"3 replicas {up.t - t_load:.1f}s after the load began")
            ready = watcher.wait("3 Ready replicas", lambda s: s.ready == 3, 90)
            loading = [s for s in watcher.between(up.t, ready.t) if s.ready < 3]
            print(f"{ready.t - up.t:.1f}s loading: {sorted({s.reason for s in loading})}")
            # The start-up delay delayed: before the replicas were Ready, the operator said it
            # counted them as loading (its reason), not a number of seconds on this machine.
            assert loading, "the start-up delay did not delay"
            assert {s.replicas for s in loading} == {3}, [s.replicas for s in loading]
            assert any("loading cover it" in s.reason for s in loading)
            # The count holds under the steady load: no write to the replicas for 40 s.
            steady_dep = deployment(kubectl_json, namespace)
            writes = spec_writes(kube_api_client, steady_dep, 40)
            loaded = watcher.between(ready.t, watcher.now())
        finally:
            load.stop()
    assert not writes and steady_dep["spec"]["replicas"] == 3, writes
    print(f"closed loop: {load.completed} requests completed, {load.errors} errors")
    steady = watcher.between(ready.t)
    lower = sum(1 for s in steady if "would carry it" in s.reason)
    print(f"steady: {lower} of {len(steady)} samples show a lower recommendation held back")
    arriving = [float(m) for s in loaded for m in ARRIVING.findall(s.reason)]
    print(f"arrival rates from the pods' completion counters: {sorted(set(arriving))}")
    assert len(arriving) >= 10 and min(arriving[-10:]) > 0, [s.reason for s in loaded[-3:]]
    timeline = watcher.replicas_seen(first.t)
    print(f"replicas over time: {timeline}")
    assert timeline in ([1, 3], [1, 2, 3]), timeline
    # The operator scales the Deployment, then writes the status in the same pass: the first
    # samples with 3 replicas may still show the decision before (fewer); from then on, only 3.
    after_up = watcher.between(up.t)
    caught_up = next(i for i, s in enumerate(after_up) if s.desired == 3)
    before_status = [s.desired for s in after_up[:caught_up]]
    assert all(d is not None and d < 3 for d in before_status), before_status
    assert {s.desired for s in after_up[caught_up:]} == {3}
    assert load.errors == 0


def test_scale_to_zero_and_wake_on_requests_at_the_gateway(
    cluster: ClusterInfo,
    namespace: str,
    kubectl: Any,
    kubectl_json: Any,
    kube_api_client: Any,
    operators: OperatorFactory,
    watcher: Watcher,
    gateway: GatewayCounter,
    gateway_prometheus: PrometheusServer,
) -> None:
    """minReplicas 0 with an arrivalRateQuery: no request at the gateway, no replica; requests
    counted there wake the service (the replicas' own metrics are gone at zero) and a live
    simulator serves; the gateway idle again for a whole stabilization window, back to zero,
    not before. Then the query loses its series (the gateway's metrics gone): the service
    stays up, ScalingDegraded says why."""
    prometheus = gateway_prometheus.url
    operators.start(namespace, LLMSERVICE_PROMETHEUS_URL=prometheus)
    apply(
        kubectl,
        autoscaled(namespace, max_replicas=2, min_replicas=0, arrival_rate_query=ARRIVALS),
    )
    watcher.start()
    wait_for("the gateway scraped", lambda: query(prometheus, ARRIVALS), 30)
    # Created without replicas, the Deployment defaults to 1; the first evaluation sets 0.
    asleep = watcher.wait("at zero", lambda s: s.desired == 0 and s.replicas == 0, 60)
    zero_dep = deployment(kubectl_json, namespace)
    writes = spec_writes(kube_api_client, zero_dep, 3 * EVALUATION_S)
    assert not writes, f"woke up with no request at the gateway: {writes}"
    assert watcher.replicas_seen(asleep.t) == [0], "woke up with no request at the gateway"

    t_requests = watcher.now()
    stop = threading.Event()

    def arrive() -> None:  # 2 requests/s at the gateway
        while not stop.wait(0.5):
            gateway.count(1)

    feeder = threading.Thread(target=arrive, daemon=True)
    feeder.start()
    try:
        woken = watcher.wait("woken", lambda s: s.replicas >= 1, 30)
        print(f"woken {woken.t - t_requests:.1f}s after requests reached the gateway")
        # The status's reason moves on at the next evaluation; the Rescaled event stays.
        wait_for(
            "a Rescaled event: activating",
            lambda: [m for m in rescaled(kubectl_json, namespace) if "activating 0 -> 1" in m],
            15,
        )
        watcher.wait("a Ready replica", lambda s: s.ready >= 1, 60)
        wait_for(
            "a live simulator, scraped",
            lambda: live_pods(cluster, prometheus, kubectl_json, namespace) >= 1,
            30,
        )
    finally:
        stop.set()
        feeder.join()
    t_idle = watcher.now()
    idle_since = datetime.now(UTC)  # the last request counted at the gateway was before this
    zero = watcher.wait("back to zero", lambda s: s.replicas == 0, WINDOW_S + 60)
    print(f"back to zero {zero.t - t_idle:.1f}s after the last request at the gateway")
    # When the operator scaled to zero, by its own clock (a lower bound: load only delays it).
    slept = scale_down_time(watcher, zero.t, 0)
    assert slept - idle_since >= timedelta(seconds=WINDOW_S), "scaled to zero too early"
    wait_for(
        "a Rescaled event: idle",
        lambda: [m for m in rescaled(kubectl_json, namespace) if "1 -> 0: idle" in m],
        15,
    )

    # The gateway's metrics gone: nothing can say the service is idle, or that requests wait.
    wait_for("the counter at rest", lambda: query(prometheus, ARRIVALS), 10)
    gateway.server.shutdown()
    degraded = watcher.wait(
        "ScalingDegraded True",
        lambda s: s.degraded is not None and s.degraded["status"] == "True",
        60,
    ).degraded
    assert degraded is not None and "arrivalRateQuery" in degraded["message"], degraded
    assert watcher.last().replicas == 0


def test_a_canary_and_its_stable_revision_scale_together(
    cluster: ClusterInfo,
    namespace: str,
    kubectl: Any,
    operators: OperatorFactory,
    watcher: Watcher,
) -> None:
    """A canary paused at 50%: the autoscaler decides one total from both revisions' pods and
    each revision gets its share of it (the candidate ceil(total / 2), the stable at least
    that), up under a burst and back down after it, never one against the other."""
    operators.start(namespace, LLMSERVICE_PROMETHEUS_URL=cluster.prometheus_url)
    service = autoscaled(namespace, max_replicas=4)
    service["spec"]["rollout"] = {
        "strategy": "canary",
        "steps": [{"setWeight": 50}, {"pause": {}}],  # paused until a person resumes it
        "progressDeadlineSeconds": 120,
    }
    apply(kubectl, service)
    watcher.start()
    watcher.wait("one Ready replica", lambda s: s.ready == 1 and s.desired == 1, 120)
    [stable] = [rev for rev, _, _ in watcher.last().revisions]
    env = service["spec"]["engine"]["env"] + [{"name": "LLMSERVICE_ROLLOUT_TEST", "value": "v2"}]
    service["spec"]["engine"]["env"] = env
    apply(kubectl, service)
    split = watcher.wait(
        "the canary at 50%: a Ready replica each",
        lambda s: len(s.revisions) == 2 and all(ready == 1 for _, _, ready in s.revisions),
        120,
    )
    [candidate] = [rev for rev, _, _ in split.revisions if rev != stable]

    with PodTargets.from_kubeconfig(NAME, namespace, str(cluster.kubeconfig)) as source:
        source.wait_ready(30)
        t_load = watcher.now()
        # 2.5x what a replica completes: more than the two Ready replicas carry.
        burst = OpenLoop(cluster, source, rate=2.5 * REPLICA_CAPACITY, seconds=60).start()
        peak = watcher.wait("the total up to 3 or more", lambda s: (s.desired or 0) >= 3, 90)
        print(f"total {peak.desired} {peak.t - t_load:.1f}s after the burst began")

        def shared(s: Sample) -> bool:
            share = math.ceil((s.desired or 0) / 2)
            return share >= 2 and s.revision(candidate)[0] == share <= s.revision(stable)[0]

        both = watcher.wait("each revision its share (2 or more)", shared, 60)
        report = burst.join(180)
    print(report.to_text())
    assert report.errors == 0
    print(f"at {both.t:.1f}s: {both.revisions}")
    # The status (the total) and the Deployments are read one after the other, and the operator
    # scales the Deployments before it writes the status: a sample may pair the Deployments of
    # one total with the status of the one before, and the total of a sample shows in the next.
    samples = watcher.between(t_load)
    for before, sample, after in zip(samples, samples[1:], samples[2:], strict=False):
        shares = {math.ceil((s.desired or 1) / 2) for s in (before, sample, after)}
        assert sample.revision(candidate)[0] in shares, sample
        assert sample.revision(stable)[0] >= min(shares), sample
    down = watcher.wait(
        "both back to one replica",
        lambda s: s.revision(candidate)[0] == 1 and s.revision(stable)[0] == 1,
        # Idle once the one-minute completion rates read 0, then a whole window, then a period
        # per replica (about 100 s here), with room for a loaded machine.
        60 + WINDOW_S + 4 * PERIOD_S + 60,
    )
    print(f"both at one replica {down.t - t_load:.1f}s after the burst began")


def assert_replicas_owned_by_the_autoscaler(
    kubectl_json: Any, namespace: str, replicas: int
) -> None:
    """One writer per field: the rendered Deployment has no replicas, the autoscaler's field
    manager writes them (at the API server's default of 1 on a new Deployment, nobody has:
    a write that changes nothing is not made)."""
    [deployment] = kubectl_json("-n", namespace, "deployments", "--show-managed-fields")["items"]
    assert deployment["spec"]["replicas"] == replicas
    managers = _replicas_managers(deployment)
    if replicas == 1:
        assert managers <= {"llmservice-autoscaler"}, managers
    else:
        assert managers == {"llmservice-autoscaler"}, managers


def scale_down_time(watcher: Watcher, since: float, desired: int) -> datetime:
    """status.autoscaling.lastScaleDownTime of the scale-down to ``desired`` seen from ``since``
    on (the operator scales, then writes the status: it may show a sample or two later)."""

    def written() -> datetime | None:
        for s in watcher.between(since):
            stamp = s.autoscaling.get("lastScaleDownTime")
            if s.desired == desired and stamp:
                return _time(stamp)
        return None

    found: datetime = wait_for(f"the status of the scale-down to {desired}", written, 30)
    return found


def _time(text: str | None) -> datetime:
    if not text:
        return datetime.min.replace(tzinfo=UTC)
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


pytestmark = pytest.mark.cluster
