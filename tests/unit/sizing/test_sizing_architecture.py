"""config.json parsing and exact parameter / KV counts, checked against hand arithmetic."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from llmservice_operator.sizing import (
    SUPPORTED_FAMILIES,
    ModelArchitecture,
    SizingError,
    builtin_model_ids,
    load_builtin_model,
    parse_hf_config,
)

Arch = Callable[[str], ModelArchitecture]


# -- worked examples ---------------------------------------------------------------------------


def test_llama_3_1_8b(arch: Arch) -> None:
    """Llama-3.1-8B: 8,030,261,248 parameters, 131,072 KV bytes per token in bf16.

    embedding 128,256 x 4,096 = 525,336,576; lm_head (untied) the same: 1,050,673,152
    per layer: q 4,096x4,096 = 16,777,216; k, v 4,096x1,024 = 4,194,304 each;
               o 16,777,216 -> attention 41,943,040
               MLP 3 x 4,096 x 14,336 = 176,160,768; 2 RMSNorms 8,192 -> 218,112,000
    32 layers = 6,979,584,000; final norm 4,096
    total 6,979,584,000 + 1,050,673,152 + 4,096 = 8,030,261,248
    KV: 2 (K,V) x 32 layers x 8 kv heads x 128 head_dim x 2 bytes = 131,072
    """
    a = arch("meta-llama/Llama-3.1-8B-Instruct")
    assert (a.family, a.num_layers, a.num_kv_heads, a.head_dim) == ("llama", 32, 8, 128)
    assert a.layer_parameters(0).total == 218_112_000
    assert a.parameter_count() == 8_030_261_248
    assert a.kv_cache_bytes_per_token(2) == 131_072
    assert a.kv_cache_bytes_per_token(1) == 65_536
    assert a.max_model_len_limit == 131_072  # llama3 rope: max_position_embeddings is scaled


def test_llama_3_1_70b(arch: Arch) -> None:
    """Llama-3.1-70B: 70,553,706,496 parameters (~70.55B), 327,680 KV bytes per token.

    embedding + lm_head 2 x 128,256 x 8,192 = 2,101,346,304
    per layer: q, o 2 x 8,192^2 = 134,217,728; k, v 2 x 8,192 x 1,024 = 16,777,216;
               MLP 3 x 8,192 x 28,672 = 704,643,072; norms 16,384 -> 855,654,400
    80 layers = 68,452,352,000; + final norm 8,192 + 2,101,346,304 = 70,553,706,496
    KV: 2 x 80 x 8 x 128 x 2 bytes = 327,680
    """
    a = arch("meta-llama/Llama-3.1-70B")
    assert a.parameter_count() == 70_553_706_496
    assert a.kv_cache_bytes_per_token(2) == 327_680


def test_mistral_7b_v0_1(arch: Arch) -> None:
    """Mistral-7B-v0.1: 7,241,732,096 parameters.

    Same layers as Llama-3.1-8B (218,112,000 x 32 = 6,979,584,000) with a 32,000 vocabulary:
    2 x 32,000 x 4,096 = 262,144,000; + final norm 4,096 -> 7,241,732,096.
    All 32 layers have a 4,096-token sliding window.
    """
    a = arch("mistralai/Mistral-7B-v0.1")
    assert a.parameter_count() == 7_241_732_096
    assert a.sliding_window == 4096
    assert a.sliding_window_layers == tuple(range(32))
    assert a.kv_cache_bytes_per_token(2) == 131_072  # counted at full length (conservative)


def test_mistral_v0_3_has_no_window(arch: Arch) -> None:
    """v0.3: vocab 32,768 -> 7,241,732,096 + 2 x 768 x 4,096 = 7,248,023,552; sliding_window null."""
    a = arch("mistralai/Mistral-7B-Instruct-v0.3")
    assert a.parameter_count() == 7_248_023_552
    assert a.sliding_window is None
    assert a.sliding_window_layers == ()


def test_qwen2_5_7b_instruct(arch: Arch) -> None:
    """Qwen2.5-7B-Instruct: 7,615,616,512 parameters (~7.62B), 57,344 KV bytes per token.

    per layer: q 3,584 x 3,584 = 12,845,056 (+3,584 bias); k, v 3,584 x 512 = 1,835,008 each
               (+512 bias each); o 12,845,056 (no bias) -> attention 29,364,736 incl. 4,608 bias
               MLP 3 x 3,584 x 18,944 = 203,685,888; norms 7,168 -> 233,057,792
    28 layers = 6,525,618,176; embedding + lm_head 2 x 152,064 x 3,584 = 1,089,994,752;
    final norm 3,584 -> 7,615,616,512
    KV: 2 x 28 x 4 x 128 x 2 bytes = 57,344. use_sliding_window is false: no window.
    """
    a = arch("Qwen/Qwen2.5-7B-Instruct")
    assert a.qkv_bias and not a.o_proj_bias
    assert a.layer_parameters(0).biases == 4_608
    assert a.layer_parameters(0).total == 233_057_792
    assert a.parameter_count() == 7_615_616_512
    assert a.kv_cache_bytes_per_token(2) == 57_344
    assert a.sliding_window is None


def test_mixtral_8x7b(arch: Arch) -> None:
    """Mixtral-8x7B: 46,702,792,704 parameters (~46.70B) stored, 12,879,925,248 active.

    per layer: attention 41,943,040; 8 experts x 3 x 4,096 x 14,336 = 8 x 176,160,768
               = 1,409,286,144; router 4,096 x 8 = 32,768; norms 8,192 -> 1,451,270,144
    32 layers = 46,440,644,608; + 262,144,000 embeddings + 4,096 final norm = 46,702,792,704
    active: 2 of 8 experts: 46,702,792,704 - 32 x 6 x 176,160,768 = 12,879,925,248
    KV: 2 x 32 x 8 x 128 x 2 = 131,072
    """
    a = arch("mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert a.is_moe and a.num_experts == 8 and a.num_experts_per_tok == 2
    assert a.layer_parameters(5).total == 1_451_270_144
    assert a.parameter_count() == 46_702_792_704
    assert a.active_parameter_count() == 12_879_925_248
    assert a.kv_cache_bytes_per_token(2) == 131_072


def test_deepseek_v3_mla(arch: Arch) -> None:
    """DeepSeek-V3: 671,026,419,200 parameters (~671B; the MTP layer is not counted).

    MLA attention per layer: q_a 7,168 x 1,536 = 11,010,048; q_a_norm 1,536;
      q_b 1,536 x 128 x 192 = 37,748,736; kv_a 7,168 x (512 + 64) = 4,128,768; kv_a_norm 512;
      kv_b 512 x 128 x (128 + 128) = 16,777,216; o 128 x 128 x 7,168 = 117,440,512
      -> 187,107,328
    3 dense layers: + MLP 3 x 7,168 x 18,432 = 396,361,728 + norms 14,336 = 583,483,392 each
    58 MoE layers: routed 256 x 3 x 7,168 x 2,048 = 11,274,289,152; shared 44,040,192;
      gate 256 x 7,168 = 1,835,008 + correction bias 256; norms 14,336 -> 11,507,286,272 each
    3 x 583,483,392 + 58 x 11,507,286,272 = 669,173,053,952
    + embedding and lm_head 2 x 129,280 x 7,168 = 1,853,358,080 + final norm 7,168
    = 671,026,419,200
    KV (MLA latent, one "head", no factor 2): 61 x (512 + 64) x 2 bytes = 70,272
    """
    a = arch("deepseek-ai/DeepSeek-V3")
    assert a.uses_mla and a.q_lora_rank == 1536
    assert a.head_dim == 128 + 64  # the q/k head; the KV cache holds the latent instead
    assert a.moe_layers == tuple(range(3, 61))
    assert a.layer_parameters(0).total == 583_483_392
    assert a.layer_parameters(3).total == 11_507_286_272
    assert a.parameter_count() == 671_026_419_200
    assert a.kv_cache_bytes_per_token(2) == 61 * (512 + 64) * 2 == 70_272
    assert a.checkpoint_quantization == "fp8"
    assert a.checkpoint_weight_block_size == 128
    assert a.max_model_len_limit == 163_840  # yarn: 4,096 x 40


def test_deepseek_v2_lite_null_q_lora(arch: Arch) -> None:
    """DeepSeek-V2-Lite: 15,706,484,224 parameters; q_lora_rank null (plain q_proj).

    attention: q 2,048 x 16 x 192 = 6,291,456; kv_a 2,048 x 576 = 1,179,648; kv_a_norm 512;
      kv_b 512 x 16 x 256 = 2,097,152; o 2,048 x 2,048 = 4,194,304 -> 13,763,072
    layer 0 dense: + 3 x 2,048 x 10,944 = 67,239,936 + norms 4,096 = 81,007,104
    26 MoE layers: 64 x 3 x 2,048 x 1,408 = 553,648,128 routed; 2 shared = 3 x 2,048 x 2,816
      = 17,301,504; gate 131,072; norms 4,096 -> 584,847,872 each = 15,206,044,672
    + embeddings 2 x 102,400 x 2,048 = 419,430,400 + final norm 2,048 = 15,706,484,224
    KV: 27 x 576 x 2 = 31,104
    """
    a = arch("deepseek-ai/DeepSeek-V2-Lite")
    assert a.q_lora_rank is None
    assert a.layer_parameters(0).total == 81_007_104
    assert a.layer_parameters(1).total == 584_847_872
    assert a.parameter_count() == 15_706_484_224
    assert a.kv_cache_bytes_per_token(2) == 31_104


def test_gemma_2_9b_sliding_and_tied(arch: Arch) -> None:
    """gemma-2-9b-it: 9,241,705,984 parameters; explicit head_dim 256; tied embeddings.

    per layer: q 3,584 x (16 x 256) = 14,680,064; k, v 3,584 x 2,048 = 7,340,032 each;
      o 14,680,064; MLP 3 x 3,584 x 14,336 = 154,140,672; 4 norms 14,336 -> 198,195,200
    42 layers = 8,324,198,400 + embedding once 256,000 x 3,584 = 917,504,000 + 3,584
    = 9,241,705,984. Layers 0, 2, 4, ... slide over 4,096 tokens (21 of 42).
    KV: 2 x 42 x 8 x 256 x 2 = 344,064 (all layers at full length: conservative)
    """
    a = arch("google/gemma-2-9b-it")
    assert a.head_dim == 256 != a.hidden_size // a.num_attention_heads
    assert a.tie_word_embeddings
    assert a.parameter_count() == 9_241_705_984
    assert a.sliding_window_layers == tuple(range(0, 42, 2))
    assert a.kv_cache_bytes_per_token(2) == 344_064


def test_gemma_3_nested_text_config_and_vision(arch: Arch) -> None:
    """gemma-3-4b-it: 4,300,079,472 parameters; text_config omits heads (transformers defaults).

    text: embedding 262,208 x 2,560 = 671,252,480 (tied); per layer q 2,560 x 2,048, k, v
      2,560 x 1,024, o 2,048 x 2,560 -> 15,728,640; q/k norms 512; MLP 3 x 2,560 x 10,240 =
      78,643,200; 4 norms 10,240 -> 94,382,592 x 34 = 3,209,008,128; + 2,560 -> 3,880,263,168
    SigLIP: patch conv 3 x 14 x 14 x 1,152 + 1,152 = 678,528; positions 64^2 x 1,152 =
      4,718,592; 27 layers x 15,239,504 = 411,466,608; post norm 2,304 -> 416,866,032
    projector 1,152 x 2,560 + 1,152 = 2,950,272 -> total 4,300,079,472
    Sliding: every layer but each 6th (5 of 34 global). Limit 131,072 (not re-scaled).
    """
    a = arch("google/gemma-3-4b-it")
    assert (a.num_attention_heads, a.num_kv_heads, a.head_dim, a.vocab_size) == (8, 4, 256, 262_208)
    assert a.vision_parameters == 416_866_032 + 2_950_272
    assert a.parameter_count() == 4_300_079_472
    assert len(a.sliding_window_layers) == 29 and 5 not in a.sliding_window_layers
    assert a.max_model_len_limit == 131_072


def test_qwen3_explicit_head_dim_and_qk_norm(arch: Arch) -> None:
    """Qwen3-8B: 8,190,735,360 parameters (q/k norms 2 x 128 per layer).

    per layer: attention 41,943,040 + 256 + MLP 3 x 4,096 x 12,288 = 150,994,944 + 8,192
    = 192,946,432 x 36 = 6,946,071,552; + 2 x 151,936 x 4,096 = 1,244,659,712 + 4,096
    """
    a = arch("Qwen/Qwen3-8B")
    assert a.qk_norm and a.head_dim == 128
    assert a.parameter_count() == 8_190_735_360
    assert a.kv_cache_bytes_per_token(2) == 2 * 36 * 8 * 128 * 2


def test_qwen3_moe(arch: Arch) -> None:
    """Qwen3-30B-A3B: 30,532,122,624 stored, 3,353,032,704 active (8 of 128 experts).

    per layer: q 2,048 x 4,096, k, v 2,048 x 512, o 4,096 x 2,048 -> 18,874,368; qk norms 256;
      experts 128 x 3 x 2,048 x 768 = 603,979,776; router 262,144; norms 4,096 -> 623,120,640
    48 layers = 29,909,790,720 + 2 x 151,936 x 2,048 = 622,329,856 + 2,048 = 30,532,122,624
    head_dim 128 is explicit (2,048 / 32 would give 64).
    """
    a = arch("Qwen/Qwen3-30B-A3B")
    assert a.head_dim == 128
    assert a.parameter_count() == 30_532_122_624
    assert a.active_parameter_count() == 30_532_122_624 - 48 * 120 * 3 * 2048 * 768


def test_phi3_mini(arch: Arch) -> None:
    """Phi-3-mini-4k: 3,821,079,552 (fused qkv / gate_up count the same as split)."""
    a = arch("microsoft/Phi-3-mini-4k-instruct")
    assert a.parameter_count() == 3_821_079_552
    assert a.sliding_window == 2047


def test_pythia_gpt_neox(arch: Arch) -> None:
    """pythia-6.9b: 6,857,302,016 parameters; no GQA, LayerNorms and linears with biases.

    per layer: 2 LayerNorms 4 x 4,096 = 16,384; qkv 4,096 x 12,288 + 12,288 = 50,343,936;
      dense 4,096^2 + 4,096 = 16,781,312; h->4h 4,096 x 16,384 + 16,384 = 67,125,248;
      4h->h 16,384 x 4,096 + 4,096 = 67,112,960 -> 201,379,840 x 32 = 6,444,154,880
    + final LayerNorm 8,192 + embed_in and embed_out 2 x 50,432 x 4,096 = 413,138,944
    KV: 2 x 32 x 32 x 128 x 2 = 524,288; dtype float16
    """
    a = arch("EleutherAI/pythia-6.9b")
    assert a.num_kv_heads == a.num_attention_heads == 32
    assert a.parameter_count() == 6_857_302_016
    assert a.kv_cache_bytes_per_token(2) == 524_288
    assert a.torch_dtype == "float16"


def test_every_carried_config_parses() -> None:
    families = set()
    for model_id in builtin_model_ids():
        config = load_builtin_model(model_id)
        assert config is not None
        a = parse_hf_config(config)
        assert a.parameter_count() > 1_000_000_000
        families.add(a.family)
    assert families >= {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen3",
        "qwen3_moe",
        "gemma2",
        "gemma3",
        "phi3",
        "deepseek_v2",
        "gpt_neox",
    }


# -- other public configs (not carried): the parser must take them as published ----------------


def test_gemma_1_7b_public_config() -> None:
    """google/gemma-7b: 8,537,680,896; tie_word_embeddings absent = tied (Gemma default)."""
    config = {
        "architectures": ["GemmaForCausalLM"],
        "attention_bias": False,
        "head_dim": 256,
        "hidden_act": "gelu",
        "hidden_size": 3072,
        "intermediate_size": 24576,
        "max_position_embeddings": 8192,
        "model_type": "gemma",
        "num_attention_heads": 16,
        "num_hidden_layers": 28,
        "num_key_value_heads": 16,
        "rms_norm_eps": 1e-06,
        "rope_theta": 10000.0,
        "torch_dtype": "bfloat16",
        "vocab_size": 256000,
    }
    a = parse_hf_config(config)
    assert a.tie_word_embeddings
    assert a.parameter_count() == 8_537_680_896


def test_llama_3_2_1b_tied() -> None:
    """Llama-3.2-1B ties embeddings and sets head_dim 64: 1,235,814,400 parameters."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "head_dim": 64,
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "max_position_embeddings": 131072,
        "model_type": "llama",
        "num_attention_heads": 32,
        "num_hidden_layers": 16,
        "num_key_value_heads": 8,
        "rope_scaling": {
            "factor": 32.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "vocab_size": 128256,
    }
    assert parse_hf_config(config).parameter_count() == 1_235_814_400


def test_transformers_v5_spellings() -> None:
    """dtype instead of torch_dtype, rope_parameters instead of rope_scaling, and the head_dim
    transformers 5 writes into DeepSeek configs (the rope dim) must not change MLA's KV."""
    config = load_builtin_model("deepseek-ai/DeepSeek-V2-Lite")
    assert config is not None
    rope = config.pop("rope_scaling")
    config.pop("torch_dtype")
    config.update(dtype="bfloat16", head_dim=64, rope_parameters={**rope, "rope_type": "yarn"})
    a = parse_hf_config(config)
    assert a.torch_dtype == "bfloat16"
    assert a.max_model_len_limit == 163_840
    assert a.kv_cache_bytes_per_token(2) == 31_104
    assert a.parameter_count() == 15_706_484_224


def test_qwen2_moe_shared_expert() -> None:
    """Qwen1.5-MoE-A2.7B: 14,315,784,192 parameters (60 experts + gated shared expert)."""
    config = {
        "architectures": ["Qwen2MoeForCausalLM"],
        "decoder_sparse_step": 1,
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "max_position_embeddings": 8192,
        "model_type": "qwen2_moe",
        "moe_intermediate_size": 1408,
        "num_attention_heads": 16,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "num_hidden_layers": 24,
        "num_key_value_heads": 16,
        "shared_expert_intermediate_size": 5632,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 151936,
    }
    a = parse_hf_config(config)
    assert a.shared_expert_gate and a.shared_expert_intermediate_size == 5632
    assert a.parameter_count() == 14_315_784_192


# -- rope and context limits -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rope", "limit"),
    [
        (None, 32_768),
        ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32_768}, 131_072),
        ({"type": "dynamic", "factor": 2.0}, 65_536),
        ({"rope_type": "linear", "factor": 2.0}, 65_536),
        ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}, 32_768),
        ({"rope_type": "longrope", "factor": 4.0}, 32_768),
        ({"rope_type": "default"}, 32_768),
    ],
)
def test_context_limit_follows_vllm(rope: dict[str, Any] | None, limit: int) -> None:
    config = load_builtin_model("Qwen/Qwen2.5-7B-Instruct")
    assert config is not None
    a = parse_hf_config(config, {"rope_scaling": rope} if rope else None)
    assert a.max_model_len_limit == limit


# -- errors and overrides ----------------------------------------------------------------------


def test_unknown_architecture_names_what_to_set() -> None:
    with pytest.raises(SizingError) as info:
        parse_hf_config({"model_type": "falcon", "architectures": ["FalconForCausalLM"]})
    err = info.value
    assert err.field == "model.architecture"
    assert "falcon" in str(err)
    assert "spec.model.architecture" in str(err)
    assert "model_type" in str(err)
    assert isinstance(err, ValueError)


def test_missing_fields_are_all_named() -> None:
    with pytest.raises(SizingError) as info:
        parse_hf_config({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32})
    err = info.value
    assert err.missing == (
        "num_hidden_layers",
        "vocab_size",
        "max_position_embeddings",
        "intermediate_size",
    )
    for key in err.missing:
        assert key in str(err)
    assert "spec.model.architecture" in str(err)


def test_missing_mla_fields() -> None:
    config = load_builtin_model("deepseek-ai/DeepSeek-V3")
    assert config is not None
    del config["kv_lora_rank"], config["v_head_dim"]
    with pytest.raises(SizingError, match=r"kv_lora_rank, .*v_head_dim"):
        parse_hf_config(config)


def test_override_fixes_an_unknown_model() -> None:
    """An unsupported model_type with a Llama layout is sized by overriding model_type."""
    config = load_builtin_model("meta-llama/Llama-3.1-8B")
    assert config is not None
    config["model_type"] = "my_llama"
    config["architectures"] = ["MyLlamaForCausalLM"]
    with pytest.raises(SizingError):
        parse_hf_config(config)
    a = parse_hf_config(config, {"model_type": "llama"})
    assert a.parameter_count() == 8_030_261_248


def test_override_alone_and_over_config() -> None:
    override = {
        "model_type": "mistral",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 32000,
        "max_position_embeddings": 32768,
    }
    assert parse_hf_config(None, override).parameter_count() == 7_241_732_096
    config = load_builtin_model("mistralai/Mistral-7B-v0.1")
    assert config is not None
    longer = parse_hf_config(config, {"max_position_embeddings": 65536, "sliding_window": None})
    assert longer.max_position_embeddings == 65536 and longer.sliding_window is None


def test_nested_override_reaches_text_config() -> None:
    config = load_builtin_model("google/gemma-3-4b-it")
    assert config is not None
    a = parse_hf_config(config, {"num_hidden_layers": 30})
    assert a.num_layers == 30
    merged = parse_hf_config({**config, "num_hidden_layers": 30})  # override merged by caller
    assert merged.num_layers == 30


def test_bad_values_are_spec_errors() -> None:
    config = load_builtin_model("meta-llama/Llama-3.1-8B")
    assert config is not None
    with pytest.raises(SizingError, match="hidden_size must be an integer"):
        parse_hf_config(config, {"hidden_size": "big"})
    with pytest.raises(SizingError, match="multiple of num_key_value_heads"):
        parse_hf_config(config, {"num_key_value_heads": 5})
    with pytest.raises(SizingError, match="at least 1"):
        parse_hf_config(config, {"num_hidden_layers": 0})


def test_architectures_key_alone_identifies_the_family() -> None:
    config = load_builtin_model("Qwen/Qwen3-8B")
    assert config is not None
    del config["model_type"]
    assert parse_hf_config(config).family == "qwen3"


def test_supported_families_listed() -> None:
    assert "deepseek_v3" in SUPPORTED_FAMILIES and "gpt_neox" in SUPPORTED_FAMILIES
