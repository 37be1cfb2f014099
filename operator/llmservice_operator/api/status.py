"""The `LLMService` status: written by the operator only, once per reconcile.

Bounded by construction (issue 38, finding 7): etcd holds an object of at most 1.5 MiB, spec
and status together, so whatever the spec says the status stays small. Free text (messages,
reasons, queries) is cut where it is written out (:data:`Text`, :data:`Brief`), names and
times too (:data:`Name`), every list has a fixed length, and the spec sections each revision
keeps for ``kubectl llms undo`` share :data:`REVISION_SPECS_BUDGET` bytes (the oldest give up
theirs first). tests/unit/test_status_bounds.py writes the status of the largest spec the
schema allows.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from .base import ApiModel
from .capacity import CostStatus, ScheduleStatus
from .spec import AnalysisSettings, BackgroundAnalysis, SLOSpec
from .text import Brief, Name, Text, Time

__all__ = [
    "MEASUREMENT_HISTORY",
    "REVISION_SPECS_BUDGET",
    "AnalysisMeasurement",
    "AnalysisRunStatus",
    "AutoscalingStatus",
    "CheckHistory",
    "Condition",
    "ConditionStatus",
    "CostStatus",
    "FrozenAnalysis",
    "LLMServiceStatus",
    "MeasurementPoint",
    "Phase",
    "RevisionEntry",
    "RevisionRecord",
    "ReplicaCapacityStatus",
    "RevisionsStatus",
    "RolloutStatus",
    "ScheduleStatus",
    "SizingStatus",
    "keep_specs",
]

ConditionStatus = Literal["True", "False", "Unknown"]
Phase = Literal["Progressing", "Available", "Degraded", "InvalidSpec"]
Verdict = Literal["Successful", "Failed", "Inconclusive", "Error", "NoData", "Running"]
#: Measurements kept per check in ``status.rollout.analysis.checks`` (Argo keeps 10 too).
MEASUREMENT_HISTORY = 10
#: Checks one analysis measures at most: 7 built-in and 16 custom (spec.rollout.analysis), 23.
MAX_CHECKS = 24
#: Conditions: one per type, and the operator writes about a dozen types.
MAX_CONDITIONS = 32
#: JSON bytes (UTF-8) of the spec sections all of status.revisions.log keeps together: a
#: typical spec's (2 to 10 KiB) for every revision; the largest spec the schema allows keeps
#: none (`kubectl llms undo` to it says so), and the status stays small.
REVISION_SPECS_BUDGET = 128 * 1024


class Condition(ApiModel):
    """metav1.Condition: keyed by type; lastTransitionTime changes only when status does."""

    type: Name
    status: ConditionStatus
    reason: Name
    message: Text = ""
    last_transition_time: Time
    observed_generation: int | None = None


class SizingStatus(ApiModel):
    gpu_type: Name
    gpus_per_replica: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    parameter_count: int
    weight_bytes: int
    kv_cache_bytes_per_token: int
    max_concurrent_sequences: int
    max_num_seqs: int
    decode_ms_per_token: float
    prefill_ms_per_1k_tokens: float
    summary: Text
    warnings: list[Brief] = Field(default_factory=list, max_length=16)


class RevisionRecord(ApiModel):
    revision: Name
    outcome: Literal["Promoted", "RolledBack", "Superseded", "Aborted"]
    reason: Text = ""
    cause: Name | None = Field(
        default=None,
        description=(
            "RolledBack: what failed (AnalysisFailed, AnalysisError, SmokeTestFailed, "
            "ProgressDeadlineExceeded), the RolledBack condition's reason; Aborted: Aborted."
        ),
    )
    time: Time


class RevisionEntry(ApiModel):
    """One revision the service ran: its number, the spec that made it, its time as stable."""

    number: int = Field(
        ge=1, description="Grows with each revision started (kubectl llms undo --to-revision)."
    )
    revision: Name
    spec: dict[str, Any] = Field(
        default_factory=dict,
        description="The pod-making parts of the spec as written (model, engine, resources, "
        "serving, slo): what `kubectl llms undo` restores. Empty when not kept (specOmittedBytes).",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True, "maxProperties": 8},
    )
    spec_omitted_bytes: int | None = Field(
        default=None,
        description="Its spec was not kept: with the newer revisions' it was over the "
        "status' budget for specs. Its size in bytes of JSON.",
    )
    created: Time
    stable_since: Time | None = None
    stable_until: Time | None = Field(
        default=None, description="When another revision replaced it as stable."
    )


class RevisionsStatus(ApiModel):
    stable: Name | None = None
    candidate: Name | None = None
    failed: Name | None = Field(
        default=None,
        description="Rolled-back or aborted revision; not retried until the spec changes or a "
        "retry (kubectl llms retry).",
    )
    history: list[RevisionRecord] = Field(default_factory=list, max_length=10)
    log: list[RevisionEntry] = Field(
        default_factory=list,
        max_length=10,
        description="The last revisions the service ran, oldest first (kubectl llms history).",
    )


class AnalysisMeasurement(ApiModel):
    check: Name
    query: Text
    value: float | None = None
    threshold: float | None = None
    verdict: Verdict
    message: Brief = ""
    dry_run: bool | None = Field(default=None, description="Reported only; never acts.")


class MeasurementPoint(ApiModel):
    value: float | None = None
    verdict: Verdict
    time: Time


class CheckHistory(ApiModel):
    """One check's last measurements (at most MEASUREMENT_HISTORY), oldest first."""

    check: Name
    threshold: float | None = None
    dry_run: bool | None = None
    measurements: list[MeasurementPoint] = Field(default_factory=list, max_length=10)


class AnalysisRunStatus(ApiModel):
    phase: Verdict
    started_at: Time
    measurements_taken: int = 0
    successful: int = 0
    failed: int = 0
    inconclusive: int = 0
    errors: int = 0
    consecutive_errors: int = 0
    next_measurement_at: Time | None = None
    last: list[AnalysisMeasurement] = Field(default_factory=list, max_length=MAX_CHECKS)
    checks: list[CheckHistory] = Field(
        default_factory=list,
        max_length=MAX_CHECKS,
        description="Each check's last 10 measurements: value, verdict, time.",
    )
    message: Text = ""


class FrozenAnalysis(ApiModel):
    """The analysis settings in force when the rollout started; they judge it to the end."""

    analysis: AnalysisSettings
    background_analysis: BackgroundAnalysis | None = None
    slo: SLOSpec
    edited: bool | None = Field(
        default=None, description="The spec's settings changed since; they apply next rollout."
    )


class RolloutStatus(ApiModel):
    step: int = 0
    weight: int = 0
    step_started_at: Time | None = None
    paused: bool = False
    pause_reason: Brief | None = None
    analysis: AnalysisRunStatus | None = None
    background_analysis: AnalysisRunStatus | None = Field(
        default=None, description="rollout.backgroundAnalysis's run (until promotion)."
    )
    promoted_at: Time | None = None
    message: Text = ""
    user_paused: bool | None = Field(
        default=None, description="A person paused it (kubectl llms pause) until resumed."
    )
    promote_full: bool | None = Field(
        default=None,
        description="A person asked for a full promotion: every remaining step, pause and "
        "analysis is skipped.",
    )
    analysis_skipped: bool | None = Field(
        default=None, description="A person skipped the analysis for the rest of this rollout."
    )
    resume_after_analysis: bool | None = Field(
        default=None,
        description="A resume arrived during a running analysis: an inconclusive end goes on.",
    )
    promotion_approved: bool | None = Field(
        default=None,
        description="blueGreen: the switch was approved; the candidate is scaling to full size.",
    )
    fast_rollback: bool | None = Field(
        default=None,
        description="A revision within rollout.rollbackWindow: the smoke test only, no steps.",
    )
    scale_down_at: Time | None = Field(
        default=None, description="When an aborted candidate is scaled to 0."
    )
    frozen: FrozenAnalysis | None = None


class ReplicaCapacityStatus(ApiModel):
    """What one full replica on ``gpuType`` processes per second (docs/autoscaling.md)."""

    gpu_type: Name
    prefill_tokens_per_second: float = Field(gt=0)
    decode_tokens_per_second: float = Field(gt=0)
    source: Literal["learned", "prior"] = Field(
        description=(
            "learned: measured on replicas queueing for a whole minute; prior: the sizing's "
            "roofline estimate (discounted, times capacityPriorScale), until one is learned."
        )
    )
    learned_time: Time | None = Field(default=None, description="When it was last learned.")


class AutoscalingStatus(ApiModel):
    desired_replicas: int
    last_evaluation_time: Time | None = None
    degraded_reason: Text | None = Field(
        default=None, description="Why the last evaluation held replicas (missing metrics)."
    )
    last_scale_time: Time | None = None
    last_scale_up_time: Time | None = None
    last_scale_down_time: Time | None = None
    reason: Text = ""
    recommendations: list[Name] = Field(
        default_factory=list,
        max_length=120,
        description=(
            "Recent history the scaling windows need across restarts: 'epoch=N' "
            "recommendations, 'epoch=+N'/'epoch=-N' scale events, 'epoch=@R' learned "
            "requests/s of a full replica, 'epoch=~R' recent arrival rates, 'epoch=^S' the "
            "last surge of arrivals (in square roots of the load)."
        ),
    )
    capacity: list[ReplicaCapacityStatus] = Field(
        default_factory=list,
        max_length=16,
        description=(
            "A full replica's capacity in prompt (prefill) and output (decode) tokens per "
            "second, per GPU type: learned ones, and the prior for the current GPU type until "
            "one is learned for it."
        ),
    )
    schedule: ScheduleStatus | None = Field(
        default=None, description="spec.scaling.schedules: the open window and its bounds."
    )


class LLMServiceStatus(ApiModel):
    observed_generation: int | None = None
    phase: Phase | None = Field(
        default=None, description="Absent until the first reconcile; then always set."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=MAX_CONDITIONS,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    sizing: SizingStatus | None = None
    revisions: RevisionsStatus | None = None
    rollout: RolloutStatus | None = None
    autoscaling: AutoscalingStatus | None = None
    cost: CostStatus | None = None
    replicas: int = 0
    ready_replicas: int = 0
    selector: Text | None = None


def keep_specs(
    log: list[RevisionEntry], budget: int = REVISION_SPECS_BUDGET
) -> list[RevisionEntry]:
    """``log`` (oldest first) with the newest revisions' specs kept while they fit ``budget``
    bytes of JSON together; the others give theirs up (``specOmittedBytes`` says how large)."""
    kept, out = 0, []
    for entry in reversed(log):
        if entry.spec:
            size = len(json.dumps(entry.spec, ensure_ascii=False, separators=(",", ":")).encode())
            if kept + size <= budget:
                kept += size
            else:
                entry = entry.model_copy(update={"spec": {}, "spec_omitted_bytes": size})
        out.append(entry)
    return out[::-1]
