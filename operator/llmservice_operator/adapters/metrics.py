"""The operator's own Prometheus metrics (prometheus-client)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

__all__ = ["OperatorMetrics", "ServiceUsage"]

Key = tuple[str, str]


class ServiceUsage(Collector):
    """``llmservice_gpu_hours_total`` and ``llmservice_cost_total`` by namespace and service:
    ``status.cost``'s all-time totals (``gpuHoursTotal``, ``costTotal``) as the leader last saw
    them, so that the counters survive a restart or a failover (they grow at each hourly fold;
    ``increase(llmservice_cost_total[30d])`` is the chargeback)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[Key, tuple[float, float]] = {}

    def record(self, key: Key, cost: Mapping[str, Any] | None) -> None:
        """The service's ``status.cost`` now (None: it has none)."""
        with self._lock:
            if not isinstance(cost, Mapping):
                self._totals.pop(key, None)
                return
            gpu_hours, spent = cost.get("gpuHoursTotal"), cost.get("costTotal")
            if isinstance(gpu_hours, int | float) and isinstance(spent, int | float):
                self._totals[key] = (float(gpu_hours), float(spent))

    def forget(self, key: Key) -> None:
        with self._lock:
            self._totals.pop(key, None)

    def collect(self) -> Iterator[CounterMetricFamily]:
        labels = ["namespace", "service"]
        gpu_hours = CounterMetricFamily(
            "llmservice_gpu_hours",
            "GPU-hours the service's replicas held (status.cost.gpuHoursTotal)",
            labels=labels,
        )
        cost = CounterMetricFamily(
            "llmservice_cost",
            "What those GPU-hours cost at the GPU catalog's list prices (status.cost.costTotal)",
            labels=labels,
        )
        with self._lock:
            totals = sorted(self._totals.items())
        for (namespace, service), (hours, spent) in totals:
            gpu_hours.add_metric([namespace, service], hours)
            cost.add_metric([namespace, service], spent)
        yield gpu_hours
        yield cost


@dataclass(frozen=True)
class OperatorMetrics:
    registry: CollectorRegistry
    reconciles: Counter
    errors: Counter
    duration: Histogram
    queue_wait: Histogram
    managed_services: Gauge
    leader: Gauge
    evaluations: Counter
    gc_pause: Histogram
    gc_frozen: Gauge
    usage: ServiceUsage = field(default_factory=ServiceUsage)

    @classmethod
    def create(cls, registry: CollectorRegistry | None = None) -> OperatorMetrics:
        registry = registry or CollectorRegistry()
        usage = ServiceUsage()
        registry.register(usage)
        return cls(
            usage=usage,
            registry=registry,
            reconciles=Counter("llmservice_reconciles", "Reconciles run", registry=registry),
            errors=Counter(
                "llmservice_reconcile_errors", "Reconciles that raised", registry=registry
            ),
            duration=Histogram(
                "llmservice_reconcile_duration_seconds",
                "Reconcile duration",
                buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
                registry=registry,
            ),
            queue_wait=Histogram(
                "llmservice_workqueue_wait_seconds",
                "How long a service waited in the work queue for a worker",
                buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
                registry=registry,
            ),
            managed_services=Gauge(
                "llmservice_managed_services", "LLMServices being managed", registry=registry
            ),
            evaluations=Counter(
                "llmservice_autoscaler_evaluations",
                "Operator-mode autoscaling evaluations (each service, each interval)",
                registry=registry,
            ),
            gc_pause=Histogram(
                "llmservice_gc_pause_seconds",
                "How long each cyclic garbage collection stopped the operator",
                ["generation"],
                buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
                registry=registry,
            ),
            gc_frozen=Gauge(
                "llmservice_gc_frozen_objects",
                "Objects frozen out of the garbage collector's walks (gc.freeze) still alive",
                registry=registry,
            ),
            leader=Gauge(
                "llmservice_leader",
                "1 while this replica holds the leader Lease (or runs without election)",
                registry=registry,
            ),
        )
