"""What the simulated engine needs to know about one model on one GPU configuration.

:class:`EngineProfile` carries the KV pool size and the two step-time functions. The operator's
sizing package computes the same quantities from a model's architecture and a GPU catalog entry;
:func:`from_sizing` turns its answer into a profile, so the simulator's KV capacity is the one
the operator predicts. :func:`fallback_profile` is a fixed, documented stand-in (roughly
Llama-3.1-8B in bf16 on one H100-80GB) for tests and for models sizing does not know.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_MAX_NUM_BATCHED_TOKENS",
    "DEFAULT_MAX_NUM_SEQS",
    "EngineProfile",
    "fallback_profile",
    "from_sizing",
    "linear_profile",
]

#: vLLM's default KV block size on CUDA (tokens per block).
DEFAULT_BLOCK_SIZE = 16
#: Simulator defaults when the container args do not say (the operator renders both flags).
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192

DecodeStepMs = Callable[[int, int], float]
"""``decode_step_ms(batch, context_tokens)``: one decode step for ``batch`` sequences holding
``context_tokens`` tokens of KV between them, in milliseconds."""
PrefillMs = Callable[[int], float]
"""``prefill_ms(prompt_tokens)``: the prefill work of one step, in milliseconds."""


@dataclass(frozen=True)
class EngineProfile:
    """Capacity and timing of one engine (one replica: all its GPUs together)."""

    kv_capacity_tokens: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    decode_step_ms: DecodeStepMs
    prefill_ms: PrefillMs
    block_size: int = DEFAULT_BLOCK_SIZE
    description: str = ""

    def __post_init__(self) -> None:
        for name in ("kv_capacity_tokens", "max_num_seqs", "max_num_batched_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_model_len < 2:
            raise ValueError(f"max_model_len must be at least 2, got {self.max_model_len}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {self.block_size}")
        if self.num_blocks < math.ceil(self.max_model_len / self.block_size):
            # vLLM refuses to start in this case too ("max_model_len ... is larger than the
            # maximum number of tokens that can be stored in KV cache").
            raise ValueError(
                f"the KV cache holds {self.num_blocks * self.block_size} tokens, fewer than "
                f"max_model_len={self.max_model_len}: lower --max-model-len or add memory"
            )

    @property
    def num_blocks(self) -> int:
        """KV blocks in the pool (vLLM's ``num_gpu_blocks``)."""
        return self.kv_capacity_tokens // self.block_size

    def full_length_sequences(self) -> int:
        """How many ``max_model_len`` sequences the pool holds at once (the sizing headline)."""
        return self.num_blocks // math.ceil(self.max_model_len / self.block_size)


def linear_profile(
    *,
    kv_capacity_tokens: int,
    max_model_len: int,
    decode_base_ms: float,
    decode_per_seq_ms: float,
    decode_per_context_token_ms: float,
    prefill_per_token_ms: float,
    prefill_base_ms: float = 0.0,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    block_size: int = DEFAULT_BLOCK_SIZE,
    description: str = "",
) -> EngineProfile:
    """A profile whose step times are affine in batch, context and prompt tokens.

    decode_step_ms = base + per_seq * batch + per_context_token * context_tokens (weights read
    once per step, KV read per token, a little compute per sequence); prefill_ms = base +
    per_token * prompt_tokens (compute bound), 0 for a step without prompt tokens.
    """

    def decode_step_ms(batch: int, context_tokens: int) -> float:
        if batch <= 0:
            return 0.0
        return (
            decode_base_ms
            + decode_per_seq_ms * batch
            + decode_per_context_token_ms * context_tokens
        )

    def prefill_ms(prompt_tokens: int) -> float:
        if prompt_tokens <= 0:
            return 0.0
        return prefill_base_ms + prefill_per_token_ms * prompt_tokens

    return EngineProfile(
        kv_capacity_tokens=kv_capacity_tokens,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        decode_step_ms=decode_step_ms,
        prefill_ms=prefill_ms,
        block_size=block_size,
        description=description,
    )


def fallback_profile(
    *,
    max_model_len: int = 8192,
    kv_capacity_tokens: int = 400_000,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
) -> EngineProfile:
    """Roughly Llama-3.1-8B in bf16 on one H100-80GB (3.35 TB/s, ~989 dense TFLOP/s).

    Weights 16 GB read per decode step at ~80% of HBM bandwidth: ~6 ms; KV 128 KiB per token:
    ~4.9e-5 ms per context token; ~0.03 ms of compute per sequence and per prompt token
    (2 x 8e9 FLOPs at ~50% utilisation). The KV pool (400k tokens) is what 0.92 x 80 GB less
    weights and activations leaves.
    """
    return linear_profile(
        kv_capacity_tokens=kv_capacity_tokens,
        max_model_len=max_model_len,
        decode_base_ms=6.0,
        decode_per_seq_ms=0.03,
        decode_per_context_token_ms=4.9e-5,
        prefill_per_token_ms=0.032,
        prefill_base_ms=1.0,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        description="fallback: ~Llama-3.1-8B bf16 on 1x H100-80GB",
    )


def from_sizing(
    *,
    kv_capacity_tokens: int,
    max_model_len: int,
    decode_step_ms: DecodeStepMs,
    prefill_ms: PrefillMs,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    block_size: int = DEFAULT_BLOCK_SIZE,
    description: str = "",
) -> EngineProfile:
    """A profile from the sizing package's answer for one model, GPU and parallelism.

    Takes the numbers rather than a sizing object so the simulator does not depend on the
    shape of ``SizingResult``: the CLI (``commands/sim.py``) does that translation.
    """
    return EngineProfile(
        kv_capacity_tokens=kv_capacity_tokens,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        decode_step_ms=decode_step_ms,
        prefill_ms=prefill_ms,
        block_size=block_size,
        description=description,
    )
