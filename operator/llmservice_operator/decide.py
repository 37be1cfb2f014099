"""One reconcile's decision, computed from what exists (pure: snapshot + now -> decision).

Level-based: whatever triggered the reconcile, the same function looks at the whole picture
and says what to apply, what to prune, which replica counts to write, the one status to write,
and which Events a person should see.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .api import LLMService, SpecError, parse_llmservice
from .api.status import (
    Condition,
    LLMServiceStatus,
    RevisionRecord,
    RevisionsStatus,
    SizingStatus,
)
from .conditions import find, rfc3339, set_condition
from .planning import ServicePlan, plan_service
from .render.labels import REVISION, selector_labels
from .render.objects import deployment, deployment_name, pod_template, revision_hash
from .sizing import GpuCatalog

__all__ = ["Decision", "Event", "Snapshot", "decide"]


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Snapshot:
    """Everything observed for one LLMService, as plain dicts from the API server."""

    body: dict[str, Any]
    owned: dict[tuple[str, str], dict[str, Any]]
    pods: list[dict[str, Any]]
    secrets: dict[str, set[str] | None]
    missing_apis: frozenset[str] = frozenset()

    def deployments(self) -> dict[str, dict[str, Any]]:
        """Revision -> Deployment."""
        found: dict[str, dict[str, Any]] = {}
        for (kind, _name), obj in self.owned.items():
            if kind == "Deployment":
                revision = obj["metadata"].get("labels", {}).get(REVISION)
                if revision:
                    found[revision] = obj
        return found


@dataclass
class Decision:
    apply: list[dict[str, Any]] = field(default_factory=list)
    delete: list[tuple[str, str, str]] = field(default_factory=list)  # apiVersion, kind, name
    #: Deployment name -> replicas to write as the autoscaler's field manager.
    scale: dict[str, int] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)


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


def _target_replicas(service: LLMService, current: int | None) -> int:
    scaling = service.spec.scaling
    if scaling.mode == "manual":
        return service.spec.replicas if service.spec.replicas is not None else scaling.min_replicas
    base = current if current is not None else scaling.min_replicas
    return max(scaling.min_replicas, min(scaling.max_replicas, base))


def _wire_status(status: LLMServiceStatus, previous: dict[str, Any]) -> dict[str, Any]:
    """Status as a merge patch: keys we no longer set are nulled so they disappear."""
    wire = status.to_wire()
    for key in previous:
        if key in _STATUS_KEYS and key not in wire:
            wire[key] = None
    return wire


def _invalid(snapshot: Snapshot, err: SpecError, now: datetime, generation: int | None) -> Decision:
    current = _current_status(snapshot.body)
    conditions = set_condition(
        current.conditions, "InvalidSpec", "True", "InvalidSpec", str(err), now, generation
    )
    if err.field.startswith("spec.resources") or "fit" in err.message:
        conditions = set_condition(
            conditions, "Sized", "False", "DoesNotFit", err.message, now, generation
        )
    status = current.model_copy(
        update={"conditions": conditions, "phase": "InvalidSpec", "observed_generation": generation}
    )
    decision = Decision(status=_wire_status(status, snapshot.body.get("status") or {}))
    before = find(current.conditions, "InvalidSpec")
    if before is None or before.status != "True" or before.message != str(err):
        decision.events.append(Event("Warning", "InvalidSpec", str(err)))
    return decision


def decide(snapshot: Snapshot, catalog: GpuCatalog, now: datetime, prometheus_url: str) -> Decision:
    body = snapshot.body
    generation = body.get("metadata", {}).get("generation")
    try:
        service = parse_llmservice(body)
        _check_secrets(service, snapshot.secrets)
        plan = plan_service(service, catalog, prometheus_url)
    except SpecError as err:
        return _invalid(snapshot, err, now, generation)

    current = _current_status(body)
    decision = Decision()
    owner = _owner_reference(body)
    template = pod_template(plan.render_input)
    revision = revision_hash(template)
    deployments = snapshot.deployments()
    previous_revisions = current.revisions or RevisionsStatus()
    stable = previous_revisions.stable if previous_revisions.stable in deployments else None
    history = list(previous_revisions.history)

    new_dep = deployments.get(revision)
    stable_dep = deployments.get(stable) if stable else None
    observed_replicas = (stable_dep or new_dep or {}).get("spec", {}).get("replicas")
    target = _target_replicas(service, observed_replicas)

    candidate: str | None = None
    if stable is None or stable == revision:
        stable = revision
    else:
        candidate = revision
        ready = _replicas(new_dep, "readyReplicas")
        if new_dep is not None and ready >= max(1, target):
            history = [
                *history,
                RevisionRecord(revision=stable, outcome="Superseded", time=rfc3339(now)),
            ][-10:]
            decision.events.append(
                Event("Normal", "Promoted", f"revision {revision} is ready; {stable} removed")
            )
            stable, candidate = revision, None

    keep = {stable} | ({candidate} if candidate else set())
    rendered = [o for o in plan.objects if o["kind"] != "Deployment"]
    manual = service.spec.scaling.mode == "manual"
    rendered.insert(
        0, deployment(plan.render_input, template, revision, target if manual else None)
    )
    for obj in rendered:
        obj["metadata"]["ownerReferences"] = [owner]
        decision.apply.append(obj)
    desired_names = {(o["kind"], o["metadata"]["name"]) for o in rendered}
    desired_names |= {("Deployment", deployment_name(service.metadata.name, r)) for r in keep}
    for (kind, name), obj in sorted(snapshot.owned.items()):
        if (kind, name) not in desired_names:
            decision.delete.append((obj.get("apiVersion", ""), kind, name))

    if service.spec.scaling.mode == "operator":
        for rev in keep:
            dep = deployments.get(rev)
            have = None if dep is None else dep.get("spec", {}).get("replicas")
            if have != target:
                decision.scale[deployment_name(service.metadata.name, rev)] = target

    serving = [deployments.get(r) for r in keep]
    replicas = sum(_replicas(d, "replicas") for d in serving)
    ready = sum(_replicas(d, "readyReplicas") for d in serving)
    decision.status = _wire_status(
        _status(
            service, plan, current, now, generation, stable, candidate, history,
            replicas, ready, target, _unschedulable_message(snapshot.pods), decision,
            snapshot.missing_apis,
        ),
        body.get("status") or {},
    )  # fmt: skip
    return decision


def _status(
    service: LLMService,
    plan: ServicePlan,
    current: LLMServiceStatus,
    now: datetime,
    generation: int | None,
    stable: str,
    candidate: str | None,
    history: list[RevisionRecord],
    replicas: int,
    ready: int,
    target: int,
    unschedulable: str | None,
    decision: Decision,
    missing_apis: frozenset[str],
) -> LLMServiceStatus:
    conditions: list[Condition] = list(current.conditions)

    def put(type_: str, status: Any, reason: str, message: str) -> None:
        nonlocal conditions
        before = find(conditions, type_)
        conditions = set_condition(conditions, type_, status, reason, message, now, generation)
        if before is None or before.status != status or before.reason != reason:
            if type_ == "Degraded" and status == "True":
                decision.events.append(Event("Warning", reason, message))
            elif type_ == "Sized" and status == "True":
                decision.events.append(Event("Normal", "Sized", message))
            elif type_ == "Available" and status == "True":
                decision.events.append(Event("Normal", "Available", message))

    put("InvalidSpec", "False", "Valid", "")
    put("Sized", "True", "Fits", plan.sizing.summary())
    needed = max(1, min(target, service.spec.scaling.min_replicas or 1))
    if ready >= needed:
        put("Available", "True", "MinimumReplicasReady", f"{ready}/{target} replicas ready")
    else:
        put("Available", "False", "ReplicasNotReady", f"{ready}/{target} replicas ready")
    if candidate is not None:
        put("Progressing", "True", "NewRevision", f"revision {candidate} replacing {stable}")
    elif ready < target:
        put("Progressing", "True", "ReplicasStarting", f"{ready}/{target} replicas ready")
    else:
        put("Progressing", "False", "Stable", f"revision {stable} serving")
    scaler_kind = {"hpa": "HorizontalPodAutoscaler", "keda": "ScaledObject"}.get(
        service.spec.scaling.mode
    )
    if unschedulable is not None:
        put("Degraded", "True", "Unschedulable", unschedulable)
    elif scaler_kind is not None and scaler_kind in missing_apis:
        put(
            "Degraded",
            "True",
            "ScalerAPIMissing",
            f"scaling.mode {service.spec.scaling.mode} needs the {scaler_kind} API, which this "
            "cluster does not serve; install it or use scaling.mode operator",
        )
    else:
        put("Degraded", "False", "AsExpected", "")

    degraded = find(conditions, "Degraded")
    if degraded is not None and degraded.status == "True":
        phase = "Degraded"
    elif candidate is not None or ready < target:
        phase = "Progressing" if ready < needed or candidate else "Available"
    else:
        phase = "Available"
    if phase == "Progressing" and ready >= needed and candidate is None:
        phase = "Available"
    return current.model_copy(
        update={
            "observed_generation": generation,
            "phase": phase,
            "conditions": conditions,
            "sizing": _sizing_status(plan),
            "revisions": RevisionsStatus(
                stable=stable, candidate=candidate, failed=None, history=history
            ),
            "replicas": replicas,
            "ready_replicas": ready,
            "selector": ",".join(
                f"{k}={v}" for k, v in selector_labels(service.metadata.name).items()
            ),
        }
    )
