"""adapters/prometheus_queries.py against a raw server: every resultType Prometheus answers
(a scalar is one series without labels), its errors, and an answer too large or too slow."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from llmservice_operator.adapters.prometheus_queries import PrometheusAdapter
from llmservice_operator.adapters.scaling_metrics import arrival_rate_from_prometheus
from llmservice_operator.rollout import Series

from .rawhttp import LATE_S, Answer, RawServer, head, serving, silent, took


@pytest.fixture
def serve() -> Iterator[Callable[..., RawServer]]:
    yield from serving()


def prometheus(payload: dict[str, Any], status: int = 200) -> Answer:
    body = json.dumps(payload).encode()

    def answer(connection: socket.socket, _request: bytes, _stop: threading.Event) -> None:
        connection.sendall(
            head(status, content_type="application/json", content_length=str(len(body))) + body
        )

    return answer


def answered(result_type: str, result: Any) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": result_type, "result": result}}


def test_a_scalar_answer_is_one_series_without_labels(serve: Callable[..., RawServer]) -> None:
    server = serve(prometheus(answered("scalar", [1_700_000_000.5, "42"])))
    adapter = PrometheusAdapter(server.url + "/")
    assert adapter.query("scalar(sum(rate(x[1m])))") == [Series({}, 42.0)]
    request = server.requests[0]
    assert request.startswith(b"POST /api/v1/query HTTP/1.1")
    assert request.endswith(b"query=scalar%28sum%28rate%28x%5B1m%5D%29%29%29&timeout=10s")
    # The autoscaler's reading of an arrivalRateQuery that returns a scalar:
    assert arrival_rate_from_prometheus(adapter, "scalar(x)") == (42.0, None)


def test_vectors_strings_and_errors(serve: Callable[..., RawServer]) -> None:
    vector = [{"metric": {"pod": "a"}, "value": [1.0, "1.5"]}, {"metric": {}, "value": [1, "2"]}]
    server = serve(prometheus(answered("vector", vector)))
    assert PrometheusAdapter(server.url).query("x") == [Series({"pod": "a"}, 1.5), Series({}, 2.0)]
    server = serve(prometheus(answered("string", [1.0, "hello"])))
    assert PrometheusAdapter(server.url).query('"hello"') == (
        "the query returns a string; it must return one number"
    )
    bad = {"status": "error", "errorType": "bad_data", "error": "parse error"}
    server = serve(prometheus(bad, 400))
    assert PrometheusAdapter(server.url).query("x{") == "Prometheus answered bad_data: parse error"


def test_a_prometheus_answer_past_its_limit_is_an_error(serve: Callable[..., RawServer]) -> None:
    many = [{"metric": {"pod": f"p{i}"}, "value": [1.0, "1"]} for i in range(1000)]
    server = serve(prometheus(answered("vector", many)))
    result = PrometheusAdapter(server.url, max_bytes=16 * 1024).query("x")
    assert isinstance(result, str)
    assert result.startswith(f"Prometheus at {server.url}: the answer is larger than 16384")


def test_a_prometheus_that_does_not_answer_is_an_error_in_time(
    serve: Callable[..., RawServer],
) -> None:
    server = serve(silent)
    started = time.monotonic()
    result = PrometheusAdapter(server.url, timeout_seconds=0.5).query("x")
    assert result == f"Prometheus at {server.url}: no answer within 2.5 s"
    assert took(started) < 2.5 + LATE_S
