"""Captures the real engine's ``/metrics`` into tests/fixtures (run with the project venv)::

    .venv/bin/python hack/vllm-cpu/capture_metrics.py [--out tests/fixtures/vllm-0.32.0-metrics.txt]

Starts the CPU engine (``make install`` put it in the cache) with the tiny model on a free
loopback port, exactly as the pod runner would (``llmservice_dev.engine``), then sends:
completions and chat completions, each plain and streamed; one request for a model it does
not serve (a 404, so ``http_requests_total`` has a ``4xx`` series); then a burst of long
streamed requests that fills the small KV pool, and scrapes ``/metrics`` while the burst runs
(running and waiting both above 0, KV usage well above 0). It prints the time to ``/health``.
The text is committed: the metric reader's unit tests parse it next to the simulator's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from llmservice_dev.engine import engine_argv, engine_env, engine_installed, engine_paths

ROOT = Path(__file__).resolve().parents[2]
MODEL = "tiny"
PROMPT = "Kubernetes operators reconcile the declared state of a service. " * 6


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


async def wait_healthy(session: aiohttp.ClientSession, base: str, proc: Any, limit: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if proc.poll() is not None:
            raise RuntimeError(f"the engine exited with {proc.returncode} before /health")
        try:
            async with session.get(f"{base}/health") as response:
                if response.status == 200:
                    return time.monotonic() - start
        except aiohttp.ClientError:
            pass  # not listening yet: vLLM listens only once the model is loaded
        await asyncio.sleep(0.25)
    raise TimeoutError(f"no /health after {limit:g}s")


async def request(
    session: aiohttp.ClientSession,
    base: str,
    chat: bool,
    stream: bool,
    max_tokens: int,
    **extra: Any,
) -> int:
    """Sends one request; returns the HTTP status (streams are read to the end)."""
    body: dict[str, Any] = {"model": MODEL, "max_tokens": max_tokens, "stream": stream, **extra}
    if chat:
        body["messages"] = [{"role": "user", "content": PROMPT}]
    else:
        body["prompt"] = PROMPT
    path = "/v1/chat/completions" if chat else "/v1/completions"
    async with session.post(base + path, json=body) as response:
        await response.read()
        return response.status


async def capture(base: str, proc: Any, out: Path) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        took = await wait_healthy(session, base, proc, 180.0)
        print(f"engine: /health 200 after {took:.1f}s", file=sys.stderr)
        statuses = []
        for chat in (False, True):
            for stream in (False, True):
                for _ in range(2):
                    statuses.append(await request(session, base, chat, stream, 32))
        statuses.append(await request(session, base, False, False, 8, ignore_eos=True))
        missing = {"model": "not-served", "prompt": "x", "max_tokens": 4}
        async with session.post(f"{base}/v1/completions", json=missing) as response:
            await response.read()
            statuses.append(response.status)
        print(f"engine: answers {statuses}", file=sys.stderr)
        # The burst: 10 x (~70 prompt + 900 output tokens) into a 5,120-token KV pool.
        burst = [
            asyncio.create_task(request(session, base, False, True, 900, ignore_eos=True))
            for _ in range(10)
        ]
        text = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            async with session.get(f"{base}/metrics") as response:
                text = await response.text()
            gauges = _gauges(text)
            if gauges.get("vllm:num_requests_waiting", 0) > 0 and gauges.get(
                "vllm:num_requests_running", 0
            ):
                break
        print(f"engine: scraped during the burst: {json.dumps(_gauges(text))}", file=sys.stderr)
        out.write_text(text)
        print(f"engine: burst answers {await asyncio.gather(*burst)}", file=sys.stderr)


def _gauges(text: str) -> dict[str, float]:
    wanted = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
    values: dict[str, float] = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0]
        if name in wanted:
            values[name] = float(line.rsplit(" ", 1)[1])
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / "tests" / "fixtures" / "vllm-0.32.0-metrics.txt"
    )
    parser.add_argument("--core", default="0", help="VLLM_CPU_OMP_THREADS_BIND (default 0)")
    parser.add_argument("--log", type=Path, default=Path("/tmp/vllm-capture.log"))
    args = parser.parse_args()
    paths = engine_paths()
    reason = engine_installed(paths)
    if reason is not None:
        print(reason, file=sys.stderr)
        return 1
    host = "127.0.0.1"
    port = free_port(host)
    serve = [MODEL, "--served-model-name", MODEL, "--max-model-len", "1024"]
    argv = engine_argv(["vllm", "serve"], serve, paths=paths, host=host, port=port)
    env = engine_env(os.environ, omp_threads_bind=args.core)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.log.open("w") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            asyncio.run(capture(f"http://{host}:{port}", proc, args.out))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
