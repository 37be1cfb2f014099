"""The operator's own Prometheus metrics (prometheus-client)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["OperatorMetrics"]


@dataclass(frozen=True)
class OperatorMetrics:
    registry: CollectorRegistry
    reconciles: Counter
    errors: Counter
    duration: Histogram
    managed_services: Gauge
    leader: Gauge
    evaluations: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry | None = None) -> OperatorMetrics:
        registry = registry or CollectorRegistry()
        return cls(
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
            managed_services=Gauge(
                "llmservice_managed_services", "LLMServices being managed", registry=registry
            ),
            evaluations=Counter(
                "llmservice_autoscaler_evaluations",
                "Operator-mode autoscaling evaluations (each service, each interval)",
                registry=registry,
            ),
            leader=Gauge(
                "llmservice_leader",
                "1 while this replica holds the leader Lease (or runs without election)",
                registry=registry,
            ),
        )
