"""observe -> decide -> apply -> one status patch. The only sequence with side effects."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .adapters.kube import KubeAdapter
from .adapters.metrics import OperatorMetrics
from .decide import Decision, Event, Snapshot, decide, referenced_secrets
from .sizing import GpuCatalog

__all__ = ["ReconcileResult", "Reconciler"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReconcileResult:
    events: list[Event]
    wrote_status: bool
    applied: int
    deleted: int


class Reconciler:
    def __init__(
        self,
        kube: KubeAdapter,
        catalog: GpuCatalog,
        prometheus_url: str,
        metrics: OperatorMetrics | None = None,
    ) -> None:
        self._kube = kube
        self._catalog = catalog
        self._prometheus_url = prometheus_url
        self._metrics = metrics

    def reconcile(self, body: dict[str, Any], now: datetime | None = None) -> ReconcileResult:
        started = time.monotonic()
        try:
            result = self._reconcile(body, now or datetime.now(UTC))
        except Exception:
            if self._metrics is not None:
                self._metrics.errors.inc()
            raise
        finally:
            if self._metrics is not None:
                self._metrics.reconciles.inc()
                self._metrics.duration.observe(time.monotonic() - started)
        return result

    def _reconcile(self, body: dict[str, Any], now: datetime) -> ReconcileResult:
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        observed = self._kube.observe(namespace, name, referenced_secrets(body))
        snapshot = Snapshot(
            body=body,
            owned=observed.owned,
            pods=observed.pods,
            secrets=observed.secrets,
            missing_apis=frozenset(observed.missing_apis),
        )
        decision = decide(snapshot, self._catalog, now, self._prometheus_url)
        applied = self._apply(decision, namespace, observed.missing_apis)
        for api_version, kind, obj_name in decision.delete:
            log.info("pruning %s %s/%s", kind, namespace, obj_name)
            self._kube.delete(api_version, kind, namespace, obj_name)
        for dep_name, replicas in decision.scale.items():
            log.info("scaling %s/%s to %d", namespace, dep_name, replicas)
            self._kube.scale_deployment(namespace, dep_name, replicas)
        wrote = self._write_status(body, decision, namespace, name)
        return ReconcileResult(decision.events, wrote, applied, len(decision.delete))

    def _apply(self, decision: Decision, namespace: str, missing_apis: set[str]) -> int:
        count = 0
        for obj in decision.apply:
            if obj["kind"] in missing_apis:
                continue  # reported as a Degraded condition by decide()
            self._kube.apply(obj)
            count += 1
        return count

    def _write_status(
        self, body: dict[str, Any], decision: Decision, namespace: str, name: str
    ) -> bool:
        current = body.get("status") or {}
        patch = {k: v for k, v in decision.status.items() if current.get(k) != v}
        patch = {k: v for k, v in patch.items() if not (v is None and k not in current)}
        if not patch:
            return False
        self._kube.patch_status(namespace, name, patch)
        return True
