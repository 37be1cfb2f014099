"""The `LLMService` spec: what a platform team writes.

Each rule that the API server can judge alone lives twice: as a CEL rule in
`x-kubernetes-validations` (so `kubectl apply` refuses it) and as a pydantic validator (so
`llmservice plan` refuses it the same way before anything reaches a cluster).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from .architecture import ArchitectureOverride
from .base import DURATION_RULES, ApiModel, Duration, cel
from .inference_pool import InferencePoolSpec
from .k8s_values import (
    LABEL_KEY_PATTERN,
    LABEL_VALUE_PATTERN,
    PEER_LABELS,
    LabelMap,
    PeerSelector,
    Quantity,
    label_map_field,
)
from .schedule import MAX_SCHEDULES, ScheduleWindow, check_schedules, schedule_rules
from .tiers import MAX_LATENCY_MS, MAX_TIERS, ServiceTier, check_tiers, tiers_rules

__all__ = [
    "AnalysisSettings",
    "AnalysisStepSettings",
    "BUILTIN_CHECKS",
    "BackgroundAnalysis",
    "BlueGreenSettings",
    "CompareToStable",
    "CustomCheck",
    "EngineSpec",
    "EnvVar",
    "GatewayParentRef",
    "LLMServiceSpec",
    "LoadTestSettings",
    "ModelCache",
    "ModelSource",
    "ModelSpec",
    "NetworkPeer",
    "NetworkPolicySpec",
    "PauseStep",
    "ResourcesSpec",
    "RollbackWindow",
    "RolloutSpec",
    "RolloutStep",
    "ScalingBehavior",
    "ScalingSpec",
    "SecretKeyRef",
    "ServingSpec",
    "SLOSpec",
    "SmokeTestSettings",
    "Toleration",
]

Dtype = Literal["auto", "bfloat16", "float16", "float32"]
Quantization = Literal["none", "fp8", "int8", "awq", "gptq"]
KvCacheDtype = Literal["auto", "fp8"]
SchedulingPolicy = Literal["fcfs", "priority"]

_K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class SecretKeyRef(ApiModel):
    """A key in a Secret in the LLMService's namespace."""

    name: str = Field(min_length=1, max_length=253, pattern=_K8S_NAME, description="Secret name.")
    key: str = Field(
        default="token", min_length=1, max_length=253, description="Key inside the Secret."
    )


class ModelSource(ApiModel):
    """Where the weights come from. HuggingFace by default; a PVC or a URI for air-gapped clusters."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!has(self.type) || self.type != 'pvc' || has(self.claimName)",
                    "source.type pvc needs source.claimName (the PVC holding the weights)",
                ),
                cel(
                    "!has(self.type) || self.type != 'uri' || has(self.uri)",
                    "source.type uri needs source.uri (for example s3://bucket/path)",
                ),
            ]
        }
    )

    type: Literal["hf", "pvc", "uri"] = Field(default="hf", description="hf, pvc or uri.")
    claim_name: str | None = Field(
        default=None, max_length=253, description="PVC with the weights (type pvc)."
    )
    path: str | None = Field(
        default=None, max_length=1024, description="Directory inside the PVC (type pvc)."
    )
    uri: str | None = Field(
        default=None, max_length=2048, description="s3:// or gs:// URI (type uri)."
    )

    @model_validator(mode="after")
    def _source_fields(self) -> ModelSource:
        if self.type == "pvc" and not self.claim_name:
            raise ValueError("source.type pvc needs source.claimName (the PVC holding the weights)")
        if self.type == "uri" and not self.uri:
            raise ValueError("source.type uri needs source.uri (for example s3://bucket/path)")
        return self


_CACHE_CLAIM_ALONE = (
    "model.cache.claimName names a claim you made: storageClassName, size and accessModes "
    "are for the claim the operator makes (leave claimName out)"
)
_CACHE_NEEDS_REVISION = (
    "model.cache needs model.revision: the cache holds one pinned commit of the model repo"
)
_CACHE_NEEDS_HF = "model.cache downloads from the hub: it needs model.source.type hf"


class ModelCache(ApiModel):
    """A PVC that holds the weights, filled once per revision by a download Job and mounted
    read-only by the serving pods (docs/model-cache.md)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!has(self.claimName) || (!has(self.storageClassName) && !has(self.size) "
                    "&& !has(self.accessModes))",
                    _CACHE_CLAIM_ALONE,
                )
            ]
        }
    )

    claim_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=_K8S_NAME,
        description="An existing PVC to use; unset: the operator makes <name>-model-cache.",
    )
    storage_class_name: str | None = Field(
        default=None, min_length=1, max_length=253, description="Of the PVC the operator makes."
    )
    size: Quantity | None = Field(
        default=None,
        description=(
            "Of the PVC the operator makes; unset: twice the sizing's weight bytes (room for a "
            "new revision next to the old one) plus 10% and 1Gi."
        ),
    )
    access_modes: (
        list[Literal["ReadWriteMany", "ReadWriteOnce", "ReadOnlyMany", "ReadWriteOncePod"]] | None
    ) = Field(
        default=None,
        max_length=4,
        description="Of the PVC the operator makes; unset: ReadWriteMany (replicas on many nodes).",
    )
    endpoint: str | None = Field(
        default=None,
        min_length=1,
        max_length=2000,
        pattern=r"^https?://",
        description="The hub (or a mirror) the Job downloads from (HF_ENDPOINT); unset: the hub.",
    )

    @model_validator(mode="after")
    def _claim_alone(self) -> ModelCache:
        made = (self.storage_class_name, self.size, self.access_modes)
        if self.claim_name is not None and any(v is not None for v in made):
            raise ValueError(_CACHE_CLAIM_ALONE)
        return self


class ModelSpec(ApiModel):
    """The model to serve and the precision to serve it in."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("!has(self.cache) || has(self.revision)", _CACHE_NEEDS_REVISION),
                cel(
                    "!has(self.cache) || !has(self.source) || !has(self.source.type) "
                    "|| self.source.type == 'hf'",
                    _CACHE_NEEDS_HF,
                ),
            ]
        }
    )

    id: str = Field(
        min_length=1,
        max_length=512,
        description="HuggingFace model id, e.g. meta-llama/Llama-3.1-8B.",
    )
    revision: str | None = Field(
        default=None,
        max_length=256,
        description="Pinned commit of the model repo; a new revision is a rollout.",
    )
    served_name: str | None = Field(
        default=None,
        max_length=256,
        description="Name clients send as `model`; defaults to the LLMService's name.",
    )
    source: ModelSource = Field(default_factory=ModelSource)
    cache: ModelCache | None = Field(
        default=None,
        description="Download the weights once per revision into a PVC the pods mount read-only.",
    )
    architecture: ArchitectureOverride | None = Field(
        default=None,
        description=(
            "HF config.json keys that override (or replace, for models the operator does not "
            "know) the model's architecture used for sizing; the numbers sizing reads are "
            "bounded at about ten times the largest public model."
        ),
    )
    dtype: Dtype = Field(default="auto", description="Weight dtype: auto follows config.json.")
    quantization: Quantization = Field(default="none", description="none, fp8, int8, awq, gptq.")

    @model_validator(mode="after")
    def _cache_fields(self) -> ModelSpec:
        if self.cache is not None and not self.revision:
            raise ValueError(_CACHE_NEEDS_REVISION)
        if self.cache is not None and self.source.type != "hf":
            raise ValueError(_CACHE_NEEDS_HF)
        return self


#: engine.env and engine.extraArgs: characters of one value, and of all of them together. The
#: engine's flags and environment are config, not data: a whole chat template fits in an
#: argument, and a Secret or ConfigMap is the place for anything larger.
MAX_ENV_VALUE = 16_384
MAX_ENV_TOTAL = 32_768
MAX_EXTRA_ARG = 8192
MAX_EXTRA_ARGS_TOTAL = 16_384
_ENV_TOO_LARGE = f"engine.env: the values must be at most {MAX_ENV_TOTAL:,} characters together"
_ARGS_TOO_LARGE = (
    f"engine.extraArgs: the flags must be at most {MAX_EXTRA_ARGS_TOTAL:,} characters together"
)


class EnvVar(ApiModel):
    name: str = Field(min_length=1, max_length=256, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
    value: str = Field(default="", max_length=MAX_ENV_VALUE)


class EngineSpec(ApiModel):
    """vLLM engine settings. Flags are rendered for `vllmVersion`'s own argument parser."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!has(self.maxNumBatchedTokens) || !has(self.maxNumSeqs) || "
                    "self.maxNumBatchedTokens >= self.maxNumSeqs",
                    "engine.maxNumBatchedTokens must be at least engine.maxNumSeqs",
                ),
                cel(
                    "!has(self.env) || self.env.map(e, has(e.value) ? size(e.value) : 0).sum() "
                    f"<= {MAX_ENV_TOTAL}",
                    _ENV_TOO_LARGE,
                ),
                cel(
                    "!has(self.extraArgs) || self.extraArgs.map(a, size(a)).sum() "
                    f"<= {MAX_EXTRA_ARGS_TOTAL}",
                    _ARGS_TOO_LARGE,
                ),
            ]
        }
    )

    vllm_version: str = Field(
        default="0.33.0",
        max_length=32,
        pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$",
        description="Pinned vLLM version.",
    )
    image: str | None = Field(
        default=None,
        max_length=512,
        description="Serving image; defaults to vllm/vllm-openai:v<vllmVersion>.",
    )
    max_model_len: int = Field(ge=128, le=10_485_760, description="Longest prompt+output, tokens.")
    max_num_seqs: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="Batch size cap; derived from the KV pool if unset.",
    )
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=10_485_760)
    kv_cache_dtype: KvCacheDtype = "auto"
    prefix_caching: bool = True
    chunked_prefill: bool = True
    scheduling_policy: SchedulingPolicy = Field(
        default="fcfs",
        description=(
            "vLLM's --scheduling-policy: fcfs (arrival order) or priority (a request's "
            "`priority`, lower first, then arrival; needed by serving.tiers)."
        ),
    )
    gpu_memory_utilization: float = Field(default=0.92, gt=0.1, le=0.99)
    extra_args: list[Annotated[str, StringConstraints(max_length=MAX_EXTRA_ARG)]] = Field(
        default_factory=list,
        max_length=64,
        description=f"Extra vLLM flags, passed verbatim; at most {MAX_EXTRA_ARGS_TOTAL:,} "
        "characters together.",
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=64,
        description=f"Environment of the engine container; each name at most once, the values "
        f"at most {MAX_ENV_TOTAL:,} characters together.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    hf_token_secret_ref: SecretKeyRef | None = Field(
        default=None, description="Secret with the HuggingFace token (never put it in env)."
    )

    @model_validator(mode="after")
    def _sizes(self) -> EngineSpec:
        if sum(len(var.value) for var in self.env) > MAX_ENV_TOTAL:
            raise ValueError(_ENV_TOO_LARGE)
        if sum(len(arg) for arg in self.extra_args) > MAX_EXTRA_ARGS_TOTAL:
            raise ValueError(_ARGS_TOO_LARGE)
        return self

    @model_validator(mode="after")
    def _env_names_once(self) -> EngineSpec:
        names = [var.name for var in self.env]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"engine.env: {', '.join(twice)} given more than once")
        return self

    @model_validator(mode="after")
    def _batched_tokens(self) -> EngineSpec:
        if (
            self.max_num_batched_tokens is not None
            and self.max_num_seqs is not None
            and self.max_num_batched_tokens < self.max_num_seqs
        ):
            raise ValueError("engine.maxNumBatchedTokens must be at least engine.maxNumSeqs")
        return self


_EQUAL_NEEDS_KEY = (
    "resources.tolerations: operator Equal needs a key (operator Exists without a key "
    "tolerates every taint)"
)
_EXISTS_TAKES_NO_VALUE = "resources.tolerations: operator Exists takes no value"


class Toleration(ApiModel):
    """As in a pod spec; the API server's rules for one are checked here too."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("self.operator == 'Exists' || (has(self.key) && self.key != '')",
                    _EQUAL_NEEDS_KEY),
                cel("self.operator != 'Exists' || !has(self.value) || self.value == ''",
                    _EXISTS_TAKES_NO_VALUE),
            ]
        }
    )  # fmt: skip

    key: str | None = Field(default=None, max_length=317, pattern=LABEL_KEY_PATTERN)
    operator: Literal["Exists", "Equal"] = "Exists"
    value: str | None = Field(default=None, max_length=63, pattern=LABEL_VALUE_PATTERN)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None

    @model_validator(mode="after")
    def _operator_rules(self) -> Toleration:
        if self.operator == "Equal" and not self.key:
            raise ValueError(_EQUAL_NEEDS_KEY)
        if self.operator == "Exists" and self.value:
            raise ValueError(_EXISTS_TAKES_NO_VALUE)
        return self


class ResourcesSpec(ApiModel):
    """Which GPUs, and how much concurrency the KV cache must hold."""

    model_config = ConfigDict(
        populate_by_name=True,
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!has(self.gpu) || self.gpu == 'auto' || !has(self.allowedGPUs) "
                    "|| size(self.allowedGPUs) == 0 || self.gpu in self.allowedGPUs",
                    "resources.gpu must be 'auto' or one of resources.allowedGPUs",
                )
            ]
        },
    )

    gpu: str = Field(
        default="auto", min_length=1, max_length=64, description="'auto' or a GPU catalog name."
    )
    allowed_gpus: list[Annotated[str, StringConstraints(min_length=1, max_length=64)]] = Field(
        default_factory=list,
        alias="allowedGPUs",
        max_length=32,
        description="GPU types 'auto' may choose from; empty means the whole catalog.",
    )
    min_concurrency: int = Field(
        default=1, ge=1, le=4096, description="Full-length sequences the KV pool must hold."
    )
    cpu: Quantity | None = Field(default=None, description="CPU request per replica, e.g. '8'.")
    memory: Quantity | None = Field(
        default=None, description="Memory request per replica, e.g. 64Gi."
    )
    node_selector: LabelMap = label_map_field("resources.nodeSelector")
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32)
    topology_key: str | None = Field(
        default=None,
        max_length=317,
        pattern=LABEL_KEY_PATTERN,
        description=(
            "Multi-node replicas only: a node label key (e.g. topology.kubernetes.io/zone or a "
            "rack label) whose value every node of one replica group shares; rendered as the "
            "LeaderWorkerSet's exclusive-topology annotation (one group per topology domain)."
        ),
    )

    @model_validator(mode="after")
    def _gpu_in_allowed(self) -> ResourcesSpec:
        if self.gpu != "auto" and self.allowed_gpus and self.gpu not in self.allowed_gpus:
            raise ValueError("resources.gpu must be 'auto' or one of resources.allowedGPUs")
        return self


class SLOSpec(ApiModel):
    """Latency and error objectives; rollouts are judged on them."""

    ttft_p99_ms: float | None = Field(
        default=None, gt=0, le=MAX_LATENCY_MS, description="Time to first token, p99."
    )
    tpot_p99_ms: float | None = Field(
        default=None, gt=0, le=MAX_LATENCY_MS, description="Time per output token, p99."
    )
    max_error_rate: float | None = Field(default=None, ge=0, le=1, description="Fraction, 0..1.")


class ScalingBehavior(ApiModel):
    stabilization_window_seconds: int = Field(default=0, ge=0, le=3600)
    max_replicas_per_period: int = Field(default=4, ge=1, le=1000)
    period_seconds: int = Field(default=60, ge=1, le=1800)


#: At zero replicas the replicas' own metrics are gone: only a rate measured ahead of them can
#: say that requests arrive.
SCALE_TO_ZERO_NEEDS_ARRIVALS = (
    "scaling.minReplicas 0 (scale to zero) needs scaling.arrivalRateQuery: with no replica left, "
    "only requests counted ahead of the replicas (gateway, ingress) can wake the service"
)


def _scale_down_default() -> ScalingBehavior:
    return ScalingBehavior(stabilization_window_seconds=300, max_replicas_per_period=1)


class ScalingSpec(ApiModel):
    """How many replicas, and who decides: the operator (default), an HPA, KEDA, or nobody."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!has(self.minReplicas) || !has(self.maxReplicas) "
                    "|| self.minReplicas <= self.maxReplicas",
                    "scaling.minReplicas must not exceed scaling.maxReplicas",
                ),
                cel(
                    "!has(self.minReplicas) || self.minReplicas > 0 || !has(self.mode) "
                    "|| self.mode == 'operator' || self.mode == 'keda'",
                    "scaling.minReplicas 0 (scale to zero) needs mode operator or keda",
                ),
                cel(
                    "!has(self.minReplicas) || self.minReplicas > 0 || has(self.arrivalRateQuery)",
                    SCALE_TO_ZERO_NEEDS_ARRIVALS,
                ),
                *schedule_rules(),
            ]
        }
    )

    mode: Literal["operator", "hpa", "keda", "manual"] = Field(
        default="operator",
        description="operator scales on queue depth; hpa/keda render an object; manual: minReplicas.",
    )
    min_replicas: int = Field(default=1, ge=0, le=1000)
    max_replicas: int = Field(default=1, ge=1, le=1000)
    target_queue_depth: float | None = Field(
        default=None,
        gt=0,
        le=100_000,
        description="Waiting requests per ready replica; derived if unset.",
    )
    kv_cache_usage_ceiling: float = Field(default=0.9, gt=0, le=1)
    target_utilization: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description=(
            "Share of a full replica's throughput to plan for (headroom for bursts while new "
            "replicas load); unset uses the policy's default (docs/autoscaling.md)."
        ),
    )
    capacity_prior_scale: float = Field(
        default=1.0,
        ge=0,
        le=1000,
        description=(
            "Multiplies the sizing's estimate of a full replica's throughput that operator mode "
            "plans on until it has seen one full (docs/autoscaling.md): 0 plans on nothing "
            "until the first saturation; an engine that runs S times faster than the wall "
            "clock (the local cluster's simulator: 10) needs S."
        ),
    )
    evaluation_interval_seconds: int = Field(default=15, ge=1, le=600)
    metrics_source: Literal["prometheus", "pods"] = Field(
        default="prometheus",
        description=(
            "Where operator mode reads each Ready replica's vLLM gauges and completion "
            "counter: Prometheus, or the pods' /metrics directly (a shorter reaction; the "
            "completion rates come from the readings of the last minute, kept in memory)."
        ),
    )
    scale_up: ScalingBehavior = Field(default_factory=ScalingBehavior)
    scale_down: ScalingBehavior = Field(default_factory=_scale_down_default)
    arrival_rate_query: str | None = Field(
        default=None,
        min_length=1,
        max_length=2000,
        description=(
            "PromQL for the requests/s reaching this service ahead of its replicas (the "
            "gateway's or ingress' request counter, e.g. sum(rate(...[1m]))). The operator plans "
            "on it instead of the replicas' completions, and it is what wakes a service scaled "
            "to zero (mode keda: an activation trigger); required with minReplicas 0."
        ),
    )
    schedules: list[ScheduleWindow] = Field(
        default_factory=list,
        max_length=MAX_SCHEDULES,
        description=(
            "Windows of scheduled capacity (mode operator): while one is open its minReplicas "
            "(and maxReplicas) replace these bounds; overlapping windows: the larger of each "
            "(docs/capacity-and-cost.md)."
        ),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )

    @model_validator(mode="after")
    def _bounds(self) -> ScalingSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError("scaling.minReplicas must not exceed scaling.maxReplicas")
        if self.min_replicas == 0 and self.mode not in ("operator", "keda"):
            raise ValueError("scaling.minReplicas 0 (scale to zero) needs mode operator or keda")
        if self.min_replicas == 0 and self.arrival_rate_query is None:
            raise ValueError(SCALE_TO_ZERO_NEEDS_ARRIVALS)
        check_schedules(self.schedules, self.mode, self.max_replicas, self.arrival_rate_query)
        return self


class PauseStep(ApiModel):
    duration: Duration | None = Field(
        default=None,
        json_schema_extra=DURATION_RULES,
        description="How long to pause; without it, until a person resumes the rollout.",
    )


class AnalysisStepSettings(ApiModel):
    """An analysis step; empty means the service's rollout.analysis settings."""

    count: int | None = Field(default=None, ge=1, le=100)
    interval: Duration | None = Field(
        default=None,
        json_schema_extra=DURATION_RULES,
    )


class RolloutStep(ApiModel):
    """Exactly one of setWeight, pause, analysis."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "[has(self.setWeight), has(self.pause), has(self.analysis)]"
                    ".filter(x, x).size() == 1",
                    "each rollout step sets exactly one of setWeight, pause, analysis",
                )
            ]
        }
    )

    set_weight: int | None = Field(default=None, ge=0, le=100)
    pause: PauseStep | None = None
    analysis: AnalysisStepSettings | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> RolloutStep:
        chosen = [x is not None for x in (self.set_weight, self.pause, self.analysis)]
        if sum(chosen) != 1:
            raise ValueError("each rollout step sets exactly one of setWeight, pause, analysis")
        return self


class CompareToStable(ApiModel):
    """Candidate versus stable over the same window."""

    ttft_p99_max_increase_percent: float | None = Field(default=None, ge=0, le=100_000)
    tpot_p99_max_increase_percent: float | None = Field(default=None, ge=0, le=100_000)


class CustomCheck(ApiModel):
    """A PromQL query of your own; `{{revision}}` and `{{namespace}}` are substituted."""

    name: str = Field(min_length=1, max_length=63, pattern=_K8S_NAME)
    query: str = Field(min_length=1, max_length=1024)
    operator: Literal["<", "<=", ">", ">="] = "<"
    threshold: float = Field(ge=-1e15, le=1e15)


#: The built-in checks' names (rollout/analysis.py), for ``analysis.dryRun``. Each has an
#: upper-case letter, which a custom check's name (a Kubernetes name) cannot.
BUILTIN_CHECKS: tuple[str, ...] = (
    "sampleCount",
    "stableSampleCount",
    "ttftP99Ms",
    "tpotP99Ms",
    "errorRate",
    "ttftP99VsStablePercent",
    "tpotP99VsStablePercent",
)
_DRY_RUN_UNKNOWN = (
    "rollout.analysis.dryRun names a check that does not exist: use a built-in check "
    "(" + ", ".join(BUILTIN_CHECKS) + ") or a customChecks name"
)


class AnalysisSettings(ApiModel):
    """Argo Rollouts semantics: count measurements every interval; limits end the run early.

    Frozen per rollout: the values in force when a rollout starts are kept in
    ``status.rollout.frozen`` and judge the whole rollout; edits apply to the next one."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!has(self.dryRun) || self.dryRun.all(n, n in "
                    + "["
                    + ", ".join(f"'{c}'" for c in BUILTIN_CHECKS)
                    + "]"
                    + " || (has(self.customChecks) && self.customChecks.exists(c, c.name == n)))",
                    _DRY_RUN_UNKNOWN,
                )
            ]
        }
    )

    interval: Duration = Field(
        default="1m",
        json_schema_extra=DURATION_RULES,
    )
    count: int = Field(default=3, ge=1, le=100)
    window: Duration | None = Field(
        default=None,
        json_schema_extra=DURATION_RULES,
        description="PromQL range; defaults to interval.",
    )
    initial_delay: Duration | None = Field(
        default=None,
        json_schema_extra=DURATION_RULES,
        description=(
            "Time from the start of an analysis to its first measurement (Argo's initialDelay); "
            "unset: one interval."
        ),
    )
    error_retry_interval: Duration = Field(
        default="10s",
        json_schema_extra=DURATION_RULES,
        description="After a measurement that errored (a query failed), the next is taken this "
        "much later instead of a whole interval (Argo retries errors after 10s).",
    )
    min_samples: int = Field(
        default=50, ge=0, le=1_000_000_000, description="Requests per window below is NoData."
    )
    failure_limit: int = Field(default=0, ge=0, le=1000)
    inconclusive_limit: int = Field(default=0, ge=0, le=1000)
    consecutive_error_limit: int = Field(default=4, ge=0, le=1000)
    on_no_data: Literal["inconclusive", "fail", "pass"] = "inconclusive"
    compare_to_stable: CompareToStable | None = None
    custom_checks: list[CustomCheck] = Field(default_factory=list, max_length=16)
    dry_run: list[Annotated[str, StringConstraints(max_length=63)]] = Field(
        default_factory=list,
        max_length=24,
        description=(
            "Checks measured and reported (status and Events) whose verdicts never act: built-in "
            "check names (ttftP99Ms, errorRate, ...) or customChecks names."
        ),
    )

    @model_validator(mode="after")
    def _dry_run_names(self) -> AnalysisSettings:
        known = {*BUILTIN_CHECKS, *(c.name for c in self.custom_checks)}
        if any(name not in known for name in self.dry_run):
            raise ValueError(_DRY_RUN_UNKNOWN)
        return self


class BackgroundAnalysis(ApiModel):
    """The analysis judged every interval from a step until promotion, whatever the step.

    It uses ``rollout.analysis`` (interval, window, limits, checks); ``count`` does not apply:
    it runs until promotion. A failure (or errors past ``consecutiveErrorLimit``) rolls back
    at any step; too many inconclusive measurements pause the rollout (resuming starts it
    afresh)."""

    starting_step: int = Field(
        default=0,
        ge=0,
        le=32,
        description=(
            "Index in rollout.steps from which it runs (0: from the first step, after the smoke "
            "test; len(steps): only during the promotion)."
        ),
    )


class RollbackWindow(ApiModel):
    """Which earlier revisions come back fast: the smoke test only, no steps, no analysis."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "has(self.revisions) != has(self.duration)",
                    "rollout.rollbackWindow sets exactly one of revisions, duration",
                )
            ]
        }
    )

    revisions: int | None = Field(
        default=None,
        ge=1,
        le=9,
        description="A revision among the last N that served as stable before the current one.",
    )
    duration: Duration | None = Field(
        default=None,
        json_schema_extra=DURATION_RULES,
        description="A revision that served as stable until at most this long ago.",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> RollbackWindow:
        if (self.revisions is None) == (self.duration is None):
            raise ValueError("rollout.rollbackWindow sets exactly one of revisions, duration")
        return self


class LoadTestSettings(ApiModel):
    """Traffic for a blue-green preview, so its pre-promotion analysis has something to judge.

    A Job (the operator image running ``llmservice load``) sends open-loop requests to the
    candidate's Ready pods from the smoke test to the switch, with the API key from
    ``serving.apiKeySecretRef`` as clients send it."""

    rate: float = Field(gt=0, le=1000, description="Requests per second.")
    prompt_tokens: int = Field(default=256, ge=1, le=1_048_576)
    output_tokens: int = Field(default=64, ge=1, le=1_048_576)
    endpoint: Literal["completions", "chat"] = "completions"


class BlueGreenSettings(ApiModel):
    scale_down_delay_seconds: int = Field(
        default=30,
        ge=0,
        le=86_400,
        description="How long the old revision stays at full size after a promotion (instant "
        "switch back meanwhile); Argo's default.",
    )
    auto_promote: bool = True
    preview_replica_count: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description=(
            "Candidate replicas behind the preview Service before the switch; it is scaled to "
            "full size only at the switch. Unset: full size from the start."
        ),
    )
    load_test: LoadTestSettings | None = Field(
        default=None, description="Built-in load on the preview for pre-promotion analysis."
    )


class SmokeTestSettings(ApiModel):
    enabled: bool = True
    timeout_seconds: int = Field(default=120, ge=1, le=3600)


class GatewayParentRef(ApiModel):
    """A Gateway API parent: traffic is then split with HTTPRoute backend weights."""

    name: str = Field(min_length=1, max_length=253)
    namespace: str | None = Field(default=None, max_length=63)
    section_name: str | None = Field(default=None, max_length=253)


_STARTING_STEP = (
    "rollout.backgroundAnalysis.startingStep must be an index in rollout.steps (or its length: "
    "from the promotion)"
)


class RolloutSpec(ApiModel):
    """How a new revision (anything that changes the serving pods) goes out."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!has(self.steps) || "
                    "self.steps.filter(s, has(s.setWeight)).map(s, s.setWeight).isSorted()",
                    "canary setWeight steps must never decrease (e.g. 10, 50, 100)",
                ),
                cel(
                    "!has(self.steps) || !has(self.strategy) || self.strategy != 'blueGreen' "
                    "|| !self.steps.exists(s, has(s.setWeight))",
                    "blueGreen rollouts switch all traffic at once: remove the setWeight steps",
                ),
                cel(
                    "!has(self.backgroundAnalysis) || !has(self.backgroundAnalysis.startingStep) "
                    "|| self.backgroundAnalysis.startingStep <= (has(self.steps) ? "
                    "size(self.steps) : 0)",
                    _STARTING_STEP,
                ),
            ]
        }
    )

    strategy: Literal["canary", "blueGreen"] = "canary"
    steps: list[RolloutStep] = Field(default_factory=list, max_length=32)
    analysis: AnalysisSettings = Field(default_factory=AnalysisSettings)
    progress_deadline_seconds: int = Field(
        default=1800, ge=60, le=86_400, description="Candidate must be Ready within this."
    )
    blue_green: BlueGreenSettings = Field(default_factory=BlueGreenSettings)
    smoke_test: SmokeTestSettings = Field(default_factory=SmokeTestSettings)
    gateway_parent_ref: GatewayParentRef | None = None
    background_analysis: BackgroundAnalysis | None = Field(
        default=None, description="Judge the candidate every interval from a step to promotion."
    )
    rollback_window: RollbackWindow | None = Field(
        default=None,
        description="A revision that served as stable within it comes back with the smoke "
        "test only (no steps, no analysis).",
    )
    abort_scale_down_delay_seconds: int = Field(
        default=30,
        ge=0,
        le=86_400,
        description="After an abort, how long the candidate keeps its replicas (0 traffic) "
        "before it is scaled to 0 (kept until the spec changes or a retry).",
    )

    @model_validator(mode="after")
    def _weights(self) -> RolloutSpec:
        weights = [s.set_weight for s in self.steps if s.set_weight is not None]
        if weights != sorted(weights):
            raise ValueError("canary setWeight steps must never decrease (e.g. 10, 50, 100)")
        if self.strategy == "blueGreen" and weights:
            raise ValueError(
                "blueGreen rollouts switch all traffic at once: remove the setWeight steps"
            )
        background = self.background_analysis
        if background is not None and background.starting_step > len(self.steps):
            raise ValueError(_STARTING_STEP)
        return self


class NetworkPeer(ApiModel):
    """Clients allowed to reach the serving port (label selectors, as in a NetworkPolicy)."""

    namespace_selector: PeerSelector | None = label_map_field(
        "networkPolicy.allowFrom[].namespaceSelector", optional=True, max_labels=PEER_LABELS
    )
    pod_selector: PeerSelector | None = label_map_field(
        "networkPolicy.allowFrom[].podSelector", optional=True, max_labels=PEER_LABELS
    )


class NetworkPolicySpec(ApiModel):
    enabled: bool = True
    allow_from: list[NetworkPeer] = Field(
        default_factory=list,
        max_length=16,
        description="Empty: only pods in the same namespace (and Prometheus) may connect.",
    )
    prometheus_namespace_selector: LabelMap | None = label_map_field(
        "networkPolicy.prometheusNamespaceSelector",
        optional=True,
        description="Namespaces whose pods may scrape /metrics.",
    )


class ServingSpec(ApiModel):
    port: int = Field(default=8000, ge=1, le=65535)
    api_key_secret_ref: SecretKeyRef | None = None
    network_policy: NetworkPolicySpec = Field(default_factory=NetworkPolicySpec)
    drain_seconds: int = Field(
        default=120,
        ge=0,
        le=3600,
        description="Grace period for in-flight streams on scale-down; longer than a generation.",
    )
    inference_pool: InferencePoolSpec | None = Field(
        default=None,
        description="Route through Gateway API Inference Extension pools (queue- and "
        "KV-cache-aware endpoint picking); needs rollout.gatewayParentRef.",
    )
    tiers: list[ServiceTier] = Field(
        default_factory=list,
        max_length=MAX_TIERS,
        description=(
            "Priority tiers (e.g. online, batch); need engine.schedulingPolicy priority. "
            "With inferencePool each renders an InferenceObjective."
        ),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )


class LLMServiceSpec(ApiModel):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [*tiers_rules()]})

    model: ModelSpec
    engine: EngineSpec
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    slo: SLOSpec = Field(default_factory=SLOSpec)
    scaling: ScalingSpec = Field(default_factory=ScalingSpec)
    replicas: int | None = Field(
        default=None,
        ge=0,
        le=1000,
        description="Replica count for scaling.mode manual (target of the scale subresource).",
    )
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    serving: ServingSpec = Field(default_factory=ServingSpec)

    @model_validator(mode="after")
    def _tiers(self) -> LLMServiceSpec:
        check_tiers(self.serving.tiers, self.engine.scheduling_policy)
        return self
