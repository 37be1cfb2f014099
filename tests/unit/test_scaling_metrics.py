"""samples_from_pods: the engine gauges and completion rates scraped from the pods' /metrics
(metricsSource: pods), from a real HTTP server serving the simulator's exposition."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from llmservice_operator.adapters.scaling_metrics import CompletionCounters, samples_from_pods
from llmservice_operator.sim.engine import FinishReason, RequestStats
from llmservice_operator.sim.exposition import SimMetrics
from llmservice_operator.vllm.metrics import metric_names

VERSION = "0.10.1"


class FakePod:
    """A pod's /metrics: the simulator's vLLM exposition on a local port."""

    def __init__(self) -> None:
        self.metrics = SimMetrics(metric_names(VERSION), "m")
        pod = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = pod.metrics.exposition()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def finish(self, count: int, reason: FinishReason = "stop") -> None:
        for i in range(count):
            self.metrics.observe_finished(
                RequestStats(f"r{i}", 0.0, 0.0, 0.1, 0.2, 1.0, 10, 5, reason, 0)
            )

    def restart(self) -> None:
        self.metrics = SimMetrics(metric_names(VERSION), "m")


@pytest.fixture
def pod() -> Iterator[FakePod]:
    fake = FakePod()
    yield fake
    fake.server.shutdown()


def pod_object(uid: str = "uid-1") -> dict[str, Any]:
    return {"metadata": {"name": "p-1", "uid": uid}, "status": {"podIP": "127.0.0.1"}}


def test_gauges_without_counters_carry_no_completion_rate(pod: FakePod) -> None:
    pod.metrics.set_state(running=3, waiting=2, kv_usage=0.4)
    samples, error = samples_from_pods([pod_object()], pod.port, VERSION)
    assert error is None and samples is not None
    sample = samples["p-1"]
    assert (sample.waiting, sample.running, sample.kv_cache_usage) == (2, 3, 0.4)
    assert sample.completion_rate is None


def test_completion_rate_from_two_scrapes_over_every_finish_reason(pod: FakePod) -> None:
    counters = CompletionCounters()
    pod.finish(7)
    first, _ = samples_from_pods([pod_object()], pod.port, VERSION, counters, 1000.0)
    assert first is not None and first["p-1"].completion_rate is None  # one reading: no rate
    pod.finish(20, "stop")
    pod.finish(10, "length")
    second, _ = samples_from_pods([pod_object()], pod.port, VERSION, counters, 1015.0)
    assert second is not None
    assert second["p-1"].completion_rate == pytest.approx(30 / 15)


def test_a_restarted_engine_starts_its_rate_over(pod: FakePod) -> None:
    counters = CompletionCounters()
    pod.finish(50)
    samples_from_pods([pod_object()], pod.port, VERSION, counters, 0.0)
    pod.restart()
    pod.finish(3)
    after, _ = samples_from_pods([pod_object()], pod.port, VERSION, counters, 15.0)
    assert after is not None and after["p-1"].completion_rate is None
    pod.finish(15)
    later, _ = samples_from_pods([pod_object()], pod.port, VERSION, counters, 30.0)
    assert later is not None and later["p-1"].completion_rate == pytest.approx(1.0)


def test_pods_are_told_apart_by_uid_and_forgotten_when_gone() -> None:
    counters = CompletionCounters()
    assert counters.rate("a", 0.0, 0.0) is None
    assert counters.rate("b", 0.0, 100.0) is None
    assert counters.rate("a", 30.0, 60.0) == pytest.approx(2.0)
    assert counters.rate("b", 30.0, 130.0) == pytest.approx(1.0)
    # "b" unread for longer than FORGET_AFTER_SECONDS: a later reading starts afresh.
    late = 30.0 + CompletionCounters.FORGET_AFTER_SECONDS + 1
    assert counters.rate("a", late, 700.0) is not None
    assert counters.rate("b", late + 1, 900.0) is None


def test_a_second_scrape_at_the_same_instant_changes_nothing() -> None:
    counters = CompletionCounters()
    counters.rate("a", 0.0, 0.0)
    assert counters.rate("a", 15.0, 30.0) == pytest.approx(2.0)
    assert counters.rate("a", 15.0, 45.0) == pytest.approx(2.0)


def test_an_unreachable_pod_is_an_error_not_a_sample() -> None:
    samples, error = samples_from_pods([pod_object()], 1, VERSION, CompletionCounters(), 0.0)
    assert samples is None
    assert error is not None and "p-1" in error
