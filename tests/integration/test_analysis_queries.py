"""The analysis' request counts and error rate, as real Prometheus answers them.

A static target serves ``http_requests_total`` the way vLLM's HTTP instrumentation does (one
series per handler and status class, created at its first request). The operator's own
queries (resolve_checks) then run through its Prometheus adapter. What they must get right:
a series that appears inside the window (a new revision's first requests, its first 5xx)
counts from zero, and a series that existed before counts only what it added since.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, Counter, start_http_server

from llmservice_dev.localcluster.ports import free_port
from llmservice_dev.localcluster.prometheus import PrometheusServer
from llmservice_operator.adapters.prometheus_queries import PrometheusAdapter
from llmservice_operator.api.spec import AnalysisSettings, SLOSpec
from llmservice_operator.rollout.analysis import (
    ERROR_RATE,
    SAMPLE_COUNT,
    AnalysisPolicy,
    AnalysisTarget,
    resolve_checks,
)

HANDLER = "/v1/completions"
WINDOW_S = 8


class Exporter:
    """``http_requests_total{namespace,llmservice,revision,handler,method,status}``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "http_requests",
            "Requests by handler and status class.",
            ["namespace", "llmservice", "revision", "handler", "method", "status"],
            registry=self.registry,
        )
        self.port = free_port()
        self.server, self.thread = start_http_server(self.port, "127.0.0.1", self.registry)

    def answer(self, revision: str, status: str, count: int) -> None:
        labels = ("ml", "chat", revision, HANDLER, "POST", status)
        self.requests.labels(*labels).inc(count)


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    found = Exporter()
    yield found
    found.server.shutdown()


@pytest.fixture
def prometheus(exporter: Exporter, tmp_path: Path) -> Iterator[PrometheusServer]:
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "static-vllm",
                "honor_labels": True,  # keep the exporter's namespace/llmservice/revision
                "static_configs": [{"targets": [f"127.0.0.1:{exporter.port}"]}],
            }
        ],
    }
    server = PrometheusServer(tmp_path / "prometheus", config=yaml.safe_dump(config))
    with server:
        yield server


def measure(url: str, revision: str) -> dict[str, float]:
    policy = AnalysisPolicy.from_settings(AnalysisSettings.model_validate({"window": "8s"}))
    target = AnalysisTarget("ml", "chat", revision, None, "0.33.0")
    checks = [
        c
        for c in resolve_checks(policy, SLOSpec(max_error_rate=0.05), target)
        if c.name in (SAMPLE_COUNT, ERROR_RATE)
    ]
    results = PrometheusAdapter(url).measure(checks)
    values: dict[str, float] = {}
    for name, result in results.items():
        assert not isinstance(result, str), result
        assert len(result) == 1, (name, result)
        values[name] = result[0].value
    return values


def scraped(prometheus: PrometheusServer, revision: str, total: int) -> None:
    """Wait until Prometheus has scraped ``total`` requests of ``revision``."""
    promql = f'sum(http_requests_total{{revision="{revision}"}})'
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        result = PrometheusAdapter(prometheus.url).query(promql)
        if not isinstance(result, str) and result and result[0].value == total:
            return
        time.sleep(0.2)
    raise AssertionError(f"Prometheus did not scrape {total} requests of {revision}")


def test_new_series_count_from_zero_and_old_ones_count_what_they_added(
    exporter: Exporter, prometheus: PrometheusServer
) -> None:
    # "old" served 100 requests long before the window.
    exporter.answer("old", "2xx", 100)
    scraped(prometheus, "old", 100)
    time.sleep(WINDOW_S + 2)

    # Within the window: "old" adds 12 (3 of them 5xx, a series new in the window); "new"
    # starts serving, its first scraped sample already at 7 (4 ok, 3 errors).
    exporter.answer("old", "2xx", 9)
    exporter.answer("old", "5xx", 3)
    exporter.answer("new", "2xx", 4)
    exporter.answer("new", "5xx", 3)
    scraped(prometheus, "old", 112)
    scraped(prometheus, "new", 7)
    time.sleep(1.5)
    exporter.answer("new", "2xx", 5)
    scraped(prometheus, "new", 12)

    old = measure(prometheus.url, "old")
    assert old[SAMPLE_COUNT] == 12, old
    assert old[ERROR_RATE] == pytest.approx(3 / 12), old

    new = measure(prometheus.url, "new")
    assert new[SAMPLE_COUNT] == 12, new
    assert new[ERROR_RATE] == pytest.approx(3 / 12), new

    # A revision that served nothing: 0 requests, and an error rate of 0/0 (NaN), which the
    # sample count (below minSamples) turns into NoData.
    idle = measure(prometheus.url, "idle")
    assert idle[SAMPLE_COUNT] == 0
    assert idle[ERROR_RATE] != idle[ERROR_RATE]  # NaN

    # Once the window has passed with no new requests, nothing is counted.
    time.sleep(WINDOW_S + 2)
    assert measure(prometheus.url, "new")[SAMPLE_COUNT] == 0
