"""An OpenAI-compatible HTTP server that drives the simulated engine in (scaled) real time.

Endpoints (as vLLM's API server): ``GET /health``, ``GET /v1/models``, ``GET /version``,
``POST /v1/completions``, ``POST /v1/chat/completions`` (``"stream": true`` gives SSE
``data: {...}`` chunks ending with ``data: [DONE]``; ``stream_options.include_usage`` adds a
usage chunk) and ``GET /metrics``.

Time scale: the engine runs ``time_scale`` times faster than the wall clock. Everything the
simulator reports is in *simulated* seconds: the latency histograms on ``/metrics``, and the
fault durations it is given (``extra_ttft_ms``, ``startup_delay_s``). With ``time_scale=10`` a
request whose simulated TTFT is 400 ms streams its first token after 40 ms of wall time while
``vllm:time_to_first_token_seconds`` records 0.4, so PromQL sees the numbers a real engine
would produce. A client measuring wall time multiplies by ``time_scale`` to compare.

Like vLLM, an idle keep-alive connection is closed after 5 s (:data:`KEEPALIVE_TIMEOUT_S`).
Differences from vLLM worth knowing: while "loading" (``startup_delay_s``) the server already
listens and answers 503 (vLLM does not listen until the model is loaded; both fail a probe);
prefix caching is accepted but not simulated; ``n > 1`` and logprobs are not supported.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import random
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from llmservice_operator.sim.engine import (
    Engine,
    EngineFaults,
    FinishReason,
    SchedulingPolicy,
    TokenEvent,
)
from llmservice_operator.sim.exposition import SimMetrics
from llmservice_operator.sim.profile import EngineProfile
from llmservice_operator.vllm.metrics import LATEST_KNOWN_VLLM_VERSION, metric_names

__all__ = [
    "KEEPALIVE_TIMEOUT_S",
    "PRIORITY_HEADER",
    "ServerFaults",
    "SimConfig",
    "SimServer",
    "estimate_tokens",
    "request_priority",
    "serving",
]

#: An idle keep-alive connection is closed after this many (wall) seconds, as vLLM's server
#: (uvicorn's ``timeout_keep_alive``) does; aiohttp's own default would keep it 75 s.
KEEPALIVE_TIMEOUT_S = 5.0

#: Words the simulated model "generates", one per token.
_VOCABULARY = (
    " the", " model", " serves", " tokens", " quickly", " and", " batches", " requests",
    " while", " the", " cache", " holds", " context", " for", " every", " sequence", ".",
    " latency", " grows", " under", " load", ",", " queue", " depth", " rises",
)  # fmt: skip

_CHARS_PER_TOKEN = 4
_CHAT_TOKENS_PER_MESSAGE = 4


@dataclass(frozen=True)
class ServerFaults:
    """Faults injected at the HTTP layer."""

    error_rate: float = 0.0
    """Fraction of completion requests answered 500 (decided per request, seeded)."""
    startup_delay_s: float = 0.0
    """Simulated seconds before /health and /v1/models answer 200."""
    never_ready: bool = False
    """/health and /v1/models never answer 200 (nor do completions)."""
    crash_after_requests: int | None = None
    """After this many completion requests have been answered, the process exits."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError(f"error_rate must be within [0, 1], got {self.error_rate}")
        if self.startup_delay_s < 0:
            raise ValueError(f"startup_delay_s must be >= 0, got {self.startup_delay_s}")
        if self.crash_after_requests is not None and self.crash_after_requests < 1:
            raise ValueError(f"crash_after_requests must be >= 1, got {self.crash_after_requests}")


@dataclass(frozen=True)
class SimConfig:
    """Everything a :class:`SimServer` needs besides the engine profile."""

    model: str
    served_model_names: tuple[str, ...] = ()
    vllm_version: str = LATEST_KNOWN_VLLM_VERSION
    seed: int = 0
    time_scale: float = 1.0
    output_len_median: int = 128
    """Median natural length (tokens) of an answer when ``ignore_eos`` is not set."""
    scheduling_policy: SchedulingPolicy = "fcfs"
    """vLLM's --scheduling-policy: with priority a request's ``priority`` orders it."""
    engine_faults: EngineFaults = field(default_factory=EngineFaults)
    server_faults: ServerFaults = field(default_factory=ServerFaults)

    def __post_init__(self) -> None:
        if self.time_scale <= 0 or not math.isfinite(self.time_scale):
            raise ValueError(f"time_scale must be a positive number, got {self.time_scale}")
        if self.output_len_median < 1:
            raise ValueError(f"output_len_median must be >= 1, got {self.output_len_median}")

    @property
    def served_names(self) -> tuple[str, ...]:
        return self.served_model_names or (self.model,)


class _HttpError(Exception):
    def __init__(self, status: int, message: str, kind: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


def _error_response(status: int, message: str, kind: str) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
    return web.json_response(body, status=status)


def estimate_tokens(text: str) -> int:
    """About four characters a token, at least one."""
    return max(1, math.ceil(len(text) / _CHARS_PER_TOKEN))


def _prompt_of_completion(body: dict[str, Any]) -> tuple[str, int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and not isinstance(prompt[0], int):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt, estimate_tokens(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return " ".join(map(str, prompt)), len(prompt)
    raise _HttpError(400, "prompt must be a string or a list of token ids", "BadRequestError")


def _prompt_of_chat(body: dict[str, Any]) -> tuple[str, int]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _HttpError(400, "messages must be a non-empty list", "BadRequestError")
    parts: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            raise _HttpError(400, "each message must be an object", "BadRequestError")
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    text = "\n".join(parts)
    tokens = math.ceil(len(text) / _CHARS_PER_TOKEN) + _CHAT_TOKENS_PER_MESSAGE * len(messages)
    return text, max(1, tokens)


#: vLLM's header that overrides the body's ``priority`` (entrypoints/generate/base/serving.py).
PRIORITY_HEADER = "X-Vllm-Priority"
_INT64 = 2**63


def request_priority(body: dict[str, Any], headers: Mapping[str, str]) -> int:
    """A request's priority as vLLM 0.33 reads it: the ``X-Vllm-Priority`` header when it
    holds an integer, else the body's ``priority`` (an int64, default 0)."""
    header = headers.get(PRIORITY_HEADER)
    if header is not None:
        with contextlib.suppress(ValueError):
            return int(header)
    value = body.get("priority", 0)
    if not isinstance(value, int) or isinstance(value, bool) or not -_INT64 <= value < _INT64:
        raise _HttpError(400, "priority must be a 64-bit integer", "BadRequestError")
    return value


def _positive_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _HttpError(400, f"{key} must be a positive integer", "BadRequestError")
    return value


@dataclass
class _Pending:
    request_id: str
    arrival: float
    prompt_tokens: int
    tokens: asyncio.Queue[TokenEvent] = field(default_factory=asyncio.Queue)


class SimServer:
    """One simulated vLLM replica: engine, clock, HTTP routes and metrics."""

    def __init__(
        self,
        profile: EngineProfile,
        config: SimConfig,
        on_crash: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.profile = profile
        self.config = config
        self.engine = Engine(
            profile, config.engine_faults, scheduling_policy=config.scheduling_policy
        )
        self.names = metric_names(config.vllm_version)
        self.model_name = config.served_names[0]
        self.metrics = SimMetrics(self.names, self.model_name)
        self._on_crash = on_crash or _exit_process
        self._clock = clock
        self._t0 = clock()
        self._error_rng = random.Random(f"{config.seed}:errors")
        self._pending: dict[str, _Pending] = {}
        self._wakeup = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._engine_time = 0.0
        self._request_counter = 0
        self._answered = 0
        self.crashed = False

    # -- time --------------------------------------------------------------------------------

    def sim_now(self) -> float:
        """Simulated seconds since the server was created."""
        return (self._clock() - self._t0) * self.config.time_scale

    def _wall(self, sim_seconds: float) -> float:
        return sim_seconds / self.config.time_scale

    def ready(self) -> bool:
        faults = self.config.server_faults
        if faults.never_ready or self.crashed:
            return False
        return self.sim_now() >= faults.startup_delay_s

    # -- application -------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._instrument])
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/version", self._version)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.on_startup.append(self._start_engine)
        app.on_cleanup.append(self._stop_engine)
        return app

    async def _start_engine(self, _app: web.Application) -> None:
        self._t0 = self._clock()
        self._wakeup = asyncio.Event()
        self._loop_task = asyncio.create_task(self._engine_loop(), name="sim-engine")

    async def _stop_engine(self, _app: web.Application) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task

    @web.middleware
    async def _instrument(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        route = request.match_info.route.resource
        path = route.canonical if route is not None else "none"
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            self.metrics.observe_http(path, request.method, exc.status)
            raise
        self.metrics.observe_http(path, request.method, response.status)
        return response

    # -- engine loop -------------------------------------------------------------------------

    async def _engine_loop(self) -> None:
        """Run engine steps on one continuous simulated timeline, paced by the wall clock.

        While the engine has work, each step starts where the last one ended; the loop sleeps
        until a step's end is due and never delivers its tokens earlier. When the host falls
        behind (CPU contention, too high a time scale) the loop runs due steps back to back
        until it catches up: tokens then reach clients late, but the engine's timeline, and so
        every latency on /metrics, stays the model's.
        """
        min_sleep = 0.001
        while True:
            if self.engine.has_work():
                now = self._engine_time
            else:
                now = max(self._engine_time, self.sim_now())
            step = self.engine.step(now)
            self._publish_state()
            if step is None:
                wake = self.engine.next_wakeup(now)
                if wake is not None and wake <= self.sim_now():
                    self._engine_time = wake  # e.g. a request that arrived while we lagged
                    continue
                timeout = None if wake is None else self._wall(wake - self.sim_now())
                self._wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), timeout)
                # Resume at what woke the loop (a request's arrival, the wakeup due), not at
                # the moment this process got the CPU back: a late wake-up on a busy host
                # would otherwise show, time-scaled, in the model's TTFT.
                due = self.engine.next_wakeup(now)
                self._engine_time = max(now, min(self.sim_now(), math.inf if due is None else due))
                continue
            delay = self._wall(step.end - self.sim_now())
            await asyncio.sleep(delay if delay > min_sleep else 0)
            self._engine_time = step.end
            self.metrics.add_tokens(step.first_token_prompt_tokens, len(step.tokens))
            for itl in step.inter_token_latencies:
                self.metrics.observe_itl(itl)
            for token in step.tokens:
                pending = self._pending.get(token.request_id)
                if pending is None:
                    continue
                if token.index == 1:
                    self.metrics.observe_ttft(token.time - pending.arrival)
                pending.tokens.put_nowait(token)
            for stats in step.finished:
                self.metrics.observe_finished(stats)
            self._publish_state()

    def _publish_state(self) -> None:
        self.metrics.set_state(
            self.engine.num_running, self.engine.num_waiting, self.engine.kv_usage
        )

    # -- simple routes -----------------------------------------------------------------------

    async def _health(self, _request: web.Request) -> web.Response:
        return web.Response(status=200 if self.ready() else 503)

    async def _version(self, _request: web.Request) -> web.Response:
        return web.json_response({"version": self.config.vllm_version})

    async def _metrics(self, _request: web.Request) -> web.Response:
        self._publish_state()
        return web.Response(
            body=self.metrics.exposition(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def _models(self, _request: web.Request) -> web.Response:
        if not self.ready():
            return _error_response(503, "The model is still loading.", "ServiceUnavailableError")
        created = int(time.time())
        data = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": self.config.model,
                "parent": None,
                "max_model_len": self.profile.max_model_len,
            }
            for name in self.config.served_names
        ]
        return web.json_response({"object": "list", "data": data})

    # -- completions -------------------------------------------------------------------------

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _serve(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            return await self._generate(request, chat)
        except _HttpError as exc:
            return await self._send(request, _error_response(exc.status, exc.message, exc.kind))
        finally:
            self._answered += 1
            limit = self.config.server_faults.crash_after_requests
            if limit is not None and self._answered == limit:
                self.crashed = True
                print(
                    f"llmservice sim: crashing after {limit} requests "
                    "(LLMSERVICE_SIM_CRASH_AFTER_REQUESTS)",
                    file=sys.stderr,
                    flush=True,
                )
                asyncio.get_running_loop().call_later(0.05, self._on_crash)

    async def _send(self, request: web.Request, response: web.Response) -> web.Response:
        """Write a whole response now (so a crash right after cannot lose it)."""
        await response.prepare(request)
        await response.write_eof()
        return response

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        if not self.ready():
            raise _HttpError(503, "The model is still loading.", "ServiceUnavailableError")
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _HttpError(400, f"invalid JSON body: {exc}", "BadRequestError") from exc
        if not isinstance(body, dict):
            raise _HttpError(400, "the body must be a JSON object", "BadRequestError")
        model = body.get("model", self.model_name)
        if model not in self.config.served_names:
            raise _HttpError(404, f"The model `{model}` does not exist.", "NotFoundError")
        if body.get("n", 1) != 1:
            raise _HttpError(400, "the simulator supports n=1 only", "BadRequestError")
        text, prompt_tokens = _prompt_of_chat(body) if chat else _prompt_of_completion(body)
        hint = _positive_int(body, "prompt_token_count")
        if hint is not None:
            prompt_tokens = hint
        max_tokens = _positive_int(body, "max_completion_tokens") if chat else None
        max_tokens = max_tokens or _positive_int(body, "max_tokens")
        if max_tokens is None:
            max_tokens = 16 if not chat else max(self.profile.max_model_len - prompt_tokens, 1)
        output_tokens, end_reason = self._output_length(text, prompt_tokens, max_tokens, body)
        priority = request_priority(body, request.headers)
        try:
            self.engine.validate(prompt_tokens, max_tokens)
        except ValueError as exc:
            raise _HttpError(400, str(exc), "BadRequestError") from exc

        error_rate = self.config.server_faults.error_rate
        if error_rate > 0 and self._error_rng.random() < error_rate:
            self.metrics.injected_error()
            raise _HttpError(
                500, "Simulated engine failure (LLMSERVICE_SIM_ERROR_RATE).", "InternalServerError"
            )

        self._request_counter += 1
        prefix = "chatcmpl" if chat else "cmpl"
        request_id = f"{prefix}-{self.config.seed:x}-{self._request_counter:08x}"
        arrival = max(self.sim_now(), self._engine_time)
        pending = _Pending(request_id, arrival, prompt_tokens)
        self._pending[request_id] = pending
        self.engine.add_request(
            request_id, prompt_tokens, output_tokens, arrival, end_reason, priority=priority
        )
        self._publish_state()
        self._wakeup.set()
        words = self._words(request_id)
        try:
            if body.get("stream"):
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return await self._stream(request, pending, chat, words, include_usage)
            return await self._complete(request, pending, chat, words)
        finally:
            self._pending.pop(request_id, None)
            aborted = self.engine.abort(request_id, max(self.sim_now(), self._engine_time))
            if aborted is not None:
                self.metrics.observe_finished(aborted)
                self._publish_state()

    def _output_length(
        self, text: str, prompt_tokens: int, max_tokens: int, body: dict[str, Any]
    ) -> tuple[int, FinishReason]:
        """Exactly max_tokens with ``ignore_eos``; otherwise a seeded draw per prompt."""
        if body.get("ignore_eos"):
            return max_tokens, "length"
        digest = hashlib.sha256(f"{self.config.seed}:{prompt_tokens}:{text}".encode()).digest()
        rng = random.Random(digest)
        natural = max(1, round(rng.lognormvariate(math.log(self.config.output_len_median), 0.6)))
        if natural >= max_tokens:
            return max_tokens, "length"
        return natural, "stop"

    def _words(self, request_id: str) -> Callable[[int], str]:
        rng = random.Random(f"{self.config.seed}:{request_id}")
        picks: list[str] = []

        def word(index: int) -> str:
            while len(picks) < index:
                picks.append(rng.choice(_VOCABULARY))
            return picks[index - 1]

        return word

    def _envelope(self, pending: _Pending, chat: bool, stream: bool) -> dict[str, Any]:
        if chat:
            kind = "chat.completion.chunk" if stream else "chat.completion"
        else:
            kind = "text_completion"
        return {
            "id": pending.request_id,
            "object": kind,
            "created": int(time.time()),
            "model": self.model_name,
        }

    def _usage(self, pending: _Pending, completion_tokens: int) -> dict[str, int]:
        return {
            "prompt_tokens": pending.prompt_tokens,
            "total_tokens": pending.prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
        }

    async def _complete(
        self, request: web.Request, pending: _Pending, chat: bool, words: Callable[[int], str]
    ) -> web.Response:
        text: list[str] = []
        while True:
            token = await pending.tokens.get()
            text.append(words(token.index))
            if token.finish_reason is not None:
                break
        body = self._envelope(pending, chat, stream=False)
        content = "".join(text)
        if chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "logprobs": None,
                "finish_reason": token.finish_reason,
                "stop_reason": None,
            }
        else:
            choice = {
                "index": 0,
                "text": content,
                "logprobs": None,
                "finish_reason": token.finish_reason,
                "stop_reason": None,
            }
        body["choices"] = [choice]
        body["usage"] = self._usage(pending, token.index)
        return await self._send(request, web.json_response(body))

    async def _stream(
        self,
        request: web.Request,
        pending: _Pending,
        chat: bool,
        words: Callable[[int], str],
        include_usage: bool,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            status=200,
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
        )
        await response.prepare(request)

        async def send(payload: dict[str, Any] | str) -> None:
            data = payload if isinstance(payload, str) else json.dumps(payload)
            await response.write(f"data: {data}\n\n".encode())

        try:
            if chat:
                first = self._envelope(pending, chat, stream=True)
                first["choices"] = [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ]
                await send(first)
            while True:
                token = await pending.tokens.get()
                chunk = self._envelope(pending, chat, stream=True)
                piece = words(token.index)
                if chat:
                    chunk["choices"] = [
                        {
                            "index": 0,
                            "delta": {"content": piece},
                            "logprobs": None,
                            "finish_reason": token.finish_reason,
                        }
                    ]
                else:
                    chunk["choices"] = [
                        {
                            "index": 0,
                            "text": piece,
                            "logprobs": None,
                            "finish_reason": token.finish_reason,
                            "stop_reason": None,
                        }
                    ]
                await send(chunk)
                if token.finish_reason is not None:
                    break
            if include_usage:
                usage = self._envelope(pending, chat, stream=True)
                usage["choices"] = []
                usage["usage"] = self._usage(pending, token.index)
                await send(usage)
            await send("[DONE]")
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass  # the client went away; the finally in _generate aborts the request
        return response


@contextlib.asynccontextmanager
async def serving(server: SimServer, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """Serve ``server`` inside the running event loop; yields its base URL (``port=0``: any)."""
    runner = web.AppRunner(server.app(), access_log=None, keepalive_timeout=KEEPALIVE_TIMEOUT_S)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound_host, bound_port = runner.addresses[0][:2]
        yield f"http://{bound_host}:{bound_port}"
    finally:
        await runner.cleanup()


def _exit_process() -> None:
    """Default crash action: leave now, like an engine process dying."""
    import os

    os._exit(70)
