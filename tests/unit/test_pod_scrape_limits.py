"""samples_from_pods within limits: a pod's /metrics past its byte limit, unreadable or slow
is that pod's error, and a service's pods together take at most the scrape's budget."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from llmservice_operator.adapters.bounded_http import Limits
from llmservice_operator.adapters.scaling_metrics import samples_from_pods
from llmservice_operator.sim.exposition import SimMetrics
from llmservice_operator.vllm.metrics import metric_names

from .rawhttp import LATE_S, Answer, RawServer, dripping, endless, head, serving, took

LIMITS = Limits(max_bytes=64 * 1024, total_s=1.0, connect_s=0.5)


@pytest.fixture
def serve() -> Iterator[Callable[..., RawServer]]:
    yield from serving()


VERSION = "0.10.1"


def _exposition(status: int) -> Answer:
    def answer(connection: socket.socket, _request: bytes, _stop: threading.Event) -> None:
        metrics = SimMetrics(metric_names(VERSION), "m")
        metrics.set_state(running=3, waiting=2, kv_usage=0.5)
        body = metrics.exposition()
        connection.sendall(head(status, content_length=str(len(body))) + body)

    return answer


exposition = _exposition(200)


def pod(name: str, ip: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": name}, "status": {"podIP": ip}}


def test_a_pod_past_the_byte_limit_is_that_pods_error(serve: Callable[..., RawServer]) -> None:
    big = serve(endless)
    serve(exposition, "127.0.0.2", big.port)  # the other pod: same port, its own address
    pods = [pod("big", "127.0.0.1"), pod("fine", "127.0.0.2")]
    samples, error = samples_from_pods(pods, big.port, VERSION, limits=LIMITS)
    assert error is None and samples is not None and set(samples) == {"fine"}
    assert samples["fine"].waiting == 2
    samples, error = samples_from_pods(pods[:1], big.port, VERSION, limits=LIMITS)
    assert samples is None and error == "big: the answer is larger than 65536 bytes"


def test_unreadable_metrics_are_that_pods_error(serve: Callable[..., RawServer]) -> None:
    def garbage(connection: socket.socket, _request: bytes, _stop: threading.Event) -> None:
        body = b"vllm:num_requests_waiting{ 1 2 3\n"
        connection.sendall(head(content_length=str(len(body))) + body)

    server = serve(garbage)
    samples, error = samples_from_pods([pod("p", "127.0.0.1")], server.port, VERSION)
    assert samples is None and error is not None and error.startswith("p: unreadable metrics")


def test_only_the_metrics_read_are_parsed_and_no_more_than_1024_series_of_them(
    serve: Callable[..., RawServer],
) -> None:
    """Whatever else the exposition holds is not parsed (a malformed line there is no error);
    a pod with more series of the four metrics than vLLM would ever have is refused."""
    body = [b"# TYPE junk histogram", b"junk{ 1 2 3", b"vllm:num_requests_waiting 4"]

    def answer(connection: socket.socket, _request: bytes, _stop: threading.Event) -> None:
        text = b"\n".join(body) + b"\n"
        connection.sendall(head(content_length=str(len(text))) + text)

    server = serve(answer)
    samples, error = samples_from_pods([pod("p", "127.0.0.1")], server.port, VERSION)
    assert error is None and samples is not None and samples["p"].waiting == 4
    body[2:] = [f'vllm:num_requests_waiting{{x="{i}"}} 1'.encode() for i in range(1025)]
    samples, error = samples_from_pods([pod("p", "127.0.0.1")], server.port, VERSION)
    assert samples is None and error is not None
    assert error.startswith("p: unreadable metrics: more than 1024 series of")
    del body[-1]  # 1,024: read
    samples, error = samples_from_pods([pod("p", "127.0.0.1")], server.port, VERSION)
    assert error is None and samples is not None and samples["p"].waiting == 1024


def test_an_error_answer_is_that_pods_error_whatever_its_body(
    serve: Callable[..., RawServer],
) -> None:
    server = serve(_exposition(503))
    samples, error = samples_from_pods([pod("p", "127.0.0.1")], server.port, VERSION)
    assert samples is None and error == "p: HTTP 503"


def test_a_pod_gets_no_more_than_what_is_left_of_the_budget(
    serve: Callable[..., RawServer],
) -> None:
    server = serve(dripping)
    generous = Limits(max_bytes=64 * 1024, total_s=30.0, connect_s=0.5)
    started = time.monotonic()
    samples, error = samples_from_pods(
        [pod("p", "127.0.0.1")], server.port, VERSION, limits=generous, budget_s=1.0
    )
    assert took(started) < 1.0 + LATE_S  # not its own 30 s
    assert samples is None and error is not None and "p: the answer took longer than" in error


def test_slow_pods_are_cut_by_the_budget_of_the_whole_scrape(
    serve: Callable[..., RawServer],
) -> None:
    server = serve(dripping)
    pods = [pod(f"p{i}", "127.0.0.1") for i in range(4)]
    started = time.monotonic()
    samples, error = samples_from_pods(pods, server.port, VERSION, limits=LIMITS, budget_s=1.5)
    assert took(started) < 1.5 + LATE_S  # not 4 pods x 1 s
    assert samples is None and error is not None
    assert "p0: the answer took longer than 1 s" in error
    assert "p2: not scraped (the pods took 1.5 s)" in error
    assert "p3: not scraped" in error
