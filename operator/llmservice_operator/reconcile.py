"""observe -> decide (-> measure / smoke-test -> decide) -> apply -> one status patch.

The only sequence with side effects. Order matters for capacity: new and scaled-up replicas
first, then traffic (Services, HTTPRoute), then scale-downs and deletions.

What keeps it cheap at a thousand services:
- **Observed from caches.** `KubeAdapter.observe` reads watch-fed stores; no LIST.
- **Planned once per generation.** Sizing and rendering the spec is most of a reconcile's CPU;
  the plan is kept per (uid, generation).
- **Decided only when something changed.** Nothing new (the same body, owned objects, pods,
  replica total and no timer due): the decision would be the last one, so it is not made again.
- **Written only when it changes.** Objects are applied when what we want differs from what
  we last applied; the status is merge-patched with the difference. The autoscaler's history
  (its samples) is kept in memory and written with its decisions, or once a minute.
- **A wave's first statuses wait.** While many services arrive at once (arrivals.py), a new
  service's first status write and its Events wait for the wave to pass: its objects do not.
- **No network on the workers.** Smoke tests, analysis queries and scrapes are background
  jobs (adapters/background.py) whose results feed the next reconcile.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException

from .adapters.background import BackgroundIO
from .adapters.metrics import OperatorMetrics
from .adapters.prometheus_queries import PrometheusAdapter
from .adapters.scaling_metrics import (
    ArrivalResult,
    CompletionCounters,
    SampleResult,
    arrival_rate_from_prometheus,
    sample_batch,
    samples_from_batch,
    samples_from_pods,
)
from .adapters.smoke import run_smoke
from .adoption import Claimed, check_names
from .api import LLMService, SpecError, parse_llmservice
from .api.policy import NO_POLICY, AdminPolicy
from .api.status import AutoscalingStatus
from .api.timestamps import from_rfc3339
from .arrivals import FIRST_STATUS_HOLD_MAX_S
from .autoscale.history import decided_entries
from .conditions import settle
from .cost import cost_due, service_cost
from .decide import Decision, decide, referenced_secrets
from .events import Event
from .laps import Laps
from .observed import WORKLOAD_KINDS, ObservedState
from .ownership import only_ours
from .render.labels import REVISION
from .render.load_test import LoadTestRuntime
from .rollout import (
    QueryResult,
    ResolvedCheck,
    SmokeObservation,
    SmokeRequest,
    SmokeResult,
    SmokeTarget,
    judge_smoke,
    smoke_requests,
)
from .scaling import ScalingOutcome, evaluate_scaling, evaluation_due, pod_counts, pod_is_ready
from .service_plan import ServicePlan, plan_service
from .sizing import GpuCatalog

__all__ = [
    "KubeApi",
    "MetricsSource",
    "ReconcileResult",
    "Reconciler",
    "merge_patch",
    "namespace_gone",
    "namespace_terminating",
]

log = logging.getLogger(__name__)

Key = tuple[str, str]
#: How long the autoscaler's sample times may live only in memory. What it decided, and the
#: history's values, are written as soon as they change; at a steady state only the time of
#: the newest sample moves, and a restart that loses it loses nothing a window needs.
AUTOSCALING_PERSIST_S = 300.0
#: The batched per-pod gauges are shared by every service while younger than this.
SAMPLES_MAX_AGE_S = 5.0
#: A ReconcileError Event is posted once per message in this long (it repeats with backoff).
ERROR_EVENT_EVERY_S = 300.0
#: Conditions a user waits to see: a first status showing one True is never held back.
_SHOWN_AT_ONCE = frozenset({"InvalidSpec", "ReconcileError", "Degraded"})
SmokeRunner = Callable[[str, Sequence[SmokeRequest], str | None], list[SmokeObservation]]


class KubeApi(Protocol):
    """What the reconcile needs of the Kubernetes adapter (adapters/kube.py)."""

    def observe(self, namespace: str, name: str, secret_names: list[str]) -> ObservedState: ...
    def apply(self, obj: dict[str, Any]) -> dict[str, Any] | None: ...
    def existing(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None: ...
    def delete(
        self, api_version: str, kind: str, namespace: str, name: str, uid: str | None = None
    ) -> None: ...
    def scale_deployment(
        self, namespace: str, name: str, replicas: int, kind: str = "Deployment"
    ) -> None: ...
    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]: ...
    def remove_annotation(self, namespace: str, name: str, key: str) -> None: ...
    def read_secret_value(self, namespace: str, name: str, key: str) -> str | None: ...
    def post_event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None: ...


class MetricsSource(Protocol):
    """What the reconcile needs of Prometheus (adapters/prometheus_queries.py)."""

    def query(self, promql: str) -> QueryResult: ...
    def measure(self, checks: Sequence[ResolvedCheck]) -> dict[str, QueryResult]: ...


@dataclass(frozen=True)
class ReconcileResult:
    events: list[Event]
    wrote_status: bool
    applied: int
    deleted: int
    requeue_at: datetime | None
    #: The object after our status write (fresher than the watch cache), if we wrote.
    updated_body: dict[str, Any] | None = None
    #: Where the reconcile's time went (set by Reconciler.reconcile).
    laps: Laps | None = None
    #: A new service's first status (and its Events) was held back during a wave of new
    #: services (arrivals.py): reconcile it again once the wave has passed.
    status_held: bool = False


@dataclass
class _Memory:
    """What the operator remembers of one service between reconciles (never needed for
    correctness: a restarted operator rebuilds it from the cluster)."""

    plan_key: tuple[str, int] | None = None
    plan: ServicePlan | None = None
    autoscaling: AutoscalingStatus | None = None
    persisted_at: datetime | None = None
    fingerprint: tuple[Any, ...] | None = None
    decided_requeue_at: datetime | None = None
    error_events: dict[str, float] = field(default_factory=dict)
    #: When its first status was held back (once per service: the next reconcile writes it).
    first_status_held_at: datetime | None = None
    #: Names looked up and found free or its own, until the watch cache has them (adoption.py).
    claimed: Claimed = frozenset()


def merge_patch(current: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    """The smallest JSON merge patch turning `current` into `desired` (None: absent)."""
    patch: dict[str, Any] = {}
    for key, want in desired.items():
        have = current.get(key)
        if want is None:
            if key in current:
                patch[key] = None
        elif have == want:  # the common case, compared in C before anything is copied
            continue
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
        kube: KubeApi,
        catalog: GpuCatalog,
        prometheus_url: str,
        metrics: OperatorMetrics | None = None,
        *,
        prometheus: MetricsSource | None = None,
        smoke: SmokeRunner = run_smoke,
        background: BackgroundIO | None = None,
        operator_namespace: str | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        load_test: LoadTestRuntime | None = None,
        in_wave: Callable[[], bool] = lambda: False,
        policy: AdminPolicy = NO_POLICY,
    ) -> None:
        self._kube = kube
        self._in_wave = in_wave
        self._clock = clock
        self._catalog = catalog
        self._prometheus_url = prometheus_url
        self._operator_namespace = operator_namespace
        self._load_test = load_test
        self._policy = policy
        self._prometheus: MetricsSource = prometheus or PrometheusAdapter(prometheus_url)
        self._smoke_runner = smoke
        self._io = background or BackgroundIO(inline=True)
        self._metrics = metrics
        self._completions = CompletionCounters()
        self._memory: dict[Key, _Memory] = {}

    def forget(self, key: Key) -> None:
        """The service is gone."""
        self._memory.pop(key, None)
        if self._metrics is not None:
            self._metrics.usage.forget(key)

    def reconcile(self, body: dict[str, Any], now: datetime | None = None) -> ReconcileResult:
        started = time.monotonic()
        laps = Laps()
        try:
            result = replace(self._reconcile(body, now, laps), laps=laps)
            laps.stop()
        except Exception:
            if self._metrics is not None:
                self._metrics.errors.inc()
            raise
        finally:
            if self._metrics is not None:
                self._metrics.reconciles.inc()
                self._metrics.duration.observe(time.monotonic() - started)
        return result

    # ------------------------------------------------------------------ the sequence
    def _reconcile(
        self, body: dict[str, Any], fixed_now: datetime | None, laps: Laps
    ) -> ReconcileResult:
        now = fixed_now or self._clock()
        meta = body["metadata"]
        key: Key = (meta["namespace"], meta["name"])
        memory = self._memory.setdefault(key, _Memory())
        # Only what holds the service's uid is its own: a label is anyone's to set.
        observed = only_ours(
            self._kube.observe(key[0], key[1], referenced_secrets(body)), str(meta.get("uid") or "")
        )
        laps.lap("observe")
        plan = self._plan(body, memory)
        laps.lap("plan")
        scaling = self._autoscale(key, plan, body, observed, memory, now) if plan else None
        laps.lap("autoscale")
        fingerprint = _fingerprint(body, observed, scaling)
        timer_due = memory.decided_requeue_at is not None and now >= memory.decided_requeue_at
        if fingerprint == memory.fingerprint and not timer_due and not self._io.pending(key):
            # Nothing the decision reads has changed: it would be the last one again.
            result = self._persist_autoscaling_only(key, body, observed, memory, scaling, now)
            laps.lap("status")
            return result
        decision = decide(
            body, observed, self._catalog, now, self._prometheus_url, scaling=scaling, plan=plan,
            load_test=self._load_test, policy=self._policy,
        )  # fmt: skip
        laps.lap("decide")
        if decision.measure is not None or decision.smoke is not None:
            followed = self._follow_up(key, body, observed, decision, scaling, plan, fixed_now)
            if followed is None:  # its job runs in the background; it will notify us
                return ReconcileResult([], False, 0, 0, None)
            decision = followed
        self._account_cost(body, observed, plan, decision, now)
        decision, written = self._act(key, body, decision, observed, memory, now)
        applied = len(written)
        laps.lap("apply")
        if self._holds_first_status(body, decision, memory):
            # No fingerprint is kept: the next reconcile decides in full again, and writes
            # this status and says these Events then.
            memory.first_status_held_at = now
            memory.decided_requeue_at = decision.requeue_at
            latest = now + timedelta(seconds=FIRST_STATUS_HOLD_MAX_S)
            requeue = _earliest(
                decision.requeue_at, latest, self._next_evaluation(plan, memory, now)
            )
            return ReconcileResult([], False, applied, len(decision.delete), requeue,
                                   status_held=True)  # fmt: skip
        status = self._status_to_write(decision.status, body, memory, scaling, now)
        updated = self._write_status(body, settle(status, None, meta.get("generation"), now), key)
        laps.lap("status")
        if updated is not None and scaling is not None and status is decision.status:
            memory.persisted_at = now  # the new autoscaling record went with it
        # As of our own writes: their watch events must not look like news.
        memory.fingerprint = _fingerprint(
            _as_decided(updated, body), _as_applied(observed, written), scaling
        )
        memory.decided_requeue_at = decision.requeue_at
        if self._metrics is not None:
            self._metrics.usage.record(key, ((updated or body).get("status") or {}).get("cost"))
        return ReconcileResult(
            decision.events,
            updated is not None,
            applied,
            len(decision.delete),
            _earliest(decision.requeue_at, self._next_evaluation(plan, memory, now)),
            updated,
        )

    def _follow_up(
        self,
        key: Key,
        body: dict[str, Any],
        observed: ObservedState,
        decision: Decision,
        scaling: ScalingOutcome | None,
        plan: ServicePlan | None,
        fixed_now: datetime | None,
    ) -> Decision | None:
        """Decide again with the measurement or smoke test the decision asked for, once its
        background job is done (None until then)."""
        if decision.measure is not None:
            checks = decision.measure
            job = ("measure", tuple((c.name, c.query) for c in checks))
            done, results = self._io.take(
                key, job, lambda: self._prometheus.measure(checks), "queries"
            )
            if not done:
                return None
            # A job that raised answers every check with its error (an Error measurement).
            measurement = (
                results
                if isinstance(results, dict)
                else {c.name: f"the measurement failed: {results}" for c in checks}
            )
            log.info("%s/%s: analysis measurement (%d checks)", *key, len(checks))
            # Decide as of now: the queries (and the smoke test) took time, which must not be
            # charged to the next interval, pause or deadline.
            now = fixed_now or self._clock()
            return decide(
                body, observed, self._catalog, now, self._prometheus_url, policy=self._policy,
                measurement=measurement, scaling=scaling, plan=plan, load_test=self._load_test,
            )  # fmt: skip
        assert decision.smoke is not None
        target = decision.smoke
        done, smoke = self._io.take(
            key, ("smoke", target.revision), lambda: self._smoke(body, observed, target), "smoke"
        )
        if not done:
            return None
        if not isinstance(smoke, SmokeResult):
            smoke = SmokeResult(False, retryable=True, message=f"smoke test failed to run: {smoke}")
        log.info(
            "%s/%s: smoke test of %s: %s",
            *key,
            target.revision,
            smoke.message or ("passed" if smoke.passed else "failed"),
        )
        now = fixed_now or self._clock()
        return decide(
            body, observed, self._catalog, now, self._prometheus_url, policy=self._policy,
            smoke=smoke, scaling=scaling, plan=plan, load_test=self._load_test,
        )  # fmt: skip

    def _act(
        self,
        key: Key,
        body: dict[str, Any],
        decision: Decision,
        observed: ObservedState,
        memory: _Memory,
        now: datetime,
    ) -> tuple[Decision, list[dict[str, Any]]]:
        """Apply, scale and prune; the decision as acted on (its writes held where a name is
        another's: adoption.py), and the objects applied, as the API server returned them. A
        refusal (a quota, an admission webhook) is shown on the service, as a ReconcileError
        condition and a Warning Event, then raised (backoff)."""
        try:
            decision, memory.claimed = check_names(
                self._kube.existing, body, decision, observed, memory.claimed, now
            )
            applied = self._apply(decision, key[0], observed)
            present = body["metadata"].get("annotations") or {}
            for annotation in decision.remove_annotations:
                if annotation in present:  # a control acted on (rollout.CONTROL_ANNOTATIONS)
                    self._kube.remove_annotation(*key, annotation)
        except ApiException as err:
            if namespace_terminating(err) or namespace_gone(err):
                raise  # the service goes (or went) with its namespace: nothing to show
            message = _api_message(err)
            generation = body["metadata"].get("generation")
            status = self._status_to_write(decision.status, body, memory, None, now)
            try:
                self._write_status(body, settle(status, message, generation, now), key)
            except ApiException as status_err:
                log.warning("%s/%s: status not written: %s", *key, _api_message(status_err))
            self._error_event(body, memory, message)
            raise
        return decision, applied

    def _holds_first_status(
        self, body: dict[str, Any], decision: Decision, memory: _Memory
    ) -> bool:
        """Whether this new service's first status waits for the wave of new services to pass
        (arrivals.py): once per service, never one that shows an error."""
        if body.get("status") or memory.first_status_held_at is not None:
            return False
        conditions = decision.status.get("conditions") or []
        if any(c.get("type") in _SHOWN_AT_ONCE and c.get("status") == "True" for c in conditions):
            return False
        return self._in_wave()

    def _error_event(self, body: dict[str, Any], memory: _Memory, message: str) -> None:
        """Once per message in ERROR_EVENT_EVERY_S: the retries come with backoff anyway."""
        last = memory.error_events.get(message)
        moment = time.monotonic()
        if last is not None and moment - last < ERROR_EVENT_EVERY_S:
            return
        memory.error_events[message] = moment
        try:
            self._kube.post_event(body, "Warning", "ReconcileError", message)
        except ApiException as err:
            log.warning("event not posted: %s", _api_message(err))

    def _account_cost(
        self,
        body: dict[str, Any],
        observed: ObservedState,
        plan: ServicePlan | None,
        decision: Decision,
        now: datetime,
    ) -> None:
        """status.cost after the GPUs the revisions' replicas hold now (cost.py): the same, so
        not written, until that count changes or an hour has passed (the service's requeue)."""
        gpu_type = plan.sizing.gpu_type if plan is not None else None
        deployments = observed.deployments().values()
        cost = service_cost(body, deployments, self._catalog, gpu_type, now)
        decision.status["cost"] = cost.model_dump(by_alias=True, mode="json")
        decision.requeue_at = _earliest(decision.requeue_at, cost_due(cost))

    # ------------------------------------------------------------------ planning
    def _plan(self, body: dict[str, Any], memory: _Memory) -> ServicePlan | None:
        """The spec sized and rendered, once per generation; None when it is invalid
        (decide() reports why)."""
        meta = body["metadata"]
        plan_key = (str(meta.get("uid", "")), int(meta.get("generation") or 0))
        if memory.plan_key != plan_key:
            try:
                memory.plan = plan_service(
                    parse_llmservice(body),
                    self._catalog,
                    self._prometheus_url,
                    self._operator_namespace,
                )
            except SpecError:
                memory.plan = None
            memory.plan_key = plan_key
        return memory.plan

    # ------------------------------------------------------------------ autoscaling
    def _autoscale(
        self,
        key: Key,
        plan: ServicePlan,
        body: dict[str, Any],
        observed: ObservedState,
        memory: _Memory,
        now: datetime,
    ) -> ScalingOutcome | None:
        """Operator-mode scaling: every evaluation interval, from the Ready pods' gauges."""
        service = plan.service
        spec = service.spec.scaling
        if spec.mode != "operator":
            return None
        previous = _fresher(memory.autoscaling, body)
        if previous is not None and not evaluation_due(previous, spec, now):
            return ScalingOutcome(previous.desired_replicas, previous, previous.degraded_reason)
        inputs = self._scaling_inputs(key, service, observed, now)
        if inputs is None:  # a background fetch is on its way; it will notify us
            if previous is None:
                return None
            return ScalingOutcome(previous.desired_replicas, previous, previous.degraded_reason)
        (samples, error), arrivals = inputs
        outcome = evaluate_scaling(
            spec,
            plan.sizing.max_num_seqs,
            previous,
            observed.pods,
            samples,
            error,
            now,
            *arrivals,
            plan=plan,
            catalog=self._catalog,
        )
        memory.autoscaling = outcome.status
        if self._metrics is not None:
            self._metrics.evaluations.inc()
        return outcome

    def _scaling_inputs(
        self, key: Key, service: LLMService, observed: ObservedState, now: datetime
    ) -> tuple[SampleResult, ArrivalResult] | None:
        spec = service.spec.scaling
        version = service.spec.engine.vllm_version
        ready_names, _loading = pod_counts(observed.pods)
        samples: SampleResult | None
        if not ready_names:
            samples = ({}, None)
        elif spec.metrics_source == "pods":
            ready = [p for p in observed.pods if p["metadata"]["name"] in ready_names]
            port = service.spec.serving.port
            done, scraped = self._io.take(
                key,
                "scrape",
                lambda: samples_from_pods(ready, port, version, self._completions, time.time()),
                "pods",
            )
            samples = scraped if done and isinstance(scraped, tuple) else None
            if done and samples is None:
                samples = (None, f"scraping the pods failed: {scraped}")
        else:
            batch = self._io.latest(
                ("samples", version),
                lambda: sample_batch(self._prometheus, version),  # type: ignore[arg-type]
                SAMPLES_MAX_AGE_S,
                key,
                "prometheus",
            )
            if batch is None:
                samples = None
            elif isinstance(batch, Exception):
                samples = (None, f"Prometheus: {batch}")
            else:
                samples = samples_from_batch(batch, *key)
        arrivals: ArrivalResult | None = (None, None)
        if spec.arrival_rate_query is not None:
            query = spec.arrival_rate_query
            found = self._io.latest(
                ("arrivals", query),
                lambda: arrival_rate_from_prometheus(self._prometheus, query),  # type: ignore[arg-type]
                SAMPLES_MAX_AGE_S,
                key,
                "queries",
            )
            arrivals = found if isinstance(found, tuple) else None
            if isinstance(found, Exception):
                arrivals = (None, f"arrivalRateQuery: {found}")
        if samples is None or arrivals is None:
            return None
        return samples, arrivals

    def _next_evaluation(
        self, plan: ServicePlan | None, memory: _Memory, now: datetime
    ) -> datetime | None:
        """When the autoscaler evaluates next (or its history is due to be written)."""
        if plan is None or plan.service.spec.scaling.mode != "operator":
            return None
        status = memory.autoscaling
        if status is None or status.last_evaluation_time is None:
            return now + timedelta(seconds=1)
        interval = timedelta(seconds=plan.service.spec.scaling.evaluation_interval_seconds)
        due = from_rfc3339(status.last_evaluation_time) + interval
        if memory.persisted_at is not None:
            due = min(due, memory.persisted_at + timedelta(seconds=AUTOSCALING_PERSIST_S))
        if status.schedule is not None and status.schedule.next_change_time is not None:
            due = min(due, from_rfc3339(status.schedule.next_change_time))  # a window's edge
        return max(due, now)

    def _status_to_write(
        self,
        desired: dict[str, Any],
        body: dict[str, Any],
        memory: _Memory,
        scaling: ScalingOutcome | None,
        now: datetime,
    ) -> dict[str, Any]:
        """The status to write: the autoscaler's new samples stay in memory unless its
        decision changed or what is written is older than AUTOSCALING_PERSIST_S. An evaluation
        that changed nothing but its own time (a service holding without metrics) is never
        written: the next operator would resume from the same history."""
        current = (body.get("status") or {}).get("autoscaling")
        wanted = desired.get("autoscaling")
        if scaling is None or current is None or wanted is None:
            return desired
        if _autoscaling_decision(current) != _autoscaling_decision(wanted):
            return desired
        stale = memory.persisted_at is None or (now - memory.persisted_at).total_seconds() >= (
            AUTOSCALING_PERSIST_S
        )
        if not stale:
            return {**desired, "autoscaling": current}
        if _but_evaluation_time(current) == _but_evaluation_time(wanted):
            memory.persisted_at = now  # nothing new to persist: as good as written now
            return {**desired, "autoscaling": current}
        return desired

    def _persist_autoscaling_only(
        self,
        key: Key,
        body: dict[str, Any],
        observed: ObservedState,
        memory: _Memory,
        scaling: ScalingOutcome | None,
        now: datetime,
    ) -> ReconcileResult:
        updated = None
        if scaling is not None:
            desired = {**(body.get("status") or {}), "autoscaling": scaling.status.model_dump(
                by_alias=True, mode="json", exclude_none=True)}  # fmt: skip
            status = self._status_to_write(desired, body, memory, scaling, now)
            updated = self._write_status(body, status, key)
            if updated is not None:
                memory.persisted_at = now
                # As of our own write: its watch event must not look like news (else a full
                # decision, render and apply follow every autoscaling write).
                memory.fingerprint = _fingerprint(_as_decided(updated, body), observed, scaling)
        requeue = _earliest(memory.decided_requeue_at, self._next_evaluation(
            memory.plan, memory, now))  # fmt: skip
        return ReconcileResult([], updated is not None, 0, 0, requeue, updated)

    # ------------------------------------------------------------------ I/O
    def _smoke(self, body: dict[str, Any], observed: ObservedState, target: SmokeTarget) -> Any:
        """The smoke test, on a background thread (bounded by its own timeout)."""
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
        observations = self._smoke_runner(f"http://{ip}:{spec.serving.port}", requests_, api_key)
        return judge_smoke(requests_, observations)

    def _apply(
        self, decision: Decision, namespace: str, observed: ObservedState
    ) -> list[dict[str, Any]]:
        written: list[dict[str, Any]] = []
        scale_ups = {n: r for n, r in decision.scale.items() if r > 0}
        for obj in decision.apply:
            if obj["kind"] in observed.missing_apis:
                continue  # reported as a Degraded condition by decide()
            applied = self._kube.apply(obj)
            if applied is not None:
                written.append(applied)
            if obj["kind"] in WORKLOAD_KINDS and obj["metadata"]["name"] in scale_ups:
                name = obj["metadata"]["name"]
                replicas = scale_ups.pop(name)
                # A new workload the API server gave the wanted replicas (its default of 1) is
                # not scaled: that write, the controller's sync it wakes and the watch events
                # of both would change nothing (the autoscaler's field manager takes replicas
                # with its first real change; the applied object never carries them).
                if (applied or {}).get("spec", {}).get("replicas") != replicas:
                    self._kube.scale_deployment(namespace, name, replicas, obj["kind"])
        kinds = decision.scale_kinds
        for dep_name, replicas in scale_ups.items():
            log.info("scaling %s/%s to %d", namespace, dep_name, replicas)
            self._kube.scale_deployment(
                namespace, dep_name, replicas, kinds.get(dep_name, "Deployment")
            )
        for dep_name, replicas in decision.scale.items():
            if replicas == 0:
                log.info("scaling %s/%s to 0", namespace, dep_name)
                self._kube.scale_deployment(
                    namespace, dep_name, 0, kinds.get(dep_name, "Deployment")
                )
        for api_version, kind, obj_name in decision.delete:
            # Observed as its own (only_ours): deleted only if the name still holds that object.
            uid = (observed.owned.get((kind, obj_name)) or {}).get("metadata", {}).get("uid")
            log.info("pruning %s %s/%s", kind, namespace, obj_name)
            self._kube.delete(api_version, kind, namespace, obj_name, uid)
        return written

    def _write_status(
        self, body: dict[str, Any], status: dict[str, Any], key: Key
    ) -> dict[str, Any] | None:
        patch = merge_patch(body.get("status") or {}, status)
        if not patch:
            return None
        return self._kube.patch_status(*key, patch)


def _as_decided(updated: dict[str, Any] | None, body: dict[str, Any]) -> dict[str, Any]:
    """The version a decision stands for: our status write's answer, unless a spec change
    landed while we decided (the answer carries a new generation that was not decided on)."""
    if updated is None:
        return body
    generation = (updated.get("metadata") or {}).get("generation")
    return updated if generation == (body.get("metadata") or {}).get("generation") else body


def _fingerprint(
    body: dict[str, Any], observed: ObservedState, scaling: ScalingOutcome | None
) -> tuple[Any, ...]:
    """Everything a decision reads, by version: equal fingerprints, equal decisions."""
    meta = body["metadata"]
    owned = tuple(sorted((k, n, _version(k, o)) for (k, n), o in observed.owned.items()))
    pods = tuple(
        sorted(
            (p["metadata"]["name"], p["metadata"].get("resourceVersion"))
            for p in (*observed.pods, *observed.worker_pods, *observed.cache_pods)
        )
    )
    secrets = tuple(sorted((n, tuple(sorted(k or ()))) for n, k in observed.secrets.items()))
    decided = None if scaling is None else (scaling.total, scaling.degraded_reason)
    return (
        meta.get("resourceVersion"),
        owned,
        pods,
        secrets,
        tuple(sorted(observed.missing_apis)),
        decided,
    )


#: Owned kinds whose status no decision reads: their generation (a change to their spec, which
#: the apply ledger restores) is what the decision depends on, not the status their controller
#: writes (a PodDisruptionBudget's moves with every pod that turns Ready or goes). A Service has
#: no generation (its resourceVersion stands in) and no status a decision reads.
STATUS_UNREAD_KINDS = frozenset({"PodDisruptionBudget", "NetworkPolicy", "Service"})


def _as_applied(observed: ObservedState, written: list[dict[str, Any]]) -> ObservedState:
    """``observed`` with the objects of STATUS_UNREAD_KINDS just applied as the API server
    returned them: the watch events of their creation are our own writes, and a decision
    made when they arrive would be this one again. (A workload's, whose status is read, is
    news: the decision then sees it exist.)"""
    echoed = [o for o in written if o.get("kind") in STATUS_UNREAD_KINDS]
    if not echoed:
        return observed
    owned = dict(observed.owned)
    for obj in echoed:
        owned[(obj["kind"], obj["metadata"]["name"])] = obj
    return replace(observed, owned=owned)


def _version(kind: str, obj: dict[str, Any]) -> Any:
    meta = obj["metadata"]
    if kind in STATUS_UNREAD_KINDS:
        return meta.get("generation") or meta.get("resourceVersion")
    return meta.get("resourceVersion")


def _autoscaling_decision(raw: dict[str, Any]) -> tuple[Any, ...]:
    """status.autoscaling without the times of its samples: what was decided."""
    decided = tuple(
        raw.get(k)
        for k in (
            "desiredReplicas",
            "degradedReason",
            "lastScaleTime",
            "lastScaleUpTime",
            "lastScaleDownTime",
            "reason",
            "schedule",
        )
    )
    return (*decided, decided_entries(raw.get("recommendations") or []))


def _but_evaluation_time(raw: dict[str, Any]) -> dict[str, Any]:
    """status.autoscaling without the time of its last evaluation."""
    return {k: v for k, v in raw.items() if k != "lastEvaluationTime"}


def _fresher(memory: AutoscalingStatus | None, body: dict[str, Any]) -> AutoscalingStatus | None:
    """The newer of the autoscaling record in memory and the one written in ``body`` (the one
    in memory on a tie). The written one is parsed only when it may be the newer: at rest the
    one in memory is, and a thousand services evaluate every 15 s."""
    if memory is None:
        return _current_autoscaling(body)
    if memory.last_evaluation_time is None:
        return memory
    written_time = ((body.get("status") or {}).get("autoscaling") or {}).get("lastEvaluationTime")
    if not isinstance(written_time, str):
        return memory
    try:
        if from_rfc3339(written_time) <= from_rfc3339(memory.last_evaluation_time):
            return memory
    except ValueError:
        return memory
    written = _current_autoscaling(body)
    return written if written is not None and written.last_evaluation_time is not None else memory


def _earliest(*times: datetime | None) -> datetime | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


def namespace_terminating(err: Exception) -> bool:
    """A create refused because the namespace is being deleted (the NamespaceTerminating cause,
    which Kubernetes' own controllers ignore): every object in it, the LLMService too, is on
    its way out."""
    details = _status_details(err, 403)
    causes = details.get("causes") or []
    return any(c.get("reason") == "NamespaceTerminating" for c in causes if isinstance(c, dict))


def namespace_gone(err: Exception) -> bool:
    """A create refused because the namespace is not there (nor, then, the LLMService)."""
    return _status_details(err, 404).get("kind") == "namespaces"


def _status_details(err: Exception, status: int) -> dict[str, Any]:
    """The details of an API error's Status body, if it has that HTTP status."""
    if not isinstance(err, ApiException) or err.status != status:
        return {}
    try:
        body = json.loads(err.body or "{}")
    except (TypeError, ValueError):
        return {}
    details = body.get("details") if isinstance(body, dict) else None
    return details if isinstance(details, dict) else {}


def _api_message(err: ApiException) -> str:
    """The API server's own message (its Status body), else the HTTP reason."""
    try:
        body = json.loads(err.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or f"{err.status} {err.reason}")[:1000]


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
