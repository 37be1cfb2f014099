"""adapters/smoke.py: the smoke test's requests against a candidate that misbehaves (a raw
server): each request ends by its timeout, its stream is cut past its byte budget, and what
the verdict needs is kept."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from llmservice_operator.adapters.smoke import SMOKE_STREAM_MAX_BYTES, run_smoke
from llmservice_operator.api.spec import SLOSpec
from llmservice_operator.rollout.smoke_verdict import judge_smoke, smoke_requests

from .rawhttp import LATE_S, RawServer, chunk, head, serving, silent, took


@pytest.fixture
def serve() -> Iterator[Callable[..., RawServer]]:
    yield from serving()


def _event(content: str | None, finish: str | None = None) -> bytes:
    delta = {} if content is None else {"content": content}
    chunk_ = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(chunk_).encode() + b"\n\n"


def _requests(timeout_seconds: float) -> Any:
    return smoke_requests("m", 4096, SLOSpec(ttft_p99_ms=5000), timeout_seconds)


def test_a_good_stream_passes_with_its_first_token_timed(serve: Callable[..., RawServer]) -> None:
    def good(connection: socket.socket, _request: bytes, _stop: threading.Event) -> None:
        connection.sendall(head(transfer_encoding="chunked", content_type="text/event-stream"))
        for event in (_event(None), _event("Paris"), _event(".", "stop"), b"data: [DONE]\n\n"):
            connection.sendall(chunk(event))
        connection.sendall(b"0\r\n\r\n")

    server = serve(good)
    requests = _requests(5)
    observations = run_smoke(server.url, requests, "secret")
    result = judge_smoke(requests, observations)
    assert result.passed, result.message
    assert all(o.first_token_seconds is not None for o in observations)
    assert b"authorization: bearer secret" in server.requests[0].lower()


def test_a_stream_that_never_ends_is_cut_at_its_timeout_and_fails_the_test(
    serve: Callable[..., RawServer],
) -> None:
    def unending(connection: socket.socket, _request: bytes, stop: threading.Event) -> None:
        connection.sendall(head(transfer_encoding="chunked"))
        connection.sendall(chunk(_event("Paris")))
        while not stop.wait(0.05):
            connection.sendall(chunk(b": still here\n"))  # an SSE comment, kept alive

    server = serve(unending)
    requests = _requests(1)
    started = time.monotonic()
    observations = run_smoke(server.url, requests, None)
    assert took(started) < 1 + LATE_S  # one request: the next would only take as long
    assert [o.name for o in observations] == ["warmup"]
    assert observations[0].status == 200 and observations[0].chunks  # what came is kept
    result = judge_smoke(requests, observations)
    assert not result.passed and not result.retryable
    assert result.message == "warmup: the answer took longer than 1 s"


def test_a_stream_past_its_byte_budget_is_cut(serve: Callable[..., RawServer]) -> None:
    def flood(connection: socket.socket, _request: bytes, stop: threading.Event) -> None:
        connection.sendall(head(transfer_encoding="chunked"))
        events = chunk(_event("x" * 100) * 40)
        while not stop.is_set():
            connection.sendall(events)

    server = serve(flood)
    requests = _requests(30)
    started = time.monotonic()
    observations = run_smoke(server.url, requests, None)
    assert took(started) < 10
    (observation,) = observations
    assert observation.error == f"the answer is larger than {SMOKE_STREAM_MAX_BYTES} bytes"
    assert sum(len(c) for c in observation.chunks) <= SMOKE_STREAM_MAX_BYTES
    result = judge_smoke(requests, observations)
    assert not result.passed and not result.retryable


def test_only_the_start_of_an_error_answer_is_read(serve: Callable[..., RawServer]) -> None:
    def failing(connection: socket.socket, _request: bytes, stop: threading.Event) -> None:
        connection.sendall(head(500, transfer_encoding="chunked"))
        while not stop.is_set():
            connection.sendall(chunk(b"E" * 4096))

    server = serve(failing)
    requests = _requests(30)
    started = time.monotonic()
    observations = run_smoke(server.url, requests, None)
    assert took(started) < 2
    assert observations[0].status == 500 and observations[0].body == "E" * 500
    assert not judge_smoke(requests, observations).retryable


def test_a_pod_that_does_not_answer_is_retried_later(serve: Callable[..., RawServer]) -> None:
    server = serve(silent)
    requests = _requests(1)
    observations = run_smoke(server.url, requests, None)
    assert [(o.status, o.error) for o in observations] == [(None, "no answer within 1 s")]
    assert judge_smoke(requests, observations).retryable
