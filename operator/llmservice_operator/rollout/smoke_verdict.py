"""The smoke test a candidate passes before it takes any traffic (pure: requests and judgement).

The adapter sends :func:`smoke_requests` in order to the candidate's preview Service
(streaming chat completions through the OpenAI API), records for each what came back as a
:class:`SmokeObservation`, and :func:`judge_smoke` says whether the candidate passed:

* HTTP 200, a well-formed SSE stream of ``chat.completion.chunk`` objects ending in
  ``[DONE]``, a ``finish_reason`` and non-empty generated text, for every request;
* the time to the first token within ``slo.ttftP99Ms`` for the measured requests (the first,
  warm-up request is not timed: it pays for lazy initialisation a real client never sees).

A 503 (vLLM's answer while the model is still loading) or a connection failure is
*retryable*: the step machine asks again until the progress deadline. Anything else that fails
is a verdict on the candidate, and the rollout rolls back: a stream cut short (larger or slower
than the adapter allows) too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..api.spec import SLOSpec

__all__ = [
    "SmokeObservation",
    "SmokeRequest",
    "SmokeResult",
    "judge_smoke",
    "smoke_requests",
]

_SHORT_PROMPT = "Reply with one short sentence: what is the capital of France?"
_LONG_SENTENCE = (
    "The quick brown fox jumps over the lazy dog while the operator watches the rollout. "
)
_LONG_QUESTION = "\n\nIn one short sentence: what animal jumps over the dog in the text above?"


@dataclass(frozen=True)
class SmokeRequest:
    name: str
    path: str
    body: dict[str, Any]
    ttft_limit_ms: float | None
    """The first token must arrive within this; None: not timed."""
    timeout_seconds: float


@dataclass(frozen=True)
class SmokeObservation:
    """What the adapter saw for one :class:`SmokeRequest`."""

    name: str
    status: int | None
    """HTTP status; None when no response came (connection refused, timeout, ...)."""
    chunks: Sequence[str] = ()
    """The ``data:`` payloads of the SSE stream, in order (``[DONE]`` included)."""
    first_token_seconds: float | None = None
    """Seconds from sending the request to the first chunk carrying text."""
    error: str | None = None
    """Why no response came (``status`` None), or why a 200's stream was cut short (it was too
    large or too slow: a failed verdict)."""
    body: str = ""
    """The body of a non-200 answer (for the message)."""


@dataclass(frozen=True)
class SmokeResult:
    passed: bool
    retryable: bool = False
    message: str = ""
    details: tuple[str, ...] = field(default=())


def smoke_requests(
    served_model: str, max_model_len: int, slo: SLOSpec, timeout_seconds: float
) -> tuple[SmokeRequest, ...]:
    """Warm-up, a short prompt and a long prompt, each a streaming chat completion.

    The long prompt is about a quarter of ``max_model_len`` in words (at most 1,024 words,
    roughly 1,400 tokens), which always leaves room for the answer.
    """
    words_per_sentence = len(_LONG_SENTENCE.split())
    sentences = max(1, min(1024, max_model_len // 4) // words_per_sentence)
    long_prompt = _LONG_SENTENCE * sentences + _LONG_QUESTION

    def body(prompt: str) -> dict[str, Any]:
        return {
            "model": served_model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 16,
            "temperature": 0,
            "stream": True,
        }

    path = "/v1/chat/completions"
    limit = slo.ttft_p99_ms
    return (
        SmokeRequest("warmup", path, body(_SHORT_PROMPT), None, timeout_seconds),
        SmokeRequest("short", path, body(_SHORT_PROMPT), limit, timeout_seconds),
        SmokeRequest("long", path, body(long_prompt), limit, timeout_seconds),
    )


def _judge_stream(chunks: Sequence[str]) -> tuple[str, str | None, str | None]:
    """(text, finish_reason, problem) of a chat-completion SSE stream."""
    if not chunks or chunks[-1].strip() != "[DONE]":
        return "", None, "the stream does not end with data: [DONE]"
    text: list[str] = []
    finish: str | None = None
    for raw in chunks[:-1]:
        try:
            chunk = json.loads(raw)
        except json.JSONDecodeError as exc:
            return "", None, f"a chunk is not JSON ({exc}): {raw[:80]!r}"
        if not isinstance(chunk, dict) or chunk.get("object") != "chat.completion.chunk":
            return "", None, f"a chunk is not a chat.completion.chunk: {raw[:80]!r}"
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return "", None, f"a chunk has no choices list: {raw[:80]!r}"
        for choice in choices:
            if not isinstance(choice, dict):
                return "", None, f"a choice is not an object: {raw[:80]!r}"
            delta = choice.get("delta") or {}
            content = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(content, str):
                text.append(content)
            if choice.get("finish_reason"):
                finish = str(choice["finish_reason"])
    return "".join(text), finish, None


def judge_smoke(
    requests: Sequence[SmokeRequest], observations: Sequence[SmokeObservation]
) -> SmokeResult:
    """Passed when every request was answered well and in time; see the module docstring."""
    seen = {o.name: o for o in observations}
    details: list[str] = []
    for request in requests:
        obs = seen.get(request.name)
        if obs is None:
            return SmokeResult(False, True, f"{request.name}: not sent", tuple(details))
        if obs.status is None:
            why = obs.error or "no response"
            return SmokeResult(False, True, f"{request.name}: {why}", tuple(details))
        if obs.status == 503:
            msg = f"{request.name}: HTTP 503 (model still loading?) {obs.body[:120]}".rstrip()
            return SmokeResult(False, True, msg, tuple(details))
        if obs.status != 200:
            msg = f"{request.name}: HTTP {obs.status} {obs.body[:200]}".rstrip()
            return SmokeResult(False, False, msg, tuple(details))
        if obs.error is not None:  # cut short: too large or too slow
            return SmokeResult(False, False, f"{request.name}: {obs.error}", tuple(details))
        text, finish, problem = _judge_stream(obs.chunks)
        if problem is not None:
            return SmokeResult(False, False, f"{request.name}: {problem}", tuple(details))
        if not text.strip():
            return SmokeResult(False, False, f"{request.name}: empty output", tuple(details))
        if finish is None:
            msg = f"{request.name}: no finish_reason in the stream"
            return SmokeResult(False, False, msg, tuple(details))
        ttft_ms = None if obs.first_token_seconds is None else obs.first_token_seconds * 1000
        if request.ttft_limit_ms is not None:
            if ttft_ms is None:
                msg = f"{request.name}: the time to first token was not measured"
                return SmokeResult(False, False, msg, tuple(details))
            if ttft_ms > request.ttft_limit_ms:
                msg = (
                    f"{request.name}: time to first token {ttft_ms:.0f} ms > "
                    f"slo.ttftP99Ms {request.ttft_limit_ms:g} ms"
                )
                return SmokeResult(False, False, msg, tuple(details))
        timing = "" if ttft_ms is None else f", TTFT {ttft_ms:.0f} ms"
        details.append(f"{request.name}: {len(text)} chars, finish {finish}{timing}")
    return SmokeResult(True, False, "; ".join(details), tuple(details))
