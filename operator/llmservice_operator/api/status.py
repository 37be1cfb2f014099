"""The `LLMService` status: written by the operator only, once per reconcile."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .base import ApiModel
from .capacity import CostStatus, ScheduleStatus
from .spec import AnalysisSettings, BackgroundAnalysis, SLOSpec

__all__ = [
    "MEASUREMENT_HISTORY",
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
]

ConditionStatus = Literal["True", "False", "Unknown"]
Phase = Literal["Progressing", "Available", "Degraded", "InvalidSpec"]
Verdict = Literal["Successful", "Failed", "Inconclusive", "Error", "NoData", "Running"]
#: Measurements kept per check in ``status.rollout.analysis.checks`` (Argo keeps 10 too).
MEASUREMENT_HISTORY = 10


class Condition(ApiModel):
    """metav1.Condition: keyed by type; lastTransitionTime changes only when status does."""

    type: str
    status: ConditionStatus
    reason: str
    message: str = ""
    last_transition_time: str
    observed_generation: int | None = None


class SizingStatus(ApiModel):
    gpu_type: str
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
    summary: str
    warnings: list[str] = Field(default_factory=list)


class RevisionRecord(ApiModel):
    revision: str
    outcome: Literal["Promoted", "RolledBack", "Superseded", "Aborted"]
    reason: str = ""
    cause: str | None = Field(
        default=None,
        description=(
            "RolledBack: what failed (AnalysisFailed, AnalysisError, SmokeTestFailed, "
            "ProgressDeadlineExceeded), the RolledBack condition's reason; Aborted: Aborted."
        ),
    )
    time: str


class RevisionEntry(ApiModel):
    """One revision the service ran: its number, the spec that made it, its time as stable."""

    number: int = Field(
        ge=1, description="Grows with each revision started (kubectl llms undo --to-revision)."
    )
    revision: str
    spec: dict[str, Any] = Field(
        default_factory=dict,
        description="The pod-making parts of the spec as written (model, engine, resources, "
        "serving): what `kubectl llms undo` restores.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    created: str
    stable_since: str | None = None
    stable_until: str | None = Field(
        default=None, description="When another revision replaced it as stable."
    )


class RevisionsStatus(ApiModel):
    stable: str | None = None
    candidate: str | None = None
    failed: str | None = Field(
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
    check: str
    query: str
    value: float | None = None
    threshold: float | None = None
    verdict: Verdict
    message: str = ""
    dry_run: bool | None = Field(default=None, description="Reported only; never acts.")


class MeasurementPoint(ApiModel):
    value: float | None = None
    verdict: Verdict
    time: str


class CheckHistory(ApiModel):
    """One check's last measurements (at most MEASUREMENT_HISTORY), oldest first."""

    check: str
    threshold: float | None = None
    dry_run: bool | None = None
    measurements: list[MeasurementPoint] = Field(default_factory=list, max_length=10)


class AnalysisRunStatus(ApiModel):
    phase: Verdict
    started_at: str
    measurements_taken: int = 0
    successful: int = 0
    failed: int = 0
    inconclusive: int = 0
    errors: int = 0
    consecutive_errors: int = 0
    next_measurement_at: str | None = None
    last: list[AnalysisMeasurement] = Field(default_factory=list)
    checks: list[CheckHistory] = Field(
        default_factory=list, description="Each check's last 10 measurements: value, verdict, time."
    )
    message: str = ""


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
    step_started_at: str | None = None
    paused: bool = False
    pause_reason: str | None = None
    analysis: AnalysisRunStatus | None = None
    background_analysis: AnalysisRunStatus | None = Field(
        default=None, description="rollout.backgroundAnalysis's run (until promotion)."
    )
    promoted_at: str | None = None
    message: str = ""
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
    scale_down_at: str | None = Field(
        default=None, description="When an aborted candidate is scaled to 0."
    )
    frozen: FrozenAnalysis | None = None


class ReplicaCapacityStatus(ApiModel):
    """What one full replica on ``gpuType`` processes per second (docs/autoscaling.md)."""

    gpu_type: str
    prefill_tokens_per_second: float = Field(gt=0)
    decode_tokens_per_second: float = Field(gt=0)
    source: Literal["learned", "prior"] = Field(
        description=(
            "learned: measured on replicas queueing for a whole minute; prior: the sizing's "
            "roofline estimate (discounted, times capacityPriorScale), until one is learned."
        )
    )
    learned_time: str | None = Field(default=None, description="When it was last learned.")


class AutoscalingStatus(ApiModel):
    desired_replicas: int
    last_evaluation_time: str | None = None
    degraded_reason: str | None = Field(
        default=None, description="Why the last evaluation held replicas (missing metrics)."
    )
    last_scale_time: str | None = None
    last_scale_up_time: str | None = None
    last_scale_down_time: str | None = None
    reason: str = ""
    recommendations: list[str] = Field(
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
    selector: str | None = None
