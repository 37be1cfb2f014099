"""The `LLMService` status: written by the operator only, once per reconcile."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import ApiModel

__all__ = [
    "AnalysisMeasurement",
    "AnalysisRunStatus",
    "AutoscalingStatus",
    "Condition",
    "ConditionStatus",
    "LLMServiceStatus",
    "Phase",
    "RevisionRecord",
    "RevisionsStatus",
    "RolloutStatus",
    "SizingStatus",
]

ConditionStatus = Literal["True", "False", "Unknown"]
Phase = Literal["Progressing", "Available", "Degraded", "InvalidSpec"]
Verdict = Literal["Successful", "Failed", "Inconclusive", "Error", "NoData", "Running"]


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
    outcome: Literal["Promoted", "RolledBack", "Superseded"]
    reason: str = ""
    cause: str | None = Field(
        default=None,
        description=(
            "RolledBack: what failed (AnalysisFailed, AnalysisError, SmokeTestFailed, "
            "ProgressDeadlineExceeded), the RolledBack condition's reason."
        ),
    )
    time: str


class RevisionsStatus(ApiModel):
    stable: str | None = None
    candidate: str | None = None
    failed: str | None = Field(
        default=None, description="Rolled-back revision; not retried until the spec changes."
    )
    history: list[RevisionRecord] = Field(default_factory=list, max_length=10)


class AnalysisMeasurement(ApiModel):
    check: str
    query: str
    value: float | None = None
    threshold: float | None = None
    verdict: Verdict
    message: str = ""


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
    message: str = ""


class RolloutStatus(ApiModel):
    step: int = 0
    weight: int = 0
    step_started_at: str | None = None
    paused: bool = False
    pause_reason: str | None = None
    analysis: AnalysisRunStatus | None = None
    promoted_at: str | None = None
    message: str = ""


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
            "requests/s of a full replica."
        ),
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
    replicas: int = 0
    ready_replicas: int = 0
    selector: str | None = None
