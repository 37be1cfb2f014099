"""The simulator's ``/metrics``: vLLM's families, built from ``vllm/metrics.py``.

Uses its own :class:`prometheus_client.CollectorRegistry` (never the global one), so several
simulators can live in one process (tests) and nothing else leaks into the exposition.
Besides vLLM's families it exposes one sim-only counter, ``llmservice_sim_injected_errors_total``
(the 500s answered because of ``LLMSERVICE_SIM_ERROR_RATE``); vLLM itself reports those only in
``http_requests_total{status="5xx"}``.

prometheus_client also writes a ``<name>_created`` gauge next to each counter and histogram
series, as vLLM's own exposition does.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from llmservice_operator.sim.engine import RequestStats
from llmservice_operator.vllm.metrics import HTTP_EXCLUDED_HANDLERS, MetricNames, MetricSpec

__all__ = ["INJECTED_ERRORS_METRIC", "SimMetrics", "status_group"]

#: Sim-only: requests answered 500 by fault injection (not a vLLM metric).
INJECTED_ERRORS_METRIC = "llmservice_sim_injected_errors_total"


def status_group(status: int) -> str:
    """``200`` -> ``"2xx"``, as prometheus-fastapi-instrumentator groups status codes."""
    return f"{status // 100}xx"


class SimMetrics:
    """Every metric the simulator exposes, with the label values of one served model."""

    def __init__(self, names: MetricNames, model_name: str, engine_index: str = "0") -> None:
        self.names = names
        self.registry = CollectorRegistry(auto_describe=True)
        self._vllm_labels = {"model_name": model_name, "engine": engine_index}
        self._gauges: dict[str, Gauge] = {}
        self._counters: dict[str, Counter] = {}
        self._histograms: dict[str, Histogram] = {}
        for spec in names.exposed:
            self._register(spec)
        self._injected = Counter(
            INJECTED_ERRORS_METRIC.removesuffix("_total"),
            "Sim only: requests answered 500 by LLMSERVICE_SIM_ERROR_RATE fault injection.",
            ["model_name"],
            registry=self.registry,
        )
        self._injected.labels(model_name=model_name)
        # vLLM creates one success series per finish reason up front, so all read 0 at start.
        success = self._counters[names.request_success]
        for reason in names.finished_reasons:
            success.labels(**self._vllm_labels, finished_reason=reason)
        for gauge in self._gauges.values():
            gauge.labels(**self._vllm_labels).set(0)
        for name in (names.prompt_tokens, names.generation_tokens):
            self._counters[name].labels(**self._vllm_labels)
        for histogram in self._histograms.values():
            histogram.labels(**self._vllm_labels)

    def _register(self, spec: MetricSpec) -> None:
        labels = list(spec.labels)
        if spec.kind == "gauge":
            self._gauges[spec.name] = Gauge(
                spec.registered_name, spec.help, labels, registry=self.registry
            )
        elif spec.kind == "counter":
            self._counters[spec.name] = Counter(
                spec.registered_name, spec.help, labels, registry=self.registry
            )
        else:
            self._histograms[spec.name] = Histogram(
                spec.registered_name,
                spec.help,
                labels,
                registry=self.registry,
                buckets=spec.buckets,
            )

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    # -- engine state ------------------------------------------------------------------------

    def set_state(self, running: int, waiting: int, kv_usage: float) -> None:
        self._gauges[self.names.num_requests_running].labels(**self._vllm_labels).set(running)
        self._gauges[self.names.num_requests_waiting].labels(**self._vllm_labels).set(waiting)
        for name in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
            if name in self._gauges:
                self._gauges[name].labels(**self._vllm_labels).set(kv_usage)

    def add_tokens(self, prompt: int, generation: int) -> None:
        if prompt:
            self._counters[self.names.prompt_tokens].labels(**self._vllm_labels).inc(prompt)
        if generation:
            counter = self._counters[self.names.generation_tokens]
            counter.labels(**self._vllm_labels).inc(generation)

    def observe_ttft(self, seconds: float) -> None:
        self._histograms[self.names.ttft].labels(**self._vllm_labels).observe(seconds)

    def observe_itl(self, seconds: float) -> None:
        """One inter-token gap, recorded in the ITL histogram and its deprecated twin."""
        for name in ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"):
            if name in self._histograms:
                self._histograms[name].labels(**self._vllm_labels).observe(seconds)

    def observe_finished(self, stats: RequestStats) -> None:
        labels = self._vllm_labels
        success = self._counters[self.names.request_success]
        success.labels(**labels, finished_reason=stats.finish_reason).inc()
        self._histograms[self.names.e2e_latency].labels(**labels).observe(stats.e2e)
        self._histograms[self.names.queue_time].labels(**labels).observe(stats.queue_time)
        per_request = "vllm:request_time_per_output_token_seconds"
        if per_request in self._histograms:
            self._histograms[per_request].labels(**labels).observe(stats.tpot)

    # -- HTTP --------------------------------------------------------------------------------

    def observe_http(self, handler: str, method: str, status: int) -> None:
        if handler in HTTP_EXCLUDED_HANDLERS:
            return
        self._counters[self.names.http_requests].labels(
            handler=handler, method=method, status=status_group(status)
        ).inc()

    def injected_error(self) -> None:
        self._injected.labels(model_name=self._vllm_labels["model_name"]).inc()
