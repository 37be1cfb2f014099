"""Roofline estimates of decode and prefill time for one replica.

A decode step reads every weight it uses once and the KV cache of every sequence in the batch;
at the batch sizes vLLM runs it is bound by HBM bandwidth. A prefill multiplies each prompt
token through the weights; it is bound by tensor-core throughput. Each estimate is the larger
of the two bounds::

    memory_ms  = bytes read  / (HBM bandwidth x TP x BANDWIDTH_EFFICIENCY)
    compute_ms = FLOPs       / (dense bf16 FLOP/s x TP x COMPUTE_EFFICIENCY)

* Bytes read per decode step: every weight except the input embedding table (a lookup reads
  only the batch's rows); for MoE the shared part plus the routed experts the batch touches,
  ``E x (1 - (1 - k/E)^batch)`` of them per layer in expectation (top-k at batch 1); plus the
  KV cache of the context.
* FLOPs: 2 per matmul parameter per token (routed experts: top-k only; the lm_head only for
  the last token of a prefill, as vLLM computes logits only there), plus attention:
  ``2 x layers x heads x (d_qk + d_v)`` per (query, key) pair. MLA decodes in the absorbed
  latent space (d_qk = kv_lora_rank + qk_rope_head_dim, d_v = kv_lora_rank) and prefills in the
  expanded one (d_qk = qk_nope + qk_rope, d_v = v_head_dim).
* Pipeline parallelism does not shorten one token's path (its stages run one after the other)
  and is ignored; tensor parallelism divides both bounds; communication is not modelled, so
  TP over PCIe is optimistic.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .architecture import ModelArchitecture
from .catalog import GpuType
from .precision import (
    DTYPE_BYTES,
    KvCacheDtype,
    Quantization,
    kv_element_bytes,
    linear_bytes_per_parameter,
    weight_bytes,
)

__all__ = [
    "BANDWIDTH_EFFICIENCY",
    "COMPUTE_EFFICIENCY",
    "PerformanceModel",
    "performance_model",
]

#: Fraction of datasheet HBM bandwidth a decode step achieves (vLLM on H100 reaches ~70-80%).
BANDWIDTH_EFFICIENCY = 0.7
#: Fraction of datasheet dense bf16 FLOP/s a prefill achieves.
COMPUTE_EFFICIENCY = 0.5


@dataclass(frozen=True)
class PerformanceModel:
    """Step-time estimates for one replica; all byte and FLOP figures are whole-model."""

    bandwidth_bytes_per_s: float
    dense_tflops: float
    tensor_parallel_size: int
    #: Weights read by every decode step whatever the batch (all but the input embedding and
    #: the routed experts).
    resident_read_bytes: int
    #: Bytes of one routed expert of one MoE layer (0 for dense models).
    expert_bytes: int
    moe_layers: int
    num_experts: int
    experts_per_tok: int
    kv_cache_bytes_per_token: int
    #: Matmul parameters one token passes through, excluding embedding and lm_head (routed
    #: experts: top-k).
    matmul_parameters: int
    lm_head_parameters: int
    #: Attention FLOPs per (query, cached key) pair, decode and prefill variants.
    decode_attention_flops_per_pair: int
    prefill_attention_flops_per_pair: int
    bandwidth_efficiency: float = BANDWIDTH_EFFICIENCY
    compute_efficiency: float = COMPUTE_EFFICIENCY

    def _memory_ms(self, nbytes: float) -> float:
        rate = self.bandwidth_bytes_per_s * self.tensor_parallel_size * self.bandwidth_efficiency
        return nbytes / rate * 1e3

    def _compute_ms(self, flops: float) -> float:
        rate = self.dense_tflops * 1e12 * self.tensor_parallel_size * self.compute_efficiency
        return flops / rate * 1e3

    def weight_read_bytes(self, batch: int) -> float:
        """Weight bytes one decode step of ``batch`` sequences reads."""
        if self.expert_bytes == 0 or batch <= 0:
            return float(self.resident_read_bytes)
        share = self.experts_per_tok / self.num_experts
        touched = self.num_experts * (1.0 - (1.0 - share) ** batch)
        return self.resident_read_bytes + self.moe_layers * self.expert_bytes * touched

    def decode_step_ms(self, batch: int, context_tokens: int) -> float:
        """One decode step: ``batch`` sequences holding ``context_tokens`` KV tokens together.

        (The simulator's convention: ``context_tokens`` is the sum over the batch; for one
        sequence it is its context length.)
        """
        if batch <= 0:
            return 0.0
        context = max(0, context_tokens)
        nbytes = self.weight_read_bytes(batch) + context * self.kv_cache_bytes_per_token
        flops = (
            2.0 * batch * (self.matmul_parameters + self.lm_head_parameters)
            + float(context) * self.decode_attention_flops_per_pair
        )
        return max(self._memory_ms(nbytes), self._compute_ms(flops))

    def prefill_ms(self, prompt_tokens: int, past_tokens: int = 0) -> float:
        """Prefill of ``prompt_tokens`` new tokens after ``past_tokens`` cached ones.

        Attention is counted as for one prompt of that length (causal: token i sees
        ``past + i`` keys), the upper bound when a step holds several prompts.
        """
        if prompt_tokens <= 0:
            return 0.0
        t = prompt_tokens
        pairs = t * max(0, past_tokens) + t * (t + 1) / 2
        flops = (
            2.0 * t * self.matmul_parameters
            + 2.0 * self.lm_head_parameters
            + pairs * self.prefill_attention_flops_per_pair
        )
        nbytes = self.resident_read_bytes + self.moe_layers * self.expert_bytes * (
            self.num_experts if self.expert_bytes else 0
        )
        nbytes += (t + max(0, past_tokens)) * self.kv_cache_bytes_per_token
        return max(self._memory_ms(nbytes), self._compute_ms(flops))


def performance_model(
    arch: ModelArchitecture,
    gpu: GpuType,
    tensor_parallel_size: int,
    *,
    dtype: str,
    quantization: Quantization,
    kv_cache_dtype: KvCacheDtype,
) -> PerformanceModel:
    """The roofline for ``arch`` served on ``tensor_parallel_size`` x ``gpu``.

    ``dtype`` is the resolved serving dtype (see precision.resolve_dtype) and
    ``quantization`` the effective one (precision.resolve_quantization).
    """
    linear = linear_bytes_per_parameter(quantization, dtype, arch)
    other = DTYPE_BYTES[dtype]
    total = weight_bytes(arch, dtype, quantization)
    embedding = 0 if arch.tie_word_embeddings else arch.embedding_parameters() * other
    moe_layers = len(arch.moe_layers) if arch.is_moe else 0
    one_expert = 3 * arch.hidden_size * arch.moe_intermediate_size if moe_layers else 0
    expert_bytes = _ceil(one_expert * linear)
    routed_bytes = moe_layers * arch.num_experts * expert_bytes
    heads = arch.num_attention_heads
    if arch.uses_mla:
        latent = arch.kv_lora_rank or 0
        rope = arch.qk_rope_head_dim or 0
        decode_dims = (latent + rope) + latent
        prefill_dims = (arch.qk_nope_head_dim or 0) + rope + (arch.v_head_dim or 0)
    else:
        decode_dims = prefill_dims = 2 * arch.head_dim
    matmul = sum(layer.active - layer.norms - layer.biases for layer in arch.layers())
    return PerformanceModel(
        bandwidth_bytes_per_s=gpu.hbm_bandwidth_bytes_per_s,
        dense_tflops=gpu.bf16_dense_tflops,
        tensor_parallel_size=tensor_parallel_size,
        resident_read_bytes=total - embedding - routed_bytes,
        expert_bytes=expert_bytes,
        moe_layers=moe_layers,
        num_experts=arch.num_experts,
        experts_per_tok=arch.num_experts_per_tok,
        kv_cache_bytes_per_token=arch.kv_cache_bytes_per_token(
            kv_element_bytes(kv_cache_dtype, dtype)
        ),
        matmul_parameters=matmul,
        lm_head_parameters=arch.vocab_size * arch.hidden_size,
        decode_attention_flops_per_pair=2 * arch.num_layers * heads * decode_dims,
        prefill_attention_flops_per_pair=2 * arch.num_layers * heads * prefill_dims,
    )


def _ceil(value: Fraction | int) -> int:
    fraction = Fraction(value)
    return -(-fraction.numerator // fraction.denominator)
