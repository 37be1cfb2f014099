"""The smoke test: the requests it sends and how their answers are judged."""

from __future__ import annotations

import json

import pytest

from llmservice_operator.api.spec import SLOSpec
from llmservice_operator.rollout.smoke_verdict import (
    SmokeObservation,
    SmokeResult,
    judge_smoke,
    smoke_requests,
)

REQUESTS = smoke_requests("chat", 16384, SLOSpec(ttft_p99_ms=800), timeout_seconds=120)


def chunk(content: str | None, finish: str | None = None) -> str:
    delta = {} if content is None else {"content": content}
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


STREAM = [chunk(None), chunk("Paris"), chunk(" is."), chunk(None, "stop"), "[DONE]"]


def answered(name: str, **change: object) -> SmokeObservation:
    base: dict[str, object] = {
        "name": name,
        "status": 200,
        "chunks": STREAM,
        "first_token_seconds": 0.05,
    }
    base.update(change)
    return SmokeObservation(**base)  # type: ignore[arg-type]


def all_good(**change: object) -> list[SmokeObservation]:
    return [answered(r.name, **change) for r in REQUESTS]


def test_requests_are_streaming_chat_completions() -> None:
    assert [r.name for r in REQUESTS] == ["warmup", "short", "long"]
    for request in REQUESTS:
        assert request.path == "/v1/chat/completions"
        assert request.body["model"] == "chat" and request.body["stream"] is True
        assert request.timeout_seconds == 120
    assert [r.ttft_limit_ms for r in REQUESTS] == [None, 800, 800]
    long_words = len(REQUESTS[2].body["messages"][0]["content"].split())
    assert 900 < long_words <= 1100


def test_long_prompt_fits_a_small_context() -> None:
    small = smoke_requests("m", 256, SLOSpec(), 30)
    assert len(small[2].body["messages"][0]["content"].split()) < 256 // 2
    assert small[1].ttft_limit_ms is None


def test_good_answers_pass() -> None:
    result = judge_smoke(REQUESTS, all_good())
    assert result.passed, result.message
    assert "short: 9 chars, finish stop, TTFT 50 ms" in result.message


# (what went wrong, observation change for the "short" request, retryable, message part)
FAILURES: list[tuple[str, dict[str, object], bool, str]] = [
    ("still loading", {"status": 503, "body": "loading"}, True, "HTTP 503"),
    ("unreachable", {"status": None, "error": "connection refused"}, True, "connection refused"),
    ("server error", {"status": 500, "body": "boom"}, False, "HTTP 500 boom"),
    ("empty output", {"chunks": [chunk(""), chunk(None, "stop"), "[DONE]"]}, False, "empty output"),
    ("no [DONE]", {"chunks": STREAM[:-1]}, False, "[DONE]"),
    ("not JSON", {"chunks": ["{oops", "[DONE]"]}, False, "not JSON"),
    ("wrong object", {"chunks": ['{"object": "text_completion"}', "[DONE]"]}, False, "chat.completion.chunk"),
    ("no finish", {"chunks": [chunk("x"), "[DONE]"]}, False, "finish_reason"),
    ("too slow", {"first_token_seconds": 0.95}, False, "950 ms > slo.ttftP99Ms 800 ms"),
    ("untimed", {"first_token_seconds": None}, False, "not measured"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "change", "retryable", "says"), FAILURES, ids=[f[0] for f in FAILURES]
)
def test_failures(name: str, change: dict[str, object], retryable: bool, says: str) -> None:
    observations = [answered("warmup"), answered("short", **change), answered("long")]
    result = judge_smoke(REQUESTS, observations)
    assert not result.passed
    assert result.retryable is retryable
    assert says in result.message
    assert result.message.startswith("short:")


def test_warmup_is_not_timed_and_missing_answers_are_retried() -> None:
    slow_warmup = [answered("warmup", first_token_seconds=30.0), *all_good()[1:]]
    assert judge_smoke(REQUESTS, slow_warmup).passed
    assert judge_smoke(REQUESTS, all_good()[:2]) == SmokeResult(
        False, True, "long: not sent", judge_smoke(REQUESTS, all_good()[:2]).details
    )
