"""Per-service gauges on the operator's /metrics, read from the LLMServices' status at scrape
time: replicas desired and ready, the rollout's step and weight, and why the autoscaler last
decided what it did (the chart's Grafana dashboard shows them next to vLLM's own series).

Only the leader knows the services (a standby watches nothing), so only it exports them. The
labels are ``namespace`` and ``llmservice``, as on the vLLM series: scrape the operator with
``honor_labels: true`` (the chart's PodMonitor does), or Prometheus renames them
``exported_namespace``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["AUTOSCALER_REASONS", "ServiceStatusCollector", "autoscaler_reason"]

#: The values of llmservice_autoscaler_reason's ``reason`` label (a sentence would make a new
#: series per number in it).
AUTOSCALER_REASONS: tuple[str, ...] = (
    "scale_up",
    "scale_down",
    "activate",
    "hold",
    "metrics_unavailable",
)


def autoscaler_reason(status: dict[str, Any]) -> str | None:
    """``status.autoscaling`` as one of AUTOSCALER_REASONS; None without an autoscaler record.

    The policy's sentences start with what it did (autoscale/policy.py, ``_REASONS``): "scale
    up 2 -> 3: ...", "scale down ...", "activating 0 -> 1: ...", "holding 2: ..."; a hold for
    missing metrics sets ``degradedReason``.
    """
    autoscaling = status.get("autoscaling")
    if not isinstance(autoscaling, dict):
        return None
    if autoscaling.get("degradedReason"):
        return "metrics_unavailable"
    reason = str(autoscaling.get("reason") or "")
    for prefix, kind in (("scale up", "scale_up"), ("scale down", "scale_down")):
        if reason.startswith(prefix):
            return kind
    if reason.startswith("activating"):
        return "activate"
    return "hold"


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


class ServiceStatusCollector(Collector):
    """Gauges from ``bodies()``: the LLMService objects as the operator last saw them."""

    def __init__(self, bodies: Callable[[], Iterable[dict[str, Any]]]) -> None:
        self._bodies = bodies

    def _snapshot(self) -> list[dict[str, Any]]:
        # The event loop changes the dict while a scrape reads it: retry a torn read.
        for _ in range(5):
            try:
                return list(self._bodies())
            except RuntimeError:
                continue
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        keys = ["namespace", "llmservice"]
        desired = GaugeMetricFamily(
            "llmservice_desired_replicas",
            "Replicas the service should run (the autoscaler's answer, else the Deployments')",
            labels=keys,
        )
        replicas = GaugeMetricFamily(
            "llmservice_replicas",
            "Replicas of the serving revisions (status.replicas)",
            labels=keys,
        )
        ready = GaugeMetricFamily(
            "llmservice_ready_replicas", "Ready replicas (status.readyReplicas)", labels=keys
        )
        step = GaugeMetricFamily(
            "llmservice_rollout_step",
            "The rollout's current step index (0-based), while a candidate revision rolls out",
            labels=[*keys, "revision"],
        )
        weight = GaugeMetricFamily(
            "llmservice_rollout_weight",
            "The candidate revision's traffic weight in percent, while it rolls out",
            labels=[*keys, "revision"],
        )
        reason = GaugeMetricFamily(
            "llmservice_autoscaler_reason",
            "1 for the kind of the autoscaler's last decision (scale_up, scale_down, activate, "
            "hold, metrics_unavailable), 0 for the others",
            labels=[*keys, "reason"],
        )
        for body in self._snapshot():
            meta = body.get("metadata") or {}
            status = body.get("status") or {}
            if not isinstance(status, dict) or not status or "namespace" not in meta:
                continue  # not reconciled yet: nothing to say
            labels = [str(meta["namespace"]), str(meta.get("name", ""))]
            autoscaling = status.get("autoscaling") or {}
            wanted = autoscaling.get("desiredReplicas", status.get("replicas"))
            desired.add_metric(labels, _int(wanted))
            replicas.add_metric(labels, _int(status.get("replicas")))
            ready.add_metric(labels, _int(status.get("readyReplicas")))
            candidate = (status.get("revisions") or {}).get("candidate")
            rollout = status.get("rollout") or {}
            if candidate:
                step.add_metric([*labels, str(candidate)], _int(rollout.get("step")))
                weight.add_metric([*labels, str(candidate)], _int(rollout.get("weight")))
            kind = autoscaler_reason(status)
            if kind is not None:
                for value in AUTOSCALER_REASONS:
                    reason.add_metric([*labels, value], 1.0 if value == kind else 0.0)
        yield from (desired, replicas, ready, step, weight, reason)
