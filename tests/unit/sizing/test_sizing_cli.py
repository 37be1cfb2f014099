"""`llmservice size`: add_parser/run contract, JSON keys, text table, exit codes."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from llmservice_operator.commands import size

MODELS = (
    Path(__file__).parents[3] / "operator" / "llmservice_operator" / "sizing" / "data" / "models"
)


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="llmservice")
    size.add_parser(parser.add_subparsers(dest="command", required=True))
    return size.run(parser.parse_args(["size", *argv]))


def test_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code = _run(
        [
            "--model-config",
            str(MODELS / "Llama-3.1-8B-Instruct.json"),
            "--gpu",
            "H100-80GB",
            "--max-model-len",
            "16384",
            "--output",
            "json",
        ]
    )
    out = capsys.readouterr().out
    data = json.loads(out)
    assert code == 0
    assert data["fits"] is True
    assert data["parameterCount"] == 8_030_261_248
    assert data["weightBytes"] == 16_060_522_496
    assert data["kvCacheBytesPerToken"] == 131_072
    assert (data["tensorParallelSize"], data["pipelineParallelSize"]) == (1, 1)
    assert data["gpusPerReplica"] == 1 and data["gpuType"] == "H100-80GB"
    assert data["maxConcurrentSequencesAtMaxLen"] == 27
    assert isinstance(data["decodeMsPerTokenAtBatch1"], float)
    assert isinstance(data["prefillMsPer1kTokens"], float)
    assert isinstance(data["reason"], str) and data["reason"]


def test_all_options(capsys: pytest.CaptureFixture[str]) -> None:
    code = _run(
        [
            "--model",
            "mistralai/Mixtral-8x7B-Instruct-v0.1",
            "--gpu",
            "H100-80GB",
            "--max-model-len",
            "32768",
            "--dtype",
            "bfloat16",
            "--quantization",
            "fp8",
            "--kv-cache-dtype",
            "fp8",
            "--min-concurrency",
            "4",
            "--gpu-memory-utilization",
            "0.9",
            "--output",
            "json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (data["quantization"], data["kvCacheDtype"], data["tensorParallelSize"]) == (
        "fp8",
        "fp8",
        1,
    )
    assert data["kvCacheBytesPerToken"] == 65_536


def test_does_not_fit_exits_2_with_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = _run(
        [
            "--model",
            "meta-llama/Llama-3.1-70B-Instruct",
            "--gpu",
            "L4",
            "--max-model-len",
            "131072",
            "--min-concurrency",
            "64",
            "--output",
            "json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 2
    assert data["fits"] is False and "64 required" in data["reason"]


def test_auto_gpu_and_allowed(capsys: pytest.CaptureFixture[str]) -> None:
    code = _run(
        [
            "--model",
            "Llama-3.1-8B-Instruct",
            "--gpu",
            "auto",
            "--allowed-gpus",
            "A100-80GB,H100-80GB",
            "--max-model-len",
            "8192",
            "--output",
            "json",
        ]
    )
    assert code == 0
    assert json.loads(capsys.readouterr().out)["gpuType"] == "A100-80GB"


def test_text_table(capsys: pytest.CaptureFixture[str]) -> None:
    code = _run(["--model", "google/gemma-2-9b-it", "--gpu", "L4", "--max-model-len", "8192"])
    out = capsys.readouterr().out
    assert code == 0
    for label in (
        "Fits",
        "GPUs",
        "Weights",
        "KV cache",
        "Sequences",
        "Decode",
        "Prefill",
        "Reason",
        "Warning",
    ):
        assert label in out
    assert "2x L4, TP=2" in out  # 17.2 GiB of bf16 weights + overhead > 20.7 GiB budget


def test_architecture_override_and_catalog(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    catalog = tmp_path / "gpus.yaml"
    catalog.write_text("gpus:\n  - name: L4\n    memory_bytes: 48305799168\n")
    code = _run(
        [
            "--model",
            "meta-llama/Llama-3.1-8B",
            "--architecture",
            '{"model_type": "llama"}',
            "--gpu",
            "L4",
            "--gpu-catalog",
            str(catalog),
            "--max-model-len",
            "8192",
            "--output",
            "json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["maxConcurrentSequencesAtMaxLen"] > 10


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpu", "H100-80GB", "--max-model-len", "8192"], "--model-config PATH or --model"),
        (["--model", "Qwen/Qwen3-8B"], "--max-model-len is required"),
        (["--model", "Qwen/Qwen3-8B", "--max-model-len", "x"], "must be an integer"),
        (["--model", "Qwen/Qwen3-8B", "--max-model-len", "0"], "at least 1"),
        (["--model", "Qwen/Qwen3-8B", "--max-model-len", "8", "--dtype", "int4"], "--dtype"),
        (
            ["--model", "Qwen/Qwen3-8B", "--max-model-len", "8", "--quantization", "nf4"],
            "--quantization",
        ),
        (["--model", "Qwen/Qwen3-8B", "--max-model-len", "8", "--gpu", "TPU"], "unknown GPU"),
        (["--model", "Qwen/Qwen3-8B", "--max-model-len", "8", "--output", "yaml"], "--output"),
        (
            ["--model", "Qwen/Qwen3-8B", "--max-model-len", "8", "--gpu-memory-utilization", "1.5"],
            "at most 1",
        ),
        (["--model", "acme/nothing", "--max-model-len", "8"], "no carried config.json"),
        (["--model-config", "/nonexistent/config.json", "--max-model-len", "8"], "cannot read"),
        (
            ["--architecture", '{"model_type": "falcon"}', "--max-model-len", "8"],
            "unknown architecture 'falcon'",
        ),
        (
            ["--architecture", '{"model_type": "llama"}', "--max-model-len", "8"],
            "lacks num_hidden_layers",
        ),
        (
            ["--model", "Qwen/Qwen3-8B", "--architecture", "[1]", "--max-model-len", "8"],
            "JSON object",
        ),
    ],
)
def test_bad_input_exits_1_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code = _run(argv)
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]
    assert "Traceback" not in captured.err


def test_model_config_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text((MODELS / "Qwen3-8B.json").read_text())
    assert _run(["--model-config", str(tmp_path), "--gpu", "L40S", "--max-model-len", "4096"]) == 0
    capsys.readouterr()
    (tmp_path / "config.json").write_text("{not json")
    assert _run(["--model-config", str(tmp_path), "--max-model-len", "4096"]) == 1
    assert "is not JSON" in capsys.readouterr().err


def test_subprocess_module_entry() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmservice_operator.commands.size",
            "--model",
            "deepseek-ai/DeepSeek-V3",
            "--gpu",
            "H200-141GB",
            "--max-model-len",
            "65536",
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["kvCacheBytesPerToken"] == 61 * 576 * 2
    assert data["tensorParallelSize"] == 8
