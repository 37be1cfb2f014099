"""From a model, precision and context length to GPUs, parallelism and concurrency.

Memory model, per GPU (docs/sizing.md has the reasoning)::

    budget   = gpu_memory_utilization x memory_bytes
    pool     = budget - weights on this GPU - overhead
    overhead = 1 GiB runtime (CUDA context, cuBLAS workspaces, allocator slack)
             + 0.5 GiB when TP x PP > 1 (NCCL and custom all-reduce buffers)
             + 0.5 GiB CUDA graphs
             + activation peak of one max_num_batched_tokens (default 8192) forward pass:
               tokens x act bytes x (4 x hidden + q/k/v/attn-out width + MLP width) per rank
             + sampler warm-up logits: max(256, max_num_seqs) x vocab x 4 bytes x 2

The pool holds KV blocks of 16 tokens; a full-length sequence takes ceil(max_model_len / 16)
blocks. KV per token per GPU is the model's divided by TP for standard attention (kv heads are
replicated once TP exceeds them), and *not* divided for MLA, whose latent every rank keeps.

Parallelism: the smallest TP in (1, 2, 4, 8) that fits on one node and is valid for the model
(divides the attention heads, the kv heads or is a multiple of them, and the MLP widths; with
awq/gptq or block-fp8, keeps each shard a whole number of 128-wide groups) and whose pool
holds max(1, min_concurrency) full-length sequences. If the largest valid TP does not, pipeline
stages of that TP are added (PP = 2 .. 4), splitting the layers the way vLLM does; beyond that
the request does not fit and the reason says what would.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .architecture import ModelArchitecture
from .catalog import GpuCatalog, GpuType
from .errors import SizingError
from .limits import MAX_OPTIONS_PER_GPU, SIZING_WORK_BUDGET
from .performance import PerformanceModel, performance_model
from .precision import (
    AWQ_GROUP_SIZE,
    DTYPE_BYTES,
    Dtype,
    KvCacheDtype,
    Quantization,
    kv_element_bytes,
    linear_bytes_per_parameter,
    resolve_dtype,
    resolve_quantization,
    weight_bytes,
)

__all__ = [
    "CUDA_GRAPH_BYTES",
    "DEFAULT_MAX_NUM_BATCHED_TOKENS",
    "KV_BLOCK_TOKENS",
    "MAX_NUM_SEQS_CAP",
    "MAX_PIPELINE_PARALLEL",
    "MULTI_GPU_OVERHEAD_BYTES",
    "RUNTIME_OVERHEAD_BYTES",
    "SLO_PROMPT_TOKENS",
    "TENSOR_PARALLEL_SIZES",
    "TYPICAL_SEQUENCE_TOKENS",
    "SizingRequest",
    "SizingResult",
    "check_work",
    "choose_gpu",
    "overhead_bytes",
    "performance_for",
    "size_at_parallelism",
    "size_for_gpu",
    "stage_layers",
]

GIB = 1 << 30
RUNTIME_OVERHEAD_BYTES = GIB
MULTI_GPU_OVERHEAD_BYTES = GIB // 2
CUDA_GRAPH_BYTES = GIB // 2
#: vLLM's default token budget per step with chunked prefill (online serving).
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
#: vLLM's default max_num_seqs; the sampler warm-up allocates logits for this many.
SAMPLER_WARMUP_SEQS = 256
KV_BLOCK_TOKENS = 16
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)
#: At most this many pipeline stages (nodes) per replica.
MAX_PIPELINE_PARALLEL = 4
#: A derived max_num_seqs never exceeds vLLM's default.
MAX_NUM_SEQS_CAP = 256
#: The sequence length a derived max_num_seqs plans for (real requests are mostly shorter
#: than max_model_len; vLLM preempts when the pool runs out).
TYPICAL_SEQUENCE_TOKENS = 2048
#: Prompt length for the TTFT estimate compared with slo.ttftP99Ms.
SLO_PROMPT_TOKENS = 4096
_DECODE_CONTEXT_TOKENS = 1024


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


class SizingRequest(BaseModel):
    """What to size: a model, its precision, and how much context and concurrency it needs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    architecture: ModelArchitecture
    dtype: Dtype = "auto"
    quantization: Quantization = "none"
    kv_cache_dtype: KvCacheDtype = "auto"
    max_model_len: int = Field(gt=0)
    min_concurrency: int = Field(default=1, ge=0)
    gpu_memory_utilization: float = Field(default=0.92, gt=0.0, le=1.0)
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    ttft_p99_ms: float | None = Field(default=None, gt=0)
    tpot_p99_ms: float | None = Field(default=None, gt=0)

    @property
    def required_sequences(self) -> int:
        return max(1, self.min_concurrency)


class SizingResult(BaseModel):
    """The answer for one GPU type. When ``fits`` is false the parallelism fields describe the
    largest option tried (0 when none could be evaluated) and ``reason`` says what would fit."""

    model_config = ConfigDict(frozen=True, alias_generator=_camel, populate_by_name=True)

    fits: bool
    reason: str
    #: CamelCase reason for a status condition: Fits, InsufficientMemory, ContextTooLong
    #: (and InvalidParallelism from size_at_parallelism).
    condition_reason: str
    warnings: tuple[str, ...] = ()
    gpu_type: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    gpus_per_replica: int
    nodes_per_replica: int
    family: str
    dtype: str
    quantization: str
    kv_cache_dtype: str
    max_model_len: int
    parameter_count: int
    active_parameter_count: int
    weight_bytes: int
    weight_bytes_per_gpu: int
    overhead_bytes_per_gpu: int
    kv_cache_bytes_per_token: int
    kv_pool_bytes_per_gpu: int
    #: Tokens of KV the replica's pool holds (every stage must hold each token).
    kv_pool_tokens: int
    max_concurrent_sequences_at_max_len: int
    max_num_seqs: int
    decode_ms_per_token_at_batch1: float
    prefill_ms_per_1k_tokens: float
    ttft_estimate_ms: float
    shm_bytes: int

    def to_summary(self) -> str:
        """One line for a status condition, e.g. '1x H100-80GB, TP=1, 38 full-length sequences'."""
        if not self.fits:
            return f"does not fit: {self.reason}"
        parallel = f"TP={self.tensor_parallel_size}"
        if self.pipeline_parallel_size > 1:
            parallel += f", PP={self.pipeline_parallel_size}"
        n = self.max_concurrent_sequences_at_max_len
        noun = "sequence" if n == 1 else "sequences"
        return f"{self.gpus_per_replica}x {self.gpu_type}, {parallel}, {n} full-length {noun}"

    def summary(self) -> str:
        return self.to_summary()

    def to_json_dict(self) -> dict[str, Any]:
        """camelCase JSON-ready dict (the `llmservice size --output json` object)."""
        data: dict[str, Any] = self.model_dump(by_alias=True, mode="json")
        data["summary"] = self.to_summary()
        return data


# -- memory model ------------------------------------------------------------------------------


def _fmt(nbytes: float) -> str:
    if abs(nbytes) >= GIB:
        return f"{nbytes / GIB:.1f} GiB"
    if abs(nbytes) >= 1 << 20:
        return f"{nbytes / (1 << 20):.0f} MiB"
    return f"{nbytes / 1024:.1f} KiB"


def _sequences(n: int) -> str:
    return f"{n} full-length sequence" + ("" if n == 1 else "s")


def _ceil(value: Fraction) -> int:
    return -(-value.numerator // value.denominator)


def stage_layers(num_layers: int, pipeline_parallel_size: int) -> list[range]:
    """vLLM's default split of layers into pipeline stages (get_pp_indices): even shares,
    the remainder going to the stages before the last, from the second-to-last backwards."""
    parts = [num_layers // pipeline_parallel_size] * pipeline_parallel_size
    for i in range(2, num_layers % pipeline_parallel_size + 2):
        parts[-i] += 1
    stages, start = [], 0
    for count in parts:
        stages.append(range(start, start + count))
        start += count
    return stages


def _tp_problem(arch: ModelArchitecture, tp: int, quantization: Quantization) -> str | None:
    """Why TP=tp cannot serve this model, or None."""
    if arch.num_attention_heads % tp:
        return f"TP={tp} does not divide {arch.num_attention_heads} attention heads"
    if not arch.uses_mla and arch.num_kv_heads % tp and tp % arch.num_kv_heads:
        return f"TP={tp} neither divides nor is a multiple of {arch.num_kv_heads} kv heads"
    widths = []
    if len(arch.moe_layers) < arch.num_layers and arch.intermediate_size:
        widths.append(("intermediate_size", arch.intermediate_size))
    if arch.is_moe:
        widths.append(("moe_intermediate_size", arch.moe_intermediate_size))
        if arch.shared_expert_intermediate_size:
            widths.append(("shared_expert_intermediate_size", arch.shared_expert_intermediate_size))
    for name, width in widths:
        if width % tp:
            return f"TP={tp} does not divide {name} {width}"
    group = 0
    if quantization in ("awq", "gptq"):
        group = AWQ_GROUP_SIZE
    elif quantization == "fp8" and arch.checkpoint_quantization == "fp8":
        group = arch.checkpoint_weight_block_size or 0
    if group and tp > 1:
        head = arch.v_head_dim if arch.uses_mla and arch.v_head_dim else arch.head_dim
        widths.append(("attention output", arch.num_attention_heads * head))
        for name, width in widths:
            if (width // tp) % group:
                return (
                    f"TP={tp} splits {name} {width} into shards of {width // tp}, not a multiple "
                    f"of the {quantization} group size {group}"
                )
    return None


@dataclass(frozen=True)
class _Precision:
    dtype: str
    quantization: Quantization
    linear: Fraction
    other: int
    kv_element: int


@dataclass(frozen=True)
class _Option:
    tp: int
    pp: int
    weights_per_gpu: int
    overhead: int
    budget: int
    pool: int
    pool_tokens: int
    sequences: int

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


def overhead_bytes(
    arch: ModelArchitecture,
    tensor_parallel_size: int,
    pipeline_parallel_size: int,
    *,
    dtype: str,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    max_num_seqs: int | None = None,
) -> int:
    """Per-GPU memory that is neither weights nor KV cache (see the module docstring)."""
    t = tensor_parallel_size
    h = arch.hidden_size
    if arch.uses_mla:
        qk = (arch.qk_nope_head_dim or 0) + (arch.qk_rope_head_dim or 0)
        attention = arch.num_attention_heads // t * (2 * qk + 2 * (arch.v_head_dim or 0))
        attention += (arch.kv_lora_rank or 0) + (arch.qk_rope_head_dim or 0)
    else:
        kv_per_rank = max(1, arch.num_kv_heads // t)
        attention = (2 * arch.num_attention_heads // t + 2 * kv_per_rank) * arch.head_dim
    mlp = 0
    if len(arch.moe_layers) < arch.num_layers:
        mlp = (3 if arch.gated_mlp else 2) * arch.intermediate_size // t
    if arch.is_moe:
        routed = arch.num_experts_per_tok * (3 * arch.moe_intermediate_size // t + h)
        mlp = max(mlp, routed + 3 * arch.shared_expert_intermediate_size // t)
    width = 4 * h + attention + mlp
    activation = max_num_batched_tokens * DTYPE_BYTES[dtype] * width
    logits = max(SAMPLER_WARMUP_SEQS, max_num_seqs or 0) * arch.vocab_size * 4 * 2
    multi = MULTI_GPU_OVERHEAD_BYTES if t * pipeline_parallel_size > 1 else 0
    return RUNTIME_OVERHEAD_BYTES + multi + CUDA_GRAPH_BYTES + activation + logits


def _evaluate(
    request: SizingRequest, gpu: GpuType, precision: _Precision, tp: int, pp: int
) -> _Option:
    arch = request.architecture
    linear, other = precision.linear, precision.other
    kv_share = min(tp, arch.num_kv_heads)
    if arch.uses_mla:
        kv_elements = arch.kv_elements_per_token_per_layer()  # the latent: whole on every rank
    else:
        kv_elements = 2 * max(1, arch.num_kv_heads // tp) * arch.head_dim
    overhead = overhead_bytes(
        arch,
        tp,
        pp,
        dtype=precision.dtype,
        max_num_batched_tokens=request.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS,
        max_num_seqs=request.max_num_seqs,
    )
    budget = int(request.gpu_memory_utilization * gpu.memory_bytes)
    stages = stage_layers(arch.num_layers, pp)
    layers = arch.layers()
    heaviest, smallest_pool, replica_tokens = 0, None, None
    for index, stage in enumerate(stages):
        # Integer sums over the stage's layers, then exact rational bytes (linear may be a
        # fraction of a byte): Fraction arithmetic per layer was most of a deep model's sizing.
        sharded = kv = replicated = unsharded = biases = 0
        for i in stage:
            layer = layers[i]
            sharded += layer.attention_linear + layer.mlp_linear + layer.expert_linear
            kv += layer.kv_linear
            replicated += layer.replicated_linear
            unsharded += layer.router + layer.norms
            biases += layer.biases
        total = sharded * linear / tp + kv * linear / kv_share + replicated * linear
        total += unsharded * other + Fraction(biases * other, tp)
        if index == 0:
            total += Fraction((arch.embedding_parameters() + arch.vision_parameters) * other, tp)
        if index == len(stages) - 1:
            head = arch.lm_head_parameters()
            if arch.tie_word_embeddings and pp > 1:
                head = arch.embedding_parameters()  # the last stage holds its own copy
            total += Fraction(head * other, tp) + arch.final_norm_parameters() * other
        stage_weights = _ceil(total)
        pool = budget - stage_weights - overhead
        per_token = len(stage) * kv_elements * precision.kv_element
        tokens = pool // per_token if pool > 0 and per_token else 0
        tokens = tokens // KV_BLOCK_TOKENS * KV_BLOCK_TOKENS
        heaviest = max(heaviest, stage_weights)
        smallest_pool = pool if smallest_pool is None else min(smallest_pool, pool)
        replica_tokens = tokens if replica_tokens is None else min(replica_tokens, tokens)
    assert smallest_pool is not None
    assert replica_tokens is not None
    blocks_per_sequence = math.ceil(request.max_model_len / KV_BLOCK_TOKENS)
    sequences = replica_tokens // (blocks_per_sequence * KV_BLOCK_TOKENS)
    return _Option(tp, pp, heaviest, overhead, budget, smallest_pool, replica_tokens, sequences)


def _options(
    request: SizingRequest, gpu: GpuType, precision: _Precision
) -> tuple[list[_Option], list[str]]:
    arch = request.architecture
    problems: list[str] = []
    valid: list[int] = []
    for tp in TENSOR_PARALLEL_SIZES:
        if tp > gpu.gpus_per_node:
            break
        problem = _tp_problem(arch, tp, precision.quantization)
        if problem is None:
            valid.append(tp)
        else:
            problems.append(problem)
    options = [_evaluate(request, gpu, precision, tp, 1) for tp in valid]
    if valid:
        for pp in range(2, MAX_PIPELINE_PARALLEL + 1):
            if pp > arch.num_layers:
                break
            options.append(_evaluate(request, gpu, precision, valid[-1], pp))
    return options, problems


# -- results -----------------------------------------------------------------------------------


def _parallel(option: _Option) -> str:
    text = f"TP={option.tp}"
    return text + (f", PP={option.pp}" if option.pp > 1 else "")


def _describe(option: _Option, gpu: GpuType) -> str:
    return f"{option.gpus}x {gpu.name} ({_parallel(option)})"


def _shortfall(option: _Option, required: int) -> str:
    if option.pool <= 0:
        return (
            f"weights {_fmt(option.weights_per_gpu)} + overhead {_fmt(option.overhead)} per GPU "
            f"exceed the {_fmt(option.budget)} budget"
        )
    return (
        f"its {_fmt(option.pool)} KV pool per GPU holds {_sequences(option.sequences)}, "
        f"{required} required"
    )


def _nodes(option: _Option, gpu: GpuType) -> int:
    return math.ceil(option.gpus / gpu.gpus_per_node)


def _shm_bytes(option: _Option, gpu: GpuType) -> int:
    """/dev/shm for a serving pod: 1 GiB per GPU the pod holds (NCCL's shared-memory transport
    and vLLM's broadcast queues between ranks), capped at 16 GiB."""
    local = min(option.gpus, gpu.gpus_per_node)
    return min(16, max(1, local)) * GIB


def performance_for(
    request: SizingRequest, gpu: GpuType, tensor_parallel_size: int
) -> PerformanceModel:
    """The roofline of ``request`` on ``tensor_parallel_size`` x ``gpu`` (for the simulator)."""
    arch = request.architecture
    dtype = resolve_dtype(request.dtype, arch)
    quantization, _ = resolve_quantization(request.quantization, arch)
    return performance_model(
        arch,
        gpu,
        tensor_parallel_size,
        dtype=dtype,
        quantization=quantization,
        kv_cache_dtype=request.kv_cache_dtype,
    )


def _slo_warnings(
    request: SizingRequest, perf: PerformanceModel, max_num_seqs: int
) -> tuple[float, list[str]]:
    warnings: list[str] = []
    prompt = min(request.max_model_len, SLO_PROMPT_TOKENS)
    ttft = perf.prefill_ms(prompt)
    if request.ttft_p99_ms is not None and ttft > request.ttft_p99_ms:
        warnings.append(
            f"estimated TTFT of a {prompt}-token prompt on an idle replica is {ttft:.0f} ms, "
            f"above ttftP99Ms {request.ttft_p99_ms:.0f}; queueing adds to it under load: use a "
            "faster GPU, more tensor parallelism or shorter prompts"
        )
    if request.tpot_p99_ms is not None:
        tpot = request.tpot_p99_ms
        single = perf.decode_step_ms(1, _DECODE_CONTEXT_TOKENS)
        typical = min(request.max_model_len, TYPICAL_SEQUENCE_TOKENS)
        if single > tpot:
            warnings.append(
                f"one sequence alone needs ~{single:.1f} ms per output token, above tpotP99Ms "
                f"{tpot:g}: use a GPU with more memory bandwidth, more tensor parallelism or "
                "fp8/awq weights"
            )
        else:
            full = perf.decode_step_ms(max_num_seqs, max_num_seqs * typical)
            if full > tpot:
                low, high = 1, max_num_seqs
                while low < high:
                    mid = (low + high + 1) // 2
                    if perf.decode_step_ms(mid, mid * typical) <= tpot:
                        low = mid
                    else:
                        high = mid - 1
                warnings.append(
                    f"with {max_num_seqs} sequences of {typical} tokens a decode step takes "
                    f"~{full:.0f} ms, above tpotP99Ms {tpot:g}; about {low} concurrent sequences "
                    "meet it: lower maxNumSeqs or add replicas"
                )
    return ttft, warnings


def _static_warnings(
    request: SizingRequest, gpu: GpuType, precision: _Precision, notes: list[str]
) -> list[str]:
    arch = request.architecture
    warnings = list(notes)
    if precision.quantization == "fp8" and not gpu.fp8:
        warnings.append(
            f"{gpu.name} has no FP8 tensor cores: vLLM runs FP8 weights as weight-only (Marlin) "
            "kernels; the memory saving holds, compute stays 16-bit"
        )
    if request.kv_cache_dtype == "fp8" and not gpu.fp8:
        warnings.append(
            f"{gpu.name} has no FP8 hardware: an fp8 KV cache works but attention converts it "
            "back to 16-bit on every read"
        )
    if arch.sliding_window_layers:
        warnings.append(
            f"{len(arch.sliding_window_layers)} of {arch.num_layers} layers use a "
            f"{arch.sliding_window}-token sliding window; sized as full attention "
            "(conservative: vLLM can hold more when it frees out-of-window blocks)"
        )
    return warnings


def _base_fields(request: SizingRequest, gpu: GpuType, precision: _Precision) -> dict[str, Any]:
    arch = request.architecture
    return {
        "gpu_type": gpu.name,
        "family": arch.family,
        "dtype": precision.dtype,
        "quantization": precision.quantization,
        "kv_cache_dtype": request.kv_cache_dtype,
        "max_model_len": request.max_model_len,
        "parameter_count": arch.parameter_count(),
        "active_parameter_count": arch.active_parameter_count(),
        "weight_bytes": weight_bytes(arch, precision.dtype, precision.quantization),
        "kv_cache_bytes_per_token": arch.kv_cache_bytes_per_token(precision.kv_element),
    }


def _empty(
    request: SizingRequest,
    gpu: GpuType,
    precision: _Precision,
    reason: str,
    condition: str,
    warnings: list[str],
) -> SizingResult:
    return SizingResult(
        fits=False,
        reason=reason,
        condition_reason=condition,
        warnings=tuple(warnings),
        tensor_parallel_size=0,
        pipeline_parallel_size=0,
        gpus_per_replica=0,
        nodes_per_replica=0,
        weight_bytes_per_gpu=0,
        overhead_bytes_per_gpu=0,
        kv_pool_bytes_per_gpu=0,
        kv_pool_tokens=0,
        max_concurrent_sequences_at_max_len=0,
        max_num_seqs=request.max_num_seqs or 0,
        decode_ms_per_token_at_batch1=0.0,
        prefill_ms_per_1k_tokens=0.0,
        ttft_estimate_ms=0.0,
        shm_bytes=0,
        **_base_fields(request, gpu, precision),
    )


def _context_limit_reason(arch: ModelArchitecture, max_model_len: int) -> str:
    limit = arch.max_model_len_limit
    source = f"max_position_embeddings {arch.max_position_embeddings}"
    if limit != arch.max_position_embeddings:
        source += f" with {arch.rope_scaling_type} rope scaling x{arch.rope_scaling_factor:g}"
    return (
        f"max_model_len {max_model_len} exceeds the model's context limit of {limit} tokens "
        f"({source}); lower engine.maxModelLen, or extend the context with rope_scaling in "
        "spec.model.architecture if the model supports it"
    )


def _not_fit_reason(
    request: SizingRequest, gpu: GpuType, precision: _Precision, last: _Option, total_weights: int
) -> str:
    desc = _describe(last, gpu)
    usable = last.budget - last.overhead
    quantized = precision.quantization in ("awq", "gptq")
    if last.pool <= 0:
        bigger = "a bigger GPU" if quantized else "fp8/awq weights or a bigger GPU"
        return (
            f"needs {_fmt(total_weights)} for weights alone; the largest option, {desc}, gives "
            f"{_fmt(usable * last.gpus)} for weights and KV cache ({_fmt(usable)} per GPU after "
            f"{_fmt(last.overhead)} overhead at gpu_memory_utilization "
            f"{request.gpu_memory_utilization:g}): use {bigger}"
        )
    advice = ["a shorter maxModelLen", "a lower minConcurrency"]
    if request.kv_cache_dtype != "fp8":
        advice.append("kvCacheDtype fp8")
    if not quantized and precision.quantization not in ("fp8", "int8"):
        advice.append("fp8/awq weights")
    advice.append("a bigger GPU")
    return (
        f"the largest option, {desc}, leaves {_fmt(last.pool)} per GPU for the KV cache after "
        f"{_fmt(last.weights_per_gpu)} of weights: {_sequences(last.sequences)} of "
        f"{request.max_model_len} tokens, {request.required_sequences} required; use "
        + ", ".join(advice[:-1])
        + f" or {advice[-1]}"
    )


def _precision(request: SizingRequest) -> tuple[_Precision, list[str]]:
    arch = request.architecture
    dtype = resolve_dtype(request.dtype, arch)
    quantization, notes = resolve_quantization(request.quantization, arch)
    precision = _Precision(
        dtype=dtype,
        quantization=quantization,
        linear=linear_bytes_per_parameter(quantization, dtype, arch),
        other=DTYPE_BYTES[dtype],
        kv_element=kv_element_bytes(request.kv_cache_dtype, dtype),
    )
    return precision, notes


def _fit_reason(request: SizingRequest, gpu: GpuType, option: _Option) -> str:
    return (
        f"{_describe(option, gpu)}: weights {_fmt(option.weights_per_gpu)} per GPU, "
        f"overhead {_fmt(option.overhead)}, KV pool {_fmt(option.pool)} per GPU holds "
        f"{_sequences(option.sequences)} of {request.max_model_len} tokens "
        f"({request.required_sequences} required)"
    )


def _insufficient(
    request: SizingRequest,
    gpu: GpuType,
    precision: _Precision,
    option: _Option,
    reason: str,
    warnings: list[str],
) -> SizingResult:
    """The largest layout tried, refused for memory with ``reason``."""
    return _result(
        request,
        gpu,
        precision,
        option,
        fits=False,
        reason=reason,
        condition="InsufficientMemory",
        warnings=warnings,
    )


def _result(
    request: SizingRequest,
    gpu: GpuType,
    precision: _Precision,
    option: _Option,
    *,
    fits: bool,
    reason: str,
    condition: str,
    warnings: list[str],
) -> SizingResult:
    required = request.required_sequences
    nodes = _nodes(option, gpu)
    if option.tp > 1 and gpu.interconnect == "pcie":
        warnings.append(
            f"TP={option.tp} over PCIe ({gpu.name}): all-reduce latency adds to every step and "
            "is not in the estimates"
        )
    if fits and nodes > 1:
        warnings.append(
            f"a replica spans {nodes} nodes (PP={option.pp}): it is served as a "
            "LeaderWorkerSet group (the cluster needs its controller); fp8/awq weights or a "
            "bigger GPU may avoid it"
        )

    typical = min(request.max_model_len, TYPICAL_SEQUENCE_TOKENS)
    if request.max_num_seqs is not None:
        max_num_seqs = request.max_num_seqs
        if fits and max_num_seqs < required:
            warnings.append(
                f"maxNumSeqs {max_num_seqs} is below minConcurrency {required}: vLLM runs at "
                f"most {max_num_seqs} sequences at once"
            )
        if fits and max_num_seqs * typical > option.pool_tokens:
            warnings.append(
                f"maxNumSeqs {max_num_seqs} sequences of {typical} tokens need "
                f"{max_num_seqs * typical} KV tokens, the pool holds {option.pool_tokens}: vLLM "
                "will preempt (and recompute) sequences when it runs out"
            )
    else:
        max_num_seqs = min(MAX_NUM_SEQS_CAP, max(option.sequences, option.pool_tokens // typical))
        max_num_seqs = max(1, max_num_seqs, required if fits else 1)

    perf = performance_for(request, gpu, option.tp)
    ttft, slo = _slo_warnings(request, perf, max_num_seqs) if fits else (0.0, [])
    warnings.extend(slo)
    return SizingResult(
        fits=fits,
        reason=reason,
        condition_reason=condition,
        warnings=tuple(warnings),
        tensor_parallel_size=option.tp,
        pipeline_parallel_size=option.pp,
        gpus_per_replica=option.gpus,
        nodes_per_replica=nodes,
        weight_bytes_per_gpu=option.weights_per_gpu,
        overhead_bytes_per_gpu=option.overhead,
        kv_pool_bytes_per_gpu=max(0, option.pool),
        kv_pool_tokens=option.pool_tokens,
        max_concurrent_sequences_at_max_len=option.sequences,
        max_num_seqs=max_num_seqs,
        decode_ms_per_token_at_batch1=round(perf.decode_step_ms(1, _DECODE_CONTEXT_TOKENS), 3),
        prefill_ms_per_1k_tokens=round(perf.prefill_ms(1024), 3),
        ttft_estimate_ms=round(
            ttft if fits else perf.prefill_ms(min(request.max_model_len, SLO_PROMPT_TOKENS)), 3
        ),
        shm_bytes=_shm_bytes(option, gpu),
        **_base_fields(request, gpu, precision),
    )


def check_work(arch: ModelArchitecture, gpu_types: int) -> None:
    """Refuse, before any layer is looked at, a sizing over SIZING_WORK_BUDGET layer
    evaluations: its time grows with layers x options (limits.py)."""
    work = arch.num_layers * MAX_OPTIONS_PER_GPU * gpu_types
    if work > SIZING_WORK_BUDGET:
        raise SizingError(
            f"sizing {arch.num_layers:,} layers on {gpu_types} GPU types takes {work:,} layer "
            f"evaluations, over the budget of {SIZING_WORK_BUDGET:,}: name fewer GPU types in "
            "resources.allowedGPUs, or fix num_hidden_layers",
            field="model.architecture.num_hidden_layers",
        )


def size_for_gpu(request: SizingRequest, gpu: GpuType) -> SizingResult:
    """Size ``request`` on one GPU type: the smallest fitting parallelism, or why none fits."""
    arch = request.architecture
    check_work(arch, 1)
    precision, notes = _precision(request)
    warnings = _static_warnings(request, gpu, precision, notes)
    if request.max_model_len > arch.max_model_len_limit:
        reason = _context_limit_reason(arch, request.max_model_len)
        return _empty(request, gpu, precision, reason, "ContextTooLong", warnings)
    options, problems = _options(request, gpu, precision)
    if not options:
        reason = (
            "no tensor-parallel size fits this model on " + gpu.name + ": " + "; ".join(problems)
        )
        return _empty(request, gpu, precision, reason, "InsufficientMemory", warnings)
    required = request.required_sequences
    chosen_index = next((i for i, o in enumerate(options) if o.sequences >= required), None)
    if chosen_index is None:
        option = options[-1]
        total = weight_bytes(arch, precision.dtype, precision.quantization)
        reason = _not_fit_reason(request, gpu, precision, option, total)
        return _insufficient(request, gpu, precision, option, reason, warnings)
    option = options[chosen_index]
    reason = _fit_reason(request, gpu, option)
    if chosen_index > 0:
        previous = options[chosen_index - 1]
        reason = (
            f"{_describe(previous, gpu)} is not enough ({_shortfall(previous, required)}); "
            + reason
        )
    if option.pp > 1:
        nodes = _nodes(option, gpu)
        reason += (
            f"; TP={option.tp} alone is not enough, so the layers are split into "
            f"{option.pp} pipeline stages" + (f" across {nodes} nodes" if nodes > 1 else "")
        )
    return _result(
        request,
        gpu,
        precision,
        option,
        fits=True,
        reason=reason,
        condition="Fits",
        warnings=warnings,
    )


def size_at_parallelism(
    request: SizingRequest,
    gpu: GpuType,
    tensor_parallel_size: int,
    pipeline_parallel_size: int = 1,
) -> SizingResult:
    """Size ``request`` at exactly TP x PP on ``gpu`` (e.g. what a running engine was given).

    Fits when the parallelism is valid for the model and its pool holds
    max(1, min_concurrency) full-length sequences; otherwise the reason says why.
    """
    arch = request.architecture
    precision, notes = _precision(request)
    warnings = _static_warnings(request, gpu, precision, notes)
    if request.max_model_len > arch.max_model_len_limit:
        reason = _context_limit_reason(arch, request.max_model_len)
        return _empty(request, gpu, precision, reason, "ContextTooLong", warnings)
    tp, pp = tensor_parallel_size, pipeline_parallel_size
    problem = _tp_problem(arch, tp, precision.quantization) if tp >= 1 else f"TP={tp}"
    if problem is None and not 1 <= pp <= arch.num_layers:
        problem = f"PP={pp} must be between 1 and the {arch.num_layers} layers"
    if problem is not None:
        return _empty(request, gpu, precision, problem, "InvalidParallelism", warnings)
    option = _evaluate(request, gpu, precision, tp, pp)
    if option.sequences >= request.required_sequences:
        return _result(
            request,
            gpu,
            precision,
            option,
            fits=True,
            condition="Fits",
            reason=_fit_reason(request, gpu, option),
            warnings=warnings,
        )
    reason = f"{_describe(option, gpu)} is not enough: " + _shortfall(
        option, request.required_sequences
    )
    return _insufficient(request, gpu, precision, option, reason, warnings)


def _allowed(catalog: GpuCatalog, allowed: Sequence[str] | None) -> list[GpuType]:
    if not allowed:
        return list(catalog.gpus)
    gpus: list[GpuType] = []
    for name in allowed:
        gpu = catalog.get(name, field="resources.allowedGPUs")
        if gpu not in gpus:
            gpus.append(gpu)
    return gpus


def choose_gpu(
    request: SizingRequest,
    catalog: GpuCatalog,
    gpu: str = "auto",
    allowed: Sequence[str] | None = None,
) -> SizingResult:
    """Size on the named GPU, or with ``gpu="auto"`` on the cheapest allowed GPU that fits.

    Cheapest = GPUs per replica x relative_cost_per_hour; ties go to fewer GPUs, then more
    memory bandwidth. ``allowed`` (empty: the whole catalog) limits both modes; a named GPU
    outside it, or an unknown name, raises SizingError.
    """
    candidates = _allowed(catalog, allowed)
    check_work(request.architecture, 1 if gpu.strip().lower() != "auto" else len(candidates))
    if gpu.strip().lower() != "auto":
        chosen = catalog.get(gpu, field="resources.gpu")
        if allowed and chosen not in candidates:
            raise SizingError(
                f"GPU {chosen.name} is not in resources.allowedGPUs "
                f"({', '.join(g.name for g in candidates)})",
                field="resources.gpu",
            )
        return size_for_gpu(request, chosen)
    results = [(g, size_for_gpu(request, g)) for g in candidates]
    fitting = [(g, r) for g, r in results if r.fits]
    if fitting:
        fitting.sort(
            key=lambda gr: (
                gr[1].gpus_per_replica * gr[0].relative_cost_per_hour,
                gr[1].gpus_per_replica,
                -gr[0].hbm_bandwidth_bytes_per_s,
                gr[0].name,
            )
        )
        best_gpu, best = fitting[0]
        cost = best.gpus_per_replica * best_gpu.relative_cost_per_hour
        others = [
            f"{r.gpus_per_replica}x {g.name} ({r.gpus_per_replica * g.relative_cost_per_hour:g})"
            for g, r in fitting[1:4]
        ]
        unfit = [g.name for g, r in results if not r.fits]
        note = (
            f"gpu auto: cheapest fitting of {len(candidates)} allowed GPU types at relative cost "
            f"{cost:g}/h"
        )
        if others:
            note += "; next: " + ", ".join(others)
        if unfit:
            note += "; too small: " + ", ".join(unfit)
        return best.model_copy(update={"reason": f"{note}. {best.reason}"})
    if all(r.condition_reason == "ContextTooLong" for _, r in results):
        return results[0][1]
    _, largest = max(
        results, key=lambda gr: (gr[1].gpus_per_replica * gr[0].memory_bytes, gr[0].name)
    )
    details = "; ".join(f"{g.name}: {r.reason}" for g, r in results)
    return largest.model_copy(update={"reason": f"no allowed GPU type fits ({details})"})
