"""How large a model's architecture may say it is, and how much work one sizing may take.

``spec.model.architecture`` is free-form (config.json keys), and sizing does work in
proportion to what it says: a list per layer, for every GPU option it tries. One tenant's
``num_hidden_layers: 1000000000`` must not pin a reconcile worker or exhaust the operator's
memory for every other tenant (issue 38), so the numbers sizing reads are bounded at about ten
times the largest public model's (Llama-3.1-405B: 126 layers, 128 heads, hidden 16,384;
Nemotron-4-340B: hidden 18,432, MLP 73,728; Gemma 3: a 262,208-token vocabulary; Kimi K2: 384
experts; Llama 4 Scout: a 10M-token context), rounded up to a power of two. The CRD carries
the same bounds as schema maxima (api/architecture.py), so the API server refuses the rest.
"""

from __future__ import annotations

import math
from typing import Any

from .errors import SizingError

__all__ = [
    "ARCHITECTURE_INTEGERS",
    "MAX_ARCHITECTURE_KEYS",
    "MAX_LAYERS",
    "MAX_OPTIONS_PER_GPU",
    "MAX_POSITIONS",
    "MAX_ROPE_FACTOR",
    "SIZING_WORK_BUDGET",
    "VISION_INTEGERS",
    "bounded_int",
    "shown_number",
]

#: Decoder layers: ten times Llama-3.1-405B's 126.
MAX_LAYERS = 1280
#: Context lengths (max_position_embeddings and its aliases, windows): 2^27, ~13x 10M tokens.
MAX_POSITIONS = 134_217_728
_WIDTH = 262_144  # hidden sizes: 2^18, ~14x 18,432
_MLP = 1_048_576  # MLP widths: 2^20, ~14x 73,728
_HEADS = 2048  # attention heads: ~16x 128
_HEAD_DIM = 4096  # per-head dimensions: 16x 256
_EXPERTS = 8192  # routed experts: ~21x 384
_RANK = 65_536  # MLA's latent ranks: ~43x 1,536

#: config.json integer keys sizing reads -> (minimum, maximum) the schema allows (sizing may ask
#: for more: at least one expert where it reads experts). Top level and ``text_config`` alike.
ARCHITECTURE_INTEGERS: dict[str, tuple[int, int]] = {
    "num_hidden_layers": (1, MAX_LAYERS),
    "hidden_size": (1, _WIDTH),
    "num_attention_heads": (1, _HEADS),
    "num_key_value_heads": (1, _HEADS),
    "head_dim": (1, _HEAD_DIM),
    "intermediate_size": (0, _MLP),
    "vocab_size": (1, 4_194_304),  # 2^22, 16x 262,208
    "max_position_embeddings": (1, MAX_POSITIONS),
    "n_positions": (1, MAX_POSITIONS),
    "max_seq_len": (1, MAX_POSITIONS),
    "seq_length": (1, MAX_POSITIONS),
    "max_sequence_length": (1, MAX_POSITIONS),
    "max_window_layers": (0, MAX_LAYERS),
    "num_local_experts": (0, _EXPERTS),
    "num_experts": (0, _EXPERTS),
    "n_routed_experts": (0, _EXPERTS),
    "num_experts_per_tok": (0, 1024),
    "n_shared_experts": (0, 1024),
    "moe_intermediate_size": (0, _MLP),
    "shared_expert_intermediate_size": (0, _MLP),
    "decoder_sparse_step": (1, MAX_LAYERS),
    "first_k_dense_replace": (0, MAX_LAYERS),
    "moe_layer_freq": (1, MAX_LAYERS),
    "kv_lora_rank": (1, _RANK),
    "q_lora_rank": (0, _RANK),
    "qk_nope_head_dim": (1, _HEAD_DIM),
    "qk_rope_head_dim": (1, _HEAD_DIM),
    "v_head_dim": (1, _HEAD_DIM),
}
#: ``vision_config`` integer keys (Gemma 3's SigLIP tower) -> (minimum, maximum).
VISION_INTEGERS: dict[str, tuple[int, int]] = {
    "hidden_size": (1, _WIDTH),
    "intermediate_size": (1, _MLP),
    "num_hidden_layers": (1, MAX_LAYERS),
    "image_size": (1, 65_536),
    "patch_size": (1, 65_536),
    "num_channels": (1, 64),
}
#: rope_scaling's factor: real ones are 8 to 64.
MAX_ROPE_FACTOR = 1024.0
#: Keys of spec.model.architecture (a whole config.json has 20 to 60).
MAX_ARCHITECTURE_KEYS = 256

#: GPU options sizing evaluates per GPU type: each tensor-parallel size (1, 2, 4, 8), then
#: pipeline stages 2..4 of the largest (fit.py).
MAX_OPTIONS_PER_GPU = 7
#: Layer evaluations one sizing may take (layers x options over the GPU types it tries): the
#: deepest model the schema allows on a catalog of 16 GPU types: about 0.2 s of CPU
#: (tests/unit/sizing/test_sizing_limits.py measures it).
SIZING_WORK_BUDGET = MAX_LAYERS * MAX_OPTIONS_PER_GPU * 16


def bounded_int(value: Any, key: str, minimum: int, maximum: int) -> int:
    """``value`` as an integer in minimum..maximum, or SizingError naming the key. Refused
    before anything is built from it: a list per layer of 10^9 layers would take the
    operator's memory (issue 38)."""
    field = f"model.architecture.{key}"
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and not (math.isfinite(value) and value.is_integer()))
    ):
        raise SizingError(
            f"config key {key} must be an integer, got {value!r:.80}; fix it in "
            "spec.model.architecture",
            field=field,
        )
    if value < minimum:
        raise SizingError(
            f"config key {key} must be at least {minimum}, got {shown_number(value)}; fix it in "
            "spec.model.architecture",
            field=field,
        )
    if value > maximum:
        raise SizingError(
            f"config key {key} must be at most {maximum:,} (about ten times the largest public "
            f"model's), got {shown_number(value)}; fix it in spec.model.architecture",
            field=field,
        )
    return int(value)


def shown_number(value: float) -> str:
    """A number as an error message shows it: a 400-digit one by its length."""
    text = repr(value)
    return text if len(text) <= 24 else f"a {len(str(abs(int(value))))}-digit number"
