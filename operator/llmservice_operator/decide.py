"""One reconcile's decision, computed from what exists (pure: body + observed + now -> decision).

Level-based: whatever triggered the reconcile, the same function looks at the whole picture
and says what to apply, what to prune, which replica counts to write, the one status to write,
and which Events a person should see.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .api import LLMService, SpecError, parse_llmservice
from .api.policy import NO_POLICY, AdminPolicy
from .api.policy import check as check_policy
from .api.status import (
    Condition,
    ConditionStatus,
    LLMServiceStatus,
    Phase,
    RevisionsStatus,
    SizingStatus,
)
from .api.text import clip
from .api.tiers import TIER_SLOS_NOT_JUDGED
from .autoscale.schedule import scheduled_bounds
from .conditions import find, set_condition
from .events import Event, EventType
from .model_cache import CacheState, cache_state, job_finished
from .observed import WORKLOAD_KINDS, ObservedState
from .render.cache_layout import PRUNE_LABEL, cached_model_path
from .render.inference_pool import check_inference_pool, inference_pool_objects
from .render.labels import REVISION, SERVICE, selector_labels
from .render.load_test import LoadTestRuntime, load_test_job
from .render.model_cache import cache_job, cache_job_name, cache_prune_job, cache_pvc
from .render.objects import (
    deployment_name,
    http_route,
    network_policy,
    pod_disruption_budget,
    prometheus_rule,
    scaler,
    workload,
    workload_kind,
)
from .render.objects import service as render_service
from .render.tiers import inference_objectives
from .rollout import (
    CONTROL_ANNOTATIONS,
    ConditionChange,
    DeploymentObservation,
    QueryResult,
    ResolvedCheck,
    RolloutDecision,
    RolloutInput,
    ServiceRef,
    SmokeResult,
    SmokeTarget,
    step,
)
from .scaling import ScalingOutcome, pod_is_ready
from .service_plan import ServicePlan, plan_service
from .sizing import GpuCatalog

__all__ = ["Decision", "decide", "referenced_secrets"]


@dataclass
class Decision:
    apply: list[dict[str, Any]] = field(default_factory=list)
    delete: list[tuple[str, str, str]] = field(default_factory=list)  # apiVersion, kind, name
    #: Workload name -> replicas to write as the autoscaler's field manager (groups, for a
    #: LeaderWorkerSet).
    scale: dict[str, int] = field(default_factory=dict)
    #: Workload name -> its kind, where it is not a Deployment (a LeaderWorkerSet).
    scale_kinds: dict[str, str] = field(default_factory=dict)
    #: The full status, None meaning "absent" (the reconcile turns it into a merge patch).
    status: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    #: Run these analysis queries / this smoke test, then decide again with the results.
    measure: tuple[ResolvedCheck, ...] | None = None
    smoke: SmokeTarget | None = None
    requeue_at: datetime | None = None
    #: Control annotations (rollout.CONTROL_ANNOTATIONS) the decision acted on: remove them.
    remove_annotations: tuple[str, ...] = ()


def referenced_secrets(body: dict[str, Any]) -> list[str]:
    """Secret names the spec points at (read before parsing, so they can be observed)."""
    spec = body.get("spec") or {}
    names = [
        ((spec.get("engine") or {}).get("hfTokenSecretRef") or {}).get("name"),
        ((spec.get("serving") or {}).get("apiKeySecretRef") or {}).get("name"),
    ]
    return [n for n in names if isinstance(n, str) and n]


def _check_secrets(service: LLMService, secrets: dict[str, set[str] | None]) -> None:
    refs = [
        ("spec.engine.hfTokenSecretRef", service.spec.engine.hf_token_secret_ref),
        ("spec.serving.apiKeySecretRef", service.spec.serving.api_key_secret_ref),
    ]
    for field_path, ref in refs:
        if ref is None:
            continue
        keys = secrets.get(ref.name)
        namespace = service.metadata.namespace
        if keys is None:
            raise SpecError(
                field_path,
                f"Secret {ref.name!r} does not exist in namespace {namespace!r}; create it "
                f"(kubectl create secret generic {ref.name} --from-literal={ref.key}=...)",
            )
        if ref.key not in keys:
            raise SpecError(
                field_path, f"Secret {ref.name!r} has no key {ref.key!r} (it has: {sorted(keys)})"
            )


def _owner_reference(body: dict[str, Any]) -> dict[str, Any]:
    meta = body["metadata"]
    return {
        "apiVersion": body.get("apiVersion", "serving.llmservice.dev/v1alpha1"),
        "kind": "LLMService",
        "name": meta["name"],
        "uid": meta.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _current_status(body: dict[str, Any]) -> LLMServiceStatus:
    raw = body.get("status") or {}
    known = {k: v for k, v in raw.items() if k in _STATUS_KEYS}
    try:
        return LLMServiceStatus.model_validate(known)
    except ValueError:
        pass
    # The frozen analysis settings are the spec's, and an older operator may have frozen one
    # past a bound added since: the rollout freezes today's again (rollout/machine.py); the
    # revisions, the autoscaler's history and the cost are kept.
    rollout = known.get("rollout")
    if isinstance(rollout, dict) and "frozen" in rollout:
        thawed = {k: v for k, v in rollout.items() if k != "frozen"}
        try:
            return LLMServiceStatus.model_validate({**known, "rollout": thawed})
        except ValueError:
            pass
    return LLMServiceStatus()


_STATUS_KEYS = set(LLMServiceStatus.model_json_schema(by_alias=True)["properties"])


def _sizing_status(plan: ServicePlan) -> SizingStatus:
    r = plan.sizing
    return SizingStatus(
        gpu_type=r.gpu_type,
        gpus_per_replica=r.gpus_per_replica,
        tensor_parallel_size=r.tensor_parallel_size,
        pipeline_parallel_size=r.pipeline_parallel_size,
        parameter_count=r.parameter_count,
        weight_bytes=r.weight_bytes,
        kv_cache_bytes_per_token=r.kv_cache_bytes_per_token,
        max_concurrent_sequences=r.max_concurrent_sequences_at_max_len,
        max_num_seqs=r.max_num_seqs,
        decode_ms_per_token=round(r.decode_ms_per_token_at_batch1, 3),
        prefill_ms_per_1k_tokens=round(r.prefill_ms_per_1k_tokens, 3),
        summary=r.summary(),
        warnings=list(r.warnings),
    )


def _replicas(dep: dict[str, Any] | None, key: str) -> int:
    if dep is None:
        return 0
    return int((dep.get("status") or {}).get(key) or 0)


def _unschedulable_message(pods: list[dict[str, Any]]) -> str | None:
    for pod in pods:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if (
                cond.get("type") == "PodScheduled"
                and cond.get("status") == "False"
                and cond.get("reason") == "Unschedulable"
            ):
                name = pod["metadata"]["name"]
                return f"pod {name} cannot be scheduled: {cond.get('message', '')}".strip()
    return None


def _invalid(
    body: dict[str, Any], err: SpecError, now: datetime, generation: int | None
) -> Decision:
    current = _current_status(body)
    conditions = set_condition(
        current.conditions, "InvalidSpec", "True", "InvalidSpec", str(err), now, generation
    )
    if err.kind == "does_not_fit":
        conditions = set_condition(
            conditions, "Sized", "False", "DoesNotFit", err.message, now, generation
        )
    status = current.model_copy(
        update={"conditions": conditions, "phase": "InvalidSpec", "observed_generation": generation}
    )
    decision = Decision(status=status.model_dump(by_alias=True, mode="json"))
    before = find(current.conditions, "InvalidSpec")
    if before is None or before.status != "True" or before.message != clip(str(err)):
        decision.events.append(Event("Warning", "InvalidSpec", str(err)))
    return decision


def _observations(deployments: dict[str, dict[str, Any]]) -> dict[str, DeploymentObservation]:
    return {
        rev: DeploymentObservation(
            replicas=int((dep.get("spec") or {}).get("replicas") or 0),
            ready=_replicas(dep, "readyReplicas"),
        )
        for rev, dep in deployments.items()
    }


def _total_replicas(
    service: LLMService,
    current: LLMServiceStatus,
    deployments: dict[str, dict[str, Any]],
    now: datetime,
) -> int:
    """Replicas the load needs now: manual count, the autoscaler's last answer, or the HPA's."""
    scaling = service.spec.scaling
    if scaling.mode == "manual":
        return service.spec.replicas if service.spec.replicas is not None else scaling.min_replicas
    if scaling.mode in ("hpa", "keda"):
        stable = (current.revisions or RevisionsStatus()).stable
        dep = deployments.get(stable) if stable else None
        have = (dep or {}).get("spec", {}).get("replicas")
        base = int(have) if have is not None else scaling.min_replicas
    else:
        auto = current.autoscaling
        base = auto.desired_replicas if auto is not None else scaling.min_replicas
    bounds = scheduled_bounds(scaling, now)  # spec.scaling's, or its open schedule window's
    return max(bounds.min_replicas, min(bounds.max_replicas, base))


def decide(
    body: dict[str, Any],
    observed: ObservedState,
    catalog: GpuCatalog,
    now: datetime,
    prometheus_url: str,
    measurement: Mapping[str, QueryResult] | None = None,
    smoke: SmokeResult | None = None,
    scaling: ScalingOutcome | None = None,
    plan: ServicePlan | None = None,
    load_test: LoadTestRuntime | None = None,
    policy: AdminPolicy = NO_POLICY,
) -> Decision:
    """The whole desired state of the LLMService ``body`` (as the watch delivered it), given
    what exists around it. See `rollout.step` for the measurement/smoke protocol:
    when the decision asks to `measure` or `smoke`, the caller runs them and calls again.

    ``plan``: the body's spec sized and rendered, when the caller already has it (sizing and
    rendering are most of a reconcile's CPU); made here otherwise. ``load_test``: the
    operator's image and pod placement for a blue-green load test Job (none without it)."""
    generation = body.get("metadata", {}).get("generation")
    try:
        service = parse_llmservice(body)
        check_policy(service.spec, policy)
        _check_secrets(service, observed.secrets)
        check_inference_pool(service.spec)
        if plan is None:
            plan = plan_service(service, catalog, prometheus_url)
        # What the templates cannot carry is found while rendering the objects (render/
        # template_json.py): InvalidSpec, like any other value the spec cannot have.
        return _decide_valid(
            body, service, plan, observed, now, measurement, smoke, scaling, load_test
        )
    except SpecError as err:
        return _invalid(body, err, now, generation)


def _decide_valid(
    body: dict[str, Any],
    service: LLMService,
    plan: ServicePlan,
    observed: ObservedState,
    now: datetime,
    measurement: Mapping[str, QueryResult] | None,
    smoke: SmokeResult | None,
    scaling: ScalingOutcome | None,
    load_test: LoadTestRuntime | None,
) -> Decision:
    """decide() for a spec that parsed and planned: the rollout step, objects and status."""
    generation = body.get("metadata", {}).get("generation")
    current = _current_status(body)
    cache = _model_cache(plan, observed, load_test)
    if cache is not None and not cache[1].ready:
        return _wait_for_cache(body, service, plan, observed, current, cache, scaling, now)
    template = plan.pod_template
    revision = plan.revision
    deployments = observed.deployments()
    rescaled: Event | None = None
    if scaling is not None:
        total = scaling.total
        rescaled = _rescaled_event(current, scaling)
        current = current.model_copy(update={"autoscaling": scaling.status})
    else:
        total = _total_replicas(service, current, deployments, now)
    annotations = body.get("metadata", {}).get("annotations") or {}
    rollout = step(
        RolloutInput(
            spec=service.spec.rollout,
            slo=service.spec.slo,
            service=ServiceRef(
                service.metadata.namespace, service.metadata.name, service.spec.engine.vllm_version
            ),
            revision=revision,
            total_replicas=total,
            deployments=_observations(deployments),
            status=current.rollout,
            revisions=current.revisions,
            now=now,
            controls={k: str(v) for k, v in annotations.items() if k in CONTROL_ANNOTATIONS},
            revision_spec=_revision_spec(body),
            measurement=measurement,
            smoke=smoke,
            load_tests_ready=observed.load_tests_ready() if load_test is not None else None,
        )
    )
    decision = Decision(
        measure=rollout.measure,
        smoke=rollout.smoke,
        requeue_at=rollout.requeue_at,
        remove_annotations=rollout.consumed,
    )
    if rescaled is not None:
        decision.events.append(rescaled)
    _desired_objects(decision, body, observed, plan, template, revision, rollout, load_test)
    if cache is not None:  # kept while the revision serves: the Job is its verified copy's record
        cache_objects = [*cache[0], *_prune_job(plan, observed, rollout, load_test)]
        kept = {(o["kind"], o["metadata"]["name"]) for o in cache_objects}
        decision.apply.extend(_owned(body, service.metadata.name, cache_objects))
        decision.delete = [d for d in decision.delete if (d[1], d[2]) not in kept]
    decision.events.extend(rollout.events)
    serving = _serving(observed, deployments, rollout, total)
    writer = _ConditionWriter(list(current.conditions), now, generation, decision.events)
    if cache is not None:
        writer.put("ModelCached", cache[1].status, cache[1].reason, cache[1].message)
    status = _status(service, plan, current, rollout, serving, scaling, writer, generation)
    decision.status = status.model_dump(by_alias=True, mode="json")
    return decision


#: The parts of the spec a revision (its pod template) is made of, kept per revision in
#: status.revisions.log so that `kubectl llms undo` can restore them (slo: with gpu auto, the
#: SLOs choose the GPU).
REVISION_SPEC_KEYS = ("model", "engine", "resources", "serving", "slo")


def _revision_spec(body: dict[str, Any]) -> dict[str, Any]:
    spec = body.get("spec") or {}
    return {k: spec[k] for k in REVISION_SPEC_KEYS if k in spec}


def _owned(body: dict[str, Any], name: str, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    owner = _owner_reference(body)
    for obj in objects:
        obj["metadata"].setdefault("labels", {})[SERVICE] = name
        obj["metadata"]["ownerReferences"] = [owner]
    return objects


def _model_cache(
    plan: ServicePlan, observed: ObservedState, runtime: LoadTestRuntime | None
) -> tuple[list[dict[str, Any]], CacheState] | None:
    """The model cache's PVC and download Job, and ModelCached; None without spec.model.cache."""
    render_input = plan.render_input
    model = render_input.spec.model
    if model.cache is None or model.revision is None:
        return None
    objects: list[dict[str, Any]] = []
    pvc = cache_pvc(render_input, plan.sizing.weight_bytes)
    if pvc is not None:
        have = observed.owned.get(("PersistentVolumeClaim", pvc["metadata"]["name"]))
        size = ((have or {}).get("spec") or {}).get("resources", {}).get("requests", {})
        if have is not None and size.get("storage") and model.cache.size is None:
            pvc = cache_pvc(render_input, plan.sizing.weight_bytes, str(size["storage"]))
        assert pvc is not None
        objects.append(pvc)
    if runtime is None:
        return objects, CacheState(
            "False",
            "NoOperatorImage",
            "the download Job runs the operator's own image, which the operator was not told "
            "(LLMSERVICE_OPERATOR_IMAGE; the chart sets it)",
        )
    keep = cache_prune_job(render_input, runtime)["metadata"]["name"]
    for (kind, name), other in sorted(observed.owned.items()):
        labels = other["metadata"].get("labels") or {}
        if kind == "Job" and PRUNE_LABEL in labels and name != keep and not job_finished(other):
            # It could remove this revision's directory as the download writes it: wait.
            return objects, CacheState(
                "False",
                "Downloading",
                f"revision {model.revision}: waiting for the clean-up Job {name} to finish",
            )
    objects.append(cache_job(render_input, runtime))
    job = observed.owned.get(("Job", cache_job_name(render_input)))
    return objects, cache_state(job, observed.cache_pods, model.revision, cached_model_path(model))


def _prune_job(
    plan: ServicePlan,
    observed: ObservedState,
    rollout: RolloutDecision,
    runtime: LoadTestRuntime | None,
) -> list[dict[str, Any]]:
    """The clean-up Job, once the spec's revision alone serves from a PVC the operator made
    (the claim a person names may hold other services' revisions: never cleaned)."""
    model = plan.render_input.spec.model
    revisions = rollout.revisions
    alone = set(observed.deployments()) == {plan.revision}
    if model.cache is None or model.cache.claim_name is not None or runtime is None:
        return []
    if revisions.candidate is not None or revisions.stable != plan.revision or not alone:
        return []
    return [cache_prune_job(plan.render_input, runtime)]


def _wait_for_cache(
    body: dict[str, Any],
    service: LLMService,
    plan: ServicePlan,
    observed: ObservedState,
    current: LLMServiceStatus,
    cache: tuple[list[dict[str, Any]], CacheState],
    scaling: ScalingOutcome | None,
    now: datetime,
) -> Decision:
    """The spec's revision is not in the cache yet (or failed to get there): apply the PVC and
    the download Job only. What serves is left as it is (no rollout step, no prune), but for
    the autoscaler's replicas of the stable revision; the new Deployment waits for the Job."""
    generation = body.get("metadata", {}).get("generation")
    objects, state = cache
    decision = Decision(apply=_owned(body, service.metadata.name, objects))
    deployments = observed.deployments()
    stable = (current.revisions or RevisionsStatus()).stable
    if scaling is not None:
        current = current.model_copy(update={"autoscaling": scaling.status})
        if stable in deployments and current.revisions and current.revisions.candidate is None:
            have = (deployments[stable].get("spec") or {}).get("replicas")
            if have != scaling.total:
                stable_name = deployment_name(service.metadata.name, stable)
                decision.scale[stable_name] = scaling.total
                _note_kind(decision, stable_name, observed.workload_kinds()[stable])
    total = (
        scaling.total
        if scaling is not None
        else _total_replicas(service, current, deployments, now)
    )
    serving = _Serving(
        replicas=sum(_replicas(d, "replicas") for d in deployments.values()),
        ready=sum(_replicas(d, "readyReplicas") for d in deployments.values()),
        target=total,
        unschedulable=_unschedulable_message(
            observed.pods + observed.worker_pods + observed.cache_pods
        ),
        missing_apis=frozenset(observed.missing_apis),
    )
    writer = _ConditionWriter(list(current.conditions), now, generation, decision.events)
    writer.put("InvalidSpec", "False", "Valid", "")
    writer.put("Sized", "True", "Fits", plan.sizing.summary())
    writer.put("ModelCached", state.status, state.reason, state.message)
    _put_available(writer, service, serving)
    failed = state.reason not in ("Downloading",)
    if failed:
        writer.put("Progressing", "False", "ModelCacheFailed", state.message)
        writer.put("Degraded", "True", "ModelCacheFailed", state.message)  # a Warning Event
    else:
        writer.put("Progressing", "True", "WaitingForModelCache", state.message)
        if serving.unschedulable is not None:
            writer.put("Degraded", "True", "Unschedulable", serving.unschedulable)
        else:
            writer.put("Degraded", "False", "AsExpected", "")
    phase: Phase = "Degraded" if writer.is_true("Degraded") else "Progressing"
    status = current.model_copy(
        update={
            "observed_generation": generation,
            "phase": phase,
            "conditions": writer.conditions,
            "sizing": _sizing_status(plan),
            "replicas": serving.replicas,
            "ready_replicas": serving.ready,
            "selector": ",".join(
                f"{k}={v}" for k, v in selector_labels(service.metadata.name).items()
            ),
        }
    )
    decision.status = status.model_dump(by_alias=True, mode="json")
    return decision


def _rescaled_event(current: LLMServiceStatus, scaling: ScalingOutcome) -> Event | None:
    """What the HPA controller reports as SuccessfulRescale: `kubectl describe` and `kubectl
    get events` show when and why, after the status has moved on."""
    before = current.autoscaling
    if before is not None and before.desired_replicas != scaling.total:
        return Event("Normal", "Rescaled", scaling.status.reason)
    return None


def _desired_objects(
    decision: Decision,
    body: dict[str, Any],
    observed: ObservedState,
    plan: ServicePlan,
    template: dict[str, Any],
    revision: str,
    rollout: RolloutDecision,
    load_test: LoadTestRuntime | None = None,
) -> None:
    """What to apply, scale and prune for this reconcile's rollout decision."""
    render_input = plan.render_input
    service = plan.service
    name = service.metadata.name
    mode = service.spec.scaling.mode
    owner = _owner_reference(body)
    traffic = rollout.traffic
    stable = rollout.revisions.stable or revision
    objects: list[dict[str, Any]] = []
    if revision in rollout.replicas:
        count = rollout.replicas[revision]
        objects.append(
            workload(render_input, template, revision, count if mode == "manual" else None)
        )
    objects.append(render_service(render_input, revision=traffic.active_revision))
    if traffic.preview_revision is not None:
        objects.append(
            render_service(render_input, name=f"{name}-preview", revision=traffic.preview_revision)
        )
    objects.append(pod_disruption_budget(render_input))
    policy = network_policy(render_input)
    if policy is not None:
        objects.append(policy)
    deployments = observed.deployments()
    kinds = observed.workload_kinds()
    kinds[revision] = workload_kind(render_input)[1]  # the spec's revision: as rendered now
    stable_kind = kinds.get(stable, kinds[revision])
    target = (WORKLOAD_KINDS[stable_kind], stable_kind)
    scale = scaler(render_input, deployment_name(name, stable), target)
    if scale is not None:
        objects.append(scale)
    if "PrometheusRule" not in observed.missing_apis:  # its alerts are the largest render
        objects.append(prometheus_rule(render_input))
    route = http_route(render_input, traffic.route_weights, traffic.preview_revision is not None)
    if route is not None:
        objects.append(route)
    # spec.serving.inferencePool: the stable's pool (and the candidate's) with their pickers.
    if "InferencePool" not in observed.missing_apis:  # no picker without its pool's CRD
        objects += inference_pool_objects(
            render_input, traffic.active_revision, traffic.preview_revision
        )
    # spec.serving.tiers with the pool: one InferenceObjective per tier, on the stable pool.
    if not {"InferencePool", "InferenceObjective"} & observed.missing_apis:
        objects += inference_objectives(render_input)
    if rollout.load_test is not None and load_test is not None:
        targets = _ready_urls(observed.pods, rollout.load_test, service.spec.serving.port)
        if targets:
            objects.append(load_test_job(render_input, rollout.load_test, targets, load_test))
    for obj in objects:
        obj["metadata"].setdefault("labels", {})[SERVICE] = name
        obj["metadata"]["ownerReferences"] = [owner]
    decision.apply.extend(objects)

    for rev, count in rollout.replicas.items():
        if mode == "manual" and rev == revision:
            continue  # the rendered object carries replicas
        if mode in ("hpa", "keda") and rev == stable:
            continue  # the HPA is the one writer of the stable's replicas
        have = (deployments.get(rev) or {}).get("spec", {}).get("replicas")
        if have != count:
            decision.scale[deployment_name(name, rev)] = count
            _note_kind(decision, deployment_name(name, rev), kinds.get(rev, kinds[revision]))
    desired_names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    desired_names |= {
        (kind, deployment_name(name, r)) for r in rollout.replicas for kind in WORKLOAD_KINDS
    }
    for (kind, obj_name), obj in sorted(observed.owned.items()):
        if (kind, obj_name) not in desired_names:
            decision.delete.append((obj.get("apiVersion", ""), kind, obj_name))


def _note_kind(decision: Decision, name: str, kind: str) -> None:
    if kind != "Deployment":
        decision.scale_kinds[name] = kind


def _ready_urls(pods: list[dict[str, Any]], revision: str, port: int) -> list[str]:
    """``http://podIP:port`` of the revision's Ready pods (the load test's targets)."""
    urls = []
    for pod in pods:
        labels = pod.get("metadata", {}).get("labels") or {}
        ip = (pod.get("status") or {}).get("podIP")
        deleting = pod.get("metadata", {}).get("deletionTimestamp")
        if labels.get(REVISION) == revision and ip and pod_is_ready(pod) and not deleting:
            urls.append(f"http://{ip}:{port}")
    return sorted(urls)


@dataclass(frozen=True)
class _Serving:
    """What the revisions that serve show, against what the load needs."""

    replicas: int
    ready: int
    target: int
    unschedulable: str | None
    missing_apis: frozenset[str]


@dataclass
class _ConditionWriter:
    """Sets conditions one by one, and says (as an Event) each that turns True worth saying."""

    conditions: list[Condition]
    now: datetime
    generation: int | None
    events: list[Event]

    def put(self, type_: str, status: ConditionStatus, reason: str, message: str) -> None:
        before = find(self.conditions, type_)
        self.conditions = set_condition(
            self.conditions, type_, status, reason, message, self.now, self.generation
        )
        changed = before is None or before.status != status or before.reason != reason
        if changed and status == "True" and type_ in _EVENT_ON_TRUE:
            kind: EventType = "Warning" if type_ in ("Degraded", "ScalingDegraded") else "Normal"
            event = Event(kind, reason if kind == "Warning" else type_, message)
            # Not twice: the rollout already said it (e.g. RolledBack) in this decision.
            if not any((e.type, e.reason) == (event.type, event.reason) for e in self.events):
                self.events.append(event)

    def is_true(self, type_: str) -> bool:
        condition = find(self.conditions, type_)
        return condition is not None and condition.status == "True"


def _serving(
    observed: ObservedState,
    deployments: dict[str, dict[str, Any]],
    rollout: RolloutDecision,
    total: int,
) -> _Serving:
    serving = [deployments.get(r) for r in rollout.replicas]
    return _Serving(
        replicas=sum(_replicas(d, "replicas") for d in serving),
        ready=sum(_replicas(d, "readyReplicas") for d in serving),
        target=total,
        unschedulable=_unschedulable_message(observed.pods + observed.worker_pods),
        missing_apis=frozenset(observed.missing_apis),
    )


def _status(
    service: LLMService,
    plan: ServicePlan,
    current: LLMServiceStatus,
    rollout: RolloutDecision,
    serving: _Serving,
    scaling: ScalingOutcome | None,
    writer: _ConditionWriter,
    generation: int | None,
) -> LLMServiceStatus:
    writer.put("InvalidSpec", "False", "Valid", "")
    writer.put("Sized", "True", "Fits", plan.sizing.summary())
    _put_tiers(writer, service)
    _put_available(writer, service, serving)
    machine_degraded: ConditionChange | None = None
    for change in rollout.conditions:
        if change.type == "Degraded":
            machine_degraded = change
        else:
            writer.put(change.type, change.status, change.reason, change.message)
    ready, target = serving.ready, serving.target
    if rollout.revisions.candidate is None and ready < target:
        writer.put("Progressing", "True", "ReplicasStarting", f"{ready}/{target} replicas ready")
    _put_degraded(writer, service, serving, machine_degraded, plan.shape.multi_node)
    if scaling is not None:
        _put_scaling_degraded(writer, scaling)
    selector = ",".join(f"{k}={v}" for k, v in selector_labels(service.metadata.name).items())
    return current.model_copy(
        update={
            "observed_generation": generation,
            "phase": _phase(writer, rollout),
            "conditions": writer.conditions,
            "sizing": _sizing_status(plan),
            "revisions": rollout.revisions,
            "rollout": rollout.rollout,
            "replicas": serving.replicas,
            "ready_replicas": ready,
            "selector": selector,
        }
    )


def _put_tiers(writer: _ConditionWriter, service: LLMService) -> None:
    """TierSLOsJudged False while spec.serving.tiers exist: no per-priority latency metrics."""
    if service.spec.serving.tiers:
        writer.put("TierSLOsJudged", "False", "NoPerPriorityMetrics", TIER_SLOS_NOT_JUDGED)
    else:
        writer.conditions = [c for c in writer.conditions if c.type != "TierSLOsJudged"]


def _put_available(writer: _ConditionWriter, service: LLMService, serving: _Serving) -> None:
    ready, target = serving.ready, serving.target
    needed = max(1, min(target, service.spec.scaling.min_replicas or 1)) if target else 0
    if ready >= needed and (ready > 0 or target == 0):
        writer.put("Available", "True", "MinimumReplicasReady", f"{ready}/{target} replicas ready")
    else:
        writer.put("Available", "False", "ReplicasNotReady", f"{ready}/{target} replicas ready")


def _put_degraded(
    writer: _ConditionWriter,
    service: LLMService,
    serving: _Serving,
    machine_degraded: ConditionChange | None,
    multi_node: bool = False,
) -> None:
    """Degraded: unschedulable pods first, then a missing workload or scaler API, then the
    rollout's."""
    mode = service.spec.scaling.mode
    scaler_kind = {"hpa": "HorizontalPodAutoscaler", "keda": "ScaledObject"}.get(mode)
    if serving.unschedulable is not None:
        writer.put("Degraded", "True", "Unschedulable", serving.unschedulable)
    elif multi_node and "LeaderWorkerSet" in serving.missing_apis:
        writer.put(
            "Degraded",
            "True",
            "LeaderWorkerSetAPIMissing",
            "a replica spans nodes, so it is a LeaderWorkerSet group, and this cluster does "
            "not serve leaderworkerset.x-k8s.io/v1: install the LeaderWorkerSet controller "
            "(sigs.k8s.io/lws; it is noticed within 30 s), or fit a replica on one node "
            "(a larger GPU, fp8/awq quantization, a shorter maxModelLen)",
        )
    elif scaler_kind is not None and scaler_kind in serving.missing_apis:
        writer.put(
            "Degraded",
            "True",
            "ScalerAPIMissing",
            f"scaling.mode {mode} needs the {scaler_kind} API, which this "
            "cluster does not serve; install it (it is noticed within 30 s) or use "
            "scaling.mode operator",
        )
    elif service.spec.rollout.gateway_parent_ref is not None and "HTTPRoute" in (
        serving.missing_apis
    ):
        writer.put(
            "Degraded",
            "True",
            "GatewayAPIMissing",
            "rollout.gatewayParentRef needs the Gateway API's HTTPRoute, which this cluster "
            "does not serve: no route is made; install it (it is noticed within 30 s)",
        )
    elif service.spec.serving.inference_pool is not None and "InferencePool" in (
        serving.missing_apis
    ):
        writer.put(
            "Degraded",
            "True",
            "InferencePoolAPIMissing",
            "serving.inferencePool needs the Gateway API Inference Extension's InferencePool "
            "(inference.networking.k8s.io/v1), which this cluster does not serve: no pool or "
            "endpoint picker is made; install its CRDs (it is noticed within 30 s)",
        )
    elif machine_degraded is not None:
        change = machine_degraded
        writer.put("Degraded", change.status, change.reason, change.message)
    else:
        writer.put("Degraded", "False", "AsExpected", "")


def _put_scaling_degraded(writer: _ConditionWriter, scaling: ScalingOutcome) -> None:
    if scaling.degraded_reason is not None:
        writer.put(
            "ScalingDegraded",
            "True",
            "MetricsUnavailable",
            f"holding {scaling.total} replicas: {scaling.degraded_reason}",
        )
    else:
        writer.put("ScalingDegraded", "False", "MetricsAvailable", scaling.status.reason)


def _phase(writer: _ConditionWriter, rollout: RolloutDecision) -> Phase:
    if writer.is_true("Degraded"):
        return "Degraded"
    if rollout.revisions.candidate is not None:
        return "Progressing"
    if writer.is_true("Available"):
        return "Available"
    return "Progressing"


_EVENT_ON_TRUE = {"Degraded", "Sized", "Available", "ScalingDegraded"}
