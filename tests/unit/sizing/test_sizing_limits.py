"""Bounded input, refused early (issue 38, finding 1): what an architecture says is bounded at
about ten times the largest public model, a number beyond is refused (naming the key) before
anything is built from it, and one sizing never takes more than a fixed work budget."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmservice_operator.cli import main
from llmservice_operator.sizing import (
    GpuCatalog,
    SizingError,
    SizingRequest,
    choose_gpu,
    load_builtin_model,
    load_catalog,
    parse_hf_config,
)
from llmservice_operator.sizing.limits import (
    ARCHITECTURE_INTEGERS,
    MAX_LAYERS,
    MAX_OPTIONS_PER_GPU,
    SIZING_WORK_BUDGET,
    VISION_INTEGERS,
)

ROOT = Path(__file__).parents[3]
CATALOG = load_catalog()
LLAMA = load_builtin_model("meta-llama/Llama-3.1-8B-Instruct")
QWEN_MOE = load_builtin_model("Qwen/Qwen3-30B-A3B")
GEMMA3 = load_builtin_model("google/gemma-3-4b-it")
HUGE = [10**9, 1e308, math.inf, -math.inf, math.nan, 10**400, 2.5, "32", True, [1]]


def _refused(config: dict[str, Any] | None, override: dict[str, Any]) -> SizingError:
    started = time.perf_counter()
    with pytest.raises(SizingError) as refused:
        parse_hf_config(config, override)
    assert time.perf_counter() - started < 0.5  # refused before any per-layer list is built
    return refused.value


@pytest.mark.parametrize("value", HUGE)
def test_num_hidden_layers_beyond_the_bound_is_refused_naming_the_key(value: object) -> None:
    err = _refused(LLAMA, {"num_hidden_layers": value})
    assert err.field == "model.architecture.num_hidden_layers"
    assert "config key num_hidden_layers must be" in str(err)
    assert len(str(err)) < 300


#: Configs that between them read every bounded key.
_READERS: list[tuple[dict[str, Any] | None, dict[str, Any]]] = [
    (LLAMA, {}),
    (QWEN_MOE, {}),
    (QWEN_MOE, {"model_type": "qwen2_moe", "shared_expert_intermediate_size": 512}),
    (load_builtin_model("deepseek-ai/DeepSeek-V3"), {}),
    (load_builtin_model("mistralai/Mixtral-8x7B-Instruct-v0.1"), {}),
    (load_builtin_model("Qwen/Qwen2.5-7B-Instruct"), {"use_sliding_window": True}),
]


@pytest.mark.parametrize("key", sorted(ARCHITECTURE_INTEGERS))
def test_every_bounded_key_is_refused_one_past_its_maximum(key: str) -> None:
    maximum = ARCHITECTURE_INTEGERS[key][1]
    refusals = []
    for config, extra in _READERS:
        try:
            parse_hf_config(config, {**extra, key: maximum + 1})
        except SizingError as err:
            refusals.append(err)
    assert any(err.field == f"model.architecture.{key}" for err in refusals), refusals
    assert all(f"must be at most {maximum:,}" in str(err) for err in refusals)


@pytest.mark.parametrize("key", sorted(VISION_INTEGERS))
def test_every_vision_key_is_refused_one_past_its_maximum(key: str) -> None:
    assert GEMMA3 is not None
    vision = {**GEMMA3["vision_config"], key: VISION_INTEGERS[key][1] + 1}
    err = _refused(GEMMA3, {"vision_config": vision})
    assert err.field == f"model.architecture.vision_config.{key}"


def test_rope_and_quantization_numbers_are_bounded() -> None:
    for factor in (1e308, math.inf, math.nan, 0, -1, "8"):
        rope = {"rope_type": "linear", "factor": factor}
        err = _refused(LLAMA, {"rope_scaling": rope})
        assert err.field == "model.architecture.rope_scaling"
    rope = {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 1e308}
    assert _refused(LLAMA, {"rope_scaling": rope}).field.endswith(
        "original_max_position_embeddings"
    )
    quant = {"quant_method": "fp8", "weight_block_size": [math.inf, 128]}
    assert _refused(LLAMA, {"quantization_config": quant}).field.endswith("weight_block_size")
    err = _refused(QWEN_MOE, {"mlp_only_layers": "all"})
    assert err.field == "model.architecture.mlp_only_layers"


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(min_value=-3, max_value=3), max_size=4),
    st.dictionaries(
        st.sampled_from(["factor", "rope_type", "type", "original_max_position_embeddings"]),
        st.one_of(st.integers(), st.floats(), st.sampled_from(["yarn", "linear", "llama3"])),
        max_size=3,
    ),
)
_KEYS = st.sampled_from(
    [*ARCHITECTURE_INTEGERS, "rope_scaling", "quantization_config", "sliding_window",
     "layer_types", "mlp_only_layers", "tie_word_embeddings", "torch_dtype", "vision_config"]
)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.sampled_from([LLAMA, QWEN_MOE, GEMMA3]),
    override=st.dictionaries(_KEYS, _VALUES, max_size=4),
)
def test_any_override_is_parsed_or_a_sizing_error_quickly(
    base: dict[str, Any], override: dict[str, Any]
) -> None:
    """Never another exception (an OverflowError, a TypeError): the operator would retry
    those for ever; never slow."""
    started = time.perf_counter()
    try:
        arch = parse_hf_config(base, override)
    except SizingError:
        return
    finally:
        assert time.perf_counter() - started < 1
    assert arch.num_layers <= MAX_LAYERS
    # what sizing computes from it is finite arithmetic
    assert arch.max_model_len_limit >= 0
    assert arch.parameter_count() >= arch.active_parameter_count() > 0
    assert arch.kv_cache_bytes_per_token() > 0


@pytest.mark.parametrize("base", [LLAMA, QWEN_MOE], ids=["dense", "moe"])
def test_the_deepest_model_allowed_sizes_on_the_whole_catalog_quickly(
    base: dict[str, Any],
) -> None:
    arch = parse_hf_config(base, {"num_hidden_layers": MAX_LAYERS})
    assert MAX_LAYERS * MAX_OPTIONS_PER_GPU * len(CATALOG.gpus) <= SIZING_WORK_BUDGET
    request = SizingRequest(architecture=arch, max_model_len=4096)
    started = time.perf_counter()
    result = choose_gpu(request, CATALOG)
    took = time.perf_counter() - started
    assert took < 1.5, took  # about 0.15 s on one core
    assert result.parameter_count > 0


def test_a_sizing_over_the_work_budget_is_refused_before_it_starts() -> None:
    gpus = len(CATALOG.gpus)
    many = GpuCatalog(
        gpus=tuple(
            gpu.model_copy(update={"name": f"{gpu.name}-{copy}"})
            for copy in range(SIZING_WORK_BUDGET // (MAX_LAYERS * MAX_OPTIONS_PER_GPU * gpus) + 1)
            for gpu in CATALOG.gpus
        )
    )
    arch = parse_hf_config(LLAMA, {"num_hidden_layers": MAX_LAYERS})
    request = SizingRequest(architecture=arch, max_model_len=4096)
    started = time.perf_counter()
    with pytest.raises(SizingError) as refused:
        choose_gpu(request, many)
    assert time.perf_counter() - started < 0.1
    assert refused.value.field == "model.architecture.num_hidden_layers"
    assert "over the budget" in str(refused.value) and "resources.allowedGPUs" in str(refused.value)
    allowed = [g.name for g in many.gpus[:gpus]]
    assert choose_gpu(request, many, "auto", allowed).parameter_count > 0  # fewer types: fine


@pytest.mark.parametrize("layers", ["1000000000", "1.0e+308"])
def test_plan_refuses_a_billion_layers_in_one_line_within_two_seconds(
    layers: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    body = yaml.safe_load((ROOT / "examples" / "llama-3.1-8b.yaml").read_text())
    body["spec"]["model"]["architecture"] = {"num_hidden_layers": yaml.safe_load(layers)}
    path = tmp_path / "deep.yaml"
    path.write_text(yaml.safe_dump(body))
    assert layers in path.read_text()
    started = time.perf_counter()
    assert main(["plan", "-f", str(path)]) == 1
    assert time.perf_counter() - started < 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(
        f"llmservice plan: error: {path}: spec.model.architecture.num_hidden_layers: "
    )
    started = time.perf_counter()
    override = f'{{"num_hidden_layers": {layers}}}'
    argv = ["size", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192"]
    assert main([*argv, "--architecture", override]) == 1
    assert time.perf_counter() - started < 2
    [line] = capsys.readouterr().err.splitlines()
    assert "llmservice size: error: config key num_hidden_layers must be at most 1,280" in line
