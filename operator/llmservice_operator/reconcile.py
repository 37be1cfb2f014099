"""observe -> decide (-> measure / smoke-test -> decide) -> apply -> one status patch.

The only sequence with side effects. Order matters for capacity: new and scaled-up replicas
first, then traffic (Services, HTTPRoute), then scale-downs and deletions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .adapters.kube import KubeAdapter
from .adapters.metrics import OperatorMetrics
from .adapters.prometheus_queries import PrometheusAdapter
from .adapters.scaling_metrics import (
    ArrivalResult,
    CompletionCounters,
    arrival_rate_from_prometheus,
    samples_from_pods,
    samples_from_prometheus,
)
from .adapters.smoke import run_smoke
from .api import SpecError, parse_llmservice
from .api.status import AutoscalingStatus
from .autoscale import ReplicaSample
from .decide import Decision, decide, referenced_secrets
from .events import Event
from .observed import ObservedState
from .render.labels import REVISION
from .rollout import RESUME_ANNOTATION, SmokeResult, SmokeTarget, judge_smoke, smoke_requests
from .scaling import ScalingOutcome, evaluate_scaling, evaluation_due, pod_counts, pod_is_ready
from .service_plan import ServicePlan, plan_service
from .sizing import GpuCatalog

__all__ = ["ReconcileResult", "Reconciler", "merge_patch"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReconcileResult:
    events: list[Event]
    wrote_status: bool
    applied: int
    deleted: int
    requeue_at: datetime | None
    #: The object after our status write (fresher than the watch cache), if we wrote.
    updated_body: dict[str, Any] | None = None


def merge_patch(current: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    """The smallest JSON merge patch turning `current` into `desired` (None: absent)."""
    patch: dict[str, Any] = {}
    for key, want in desired.items():
        have = current.get(key)
        if want is None:
            if key in current:
                patch[key] = None
        elif isinstance(want, dict) and isinstance(have, dict):
            sub = merge_patch(have, want)
            if sub:
                patch[key] = sub
        elif have != _without_none(want):
            patch[key] = _without_none(want)
    return patch


def _without_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


class Reconciler:
    def __init__(
        self,
        kube: KubeAdapter,
        catalog: GpuCatalog,
        prometheus_url: str,
        metrics: OperatorMetrics | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._kube = kube
        self._clock = clock
        self._catalog = catalog
        self._prometheus_url = prometheus_url
        self._prometheus = PrometheusAdapter(prometheus_url)
        self._metrics = metrics
        self._completions = CompletionCounters()

    def reconcile(self, body: dict[str, Any], now: datetime | None = None) -> ReconcileResult:
        started = time.monotonic()
        try:
            result = self._reconcile(body, now)
        except Exception:
            if self._metrics is not None:
                self._metrics.errors.inc()
            raise
        finally:
            if self._metrics is not None:
                self._metrics.reconciles.inc()
                self._metrics.duration.observe(time.monotonic() - started)
        return result

    def _reconcile(self, body: dict[str, Any], fixed_now: datetime | None) -> ReconcileResult:
        now = fixed_now or self._clock()
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        observed = self._kube.observe(namespace, name, referenced_secrets(body))
        plan = self._plan(body)
        scaling = self._autoscale(plan, body, observed, now) if plan is not None else None
        decision = decide(
            body, observed, self._catalog, now, self._prometheus_url, scaling=scaling, plan=plan
        )
        if decision.measure is not None:
            log.info(
                "%s/%s: analysis measurement (%d checks)", namespace, name, len(decision.measure)
            )
            results = self._prometheus.measure(decision.measure)
            # Decide as of now: the queries (and the smoke test below) take time, which must
            # not be charged to the next interval, pause or deadline.
            now = fixed_now or self._clock()
            decision = decide(
                body,
                observed,
                self._catalog,
                now,
                self._prometheus_url,
                measurement=results,
                scaling=scaling,
                plan=plan,
            )
        elif decision.smoke is not None:
            result = self._smoke(body, observed, decision.smoke)
            log.info(
                "%s/%s: smoke test of %s: %s",
                namespace,
                name,
                decision.smoke.revision,
                result.message or ("passed" if result.passed else "failed"),
            )
            now = fixed_now or self._clock()
            decision = decide(
                body,
                observed,
                self._catalog,
                now,
                self._prometheus_url,
                smoke=result,
                scaling=scaling,
                plan=plan,
            )
        applied = self._apply(decision, namespace, observed.missing_apis)
        if decision.remove_resume_annotation and RESUME_ANNOTATION in (
            meta.get("annotations") or {}
        ):
            self._kube.remove_annotation(namespace, name, RESUME_ANNOTATION)
        updated = self._write_status(body, decision, namespace, name)
        return ReconcileResult(
            decision.events,
            updated is not None,
            applied,
            len(decision.delete),
            decision.requeue_at,
            updated,
        )

    def _plan(self, body: dict[str, Any]) -> ServicePlan | None:
        """The spec sized and rendered once per reconcile; None when it is invalid (decide()
        reports why)."""
        try:
            return plan_service(parse_llmservice(body), self._catalog, self._prometheus_url)
        except SpecError:
            return None

    def _autoscale(
        self, plan: ServicePlan, body: dict[str, Any], observed: ObservedState, now: datetime
    ) -> ScalingOutcome | None:
        """Operator-mode scaling: every evaluation interval, from the Ready pods' gauges."""
        service = plan.service
        spec = service.spec.scaling
        previous = _current_autoscaling(body)
        if spec.mode != "operator":
            return None
        if not evaluation_due(previous, spec, now) and previous is not None:
            return ScalingOutcome(previous.desired_replicas, previous, previous.degraded_reason)
        ready_names, _loading = pod_counts(observed.pods)
        version = service.spec.engine.vllm_version
        samples: dict[str, ReplicaSample] | None
        if not ready_names:
            samples, error = {}, None
        elif spec.metrics_source == "pods":
            ready = [p for p in observed.pods if p["metadata"]["name"] in ready_names]
            samples, error = samples_from_pods(
                ready, service.spec.serving.port, version, self._completions, now.timestamp()
            )
        else:
            samples, error = samples_from_prometheus(
                self._prometheus, service.metadata.namespace, service.metadata.name, version
            )
        arrivals: ArrivalResult = (None, None)
        if spec.arrival_rate_query is not None:
            arrivals = arrival_rate_from_prometheus(self._prometheus, spec.arrival_rate_query)
        return evaluate_scaling(
            spec, plan.sizing.max_num_seqs, previous, observed.pods, samples, error, now, *arrivals
        )

    def _smoke(
        self, body: dict[str, Any], observed: ObservedState, target: SmokeTarget
    ) -> SmokeResult:
        service = parse_llmservice(body)
        spec = service.spec
        requests_ = smoke_requests(
            service.served_model_name,
            spec.engine.max_model_len,
            spec.slo,
            float(spec.rollout.smoke_test.timeout_seconds),
        )
        ip = _ready_pod_ip(observed.pods, target.revision)
        if ip is None:
            return SmokeResult(False, retryable=True, message="no Ready candidate pod yet")
        api_key = None
        ref = spec.serving.api_key_secret_ref
        if ref is not None:
            api_key = self._kube.read_secret_value(service.metadata.namespace, ref.name, ref.key)
        observations = run_smoke(f"http://{ip}:{spec.serving.port}", requests_, api_key)
        return judge_smoke(requests_, observations)

    def _apply(self, decision: Decision, namespace: str, missing_apis: set[str]) -> int:
        count = 0
        scale_ups = {n: r for n, r in decision.scale.items() if r > 0}
        for obj in decision.apply:
            if obj["kind"] in missing_apis:
                continue  # reported as a Degraded condition by decide()
            self._kube.apply(obj)
            count += 1
            if obj["kind"] == "Deployment" and obj["metadata"]["name"] in scale_ups:
                name = obj["metadata"]["name"]
                self._kube.scale_deployment(namespace, name, scale_ups.pop(name))
        for dep_name, replicas in scale_ups.items():
            log.info("scaling %s/%s to %d", namespace, dep_name, replicas)
            self._kube.scale_deployment(namespace, dep_name, replicas)
        for dep_name, replicas in decision.scale.items():
            if replicas == 0:
                log.info("scaling %s/%s to 0", namespace, dep_name)
                self._kube.scale_deployment(namespace, dep_name, 0)
        for api_version, kind, obj_name in decision.delete:
            log.info("pruning %s %s/%s", kind, namespace, obj_name)
            self._kube.delete(api_version, kind, namespace, obj_name)
        return count

    def _write_status(
        self, body: dict[str, Any], decision: Decision, namespace: str, name: str
    ) -> dict[str, Any] | None:
        patch = merge_patch(body.get("status") or {}, decision.status)
        if not patch:
            return None
        return self._kube.patch_status(namespace, name, patch)


def _current_autoscaling(body: dict[str, Any]) -> AutoscalingStatus | None:
    raw = (body.get("status") or {}).get("autoscaling")
    if not raw:
        return None
    try:
        return AutoscalingStatus.model_validate(raw)
    except ValueError:
        return None


def _ready_pod_ip(pods: list[dict[str, Any]], revision: str) -> str | None:
    for pod in pods:
        labels = pod.get("metadata", {}).get("labels") or {}
        status = pod.get("status") or {}
        if labels.get(REVISION) == revision and pod_is_ready(pod) and status.get("podIP"):
            return str(status["podIP"])
    return None
