"""`llmservice sim` and `llmservice load` as commands: vLLM-style args, env faults, sizing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from llmservice_dev.localcluster.ports import free_port
from llmservice_operator import sizing
from llmservice_operator.cli import main
from llmservice_operator.commands.sim import build_profile, options_from

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"


def test_vllm_serve_args_are_accepted_verbatim() -> None:
    argv = [
        "serve",
        LLAMA_8B,
        "--served-model-name", "chat", "llama",
        "--host", "0.0.0.0",
        "--port", "8000",
        "--max-model-len", "16K",
        "--max-num-seqs", "64",
        "--tensor-parallel-size", "1",
        "--gpu-memory-utilization", "0.9",
        "--dtype", "bfloat16",
        "--kv-cache-dtype", "fp8",
        "--no-enable-prefix-caching",
        "--swap-space", "4",
        "--enforce-eager",
        "--some-future-flag=1",
    ]  # fmt: skip
    options = options_from(argv, {})
    assert options.model == LLAMA_8B
    assert options.served_model_names == ("chat", "llama")
    assert options.max_model_len == 16384
    assert options.max_num_seqs == 64
    assert options.gpu_memory_utilization == 0.9
    assert options.kv_cache_dtype == "fp8"
    assert options.ignored == ("--some-future-flag=1",)
    assert options.gpu == "H100-80GB"
    assert options.time_scale == 1.0
    assert options.vllm_version == "0.33.0"
    assert options_from(["--model", LLAMA_8B], {}).model == LLAMA_8B


def test_faults_and_sim_settings_come_from_the_environment() -> None:
    env = {
        "LLMSERVICE_SIM_EXTRA_TTFT_MS": "250",
        "LLMSERVICE_SIM_DECODE_SLOWDOWN": "2.5",
        "LLMSERVICE_SIM_ERROR_RATE": "0.1",
        "LLMSERVICE_SIM_STARTUP_DELAY_S": "30",
        "LLMSERVICE_SIM_NEVER_READY": "true",
        "LLMSERVICE_SIM_CRASH_AFTER_REQUESTS": "100",
        "LLMSERVICE_SIM_TIME_SCALE": "10",
        "LLMSERVICE_SIM_GPU": "L4",
        "LLMSERVICE_SIM_SEED": "7",
        "LLMSERVICE_SIM_VLLM_VERSION": "0.10.1",
    }
    options = options_from([LLAMA_8B], env)
    assert options.engine_faults.extra_ttft_s == 0.25
    assert options.engine_faults.decode_slowdown == 2.5
    assert options.server_faults.error_rate == 0.1
    assert options.server_faults.startup_delay_s == 30
    assert options.server_faults.never_ready
    assert options.server_faults.crash_after_requests == 100
    assert (options.time_scale, options.gpu, options.seed) == (10, "L4", 7)
    assert options.vllm_version == "0.10.1"
    flags = options_from([LLAMA_8B, "--sim-time-scale", "4", "--sim-gpu", "A100-80GB"], env)
    assert (flags.time_scale, flags.gpu) == (4, "A100-80GB")  # a flag wins over its variable
    quiet = options_from([LLAMA_8B], {"LLMSERVICE_SIM_NEVER_READY": "", "OTHER": "1"})
    assert not quiet.server_faults.never_ready


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ([], {}, "no model given"),
        ([LLAMA_8B], {"LLMSERVICE_SIM_ERROR_RATE": "lots"}, "LLMSERVICE_SIM_ERROR_RATE"),
        ([LLAMA_8B], {"LLMSERVICE_SIM_ERROR_RATE": "1.5"}, "error_rate"),
        ([LLAMA_8B], {"LLMSERVICE_SIM_NEVER_READY": "maybe"}, "LLMSERVICE_SIM_NEVER_READY"),
        ([LLAMA_8B], {"LLMSERVICE_SIM_TIME_SCALE": "0"}, "time scale"),
        ([LLAMA_8B], {"LLMSERVICE_SIM_CRASH_AFTER_REQUESTS": "2.5"}, "valid int"),
        ([LLAMA_8B, "--sim-vllm-version", "0.5.0"], {}, "predates the V1 engine"),
    ],
)
def test_bad_settings_are_refused(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        options_from(argv, env)


def test_kv_capacity_is_what_sizing_predicts() -> None:
    options = options_from([LLAMA_8B, "--max-model-len", "16384", "--sim-gpu", "H100-80GB"], {})
    profile, note = build_profile(options)
    request = sizing.SizingRequest(
        architecture=sizing.parse_hf_config(sizing.load_builtin_model(LLAMA_8B)),
        max_model_len=16384,
    )
    expected = sizing.size_for_gpu(request, sizing.builtin_catalog().get("H100-80GB"))
    assert profile.kv_capacity_tokens == expected.kv_pool_tokens
    assert profile.full_length_sequences() == expected.max_concurrent_sequences_at_max_len
    assert profile.max_num_seqs == expected.max_num_seqs
    assert note.startswith("sized 1x H100-80GB, TP=1")
    perf = sizing.performance_for(request, sizing.builtin_catalog().get("H100-80GB"), 1)
    assert profile.decode_step_ms(8, 8000) == perf.decode_step_ms(8, 8000)


def test_tensor_parallelism_is_honoured_or_refused() -> None:
    seventy = "meta-llama/Llama-3.1-70B-Instruct"
    profile, note = build_profile(
        options_from([seventy, "-tp", "4", "--max-model-len", "8192"], {})
    )
    assert "4x H100-80GB, TP=4" in note
    two, _ = build_profile(options_from([seventy, "-tp", "2", "--max-model-len", "8192"], {}))
    assert two.kv_capacity_tokens < profile.kv_capacity_tokens
    with pytest.raises(ValueError, match="the smallest that does is 2x H100-80GB"):
        build_profile(options_from([seventy, "-tp", "1", "--max-model-len", "8192"], {}))


def test_unknown_models_use_the_fallback_profile() -> None:
    argv = ["acme/secret-model", "--max-model-len", "4096", "--sim-kv-capacity-tokens", "65536"]
    profile, note = build_profile(options_from(argv, {}))
    assert "fallback" in note
    assert (profile.kv_capacity_tokens, profile.max_model_len) == (65536, 4096)
    assert profile.full_length_sequences() == 16


def test_help_lists_the_environment(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--help"]) == 0
    out = capsys.readouterr().out
    assert "LLMSERVICE_SIM_CRASH_AFTER_REQUESTS" in out
    assert "--sim-time-scale" in out


@contextmanager
def sim_process(env: dict[str, str], *args: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    command = [sys.executable, "-m", "llmservice_operator", "sim", LLAMA_8B]
    command += ["--served-model-name", "chat", "--host", "127.0.0.1", "--port", str(port), *args]
    process = subprocess.Popen(
        command,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=1) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "the simulator did not become healthy"
            time.sleep(0.05)
        yield process, base
    finally:
        if process.poll() is None:
            process.terminate()
        process.wait(timeout=10)
        if process.stderr:
            process.stderr.close()


def complete(base: str) -> int:
    body = json.dumps({"model": "chat", "prompt": "hello", "max_tokens": 3}).encode()
    request = urllib.request.Request(
        f"{base}/v1/completions", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        status: int = response.status
        return status


def test_the_process_exits_after_n_requests() -> None:
    env = {"LLMSERVICE_SIM_CRASH_AFTER_REQUESTS": "2", "LLMSERVICE_SIM_TIME_SCALE": "20"}
    with sim_process(env) as (process, base):
        assert complete(base) == 200
        assert process.poll() is None
        assert complete(base) == 200
        assert process.wait(timeout=10) == 70
        stderr = process.stderr.read().decode() if process.stderr else ""
        assert "crashing after 2 requests" in stderr


def test_load_command_against_a_sim_process(capsys: pytest.CaptureFixture[str]) -> None:
    with sim_process({}, "--sim-time-scale", "20", "--max-model-len", "8192") as (_, base):
        argv = ["load", "--target", base, "--rate", "10", "--duration", "4", "--time-scale", "20"]
        argv += ["--prompt-tokens", "uniform:100:400", "--output-tokens", "16", "--output", "json"]
        assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["requests"] > 10
    assert report["errors"] == 0
    assert report["completed"] == report["per_target"][base]["ok"]
    assert report["ttft_s"]["p99"] > 0
    assert report["time_scale"] == 20


def test_load_command_flag_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["load", "--target", "http://127.0.0.1:9", "--rate", "1"]) == 1  # bad input
    assert "llmservice load: error: give --rate and --duration" in capsys.readouterr().err
    port = free_port()
    argv = ["load", "--target", f"http://127.0.0.1:{port}", "--rate", "1", "--duration", "1"]
    assert main(argv) == 1  # nothing listens there: /v1/models cannot be asked
