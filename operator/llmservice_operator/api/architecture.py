"""`spec.model.architecture`: config.json keys over the model's own, bounded where sizing reads.

The keys are config.json's (snake_case; unknown ones are kept, so a whole config.json may be
pasted), so the field stays free-form (``x-kubernetes-preserve-unknown-fields``). What sizing
reads is declared with the bounds of sizing/limits.py (about ten times the largest public
model) at the top level, in ``text_config`` and in ``vision_config``: the API server refuses
``num_hidden_layers: 1000000000`` naming the field, and pydantic refuses it the same way for
``llmservice plan``. A structural schema cannot bound what an unknown key holds, so the
operator also refuses an architecture over MAX_ARCHITECTURE_BYTES of JSON (real config.json
files are 1 to 5 KiB); nothing copies it anywhere before that.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from ..sizing.limits import (
    ARCHITECTURE_INTEGERS,
    MAX_ARCHITECTURE_KEYS,
    MAX_POSITIONS,
    MAX_ROPE_FACTOR,
    VISION_INTEGERS,
)

__all__ = [
    "MAX_ARCHITECTURE_BYTES",
    "ArchitectureOverride",
    "RopeScaling",
    "TextConfig",
    "VisionConfig",
]

#: JSON bytes (UTF-8) of the whole override, nested keys included.
MAX_ARCHITECTURE_BYTES = 32 * 1024


def _number(value: Any) -> Any:
    """A JSON number only: not "32" or true (pydantic would make numbers of them)."""
    if isinstance(value, bool | str):
        raise ValueError(f"must be a number, got {value!r:.40}")
    return value


def _integer(value: Any) -> Any:
    """A number, and not one past every bound (pydantic's message for 1e308 as an integer is
    about parsing)."""
    if isinstance(_number(value), float) and math.isfinite(value) and abs(value) > 2**53:
        raise ValueError(f"must be at most its bound, got {value:g}")
    return value


_Int = Annotated[int | None, BeforeValidator(_integer)]
_Float = Annotated[float | None, BeforeValidator(_number)]


def _bounded(key: str, table: dict[str, tuple[int, int]] = ARCHITECTURE_INTEGERS) -> Any:
    minimum, maximum = table[key]
    return Field(default=None, ge=minimum, le=maximum)


def _free_form(max_keys: int) -> ConfigDict:
    """Unknown keys kept as written (snake_case: no camelCase aliases here)."""
    return ConfigDict(
        extra="allow",
        frozen=True,
        json_schema_extra={
            "x-kubernetes-preserve-unknown-fields": True,
            "maxProperties": max_keys,
        },
    )


class _FewKeys(BaseModel):
    #: maxProperties, as the schema says it (_free_form)
    max_keys: ClassVar[int] = MAX_ARCHITECTURE_KEYS

    @model_validator(mode="before")
    @classmethod
    def _few_keys(cls, value: Any) -> Any:
        if isinstance(value, dict) and len(value) > cls.max_keys:
            raise ValueError(f"at most {cls.max_keys} keys, got {len(value)}")
        return value


class TextConfig(_FewKeys):
    """The decoder's keys: at the top level, or a multimodal config's text_config."""

    model_config = _free_form(MAX_ARCHITECTURE_KEYS)

    num_hidden_layers: _Int = _bounded("num_hidden_layers")
    hidden_size: _Int = _bounded("hidden_size")
    num_attention_heads: _Int = _bounded("num_attention_heads")
    num_key_value_heads: _Int = _bounded("num_key_value_heads")
    head_dim: _Int = _bounded("head_dim")
    intermediate_size: _Int = _bounded("intermediate_size")
    vocab_size: _Int = _bounded("vocab_size")
    max_position_embeddings: _Int = _bounded("max_position_embeddings")
    n_positions: _Int = _bounded("n_positions")
    max_seq_len: _Int = _bounded("max_seq_len")
    seq_length: _Int = _bounded("seq_length")
    max_sequence_length: _Int = _bounded("max_sequence_length")
    max_window_layers: _Int = _bounded("max_window_layers")
    num_local_experts: _Int = _bounded("num_local_experts")
    num_experts: _Int = _bounded("num_experts")
    n_routed_experts: _Int = _bounded("n_routed_experts")
    num_experts_per_tok: _Int = _bounded("num_experts_per_tok")
    n_shared_experts: _Int = _bounded("n_shared_experts")
    moe_intermediate_size: _Int = _bounded("moe_intermediate_size")
    shared_expert_intermediate_size: _Int = _bounded("shared_expert_intermediate_size")
    decoder_sparse_step: _Int = _bounded("decoder_sparse_step")
    first_k_dense_replace: _Int = _bounded("first_k_dense_replace")
    moe_layer_freq: _Int = _bounded("moe_layer_freq")
    kv_lora_rank: _Int = _bounded("kv_lora_rank")
    q_lora_rank: _Int = _bounded("q_lora_rank")
    qk_nope_head_dim: _Int = _bounded("qk_nope_head_dim")
    qk_rope_head_dim: _Int = _bounded("qk_rope_head_dim")
    v_head_dim: _Int = _bounded("v_head_dim")


class VisionConfig(_FewKeys):
    """vision_config: the vision tower's keys (Gemma 3's SigLIP)."""

    max_keys = 64
    model_config = _free_form(max_keys)

    hidden_size: _Int = _bounded("hidden_size", VISION_INTEGERS)
    intermediate_size: _Int = _bounded("intermediate_size", VISION_INTEGERS)
    num_hidden_layers: _Int = _bounded("num_hidden_layers", VISION_INTEGERS)
    image_size: _Int = _bounded("image_size", VISION_INTEGERS)
    patch_size: _Int = _bounded("patch_size", VISION_INTEGERS)
    num_channels: _Int = _bounded("num_channels", VISION_INTEGERS)


class RopeScaling(_FewKeys):
    """rope_scaling (or rope_parameters): what sizing reads of it."""

    max_keys = 32
    model_config = _free_form(max_keys)

    factor: _Float = Field(default=None, gt=0, le=MAX_ROPE_FACTOR)
    original_max_position_embeddings: _Int = Field(default=None, ge=1, le=MAX_POSITIONS)


class ArchitectureOverride(TextConfig):
    """HF config.json keys that override (or replace, for models the operator does not know)
    the model's architecture used for sizing."""

    model_config = _free_form(MAX_ARCHITECTURE_KEYS)

    text_config: TextConfig | None = None
    vision_config: VisionConfig | None = None
    rope_scaling: RopeScaling | None = None
    rope_parameters: RopeScaling | None = None

    @model_validator(mode="before")
    @classmethod
    def _small(cls, value: Any) -> Any:
        try:
            size = len(json.dumps(value, ensure_ascii=False).encode())
        except (TypeError, ValueError, UnicodeError):
            return value  # not plain JSON: the fields say what is wrong
        if size > MAX_ARCHITECTURE_BYTES:
            raise ValueError(
                f"is {size:,} bytes of JSON, at most {MAX_ARCHITECTURE_BYTES:,}: give the "
                "config.json keys sizing needs, not a whole file with its extras"
            )
        return value

    def config(self) -> dict[str, Any]:
        """The keys as written (config.json's form), to merge over the model's own."""
        return self.model_dump(exclude_unset=True)
