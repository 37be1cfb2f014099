"""A model's architecture, parsed from its HuggingFace ``config.json``, and exact counts from it.

:func:`parse_hf_config` reads the keys that decide memory and speed for the families vLLM
serves most (Llama, Mistral, Mixtral, Qwen2/2.5, Qwen2-MoE, Qwen3, Qwen3-MoE, Gemma 1/2/3,
Phi-3, DeepSeek-V2/V3 with MLA, GPT-NeoX) and returns a frozen :class:`ModelArchitecture`.
The spec's ``model.architecture`` override is a dict of the same keys, merged over the config.

Counting follows the module layout of each family's transformers implementation, so
:meth:`ModelArchitecture.parameter_count` reproduces the published totals exactly (see the
worked examples in ``tests/unit/sizing``).  Two things are not counted: DeepSeek-V3's
multi-token-prediction layer (``num_nextn_predict_layers``; vLLM does not load it unless
speculative decoding asks for it) and buffers that are not parameters (rotary tables).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .errors import SizingError
from .limits import (
    ARCHITECTURE_INTEGERS,
    MAX_LAYERS,
    MAX_POSITIONS,
    MAX_ROPE_FACTOR,
    VISION_INTEGERS,
    bounded_int,
    shown_number,
)

__all__ = [
    "SUPPORTED_FAMILIES",
    "LayerParameters",
    "ModelArchitecture",
    "parse_hf_config",
]

_FIELD = "model.architecture"

#: model_type -> family. Aliases map to the family whose layout they share.
_FAMILY_OF_MODEL_TYPE: dict[str, str] = {
    "llama": "llama",
    "mistral": "mistral",
    "mixtral": "mixtral",
    "qwen2": "qwen2",
    "qwen2_moe": "qwen2_moe",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3_moe",
    "gemma": "gemma",
    "gemma2": "gemma2",
    "gemma3": "gemma3",
    "gemma3_text": "gemma3",
    "phi3": "phi3",
    "deepseek_v2": "deepseek_v2",
    "deepseek_v3": "deepseek_v3",
    "gpt_neox": "gpt_neox",
}

#: ``architectures[0]`` -> model_type, for configs without a model_type.
_MODEL_TYPE_OF_ARCHITECTURE: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "GemmaForCausalLM": "gemma",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
    "Gemma3ForConditionalGeneration": "gemma3",
    "Phi3ForCausalLM": "phi3",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "GPTNeoXForCausalLM": "gpt_neox",
}

SUPPORTED_FAMILIES: tuple[str, ...] = tuple(sorted(set(_FAMILY_OF_MODEL_TYPE.values())))

#: transformers' Gemma3TextConfig defaults. HF writes nested sub-configs as a diff against
#: these, so google/gemma-3-4b-it's text_config omits heads, kv heads, head_dim and vocab.
_GEMMA3_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_208,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "max_position_embeddings": 131_072,
    "tie_word_embeddings": True,
    "attention_bias": False,
    "sliding_window": 4096,
    "sliding_window_pattern": 6,
}
#: transformers' SiglipVisionConfig defaults (the Gemma 3 vision tower).
_SIGLIP_DEFAULTS: dict[str, Any] = {
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 12,
    "num_channels": 3,
    "image_size": 224,
    "patch_size": 16,
}

_DTYPE_ALIASES: dict[str, str] = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
}

#: Keys vLLM reads the context limit from (it takes the smallest present).
_MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "max_sequence_length",
)


@dataclass(frozen=True)
class LayerParameters:
    """Parameters of one decoder layer, split by how they are stored and sharded.

    ``attention_linear``, ``mlp_linear`` and ``expert_linear`` are tensor-parallel sharded
    linear weights; ``kv_linear`` (k/v projections) is sharded across at most ``num_kv_heads``
    ranks and replicated beyond; ``replicated_linear`` (MLA's q_a/kv_a down-projections) sits
    whole on every rank. These are the weights quantization shrinks. ``router`` (MoE gates,
    DeepSeek-V3's correction bias, Qwen2-MoE's shared-expert gate), ``norms`` and ``biases`` stay
    in the model dtype.
    """

    attention_linear: int = 0
    kv_linear: int = 0
    replicated_linear: int = 0
    mlp_linear: int = 0
    expert_linear: int = 0
    active_expert_linear: int = 0
    router: int = 0
    norms: int = 0
    biases: int = 0

    @property
    def total(self) -> int:
        return (
            self.attention_linear
            + self.kv_linear
            + self.replicated_linear
            + self.mlp_linear
            + self.expert_linear
            + self.router
            + self.norms
            + self.biases
        )

    @property
    def active(self) -> int:
        """Parameters one token touches: routed experts only the top-k."""
        return self.total - self.expert_linear + self.active_expert_linear


class ModelArchitecture(BaseModel):
    """What sizing needs to know about a model, parsed from config.json (see parse_hf_config)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    family: str = Field(description="Normalised model_type, one of SUPPORTED_FAMILIES.")
    num_layers: int = Field(gt=0, le=MAX_LAYERS)
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0, description="KV heads (GQA); MLA: as config, unused for KV.")
    head_dim: int = Field(
        gt=0, description="Explicit head_dim, else hidden/heads; MLA: qk_nope + qk_rope."
    )
    intermediate_size: int = Field(ge=0, description="Dense MLP width (0: no dense layers).")
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool
    max_position_embeddings: int = Field(gt=0)
    torch_dtype: str | None = Field(default=None, description="config.json dtype, normalised.")
    rope_scaling_type: str | None = None
    rope_scaling_factor: float | None = None
    rope_original_max_position_embeddings: int | None = None
    # layout details
    qkv_bias: bool = False
    o_proj_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    gated_mlp: bool = True
    norms_per_layer: int = 2
    norm_bias: bool = False
    # mixture of experts
    num_experts: int = Field(default=0, ge=0, description="Routed experts per MoE layer.")
    num_experts_per_tok: int = Field(default=0, ge=0)
    moe_intermediate_size: int = Field(default=0, ge=0)
    num_shared_experts: int = Field(default=0, ge=0)
    shared_expert_intermediate_size: int = Field(
        default=0, ge=0, description="Width of the (fused) shared-expert MLP."
    )
    shared_expert_gate: bool = False
    router_bias: bool = False
    moe_layers: tuple[int, ...] = ()
    # multi-head latent attention (DeepSeek-V2/V3)
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    # sliding-window attention
    sliding_window: int | None = None
    sliding_window_layers: tuple[int, ...] = ()
    # extras
    vision_parameters: int = Field(default=0, ge=0, description="Vision tower + projector.")
    checkpoint_quantization: str | None = Field(
        default=None, description="quantization_config.quant_method of a pre-quantized checkpoint."
    )
    checkpoint_weight_block_size: int | None = None

    # -- derived ----------------------------------------------------------------------------

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0 and bool(self.moe_layers)

    @property
    def uses_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def max_model_len_limit(self) -> int:
        """The longest context vLLM accepts without an override, as vLLM derives it.

        Like vLLM's ``_get_and_verify_max_len``: rope scaling multiplies max_position_embeddings
        by its factor (yarn: original_max_position_embeddings x factor), except the types whose
        max_position_embeddings is already the scaled length (llama3, longrope/su) and Gemma 3.
        """
        limit = self.max_position_embeddings
        kind = self.rope_scaling_type
        if kind is None or self.family == "gemma3" or kind in ("llama3", "longrope", "su"):
            return limit
        factor = self.rope_scaling_factor if self.rope_scaling_factor is not None else 1.0
        if kind == "yarn" and self.rope_original_max_position_embeddings is not None:
            limit = self.rope_original_max_position_embeddings
        return int(limit * factor)

    def embedding_parameters(self) -> int:
        return self.vocab_size * self.hidden_size

    def lm_head_parameters(self) -> int:
        """Output projection; 0 when tied to the embedding (counted once)."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    def final_norm_parameters(self) -> int:
        return self.hidden_size * (2 if self.norm_bias else 1)

    def layer_parameters(self, index: int) -> LayerParameters:
        """The parameters of decoder layer ``index`` (0-based)."""
        if not 0 <= index < self.num_layers:
            raise IndexError(f"layer {index} out of range 0..{self.num_layers - 1}")
        return self._layer(index in self.moe_layers and self.num_experts > 0)

    def _layer(self, moe: bool) -> LayerParameters:
        """A MoE layer's parameters, or a dense one's: the only two kinds of layer."""
        h = self.hidden_size
        norm_width = 2 if self.norm_bias else 1
        norms = self.norms_per_layer * h * norm_width
        biases = 0
        replicated = 0
        if self.uses_mla:
            assert self.kv_lora_rank is not None
            nope = self.qk_nope_head_dim or 0
            rope = self.qk_rope_head_dim or 0
            v_dim = self.v_head_dim or 0
            heads = self.num_attention_heads
            q_out = heads * (nope + rope)
            if self.q_lora_rank:
                replicated += h * self.q_lora_rank  # q_a_proj
                attention = self.q_lora_rank * q_out  # q_b_proj
                norms += self.q_lora_rank  # q_a_layernorm
            else:
                attention = h * q_out  # q_proj
            replicated += h * (self.kv_lora_rank + rope)  # kv_a_proj_with_mqa
            norms += self.kv_lora_rank  # kv_a_layernorm
            attention += self.kv_lora_rank * heads * (nope + v_dim)  # kv_b_proj
            attention += heads * v_dim * h  # o_proj
            kv = 0
        else:
            q_width = self.num_attention_heads * self.head_dim
            kv_width = self.num_kv_heads * self.head_dim
            attention = h * q_width * 2  # q_proj + o_proj
            kv = h * kv_width * 2  # k_proj + v_proj
            if self.qkv_bias:
                biases += q_width + 2 * kv_width
            if self.o_proj_bias:
                biases += h
            if self.qk_norm:
                norms += 2 * self.head_dim
        mlp = expert = active = router = 0
        matrices = 3 if self.gated_mlp else 2
        if moe:
            one_expert = 3 * h * self.moe_intermediate_size
            expert = self.num_experts * one_expert
            active = self.num_experts_per_tok * one_expert
            router = h * self.num_experts + (self.num_experts if self.router_bias else 0)
            if self.shared_expert_intermediate_size:
                mlp = 3 * h * self.shared_expert_intermediate_size
            if self.shared_expert_gate:
                router += h
        else:
            mlp = matrices * h * self.intermediate_size
            if self.mlp_bias:
                biases += (matrices - 1) * self.intermediate_size + h
        return LayerParameters(
            attention_linear=attention,
            kv_linear=kv,
            replicated_linear=replicated,
            mlp_linear=mlp,
            expert_linear=expert,
            active_expert_linear=active,
            router=router,
            norms=norms,
            biases=biases,
        )

    def layers(self) -> list[LayerParameters]:
        """Every layer's parameters, in order (each kind computed once)."""
        moe_layers = frozenset(self.moe_layers) if self.num_experts > 0 else frozenset()
        dense = self._layer(False)
        moe = self._layer(True) if moe_layers else dense
        return [moe if i in moe_layers else dense for i in range(self.num_layers)]

    def parameter_count(self) -> int:
        """All parameters stored in the checkpoint (every expert; tied embeddings once)."""
        return (
            self.embedding_parameters()
            + self.lm_head_parameters()
            + self.final_norm_parameters()
            + self.vision_parameters
            + sum(layer.total for layer in self.layers())
        )

    def active_parameter_count(self) -> int:
        """Parameters one token passes through: MoE counts top-k routed + shared experts."""
        return (
            self.embedding_parameters()
            + self.lm_head_parameters()
            + self.final_norm_parameters()
            + self.vision_parameters
            + sum(layer.active for layer in self.layers())
        )

    def kv_elements_per_token_per_layer(self) -> int:
        """Cache elements one token adds to one layer (all KV heads).

        Standard attention: K and V, ``2 x num_kv_heads x head_dim``. MLA: the compressed
        latent plus the decoupled rope key, ``kv_lora_rank + qk_rope_head_dim``, one "head", no
        factor 2 (that is what vLLM's MLA backends store).
        """
        if self.uses_mla:
            assert self.kv_lora_rank is not None
            return self.kv_lora_rank + (self.qk_rope_head_dim or 0)
        return 2 * self.num_kv_heads * self.head_dim

    def kv_cache_bytes_per_token(self, element_bytes: int = 2) -> int:
        """KV cache bytes per token over all layers, for the whole model (before TP/PP).

        Sliding-window layers are counted at full length: see docs/sizing.md.
        """
        return self.num_layers * self.kv_elements_per_token_per_layer() * element_bytes


# -- parsing -----------------------------------------------------------------------------------


def _missing_error(family: str, missing: list[str]) -> SizingError:
    keys = ", ".join(missing)
    return SizingError(
        f"the {family} config.json lacks {keys}; set spec.model.architecture with these keys "
        "(the config.json names) to size this model",
        field=_FIELD,
        missing=tuple(missing),
    )


class _Reader:
    """Typed access to the merged config, collecting every missing key before failing."""

    def __init__(
        self,
        family: str,
        values: Mapping[str, Any],
        limits: Mapping[str, tuple[int, int]] = ARCHITECTURE_INTEGERS,
        prefix: str = "",
    ) -> None:
        self.family = family
        self.values = values
        self.limits = limits
        self.prefix = prefix  # "vision_config." for the vision tower's keys
        self.missing: list[str] = []

    def has(self, key: str) -> bool:
        return self.values.get(key) is not None

    def int_(self, key: str, default: int | None = None, *, minimum: int = 1) -> int:
        value = self.values.get(key)
        if value is None:
            if default is not None:
                return default
            if key not in self.missing:
                self.missing.append(key)
            return minimum
        maximum = self.limits.get(key, (0, MAX_POSITIONS))[1]
        return bounded_int(value, f"{self.prefix}{key}", minimum, maximum)

    def bool_(self, key: str, default: bool) -> bool:
        value = self.values.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise SizingError(
                f"config key {key} must be true or false, got {value!r:.80}", field=_FIELD
            )
        return value

    def check(self) -> None:
        if self.missing:
            raise _missing_error(self.family, self.missing)


def _flatten(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None, bool]:
    """One level of keys (``text_config`` merged in), the vision config, and whether nested.

    A key set (non-null) both at the top level and in ``text_config`` keeps the top-level
    value: real configs do not repeat decoder keys at the top, so one there is an override
    merged into the dict (``{**config, **override}``).
    """
    flat = {k: v for k, v in config.items() if k not in ("text_config", "vision_config")}
    text = config.get("text_config")
    nested = isinstance(text, Mapping)
    if isinstance(text, Mapping):
        for key, value in text.items():
            if key == "model_type" and "model_type" in flat:
                flat["text_model_type"] = value
            elif flat.get(key) is None:
                flat[key] = value
    vision = config.get("vision_config")
    return flat, dict(vision) if isinstance(vision, Mapping) else None, nested


def _model_type(values: Mapping[str, Any]) -> str | None:
    for key in ("model_type", "text_model_type"):
        value = values.get(key)
        if isinstance(value, str) and value in _FAMILY_OF_MODEL_TYPE:
            return value
    architectures = values.get("architectures")
    if isinstance(architectures, list):
        for name in architectures:
            if isinstance(name, str) and name in _MODEL_TYPE_OF_ARCHITECTURE:
                return _MODEL_TYPE_OF_ARCHITECTURE[name]
    return None


def _rope(values: Mapping[str, Any]) -> tuple[str | None, float | None, int | None]:
    """(type, factor, original_max_position_embeddings) from rope_scaling or rope_parameters."""
    rope = values.get("rope_scaling")
    if not isinstance(rope, Mapping):
        rope = values.get("rope_parameters")  # transformers >= 5 spelling
        if isinstance(rope, Mapping) and isinstance(rope.get("full_attention"), Mapping):
            rope = rope["full_attention"]  # per-layer-type parameters (Gemma 3 in v5)
    if not isinstance(rope, Mapping):
        return None, None, None
    kind = rope.get("rope_type", rope.get("type"))
    if not isinstance(kind, str) or kind == "default":
        return None, None, None
    factor = rope.get("factor")
    if isinstance(factor, bool) or not isinstance(factor, int | float | None):
        factor = math.nan
    if factor is not None and not 0 < factor <= MAX_ROPE_FACTOR:
        raise SizingError(
            f"config key rope_scaling.factor must be a number above 0 and at most "
            f"{MAX_ROPE_FACTOR:g}, got {shown_number(factor)}; fix it in spec.model.architecture",
            field=f"{_FIELD}.rope_scaling",
        )
    original = rope.get("original_max_position_embeddings")
    if original is not None:
        key = "rope_scaling.original_max_position_embeddings"
        original = bounded_int(original, key, 1, MAX_POSITIONS)
    return kind, None if factor is None else float(factor), original


def _dtype(values: Mapping[str, Any]) -> str | None:
    raw = values.get("torch_dtype", values.get("dtype"))
    if isinstance(raw, str):
        return _DTYPE_ALIASES.get(raw.removeprefix("torch."))
    return None


def _quantization(values: Mapping[str, Any]) -> tuple[str | None, int | None]:
    quant = values.get("quantization_config")
    if not isinstance(quant, Mapping):
        return None, None
    method = quant.get("quant_method")
    block = quant.get("weight_block_size")
    block_size = None
    if isinstance(block, list) and block:
        key = "quantization_config.weight_block_size"
        block_size = bounded_int(block[0], key, 1, 65_536)
    return (str(method).lower() if method is not None else None), block_size


def _sliding_layers(family: str, r: _Reader, num_layers: int) -> tuple[int | None, tuple[int, ...]]:
    window = r.values.get("sliding_window")
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        return None, ()
    layer_types = r.values.get("layer_types")
    if isinstance(layer_types, list) and len(layer_types) == num_layers:
        layers = tuple(i for i, kind in enumerate(layer_types) if kind == "sliding_attention")
    elif family in ("mistral", "mixtral", "phi3"):
        layers = tuple(range(num_layers))
    elif family in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        if not r.bool_("use_sliding_window", False):
            return None, ()
        first = r.int_("max_window_layers", num_layers, minimum=0)
        layers = tuple(range(first, num_layers))
    elif family == "gemma2":
        layers = tuple(i for i in range(num_layers) if i % 2 == 0)
    elif family == "gemma3":
        pattern = r.values.get("sliding_window_pattern", r.values.get("_sliding_window_pattern"))
        period = pattern if isinstance(pattern, int) and pattern > 0 else 6
        layers = tuple(i for i in range(num_layers) if (i + 1) % period != 0)
    else:
        return None, ()
    return (window, layers) if layers else (None, ())


def _moe_layers(family: str, r: _Reader, num_layers: int) -> tuple[int, ...]:
    if family == "mixtral":
        return tuple(range(num_layers))
    if family in ("qwen2_moe", "qwen3_moe"):
        step = r.int_("decoder_sparse_step", 1)
        only_mlp = _layer_indices(r.values.get("mlp_only_layers"), "mlp_only_layers")
        return tuple(i for i in range(num_layers) if i not in only_mlp and (i + 1) % step == 0)
    if family in ("deepseek_v2", "deepseek_v3"):
        if not r.has("n_routed_experts"):
            return ()
        first_dense = r.int_("first_k_dense_replace", 0, minimum=0)
        freq = r.int_("moe_layer_freq", 1)
        return tuple(i for i in range(num_layers) if i >= first_dense and i % freq == 0)
    return ()


def _layer_indices(value: Any, key: str) -> frozenset[int]:
    """A config's list of layer indices (``mlp_only_layers``), as a set."""
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in value
    ):
        raise SizingError(
            f"config key {key} must be a list of layer indices, got {value!r:.80}; fix it in "
            "spec.model.architecture",
            field=f"{_FIELD}.{key}",
        )
    return frozenset(value)


def _siglip_parameters(vision: Mapping[str, Any], text_hidden: int) -> int:
    """SigLIP vision tower + Gemma 3 multimodal projector (exact for vision_use_head=false)."""
    v = {**_SIGLIP_DEFAULTS, **{k: x for k, x in vision.items() if x is not None}}
    r = _Reader("gemma3", v, VISION_INTEGERS, "vision_config.")
    hidden, inter, layers = (
        r.int_("hidden_size"),
        r.int_("intermediate_size"),
        r.int_("num_hidden_layers"),
    )
    patch, image, channels = r.int_("patch_size"), r.int_("image_size"), r.int_("num_channels")
    patch_embedding = channels * patch * patch * hidden + hidden
    position_embedding = (image // patch) ** 2 * hidden
    per_layer = (
        2 * 2 * hidden  # layer_norm1, layer_norm2 (weight + bias)
        + 4 * (hidden * hidden + hidden)  # q, k, v, out projections with bias
        + (hidden * inter + inter)  # fc1
        + (inter * hidden + hidden)  # fc2
    )
    post_layernorm = 2 * hidden
    projector = hidden * text_hidden + hidden  # mm_input_projection_weight + mm_soft_emb_norm
    return patch_embedding + position_embedding + layers * per_layer + post_layernorm + projector


# -- the families --------------------------------------------------------------------------------

_Fields = dict[str, Any]


def _attention_bias(r: _Reader) -> _Fields:
    """Llama-style: one ``attention_bias`` for q/k/v/o, one ``mlp_bias``, both off by default."""
    bias = r.bool_("attention_bias", False)
    return {"qkv_bias": bias, "o_proj_bias": bias, "mlp_bias": r.bool_("mlp_bias", False)}


def _qkv_bias(r: _Reader) -> _Fields:
    """Qwen2: q/k/v always carry a bias, o_proj and the MLP never."""
    return {"qkv_bias": True}


def _no_bias(r: _Reader) -> _Fields:
    return {}


def _gpt_neox_layout(r: _Reader) -> _Fields:
    """GPT-NeoX: biases everywhere (attention ones switchable), a plain 2-matrix MLP, and
    LayerNorm with a bias."""
    bias = r.bool_("attention_bias", True)
    return {
        "qkv_bias": bias,
        "o_proj_bias": bias,
        "mlp_bias": True,
        "gated_mlp": False,
        "norm_bias": True,
    }


def _no_experts(r: _Reader, moe_layers: tuple[int, ...]) -> _Fields:
    return {}


def _mixtral_experts(r: _Reader, moe_layers: tuple[int, ...]) -> _Fields:
    return {
        "num_experts": r.int_("num_local_experts"),
        "num_experts_per_tok": r.int_("num_experts_per_tok"),
        "moe_intermediate_size": r.int_("intermediate_size"),
    }


def _qwen3_moe_experts(r: _Reader, moe_layers: tuple[int, ...]) -> _Fields:
    return {
        "num_experts": r.int_("num_experts"),
        "num_experts_per_tok": r.int_("num_experts_per_tok"),
        "moe_intermediate_size": r.int_("moe_intermediate_size"),
    }


def _qwen2_moe_experts(r: _Reader, moe_layers: tuple[int, ...]) -> _Fields:
    """Qwen3-MoE's experts plus one gated shared expert of its own width."""
    fields = _qwen3_moe_experts(r, moe_layers)
    shared = r.int_("shared_expert_intermediate_size", 0, minimum=0)
    return {
        **fields,
        "shared_expert_intermediate_size": shared,
        "num_shared_experts": 1 if shared else 0,
        "shared_expert_gate": bool(shared),
    }


def _deepseek_attention_and_experts(r: _Reader, moe_layers: tuple[int, ...]) -> _Fields:
    """Multi-head latent attention, and (where there are MoE layers) routed + shared experts."""
    fields: _Fields = {
        "kv_lora_rank": r.int_("kv_lora_rank"),
        "q_lora_rank": r.int_("q_lora_rank", 0, minimum=0) or None,
        "qk_nope_head_dim": r.int_("qk_nope_head_dim"),
        "qk_rope_head_dim": r.int_("qk_rope_head_dim"),
        "v_head_dim": r.int_("v_head_dim"),
    }
    if not moe_layers:
        return fields
    shared = r.int_("n_shared_experts", 0, minimum=0)
    moe_width = r.int_("moe_intermediate_size")
    return {
        **fields,
        "num_experts": r.int_("n_routed_experts"),
        "num_experts_per_tok": r.int_("num_experts_per_tok"),
        "moe_intermediate_size": moe_width,
        "num_shared_experts": shared,
        "shared_expert_intermediate_size": shared * moe_width,
        "router_bias": r.values.get("topk_method") == "noaux_tc",
    }


@dataclass(frozen=True)
class _Family:
    """How a family lays out its decoder layers, beyond the keys every family shares."""

    biases: Callable[[_Reader], _Fields]
    experts: Callable[[_Reader, tuple[int, ...]], _Fields] = _no_experts
    """MoE (and MLA) fields, given the layers that are MoE layers."""
    qk_norm: bool = False
    norms_per_layer: int = 2
    tied_embeddings: bool = False
    """transformers' class default for tie_word_embeddings (HF omits the key from config.json
    when it equals both the base default, True, and the class default)."""
    latent_attention: bool = False
    """MLA: head_dim is qk_nope + qk_rope and the KV heads are not what the cache holds."""
    grouped_kv_heads: bool = True
    """False: one K/V head per query head (GPT-NeoX; num_key_value_heads, head_dim unread)."""
    text_defaults: Mapping[str, Any] | None = None
    """Class defaults a nested text_config is written against (HF writes only the diff)."""
    vision_parameters: Callable[[Mapping[str, Any], int], int] | None = None
    """The vision tower's parameters from vision_config and the text hidden size."""


_DEEPSEEK = _Family(_no_bias, _deepseek_attention_and_experts, latent_attention=True)

_FAMILIES: dict[str, _Family] = {
    "llama": _Family(_attention_bias),
    "mistral": _Family(_attention_bias),
    "mixtral": _Family(_attention_bias, _mixtral_experts),
    "qwen2": _Family(_qkv_bias),
    "qwen2_moe": _Family(_qkv_bias, _qwen2_moe_experts),
    "qwen3": _Family(_attention_bias, qk_norm=True),
    "qwen3_moe": _Family(_attention_bias, _qwen3_moe_experts, qk_norm=True),
    "gemma": _Family(_attention_bias, tied_embeddings=True),
    "gemma2": _Family(_attention_bias, norms_per_layer=4, tied_embeddings=True),
    "gemma3": _Family(
        _attention_bias,
        qk_norm=True,
        norms_per_layer=4,
        tied_embeddings=True,
        text_defaults=_GEMMA3_TEXT_DEFAULTS,
        vision_parameters=_siglip_parameters,
    ),
    "phi3": _Family(_attention_bias),
    "deepseek_v2": _DEEPSEEK,
    "deepseek_v3": _DEEPSEEK,
    "gpt_neox": _Family(_gpt_neox_layout, grouped_kv_heads=False),
}


# -- parse_hf_config ---------------------------------------------------------------------------


def _merged(
    config: Mapping[str, Any] | None, override: Mapping[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any] | None, bool]:
    """:func:`_flatten` of ``config`` with ``override``'s keys (and vision keys) on top."""
    flat, vision, nested = _flatten(config or {})
    if override:
        o_flat, o_vision, _ = _flatten(override)
        flat.update(o_flat)
        if o_vision is not None:
            vision = {**(vision or {}), **o_vision}
    return flat, vision, nested


def _known_model_type(flat: Mapping[str, Any]) -> str:
    model_type = _model_type(flat)
    if model_type is not None:
        return model_type
    named = flat.get("model_type") or (flat.get("architectures") or [None])[0]
    raise SizingError(
        f"unknown architecture {named!r}: sizing knows the families "
        f"{', '.join(SUPPORTED_FAMILIES)}; set spec.model.architecture with model_type set "
        "to the family whose layout the model shares, plus num_hidden_layers, hidden_size, "
        "num_attention_heads, num_key_value_heads, intermediate_size, vocab_size and "
        "max_position_embeddings",
        field=_FIELD,
        missing=("model_type",),
    )


@dataclass(frozen=True)
class _Attention:
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_lens: tuple[int, ...]
    """Every context limit the config states (vLLM takes the smallest)."""


def _read_attention(r: _Reader, family: _Family) -> _Attention:
    """The keys every family shares (missing ones are collected in ``r``, not raised)."""
    num_layers = r.int_("num_hidden_layers")
    hidden = r.int_("hidden_size")
    heads = r.int_("num_attention_heads")
    vocab = r.int_("vocab_size")
    max_lens = tuple(r.int_(k) for k in _MAX_LEN_KEYS if r.values.get(k) is not None)
    if not max_lens:
        r.missing.append("max_position_embeddings")
    kv_heads = r.int_("num_key_value_heads", heads) if family.grouped_kv_heads else heads
    head_dim = hidden // heads
    if family.latent_attention:
        # the query/key head (nope + rope); transformers 5 writes the rope dim as head_dim
        head_dim = r.int_("qk_nope_head_dim") + r.int_("qk_rope_head_dim")
    elif family.grouped_kv_heads and r.has("head_dim"):
        head_dim = r.int_("head_dim")
    return _Attention(num_layers, hidden, heads, kv_heads, head_dim, vocab, max_lens)


def _layout_fields(r: _Reader, family: _Family, moe_layers: tuple[int, ...]) -> _Fields:
    fields = family.biases(r)
    if family.qk_norm:
        fields["qk_norm"] = True
    if family.norms_per_layer != 2:
        fields["norms_per_layer"] = family.norms_per_layer
    fields.update(family.experts(r, moe_layers))
    return fields


def parse_hf_config(
    config: Mapping[str, Any] | None, override: Mapping[str, Any] | None = None
) -> ModelArchitecture:
    """Parse a HuggingFace config.json dict (with the spec's override merged over it).

    ``override`` uses the same keys as config.json and wins over them (it may also stand
    alone, ``config=None``). Raises :class:`SizingError` naming every missing key, or the
    unknown architecture, and saying to set ``spec.model.architecture``.
    """
    flat, vision, nested = _merged(config, override)
    model_type = _known_model_type(flat)
    name = _FAMILY_OF_MODEL_TYPE[model_type]
    family = _FAMILIES[name]
    # A nested text_config, or a bare text config (gemma3_text), is a diff against defaults.
    if family.text_defaults is not None and (nested or model_type.endswith("_text")):
        flat = {**family.text_defaults, **{k: v for k, v in flat.items() if v is not None}}
    r = _Reader(name, flat)
    a = _read_attention(r, family)
    moe_layers = _moe_layers(name, r, a.num_layers)
    dense_needed = len(moe_layers) < a.num_layers
    intermediate = r.int_("intermediate_size", None if dense_needed else 0, minimum=0)
    fields = _layout_fields(r, family, moe_layers)
    r.check()

    if not family.latent_attention and a.num_attention_heads % a.num_kv_heads != 0:
        raise SizingError(
            f"num_attention_heads ({a.num_attention_heads}) must be a multiple of "
            f"num_key_value_heads ({a.num_kv_heads}); fix spec.model.architecture",
            field=_FIELD,
        )
    window, sliding = _sliding_layers(name, r, a.num_layers)
    max_position = min(a.max_lens)
    if window is not None and window >= max_position:
        window, sliding = None, ()  # a window as long as the context never slides
    rope_type, rope_factor, rope_original = _rope(flat)
    quant_method, block_size = _quantization(flat)
    vision_params = 0
    if family.vision_parameters is not None and vision is not None:
        vision_params = family.vision_parameters(vision, a.hidden_size)
    return ModelArchitecture(
        family=name,
        num_layers=a.num_layers,
        hidden_size=a.hidden_size,
        num_attention_heads=a.num_attention_heads,
        num_kv_heads=a.num_kv_heads,
        head_dim=a.head_dim,
        intermediate_size=intermediate,
        vocab_size=a.vocab_size,
        tie_word_embeddings=r.bool_("tie_word_embeddings", family.tied_embeddings),
        max_position_embeddings=max_position,
        torch_dtype=_dtype(flat),
        rope_scaling_type=rope_type,
        rope_scaling_factor=rope_factor,
        rope_original_max_position_embeddings=rope_original,
        moe_layers=moe_layers if fields.get("num_experts") else (),
        sliding_window=window,
        sliding_window_layers=sliding,
        vision_parameters=vision_params,
        checkpoint_quantization=quant_method,
        checkpoint_weight_block_size=block_size,
        **fields,
    )
