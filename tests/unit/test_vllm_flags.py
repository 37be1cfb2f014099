"""Opt-in (`make test-vllm-flags`): the args we render are accepted by the pinned vLLM's own
server argument parser, and mean what we meant. Needs `pip install vllm==0.33.0` (~9 GB), so
it is marked `vllm` and deselected from the default run (see pyproject's addopts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llmservice_operator.commands.plan import plan_documents

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


@pytest.fixture(scope="module")
def vllm_parser() -> Any:
    platforms = pytest.importorskip("vllm.platforms")
    from vllm.platforms.cpu import CpuPlatform

    platforms._current_platform = CpuPlatform()  # the parser runs on a CPU-only machine
    from vllm.entrypoints.common.cli_args import FlexibleArgumentParser, make_arg_parser

    return make_arg_parser(FlexibleArgumentParser())


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_rendered_args_parse_with_vllms_own_parser(example: Path, vllm_parser: Any) -> None:
    [plan] = plan_documents(example, None, "http://prometheus:9090")
    [dep] = [o for o in plan.objects if o["kind"] == "Deployment"]
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["vllm", "serve"]
    args = vllm_parser.parse_args(container["args"])  # exits (SystemExit) on an unknown flag
    sizing = plan.sizing
    spec = plan.service.spec
    assert args.model_tag == container["args"][0]
    assert args.tensor_parallel_size == sizing.tensor_parallel_size
    assert args.pipeline_parallel_size == sizing.pipeline_parallel_size
    assert args.max_model_len == spec.engine.max_model_len
    assert args.max_num_seqs == plan.shape.max_num_seqs
    assert args.gpu_memory_utilization == spec.engine.gpu_memory_utilization
    assert args.enable_prefix_caching is spec.engine.prefix_caching
    assert args.enable_chunked_prefill is spec.engine.chunked_prefill
    assert args.kv_cache_dtype == spec.engine.kv_cache_dtype
    assert args.port == spec.serving.port
    expected_quantization = None if spec.model.quantization == "none" else spec.model.quantization
    assert args.quantization == expected_quantization


def test_flag_table_default_matches_vllm(vllm_parser: Any) -> None:
    from llmservice_operator.vllm.flags import flag_table

    assert vllm_parser.get_default("gpu_memory_utilization") == pytest.approx(
        flag_table("0.33.0").default_gpu_memory_utilization
    )
