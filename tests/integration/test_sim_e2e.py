"""End to end on the local cluster: the real operator renders Deployments, kwok runs their pods,
the simulator runner gives each pod a live ``llmservice sim``, Prometheus scrapes them and the
load generator sends requests to the Ready pods it resolves from the API.

Latencies are simulated seconds: the load generator runs at the cluster's time scale, so its
numbers compare with the simulators' histograms as Prometheus stores them.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
import urllib.request
from typing import Any

import pytest

from llmservice_dev.localcluster import ClusterInfo
from llmservice_dev.localcluster.prometheus import query, targets
from llmservice_operator.loadgen.client import LoadConfig, run_load
from llmservice_operator.loadgen.distributions import LengthDist
from llmservice_operator.loadgen.report import LoadReport
from llmservice_operator.loadgen.schedule import RateSchedule
from llmservice_operator.loadgen.targets import PodTargets
from llmservice_operator.vllm.metrics import (
    LATEST_KNOWN_VLLM_VERSION,
    TIME_TO_FIRST_TOKEN_BUCKETS,
    metric_names,
)

from .operator_fixtures import OperatorFactory, wait_for

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
PROMPT_TOKENS = 512
OUTPUT_TOKENS = 24
#: The vLLM metrics the issue lists: name -> type, as Prometheus's metadata API reports them.
ISSUE_METRICS = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:request_time_per_output_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:prompt_tokens_total": "counter",
    "vllm:generation_tokens_total": "counter",
    "vllm:request_success_total": "counter",
}
TARGET_LABELS = {"namespace", "pod", "llmservice", "revision", "instance", "job"}


# ------------------------------------------------------------------------------- helpers


def llmservice(
    name: str, namespace: str, *, replicas: int, gpu: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "serving.llmservice.dev/v1alpha1",
        "kind": "LLMService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"id": MODEL},
            "engine": {
                "maxModelLen": 4096,
                "maxNumSeqs": 8,
                "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
            },
            "resources": {"gpu": gpu, "minConcurrency": 1},
            "scaling": {"minReplicas": replicas, "maxReplicas": replicas},
        },
    }


def apply(kubectl: Any, obj: dict[str, Any]) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(obj))


def pods(kubectl_json: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kubectl_json(
        "-n", namespace, "pods", "-l", f"llmservice.dev/service={name}"
    )["items"]
    return items


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return dict(cond)
    return None


def available(kubectl_json: Any, namespace: str, name: str) -> bool:
    obj = kubectl_json("-n", namespace, "llmservice", name)
    cond = condition(obj, "Available")
    return bool(cond and cond["status"] == "True")


def runner_pods(cluster: ClusterInfo, namespace: str) -> dict[str, dict[str, Any]]:
    with urllib.request.urlopen(f"{cluster.simrunner_url}/pods", timeout=5) as response:
        return {p["name"]: p for p in json.loads(response.read()) if p["namespace"] == namespace}


def scraped_pods(cluster: ClusterInfo, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    """Prometheus's active targets of one LLMService, by pod label."""
    return {
        t["labels"]["pod"]: t
        for t in targets(cluster.prometheus_url)
        if t["labels"].get("namespace") == namespace and t["labels"].get("llmservice") == name
    }


def value(cluster: ClusterInfo, promql: str, at: float | None = None) -> float | None:
    result = query(cluster.prometheus_url, promql, at=at)
    return float(result[0]["value"][1]) if result else None


def load(cluster: ClusterInfo, source: PodTargets, rate: float, duration: float) -> LoadReport:
    config = LoadConfig(
        schedule=RateSchedule.constant(rate, duration),
        prompt_tokens=LengthDist("fixed", PROMPT_TOKENS),
        output_tokens=LengthDist("fixed", OUTPUT_TOKENS),
        time_scale=cluster.sim_time_scale,
        seed=7,
        request_timeout_s=600,
    )
    return asyncio.run(run_load(config, source))


def bucket(seconds: float) -> int:
    """Index of the TTFT histogram bucket holding ``seconds``."""
    for index, bound in enumerate(TIME_TO_FIRST_TOKEN_BUCKETS):
        if seconds <= bound:
            return index
    return len(TIME_TO_FIRST_TOKEN_BUCKETS)


def p99(histogram: str, selector: str, since: float | None = None, quantile: float = 0.99) -> str:
    """PromQL: p99 (or ``quantile``) of ``histogram`` over every observation (or those after
    ``since``)."""
    buckets = f"sum by (le) ({histogram}_bucket{{{selector}}})"
    if since is not None:
        buckets = f"{buckets} - sum by (le) ({histogram}_bucket{{{selector}}} @ {since:.3f})"
    return f"histogram_quantile({quantile:g}, {buckets})"


class Steps:
    """Prints how long each phase took (pytest shows it when a test fails)."""

    def __init__(self) -> None:
        self.t0 = self.last = time.monotonic()

    def __call__(self, what: str) -> None:
        now = time.monotonic()
        print(f"[{now - self.t0:6.1f}s] +{now - self.last:5.1f}s {what}")
        self.last = now


def wait_scraped(cluster: ClusterInfo, selector: str, count: int) -> float:
    """Wait until Prometheus has scraped ``count`` TTFT observations; the scrape time."""
    promql = f"sum(vllm:time_to_first_token_seconds_count{{{selector}}})"
    wait_for(
        f"Prometheus to scrape {count} requests",
        lambda: value(cluster, promql) == count,
        timeout=30,
    )
    return time.time()


# ------------------------------------------------------------------------------- tests


def test_live_pods_are_scraped_and_loaded(
    cluster: ClusterInfo,
    namespace: str,
    kubectl: Any,
    kubectl_json: Any,
    operators: OperatorFactory,
) -> None:
    """Apply an LLMService: its pods become live simulators, Prometheus scrapes each Ready pod
    with vLLM's metrics, load below and above capacity shows in the queue and TTFT, the
    client's median TTFT matches PromQL's, and scaled-down or deleted pods leave no target."""
    step = Steps()
    operators.start(namespace, LLMSERVICE_PROMETHEUS_URL=cluster.prometheus_url)
    apply(kubectl, llmservice("chat", namespace, replicas=2, gpu="L4"))
    wait_for("chat Available", lambda: available(kubectl_json, namespace, "chat"), 120)
    step("chat Available")

    # Live pods: two Ready pods, each with a ready simulator on its IP, each scraped.
    ready = {p["metadata"]["name"]: p for p in pods(kubectl_json, namespace, "chat") if is_ready(p)}
    assert len(ready) == 2
    sims = runner_pods(cluster, namespace)
    for name, pod in ready.items():
        assert sims[name]["ready"] and sims[name]["ip"] == pod["status"]["podIP"]
        assert sims[name]["gpu"] == "L4"
    scraped = wait_for(
        "a healthy target per Ready pod",
        lambda: (
            (t := scraped_pods(cluster, namespace, "chat")).keys() == ready.keys()
            and all(x["health"] == "up" for x in t.values())
            and t
        ),
        timeout=30,
    )
    for name, target in scraped.items():
        revision = ready[name]["metadata"]["labels"]["llmservice.dev/revision"]
        assert target["labels"]["revision"] == revision
        assert target["scrapeUrl"] == f"http://{ready[name]['status']['podIP']}:8000/metrics"

    step("targets up")

    # vLLM's metric families, types and labels, as Prometheus stored them.
    selector = f'namespace="{namespace}",llmservice="chat"'
    names = metric_names(LATEST_KNOWN_VLLM_VERSION)
    with urllib.request.urlopen(
        f"{cluster.prometheus_url}/api/v1/targets/metadata?match_target="
        + urllib.parse.quote(f'{{namespace="{namespace}"}}'),
        timeout=10,
    ) as response:
        metadata = json.loads(response.read())["data"]
    # Besides vLLM's families: prometheus_client's ``_created`` gauges, the sim-only error
    # counter, and nothing else.
    types = {m["metric"]: m["type"] for m in metadata if not m["metric"].endswith("_created")}
    expected = {s.name: s.kind for s in names.exposed}
    assert types == {**expected, "llmservice_sim_injected_errors_total": "counter"}
    assert ISSUE_METRICS.items() <= types.items()
    for spec in names.exposed:
        series_name = spec.name + ("_bucket" if spec.kind == "histogram" else "")
        # http_requests_total starts at a pod's first probe: a target can be up from a scrape
        # before it, and the series comes with the next scrape.
        found = wait_for(
            f"{spec.name} from both pods",
            lambda q=f"{series_name}{{{selector}}}": (
                (f := query(cluster.prometheus_url, q))
                and len({s["metric"]["pod"] for s in f}) == 2
                and f
            ),
            timeout=15,
        )
        extra = {"__name__", "le"} if spec.kind == "histogram" else {"__name__"}
        for series in found:
            assert set(series["metric"]) == set(spec.labels) | TARGET_LABELS | extra, spec.name
            assert series["metric"].get("model_name", "chat") == "chat"

    with PodTargets.from_kubeconfig("chat", namespace, str(cluster.kubeconfig)) as source:
        assert len(source.wait_ready(30, minimum=2)) == 2

        step("metrics checked")
        # Below capacity (~1/5 of it): nothing queues longer than one engine step.
        started = time.time()
        calm = load(cluster, source, rate=1.2, duration=120)
        assert calm.completed == calm.requests >= 120
        assert all(c.requests > 0.3 * calm.requests for c in calm.per_target.values())
        step("calm load sent")
        t_calm = wait_scraped(cluster, selector, calm.completed)
        step("calm load scraped")
        window = f"{int(t_calm - started) + 2}s"
        calm_waiting = value(
            cluster, f"max(max_over_time(vllm:num_requests_waiting{{{selector}}}[{window}]))"
        )
        # The first traffic: the cumulative histograms hold exactly this phase.
        calm_queue_p99 = value(cluster, p99(names.queue_time, selector))
        calm_p99 = value(cluster, p99(names.ttft, selector))
        calm_p90 = value(cluster, p99(names.ttft, selector, quantile=0.9))
        calm_p50 = value(cluster, p99(names.ttft, selector, quantile=0.5))
        assert calm_p99 is not None and calm.ttft_s.p99 is not None
        assert calm_p90 is not None and calm.ttft_s.p90 is not None
        assert calm_p50 is not None and calm.ttft_s.p50 is not None
        # The gauge is read at scrape time: a request that arrived during the engine step in
        # flight counts as waiting until that step ends. A queue would be more than that.
        assert calm_waiting is not None and calm_waiting <= 1
        assert calm_queue_p99 is not None and calm_queue_p99 < 0.5
        # Client-side and PromQL agree: the median in the same or a neighbouring histogram
        # bucket. The client's tail holds its own process's stalls too (a 50 ms stall on a busy
        # machine is 0.5 s on the simulators' clock; CI saw the client's p90 three buckets
        # above), so there the client sees at least what the server reports, never less.
        assert abs(bucket(calm.ttft_s.p50) - bucket(calm_p50)) <= 1, (calm.ttft_s.p50, calm_p50)
        assert bucket(calm.ttft_s.p90) >= bucket(calm_p90) - 1, (calm.ttft_s.p90, calm_p90)

        # Above capacity (2.5x, open loop): the queue builds and TTFT p99 grows.
        burst = load(cluster, source, rate=15.0, duration=20)
        assert burst.completed == burst.requests
        step("burst load sent")
        t_burst = wait_scraped(cluster, selector, calm.completed + burst.completed)
        step("burst load scraped")
        window = f"{int(t_burst - t_calm) + 1}s"
        burst_waiting = value(
            cluster, f"max(max_over_time(vllm:num_requests_waiting{{{selector}}}[{window}]))"
        )
        burst_p99 = value(cluster, p99(names.ttft, selector, since=t_calm))
        print(
            f"calm: {calm.requests} requests, waiting max {calm_waiting}, queue p99 "
            f"{calm_queue_p99}, TTFT p99 client {calm.ttft_s.p99:.3f} PromQL {calm_p99:.3f}; "
            f"burst: {burst.requests} requests, waiting max {burst_waiting}, TTFT p99 client "
            f"{burst.ttft_s.p99} PromQL {burst_p99}"
        )
        assert burst_waiting is not None and burst_waiting >= 10
        assert burst_p99 is not None and burst.ttft_s.p99 is not None
        assert burst_p99 > 4 * calm_p99 and bucket(burst_p99) >= bucket(calm_p99) + 2
        assert abs(bucket(burst.ttft_s.p99) - bucket(burst_p99)) <= 1, (burst.ttft_s.p99, burst_p99)

        # Scale down: the removed pod loses its simulator and its target; load follows.
        kubectl(
            "-n", namespace, "patch", "llmservice", "chat", "--type=merge",
            "-p", json.dumps({"spec": {"scaling": {"minReplicas": 1, "maxReplicas": 1}}}),
        )  # fmt: skip
        wait_for("one pod left", lambda: len(pods(kubectl_json, namespace, "chat")) == 1, 60)
        step("scaled down")
        [kept] = pods(kubectl_json, namespace, "chat")
        gone = set(ready) - {kept["metadata"]["name"]}
        wait_for(
            "the removed pod's simulator stopped",
            lambda: not gone & runner_pods(cluster, namespace).keys(),
            30,
        )
        wait_for(
            "only the kept pod scraped",
            lambda: scraped_pods(cluster, namespace, "chat").keys() == {kept["metadata"]["name"]},
            timeout=30,
        )
        wait_for("the load targets to follow", lambda: len(source.refresh()) == 1, 30)
        step("scaled-down pod unscraped")

    # Delete the LLMService: no pod, no simulator, no target.
    kubectl("-n", namespace, "delete", "llmservice", "chat", "--wait=false")
    wait_for("pods gone", lambda: not pods(kubectl_json, namespace, "chat"), 60)
    wait_for("simulators gone", lambda: not runner_pods(cluster, namespace), 30)
    wait_for("targets gone", lambda: not scraped_pods(cluster, namespace, "chat"), 30)
    step("deleted: no pods, simulators or targets")


def test_faults_errors_and_never_ready(
    cluster: ClusterInfo,
    namespace: str,
    kubectl: Any,
    kubectl_json: Any,
    operators: OperatorFactory,
) -> None:
    """A pod with the error fault fails the share of requests asked (client and Prometheus
    agree); a pod that never becomes ready stays unready in Kubernetes: Deployment
    readyReplicas 0 and the LLMService not Available; a crashing simulator restarts and the
    pod's restartCount says so."""
    operators.start(namespace)
    error_rate = 0.25
    faults = {
        "crashy": {"LLMSERVICE_SIM_CRASH_AFTER_REQUESTS": "3"},
        "flaky": {"LLMSERVICE_SIM_ERROR_RATE": str(error_rate)},
        "stuck": {"LLMSERVICE_SIM_NEVER_READY": "1"},
    }
    for name, env in faults.items():
        apply(kubectl, llmservice(name, namespace, replicas=1, gpu="H100-80GB", env=env))
    wait_for("flaky Available", lambda: available(kubectl_json, namespace, "flaky"), 120)

    with PodTargets.from_kubeconfig("flaky", namespace, str(cluster.kubeconfig)) as source:
        source.wait_ready(30)
        report = load(cluster, source, rate=4.0, duration=60)
    print(f"error fault: {report.errors}/{report.requests} = {report.error_rate:.3f}")
    assert report.requests >= 200
    assert set(report.errors_by_kind) == {"http_500"}
    # Binomial: 4 standard deviations of the asked rate.
    sd = (error_rate * (1 - error_rate) / report.requests) ** 0.5
    assert abs(report.error_rate - error_rate) < 4 * sd, report.error_rate
    selector = f'namespace="{namespace}",llmservice="flaky"'
    wait_for(
        "Prometheus to count the 5xx answers",
        lambda: (
            value(cluster, f'sum(http_requests_total{{{selector},status="5xx"}})') == report.errors
        ),
        timeout=30,
    )
    assert (
        value(cluster, f"sum(llmservice_sim_injected_errors_total{{{selector}}})") == report.errors
    )

    # The never-ready pod: its simulator runs and fails the probe; Kubernetes agrees.
    [stuck] = wait_for("the stuck pod", lambda: pods(kubectl_json, namespace, "stuck"), 60)
    name = stuck["metadata"]["name"]
    wait_for(
        "the stuck simulator probed",
        lambda: (s := runner_pods(cluster, namespace).get(name)) and s["state"] == "running",
        timeout=30,
    )
    time.sleep(2)  # several probe periods at the cluster's time scale
    [stuck] = pods(kubectl_json, namespace, "stuck")
    assert stuck["status"]["phase"] == "Running" and not is_ready(stuck)
    assert stuck["status"]["containerStatuses"][0]["restartCount"] == 0
    assert not runner_pods(cluster, namespace)[name]["ready"]
    [deployment] = kubectl_json(
        "-n", namespace, "deployments", "-l", "llmservice.dev/service=stuck"
    )["items"]
    assert deployment["status"].get("readyReplicas", 0) == 0
    assert not available(kubectl_json, namespace, "stuck")
    # Still scraped (it runs): analysis can see a broken revision's metrics.
    wait_for("the stuck pod scraped", lambda: name in scraped_pods(cluster, namespace, "stuck"), 15)

    # The crash fault: the simulator exits after 3 requests; the pod turns unready, the
    # runner restarts it (kubelet back-off on the simulated clock) and it is Ready again.
    wait_for("crashy Available", lambda: available(kubectl_json, namespace, "crashy"), 60)
    with PodTargets.from_kubeconfig("crashy", namespace, str(cluster.kubeconfig)) as source:
        source.wait_ready(30)
        crashed = load(cluster, source, rate=2.0, duration=5)
    # Three answers, then the process dies (one in flight may still make it out).
    assert 3 <= crashed.completed <= 4 and crashed.errors == crashed.requests - crashed.completed
    restarted = wait_for(
        "crashy restarted and Ready again",
        lambda: [
            p
            for p in pods(kubectl_json, namespace, "crashy")
            if p["status"]["containerStatuses"][0]["restartCount"] >= 1 and is_ready(p)
        ],
        timeout=30,
    )
    assert runner_pods(cluster, namespace)[restarted[0]["metadata"]["name"]]["restarts"] >= 1


pytestmark = pytest.mark.cluster
