"""Per-pod engine gauges for the autoscaler: from Prometheus, or scraped from the pods (each
pod's answer bounded in bytes and time, every pod of a service together in time)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from ..autoscale import RATE_WINDOW_SECONDS, Reading, ReplicaSample, counter_rate
from ..vllm.metrics import metric_names
from .bounded_http import ERRORS, Limits, ReadRefused, open_url
from .prometheus_queries import PrometheusAdapter

__all__ = [
    "SCRAPE_BUDGET_S",
    "SCRAPE_LIMITS",
    "SCRAPE_MAX_SERIES",
    "ArrivalResult",
    "CompletionCounters",
    "SampleBatch",
    "SampleResult",
    "arrival_rate_from_prometheus",
    "sample_batch",
    "samples_from_batch",
    "samples_from_pods",
]

#: (samples by pod name, or None with the reason they are missing)
SampleResult = tuple[dict[str, ReplicaSample] | None, str | None]
#: (requests/s, or None with the reason it is unknown)
ArrivalResult = tuple[float | None, str | None]


def arrival_rate_from_prometheus(prometheus: PrometheusAdapter, query: str) -> ArrivalResult:
    """``spec.scaling.arrivalRateQuery``: the sum of its series. No series is no answer, not 0
    (a mistyped label would otherwise read as idle and scale the service to zero for good)."""
    result = prometheus.query(query)
    if isinstance(result, str):
        return None, f"arrivalRateQuery: {result}"
    values = [s.value for s in result if s.value == s.value]  # NaN (0/0) is no answer either
    if not values:
        return None, f"arrivalRateQuery returned no series: {query}"
    return max(0.0, sum(values)), None


#: Every service's per-pod samples from one batch: (namespace, service) -> pod -> sample.
SampleBatch = dict[tuple[str, str], dict[str, ReplicaSample]]


def sample_batch(prometheus: PrometheusAdapter, vllm_version: str) -> SampleBatch | str:
    """Every service's per-pod engine gauges in four queries, whatever the number of services
    (grouped by namespace, service and pod); or the error that stopped them."""
    names = metric_names(vllm_version)
    selector = '{llmservice!=""}'
    by = "by (namespace, llmservice, pod)"
    queries = {
        "waiting": f"sum {by} ({names.num_requests_waiting}{selector})",
        "running": f"sum {by} ({names.num_requests_running}{selector})",
        "kv": f"max {by} ({names.kv_cache_usage}{selector})",
        "rate": f"sum {by} (rate({names.request_success}{selector}[1m]))",
    }
    values: dict[str, dict[tuple[str, str, str], float]] = {}
    for key, query in queries.items():
        result = prometheus.query(query)
        if isinstance(result, str):
            return result
        values[key] = {
            (
                s.labels.get("namespace", ""),
                s.labels.get("llmservice", ""),
                s.labels.get("pod", ""),
            ): s.value
            for s in result
        }
    batch: SampleBatch = {}
    for (namespace, service, pod), waiting in values["waiting"].items():
        if pod and (namespace, service, pod) in values["running"]:
            kv = values["kv"].get((namespace, service, pod))
            batch.setdefault((namespace, service), {})[pod] = ReplicaSample(
                waiting=max(0.0, waiting),
                running=max(0.0, values["running"][(namespace, service, pod)]),
                kv_cache_usage=None if kv is None else min(1.0, max(0.0, kv)),
                completion_rate=values["rate"].get((namespace, service, pod)),
            )
    return batch


def samples_from_batch(batch: SampleBatch | str, namespace: str, service: str) -> SampleResult:
    """One service's samples from a batch (an error batch is the error of every service)."""
    if isinstance(batch, str):
        return None, batch
    return dict(batch.get((namespace, service), {})), None


class CompletionCounters:
    """Each pod's ``vllm:request_success_total`` readings of the last minute, for its completion
    rate when the operator scrapes the pods itself (Prometheus keeps them otherwise). In memory,
    keyed by pod UID and shared by every service: after a restart a pod has a rate again from
    its second scrape, one evaluation interval later."""

    #: A pod not read for this long is forgotten (it is gone, or its service scales otherwise).
    FORGET_AFTER_SECONDS = 10 * RATE_WINDOW_SECONDS

    def __init__(self) -> None:
        self._readings: dict[str, list[Reading]] = {}
        self._lock = threading.Lock()
        self._swept_at = float("-inf")

    def rate(self, pod_uid: str, now: float, total: float) -> float | None:
        """Record ``total`` completions read at ``now``; requests/s over about the last minute,
        None before the pod's second reading."""
        with self._lock:
            readings = self._readings.get(pod_uid, [])
            if not readings or now > readings[-1][0]:
                readings = [*readings, (now, total)]
            kept, rate = counter_rate(readings, now)
            self._readings[pod_uid] = kept
            if now - self._swept_at >= RATE_WINDOW_SECONDS:  # not a scan of every pod per pod
                self._swept_at = now
                stale = now - self.FORGET_AFTER_SECONDS
                for uid in [u for u, r in self._readings.items() if r[-1][0] < stale]:
                    del self._readings[uid]
            return rate


#: One pod's /metrics. Real vLLM's is about 50 KiB for one engine
#: (tests/fixtures/vllm-0.32.0-metrics.txt); data parallelism repeats most series per engine
#: (eight: about 400 KiB), and LoRA adapters add none (one info series). 2 MiB is five times
#: that; read, decoded and parsed it takes about 3 times its size, on each of the pod lane's 8
#: threads (adapters/background.py). Over it, or slower than 3 s (a Ready pod answers in
#: milliseconds), is that pod's error.
SCRAPE_LIMITS = Limits(max_bytes=2 * 1024 * 1024, total_s=3.0, connect_s=2.0)
#: Of the four metrics read, the series one pod may have: vLLM has one of each per engine
#: (eight with data parallelism); parsing a thousand takes milliseconds.
SCRAPE_MAX_SERIES = 1024
#: One service's pods, scraped one after another: pods left when it is spent are not scraped
#: (errors), so a service of slow pods holds a thread of the pod pool this long, not 3 s a pod.
SCRAPE_BUDGET_S = 10.0


def _scrape(ip: str, port: int, limits: Limits) -> str:
    """One pod's exposition; raises one of ERRORS."""
    with open_url("GET", f"http://{ip}:{port}/metrics", limits) as response:
        if response.status != 200:
            raise ReadRefused(f"HTTP {response.status}")
        return response.read().decode(errors="replace")


def _gauges(text: str, wanted: tuple[str, ...]) -> dict[str, float]:
    """Each sample name's sum over its series, for the samples named ``wanted``. Only their
    lines are parsed: prometheus_client's parser takes about a second of CPU per MiB, most of
    an exposition is histograms nobody here reads, and a tenant's pod writes it."""
    lines = [line for line in text.splitlines() if line.startswith(wanted)]
    if len(lines) > SCRAPE_MAX_SERIES:
        raise ValueError(f"more than {SCRAPE_MAX_SERIES} series of {', '.join(wanted)}")
    gauges: dict[str, float] = {}
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for sample in family.samples:
            gauges[sample.name] = gauges.get(sample.name, 0.0) + float(sample.value)
    return gauges


def samples_from_pods(
    pods: list[dict[str, Any]],
    port: int,
    vllm_version: str,
    counters: CompletionCounters | None = None,
    now: float | None = None,
    *,
    limits: Limits = SCRAPE_LIMITS,
    budget_s: float = SCRAPE_BUDGET_S,
) -> SampleResult:
    """Scrape each Ready pod's /metrics directly (a shorter reaction than Prometheus). With
    ``counters`` (and ``now``, in seconds) the samples carry each pod's completion rate too.
    Each pod within ``limits``, all of them within ``budget_s``."""
    names = metric_names(vllm_version)
    wanted = (
        names.num_requests_waiting,
        names.num_requests_running,
        names.kv_cache_usage,
        names.request_success,
    )
    samples: dict[str, ReplicaSample] = {}
    errors: list[str] = []
    deadline = time.monotonic() + budget_s
    for pod in pods:
        ip = (pod.get("status") or {}).get("podIP")
        name = pod["metadata"]["name"]
        if not ip:
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            errors.append(f"{name}: not scraped (the pods took {budget_s:g} s)")
            continue
        try:
            text = _scrape(ip, port, replace(limits, total_s=min(limits.total_s, left)))
        except ERRORS as err:
            errors.append(f"{name}: {err}")
            continue
        try:
            gauges = _gauges(text, wanted)
        except Exception as err:  # noqa: BLE001 - the pod's text, whatever the parser makes of it
            errors.append(f"{name}: unreadable metrics: {err}")
            continue
        if names.num_requests_waiting not in gauges:
            errors.append(f"{name}: no {names.num_requests_waiting}")
            continue
        kv = gauges.get(names.kv_cache_usage)
        completed = gauges.get(names.request_success)
        rate = None
        if counters is not None and now is not None and completed is not None:
            rate = counters.rate(pod["metadata"].get("uid") or name, now, completed)
        samples[name] = ReplicaSample(
            waiting=gauges[names.num_requests_waiting],
            running=gauges.get(names.num_requests_running, 0.0),
            kv_cache_usage=None if kv is None else min(1.0, max(0.0, kv)),
            completion_rate=rate,
        )
    if not samples and errors:
        return None, "; ".join(errors)[:500]
    return samples, None
