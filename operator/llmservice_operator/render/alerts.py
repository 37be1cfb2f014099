"""The PrometheusRule of one LLMService: alerts on its engine's and its GPUs' metrics (pure).

Two rule groups (``templates/prometheusrule.yaml.j2`` holds their structure; this module the
PromQL, which needs the spec, the sizing and the pinned vLLM's metric names):

* ``<namespace>.<name>.serving``: the KV cache above 90% for 5 minutes, GPUs holding over 90%
  of their memory while computing under 20% for 30 minutes (DCGM exporter), and the waiting
  queue above the autoscaler's target while maxReplicas replicas serve.
* ``<namespace>.<name>.slo`` (when ``spec.slo`` sets ``maxErrorRate`` or ``ttftP99Ms``): burn
  rates of the error and TTFT objectives, multiwindow and multi-burn-rate as in the Google SRE
  workbook (chapter "Alerting on SLOs"): a page when 1 hour and 5 minutes both burn the budget
  14.4 times too fast, a ticket when 6 hours and 30 minutes both burn it 6 times too fast.

The series and labels are the ones the rollout analysis and the autoscaler query
(``rollout/analysis.py``, ``vllm/metrics.py``, ``docs/prometheus.md``): every vLLM series
carries ``namespace``, ``pod``, ``llmservice`` and ``revision``. The DCGM exporter's series
carry the GPU's ``namespace`` and ``pod`` from its Kubernetes pod mapping
(``DCGM_EXPORTER_KUBERNETES=true``; scraped with ``honorLabels: true``, as its chart does):
they are tied to the service through the pods that report vLLM series.

The operator creates the object only where the cluster serves the PrometheusRule kind (the
Prometheus Operator's CRD), as it does with KEDA's ScaledObject.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..autoscale.policy import resolve_target_queue_depth
from ..rollout.analysis import INFERENCE_HANDLERS
from ..vllm.metrics import TIME_TO_FIRST_TOKEN_BUCKETS, metric_names

if TYPE_CHECKING:
    from .objects import RenderInput

__all__ = [
    "BURN_RATE_WINDOWS",
    "BurnWindow",
    "GPU_MEMORY_LIMIT",
    "GPU_UTILIZATION_FLOOR",
    "KV_CACHE_USAGE_LIMIT",
    "RECORDED_WINDOWS",
    "alert_context",
    "bucket_label",
    "ttft_good_rate",
]

#: vllm:kv_cache_usage_perc (a 0..1 fraction) above this for KV_CACHE_FOR.
KV_CACHE_USAGE_LIMIT = 0.9
KV_CACHE_FOR = "5m"
#: DCGM_FI_DEV_FB_USED / (USED + FREE) above this while DCGM_FI_DEV_GPU_UTIL (percent) is
#: below GPU_UTILIZATION_FLOOR, for GPU_IDLE_FOR.
GPU_MEMORY_LIMIT = 0.9
GPU_UTILIZATION_FLOOR = 20
GPU_IDLE_FOR = "30m"
QUEUE_AT_MAX_FOR = "5m"
#: A p99 objective leaves 1% of the requests to be slower than the threshold.
TTFT_BUDGET = 0.01


@dataclass(frozen=True)
class BurnWindow:
    """One multiwindow burn-rate alert: both windows above ``factor`` x the budget."""

    severity: str
    factor: float
    long: str
    short: str
    for_: str
    #: How long a 30-day error budget lasts at this burn rate, in words.
    exhausts: str


#: The SRE workbook's two alerts for a 30-day objective: 2% of the budget spent in an hour
#: pages, 5% in six hours opens a ticket.
BURN_RATE_WINDOWS: tuple[BurnWindow, ...] = (
    BurnWindow("critical", 14.4, "1h", "5m", "2m", "a 30-day error budget is gone in about 2 days"),
    BurnWindow("warning", 6.0, "6h", "30m", "15m", "a 30-day error budget is gone in 5 days"),
)
#: Every window a burn-rate alert reads: one recording rule each per objective.
RECORDED_WINDOWS: tuple[str, ...] = ("5m", "30m", "1h", "6h")

_BY = "namespace, llmservice"


def bucket_label(bound: float) -> str:
    """A histogram bucket's ``le`` as the series carry it: prometheus_client writes ``1.0`` and
    ``0.75``, and Prometheus 3 normalises every ``le`` to that float form on ingestion."""
    return repr(float(bound))


def _selector(render_input: RenderInput) -> str:
    return f'namespace="{render_input.namespace}",llmservice="{render_input.name}"'


def _handlers() -> str:
    return f'handler=~"{"|".join(INFERENCE_HANDLERS)}"'


def _error_ratio(selector: str, window: str) -> str:
    """The share of inference requests answered 5xx (vLLM's only request-error signal)."""
    total = f"http_requests_total{{{selector},{_handlers()}}}"
    errors = f'http_requests_total{{{selector},{_handlers()},status="5xx"}}'
    return f"sum by ({_BY}) (rate({errors}[{window}]))\n/\nsum by ({_BY}) (rate({total}[{window}]))"


def ttft_good_rate(histogram: str, selector: str, threshold_s: float, window: str) -> str:
    """The rate of requests whose TTFT was at most ``threshold_s``.

    On a bucket boundary that bucket's rate; between two boundaries linearly interpolated
    between them, the assumption ``histogram_quantile`` (and so the rollout analysis) makes.
    """

    def bucket(bound: float) -> str:
        return (
            f'sum by ({_BY}) (rate({histogram}_bucket{{{selector},le="{bucket_label(bound)}"}}'
            f"[{window}]))"
        )

    bounds = TIME_TO_FIRST_TOKEN_BUCKETS
    if threshold_s in bounds:
        return bucket(threshold_s)
    above = [b for b in bounds if b > threshold_s]
    if not above:  # beyond the last finite bucket: every request counted is within it
        return f"sum by ({_BY}) (rate({histogram}_count{{{selector}}}[{window}]))"
    upper = above[0]
    below = [b for b in bounds if b < threshold_s]
    if not below:  # under the first bucket: from zero
        return f"{bucket(upper)} * {threshold_s / upper:.6g}"
    lower = below[-1]
    share = (threshold_s - lower) / (upper - lower)
    return f"({bucket(lower)}\n + ({bucket(upper)} - {bucket(lower)}) * {share:.6g})"


def _ttft_slow_ratio(histogram: str, selector: str, threshold_s: float, window: str) -> str:
    good = ttft_good_rate(histogram, selector, threshold_s, window)
    total = f"sum by ({_BY}) (rate({histogram}_count{{{selector}}}[{window}]))"
    return f"1 - (\n{good}\n)\n/\n{total}"


def _fmt(value: float) -> str:
    return f"{value:g}"


def _record_name(objective: str, window: str) -> str:
    return f"llmservice:{objective}:ratio_rate{window}"


def _burn_rates(render_input: RenderInput) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """The recording rules and the alerts for each objective spec.slo sets."""
    slo = render_input.spec.slo
    selector = _selector(render_input)
    objectives: list[tuple[str, str, str, float, str]] = []  # key, alert, objective, budget, bad
    records: list[dict[str, str]] = []
    if slo.max_error_rate is not None and slo.max_error_rate > 0:
        objectives.append(
            ("vllm_http_errors", "LLMServiceErrorBudgetBurn", "The error rate",
             slo.max_error_rate, "inference requests answered 5xx")
        )  # fmt: skip
        for window in RECORDED_WINDOWS:
            expr = _error_ratio(selector, window)
            records.append({"name": _record_name("vllm_http_errors", window), "expr": expr})
    if slo.ttft_p99_ms is not None:
        histogram = metric_names(render_input.spec.engine.vllm_version).ttft
        threshold_s = slo.ttft_p99_ms / 1000
        objectives.append(
            ("vllm_ttft_over_slo", "LLMServiceTTFTBudgetBurn", "TTFT",
             TTFT_BUDGET, f"requests with a time to first token over {_fmt(slo.ttft_p99_ms)} ms")
        )  # fmt: skip
        for window in RECORDED_WINDOWS:
            expr = _ttft_slow_ratio(histogram, selector, threshold_s, window)
            records.append({"name": _record_name("vllm_ttft_over_slo", window), "expr": expr})
    alerts: list[dict[str, Any]] = []
    for key, alert, objective, budget, bad in objectives:
        for burn in BURN_RATE_WINDOWS:
            limit = f"{_fmt(burn.factor)} * {_fmt(budget)}"
            expr = (
                f"{_record_name(key, burn.long)}{{{selector}}} > {limit}\nand\n"
                f"{_record_name(key, burn.short)}{{{selector}}} > {limit}"
            )
            alerts.append(
                {
                    "alert": alert,
                    "expr": expr,
                    "for_": burn.for_,
                    "severity": burn.severity,
                    "objective": objective,
                    "factor": _fmt(burn.factor),
                    "long": burn.long,
                    "short": burn.short,
                    "budget": _fmt(budget),
                    "bad": bad,
                    "exhausts": burn.exhausts,
                }
            )
    return records, alerts


def _kv_cache_expr(render_input: RenderInput) -> str:
    kv = metric_names(render_input.spec.engine.vllm_version).kv_cache_usage
    return f"max by ({_BY}, pod) ({kv}{{{_selector(render_input)}}}) > {_fmt(KV_CACHE_USAGE_LIMIT)}"


def _gpu_idle_expr(render_input: RenderInput) -> str:
    """Per serving pod: its fullest GPU's memory over the limit and its busiest GPU's
    utilisation under the floor; pods are the service's when they report vLLM series."""
    dcgm = f'namespace="{render_input.namespace}"'
    used = f"DCGM_FI_DEV_FB_USED{{{dcgm}}}"
    free = f"DCGM_FI_DEV_FB_FREE{{{dcgm}}}"
    running = metric_names(render_input.spec.engine.vllm_version).num_requests_running
    return (
        f"max by (namespace, pod) ({used} / ({used} + {free})) > {_fmt(GPU_MEMORY_LIMIT)}\n"
        f"and on (namespace, pod)\n"
        f"max by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{{{dcgm}}}) < {GPU_UTILIZATION_FLOOR}\n"
        f"and on (namespace, pod)\n"
        f"count by (namespace, pod) ({running}{{{_selector(render_input)}}})"
    )


def _queue_expr(render_input: RenderInput, target: float) -> str:
    waiting = (
        f"{metric_names(render_input.spec.engine.vllm_version).num_requests_waiting}"
        f"{{{_selector(render_input)}}}"
    )
    replicas = f"count by ({_BY}) (max by ({_BY}, pod) ({waiting}))"
    return (
        f"sum by ({_BY}) ({waiting}) / {replicas} > {_fmt(target)}\n"
        f"and\n{replicas} >= {render_input.spec.scaling.max_replicas}"
    )


def alert_context(render_input: RenderInput, labels: dict[str, str]) -> dict[str, Any]:
    """The template's variables for ``render_input``'s PrometheusRule."""
    scaling = render_input.spec.scaling
    target = resolve_target_queue_depth(scaling.target_queue_depth, render_input.shape.max_num_seqs)
    records, burn_rates = _burn_rates(render_input)
    return {
        "name": render_input.name,
        "namespace": render_input.namespace,
        "labels": labels,
        "group_prefix": f"llmservice.{render_input.namespace}.{render_input.name}",
        "kv_cache_expr": _kv_cache_expr(render_input),
        "kv_cache_for": KV_CACHE_FOR,
        "kv_cache_percent": _fmt(KV_CACHE_USAGE_LIMIT * 100),
        "gpu_idle_expr": _gpu_idle_expr(render_input),
        "gpu_idle_for": GPU_IDLE_FOR,
        "gpu_memory_percent": _fmt(GPU_MEMORY_LIMIT * 100),
        "gpu_util_percent": GPU_UTILIZATION_FLOOR,
        # Manual mode has no autoscaler and no ceiling to be at.
        "queue_expr": _queue_expr(render_input, target) if scaling.mode != "manual" else "",
        "queue_for": QUEUE_AT_MAX_FOR,
        "target_queue_depth": _fmt(target),
        "max_replicas": scaling.max_replicas,
        "records": records,
        "burn_rates": burn_rates,
    }
