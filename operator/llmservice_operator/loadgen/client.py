"""The open-loop load generator: Poisson arrivals, streamed requests, client-side latencies.

Open loop: requests are sent at the schedule's arrival times whatever the server does, so a
slow server builds a queue (the situation autoscaling has to handle) instead of slowing the
generator down. Each request streams (SSE) so TTFT is the time to the first token chunk and
TPOT is ``(last token - first token) / (output tokens - 1)``, vLLM's own definition.

Targets come from a callable asked once per request, so a caller can hand in the ready pods
of an LLMService and refresh them during the run; requests go round-robin over the list.

Time scale: with ``time_scale=S`` the schedule (rates, durations, timeouts) is read in
simulated seconds and compressed S times, and every measured time is multiplied by S, so a
run against ``llmservice sim --sim-time-scale S`` reports numbers comparable with the
simulator's ``/metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp

from llmservice_operator.loadgen.distributions import LengthDist
from llmservice_operator.loadgen.report import LoadReport, RequestRecord, summarize
from llmservice_operator.loadgen.schedule import RateSchedule

__all__ = [
    "IDLE_CONNECTION_TIMEOUT_S",
    "LoadConfig",
    "TargetSource",
    "load_session",
    "prompt_text",
    "resolve_model",
    "run_load",
    "static_targets",
]

TargetSource = Callable[[], Sequence[str]]
"""Returns the base URLs (``http://host:port``) to spread requests over, right now."""

Endpoint = Literal["completions", "chat"]
_PROMPT_WORD = "lorem "  # ~1.5 tokens per word to a real tokenizer; the simulator reads the hint

#: How long an idle pooled connection is kept for reuse. vLLM's server (uvicorn,
#: ``timeout_keep_alive`` 5 s) closes a keep-alive connection idle for 5 s; a request sent on it
#: just as it closes fails ("Server disconnected": ~3% of a burst after an idle gap, measured on
#: the real engine). Dropping our side first, below 5 s, means a reused connection is never
#: one the server is closing.
IDLE_CONNECTION_TIMEOUT_S = 4.0


def load_session() -> aiohttp.ClientSession:
    """The HTTP session a load run uses: no connection limit, idle connections dropped after
    :data:`IDLE_CONNECTION_TIMEOUT_S`. Call it inside the event loop that will use it."""
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=IDLE_CONNECTION_TIMEOUT_S)
    return aiohttp.ClientSession(connector=connector)


def static_targets(urls: Sequence[str]) -> TargetSource:
    frozen = tuple(u.rstrip("/") for u in urls)
    if not frozen:
        raise ValueError("at least one target is needed")
    return lambda: frozen


@dataclass(frozen=True)
class LoadConfig:
    schedule: RateSchedule
    prompt_tokens: LengthDist = field(default_factory=lambda: LengthDist("fixed", 256))
    output_tokens: LengthDist = field(default_factory=lambda: LengthDist("fixed", 128))
    endpoint: Endpoint = "completions"
    model: str | None = None
    """Model name to send; None asks the first target's /v1/models."""
    max_requests: int | None = None
    seed: int = 0
    time_scale: float = 1.0
    request_timeout_s: float = 600.0
    drain_timeout_s: float = 600.0
    """After the last send, how long in-flight requests may still take before they are cut."""
    ignore_eos: bool = True
    """Ask for exactly the drawn output length (vLLM's ``ignore_eos``)."""
    api_key: str | None = field(default=None, repr=False)
    """Sent as ``Authorization: Bearer`` (vLLM's ``--api-key``), as clients send it."""

    def __post_init__(self) -> None:
        if self.time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {self.time_scale}")
        if self.max_requests is not None and self.max_requests < 0:
            raise ValueError(f"max_requests must be >= 0, got {self.max_requests}")
        if self.request_timeout_s <= 0 or self.drain_timeout_s < 0:
            raise ValueError("request_timeout_s must be > 0 and drain_timeout_s >= 0")


@dataclass(frozen=True)
class _Planned:
    at: float
    prompt_tokens: int
    output_tokens: int


def plan(config: LoadConfig) -> list[_Planned]:
    """The whole run, decided up front from the seed: send times and lengths."""
    times = config.schedule.arrival_times(
        random.Random(f"{config.seed}:arrivals"), config.max_requests
    )
    prompt_rng = random.Random(f"{config.seed}:prompt")
    output_rng = random.Random(f"{config.seed}:output")
    return [
        _Planned(
            t, config.prompt_tokens.sample(prompt_rng), config.output_tokens.sample(output_rng)
        )
        for t in times
    ]


def prompt_text(prompt_tokens: int) -> str:
    """The prompt sent for ``prompt_tokens``: four characters a token, as the simulator counts
    (it also gets the number itself); a real tokenizer makes its own count of it."""
    return (_PROMPT_WORD * ((prompt_tokens * 4) // len(_PROMPT_WORD) + 1))[: prompt_tokens * 4]


def _payload(config: LoadConfig, model: str, item: _Planned) -> dict[str, Any]:
    text = prompt_text(item.prompt_tokens)
    payload: dict[str, Any] = {
        "model": model,
        "max_tokens": item.output_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "prompt_token_count": item.prompt_tokens,  # read by the simulator, ignored by vLLM
    }
    if config.ignore_eos:
        payload["ignore_eos"] = True
    if config.endpoint == "chat":
        payload["messages"] = [{"role": "user", "content": text}]
    else:
        payload["prompt"] = text
    return payload


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def resolve_model(
    session: aiohttp.ClientSession, target: str, timeout_s: float, api_key: str | None = None
) -> str:
    """The first model id a target serves (GET /v1/models)."""
    async with session.get(
        f"{target}/v1/models",
        timeout=aiohttp.ClientTimeout(total=timeout_s),
        headers=_headers(api_key),
    ) as response:
        response.raise_for_status()
        body = await response.json()
    models = body.get("data") or []
    if not models:
        raise ValueError(f"{target}/v1/models lists no model")
    model: str = models[0]["id"]
    return model


class _Run:
    def __init__(self, config: LoadConfig, session: aiohttp.ClientSession, model: str) -> None:
        self.config = config
        self.session = session
        self.model = model
        self.loop = asyncio.get_running_loop()
        self.t0 = self.loop.time()
        self.scale = config.time_scale
        self.last_end = self.t0

    def elapsed(self) -> float:
        """Run-clock seconds since the start (scaled)."""
        return (self.loop.time() - self.t0) * self.scale

    async def one(self, target: str, item: _Planned) -> RequestRecord:
        url = (
            f"{target}/v1/{'chat/completions' if self.config.endpoint == 'chat' else 'completions'}"
        )
        start = self.loop.time()
        sent_at = (start - self.t0) * self.scale
        first: float | None = None
        last: float | None = None
        chunks = 0
        usage_tokens: int | None = None
        prompt_tokens = item.prompt_tokens
        timeout = aiohttp.ClientTimeout(total=self.config.request_timeout_s / self.scale)

        def failed(error: str, status: int | None) -> RequestRecord:
            self.last_end = max(self.last_end, self.loop.time())
            return RequestRecord(target, sent_at, False, status, error)

        try:
            async with self.session.post(
                url,
                json=_payload(self.config, self.model, item),
                timeout=timeout,
                headers=_headers(self.config.api_key),
            ) as response:
                if response.status != 200:
                    await response.read()
                    return failed(f"http_{response.status}", response.status)
                async for raw in response.content:
                    line = raw.strip()
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        break
                    chunk = json.loads(data)
                    if chunk.get("usage"):
                        usage_tokens = chunk["usage"].get("completion_tokens")
                        prompt_tokens = chunk["usage"].get("prompt_tokens", prompt_tokens)
                    if _has_token(chunk):
                        now = self.loop.time()
                        first = now if first is None else first
                        last = now
                        chunks += 1
        except TimeoutError:
            return failed("timeout", None)
        except aiohttp.ClientError:
            return failed("connection", None)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return failed("bad_stream", 200)
        end = self.loop.time()
        self.last_end = max(self.last_end, end)
        if first is None or last is None:
            return RequestRecord(target, sent_at, False, 200, "bad_stream")
        tokens = usage_tokens if usage_tokens is not None else chunks
        tpot = (last - first) * self.scale / (tokens - 1) if tokens > 1 else None
        return RequestRecord(
            target=target,
            start=sent_at,
            ok=True,
            status=200,
            ttft=(first - start) * self.scale,
            tpot=tpot,
            e2e=(end - start) * self.scale,
            prompt_tokens=prompt_tokens,
            output_tokens=tokens,
        )


def _has_token(chunk: dict[str, Any]) -> bool:
    for choice in chunk.get("choices") or []:
        if choice.get("text"):
            return True
        delta = choice.get("delta") or {}
        if delta.get("content"):
            return True
    return False


async def run_load(
    config: LoadConfig,
    targets: TargetSource,
    session: aiohttp.ClientSession | None = None,
) -> LoadReport:
    """Send the planned load to ``targets`` and summarise what came back (on
    :func:`load_session` unless a ``session`` is given)."""
    owned = session is None
    if session is None:
        session = load_session()
    try:
        return await _run_load(config, targets, session)
    finally:
        if owned:
            await session.close()


async def _run_load(
    config: LoadConfig, targets: TargetSource, session: aiohttp.ClientSession
) -> LoadReport:
    planned = plan(config)
    first_targets = [t.rstrip("/") for t in targets()]
    if not first_targets:
        raise ValueError("no targets to send load to")
    model = config.model or await resolve_model(
        session, first_targets[0], config.request_timeout_s / config.time_scale, config.api_key
    )
    run = _Run(config, session, model)
    tasks: list[asyncio.Task[RequestRecord]] = []
    sent_to: list[str] = []
    for counter, item in enumerate(planned):
        delay = run.t0 + item.at / run.scale - run.loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        current = [t.rstrip("/") for t in targets()] or first_targets
        target = current[counter % len(current)]
        sent_to.append(target)
        tasks.append(asyncio.create_task(run.one(target, item)))
    records: list[RequestRecord] = []
    if tasks:
        done, pending = await asyncio.wait(tasks, timeout=config.drain_timeout_s / run.scale)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for task, target, item in zip(tasks, sent_to, planned, strict=False):
            if task in done:
                records.append(task.result())
            else:
                records.append(RequestRecord(target, item.at, False, None, "cancelled"))
    duration = (run.last_end - run.t0) * run.scale
    return summarize(records, duration, config.time_scale)
