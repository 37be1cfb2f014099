"""The simulator over real HTTP on 127.0.0.1: OpenAI shapes, SSE, /metrics, faults.

Servers run time-scaled (the engine runs 20x faster than the wall clock) so the suite is fast.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmservice_operator.sim.engine import EngineFaults
from llmservice_operator.sim.profile import fallback_profile
from llmservice_operator.sim.server import ServerFaults, SimConfig, SimServer, serving
from llmservice_operator.vllm.metrics import (
    INTER_TOKEN_LATENCY_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TIME_TO_FIRST_TOKEN_BUCKETS,
)

SCALE = 20.0
Session = aiohttp.ClientSession


def make_server(**overrides: Any) -> SimServer:
    on_crash = overrides.pop("on_crash", None)
    config = SimConfig(
        model="meta-llama/Llama-3.1-8B-Instruct",
        served_model_names=("chat",),
        time_scale=SCALE,
        **overrides,
    )
    return SimServer(fallback_profile(), config, on_crash=on_crash)


def with_server(server: SimServer, body: Callable[[Session, str], Awaitable[None]]) -> None:
    async def main() -> None:
        async with serving(server) as base, aiohttp.ClientSession() as session:
            await body(session, base)

    asyncio.run(main())


async def post(session: Session, url: str, payload: dict[str, Any]) -> tuple[int, Any]:
    async with session.post(url, json=payload) as response:
        return response.status, await response.json()


async def sse(session: Session, url: str, payload: dict[str, Any]) -> list[Any]:
    events: list[Any] = []
    async with session.post(url, json={**payload, "stream": True}) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        async for raw in response.content:
            line = raw.decode().strip()
            if not line:
                continue
            assert line.startswith("data: ")
            data = line.removeprefix("data: ")
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


async def scrape(session: Session, base: str) -> dict[str, Any]:
    async with session.get(f"{base}/metrics") as response:
        assert response.status == 200
        text = await response.text()
    return {family.name: family for family in text_string_to_metric_families(text)}


def value(families: dict[str, Any], sample_name: str, **labels: str) -> float:
    family_name = sample_name.removesuffix("_total")
    for suffix in ("_count", "_sum"):
        family_name = family_name.removesuffix(suffix)
    total = 0.0
    for sample in families[family_name].samples:
        if sample.name == sample_name and labels.items() <= sample.labels.items():
            total += sample.value
    return total


def test_completion_shape_and_usage() -> None:
    async def body(session: Session, base: str) -> None:
        payload = {
            "model": "chat",
            "prompt": "x" * 400,
            "max_tokens": 12,
            "ignore_eos": True,
        }
        status, answer = await post(session, f"{base}/v1/completions", payload)
        assert status == 200
        assert answer["object"] == "text_completion"
        assert answer["model"] == "chat"
        assert answer["id"].startswith("cmpl-")
        (choice,) = answer["choices"]
        assert choice["finish_reason"] == "length"
        assert choice["index"] == 0
        assert isinstance(choice["text"], str)
        assert choice["text"]
        assert answer["usage"] == {
            "prompt_tokens": 100,
            "completion_tokens": 12,
            "total_tokens": 112,
        }

        hinted = {"model": "chat", "prompt": "hi", "prompt_token_count": 777, "max_tokens": 3}
        status, answer = await post(session, f"{base}/v1/completions", hinted)
        assert status == 200
        assert answer["usage"]["prompt_tokens"] == 777
        assert answer["usage"]["completion_tokens"] <= 3

    with_server(make_server(), body)


def test_chat_shape_and_natural_stop() -> None:
    async def body(session: Session, base: str) -> None:
        payload = {
            "model": "chat",
            "messages": [{"role": "user", "content": "Tell me about batching."}],
            "max_tokens": 4000,
        }
        status, answer = await post(session, f"{base}/v1/chat/completions", payload)
        assert status == 200
        assert answer["object"] == "chat.completion"
        (choice,) = answer["choices"]
        assert choice["message"]["role"] == "assistant"
        assert choice["finish_reason"] == "stop"  # the seeded draw stops well before 4000
        assert 1 <= answer["usage"]["completion_tokens"] < 4000

    with_server(make_server(), body)


def test_completion_stream_is_sse_ending_with_done() -> None:
    async def body(session: Session, base: str) -> None:
        payload = {
            "model": "chat",
            "prompt": "stream me",
            "max_tokens": 7,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        }
        events = await sse(session, f"{base}/v1/completions", payload)
        assert events[-1] == "[DONE]"
        usage = events[-2]
        assert usage["choices"] == []
        assert usage["usage"]["completion_tokens"] == 7
        tokens = events[:-2]
        assert len(tokens) == 7
        assert all(e["object"] == "text_completion" for e in tokens)
        assert [e["choices"][0]["finish_reason"] for e in tokens] == [None] * 6 + ["length"]
        assert len({e["id"] for e in events[:-1]}) == 1

        no_usage = await sse(session, f"{base}/v1/completions", {**payload, "stream_options": {}})
        assert len(no_usage) == 7 + 1

    with_server(make_server(), body)


def test_chat_stream_starts_with_the_role() -> None:
    async def body(session: Session, base: str) -> None:
        payload = {
            "model": "chat",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 5,
            "ignore_eos": True,
        }
        events = await sse(session, f"{base}/v1/chat/completions", payload)
        assert events[-1] == "[DONE]"
        first, *tokens = events[:-1]
        assert first["object"] == "chat.completion.chunk"
        assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert len(tokens) == 5
        assert tokens[-1]["choices"][0]["finish_reason"] == "length"
        assert all("content" in t["choices"][0]["delta"] for t in tokens)

    with_server(make_server(), body)


def test_models_health_version_and_errors() -> None:
    async def body(session: Session, base: str) -> None:
        async with session.get(f"{base}/health") as response:
            assert response.status == 200
        async with session.get(f"{base}/v1/models") as response:
            models = await response.json()
        assert models["object"] == "list"
        (model,) = models["data"]
        assert model["id"] == "chat"
        assert model["root"] == "meta-llama/Llama-3.1-8B-Instruct"
        assert model["max_model_len"] == 8192
        async with session.get(f"{base}/version") as response:
            assert (await response.json())["version"] == "0.33.0"

        status, error = await post(session, f"{base}/v1/completions", {"model": "x", "prompt": "a"})
        assert status == 404
        assert error["error"]["code"] == 404
        too_long = {"model": "chat", "prompt": "a", "prompt_token_count": 8000, "max_tokens": 500}
        status, error = await post(session, f"{base}/v1/completions", too_long)
        assert status == 400
        assert "maximum context length is 8192" in error["error"]["message"]
        async with session.post(f"{base}/v1/completions", data=b"{nope") as response:
            assert response.status == 400

    with_server(make_server(), body)


def test_same_seed_same_answer() -> None:
    payload = {"model": "chat", "prompt": "deterministic please", "max_tokens": 300}
    answers: list[tuple[str, int]] = []

    for seed in (5, 5, 6):

        async def body(session: Session, base: str) -> None:
            status, answer = await post(session, f"{base}/v1/completions", payload)
            assert status == 200
            choice = answer["choices"][0]
            answers.append((choice["text"], answer["usage"]["completion_tokens"]))

        with_server(make_server(seed=seed), body)
    assert answers[0] == answers[1]
    assert answers[0] != answers[2]


EXPECTED_SERIES = {
    # name PromQL sees: (type, label names)
    "vllm:num_requests_running": ("gauge", {"model_name", "engine"}),
    "vllm:num_requests_waiting": ("gauge", {"model_name", "engine"}),
    "vllm:kv_cache_usage_perc": ("gauge", {"model_name", "engine"}),
    "vllm:prompt_tokens_total": ("counter", {"model_name", "engine"}),
    "vllm:generation_tokens_total": ("counter", {"model_name", "engine"}),
    "vllm:request_success_total": ("counter", {"model_name", "engine", "finished_reason"}),
    "vllm:time_to_first_token_seconds": ("histogram", {"model_name", "engine"}),
    "vllm:inter_token_latency_seconds": ("histogram", {"model_name", "engine"}),
    "vllm:request_time_per_output_token_seconds": ("histogram", {"model_name", "engine"}),
    "vllm:e2e_request_latency_seconds": ("histogram", {"model_name", "engine"}),
    "vllm:request_queue_time_seconds": ("histogram", {"model_name", "engine"}),
    "http_requests_total": ("counter", {"handler", "method", "status"}),
    "llmservice_sim_injected_errors_total": ("counter", {"model_name"}),
}


def test_metrics_names_types_labels_and_buckets_are_vllms() -> None:
    async def body(session: Session, base: str) -> None:
        for _ in range(3):
            payload = {"model": "chat", "prompt": "abcd" * 50, "max_tokens": 10, "ignore_eos": True}
            status, _answer = await post(session, f"{base}/v1/completions", payload)
            assert status == 200
        families = await scrape(session, base)

        series: dict[str, tuple[str, set[str]]] = {}
        for family in families.values():
            if family.name.endswith("_created"):
                continue  # prometheus_client's creation timestamps, as in vLLM's exposition
            name = f"{family.name}_total" if family.type == "counter" else family.name
            labels = {k for s in family.samples for k in s.labels if k != "le"}
            series[name] = (family.type, labels)
        assert series == EXPECTED_SERIES

        for sample in families["vllm:num_requests_running"].samples:
            assert sample.labels == {"model_name": "chat", "engine": "0"}
        reasons = {s.labels["finished_reason"] for s in families["vllm:request_success"].samples}
        assert reasons == {"stop", "length", "abort", "error", "repetition"}

        def bounds(name: str) -> tuple[float, ...]:
            les = [s.labels["le"] for s in families[name].samples if s.name.endswith("_bucket")]
            return tuple(float(le) for le in les if le != "+Inf")

        assert bounds("vllm:time_to_first_token_seconds") == TIME_TO_FIRST_TOKEN_BUCKETS
        assert bounds("vllm:inter_token_latency_seconds") == INTER_TOKEN_LATENCY_BUCKETS
        assert bounds("vllm:request_time_per_output_token_seconds") == INTER_TOKEN_LATENCY_BUCKETS
        assert bounds("vllm:e2e_request_latency_seconds") == REQUEST_LATENCY_BUCKETS
        assert bounds("vllm:request_queue_time_seconds") == REQUEST_LATENCY_BUCKETS

        assert value(families, "vllm:request_success_total", finished_reason="length") == 3
        assert value(families, "vllm:generation_tokens_total") == 30
        assert value(families, "vllm:prompt_tokens_total") == 150
        assert value(families, "vllm:time_to_first_token_seconds_count") == 3
        assert value(families, "vllm:inter_token_latency_seconds_count") == 27
        assert value(families, "http_requests_total", handler="/v1/completions", status="2xx") == 3
        assert value(families, "vllm:num_requests_running") == 0
        assert value(families, "vllm:kv_cache_usage_perc") == 0
        # Latencies are simulated seconds: a 200-token prefill plus 9 decode steps of ~6 ms.
        e2e = value(families, "vllm:e2e_request_latency_seconds_sum") / 3
        assert 0.05 < e2e < 0.2

    with_server(make_server(), body)


def test_older_versions_expose_their_own_names() -> None:
    async def body(session: Session, base: str) -> None:
        families = await scrape(session, base)
        assert "vllm:gpu_cache_usage_perc" in families
        assert "vllm:kv_cache_usage_perc" in families
        assert "vllm:time_per_output_token_seconds" in families
        assert "vllm:inter_token_latency_seconds" not in families
        assert "vllm:request_time_per_output_token_seconds" not in families

    with_server(make_server(vllm_version="0.10.1"), body)


def test_gauges_show_running_and_waiting_under_load() -> None:
    profile = fallback_profile(max_num_seqs=4)
    server = SimServer(profile, SimConfig(model="m", time_scale=SCALE))

    async def body(session: Session, base: str) -> None:
        payload = {"model": "m", "prompt": "q", "max_tokens": 600, "ignore_eos": True}
        url = f"{base}/v1/completions"
        tasks = [asyncio.create_task(post(session, url, payload)) for _ in range(10)]
        # Until all ten have arrived and the batch is full: the first request starts alone at
        # its arrival, the others join at the next steps (the first batch takes ~0.2 s).
        for _ in range(100):
            await asyncio.sleep(0.005)
            families = await scrape(session, base)
            running = value(families, "vllm:num_requests_running")
            if running == 4 and value(families, "vllm:num_requests_waiting") + running == 10:
                break
        assert value(families, "vllm:num_requests_running") == 4
        assert value(families, "vllm:num_requests_waiting") == 6
        assert value(families, "vllm:kv_cache_usage_perc") > 0
        results = await asyncio.gather(*tasks)
        assert [status for status, _ in results] == [200] * 10
        families = await scrape(session, base)
        assert value(families, "vllm:num_requests_waiting") == 0
        queue_sum = value(families, "vllm:request_queue_time_seconds_sum")
        assert queue_sum > 6 * 3.0  # six waited for a ~4 s (simulated) batch, two of them twice

    with_server(server, body)


def test_error_rate_is_within_binomial_tolerance() -> None:
    rate, n = 0.3, 300
    sigma = math.sqrt(n * rate * (1 - rate))

    async def body(session: Session, base: str) -> None:
        payload = {"model": "chat", "prompt": "e", "max_tokens": 1}
        results = await asyncio.gather(
            *(post(session, f"{base}/v1/completions", payload) for _ in range(n))
        )
        errors = [answer for status, answer in results if status == 500]
        assert all(status in (200, 500) for status, _ in results)
        assert abs(len(errors) - rate * n) <= 4 * sigma
        assert errors[0]["error"]["type"] == "InternalServerError"
        families = await scrape(session, base)
        assert value(families, "llmservice_sim_injected_errors_total") == len(errors)
        assert value(families, "http_requests_total", status="5xx") == len(errors)
        assert value(families, "vllm:request_success_total") == n - len(errors)

    with_server(make_server(server_faults=ServerFaults(error_rate=rate)), body)


def test_startup_delay_then_ready() -> None:
    # 3 simulated seconds at 20x: 0.15 s of wall time.
    server = make_server(server_faults=ServerFaults(startup_delay_s=3.0))

    async def body(session: Session, base: str) -> None:
        async with session.get(f"{base}/health") as response:
            assert response.status == 503
        async with session.get(f"{base}/v1/models") as response:
            assert response.status == 503
        status, _ = await post(session, f"{base}/v1/completions", {"prompt": "a"})
        assert status == 503
        await asyncio.sleep(3.0 / SCALE + 0.05)
        async with session.get(f"{base}/health") as response:
            assert response.status == 200
        async with session.get(f"{base}/v1/models") as response:
            assert response.status == 200

    with_server(server, body)


def test_never_ready() -> None:
    async def body(session: Session, base: str) -> None:
        for _ in range(3):
            async with session.get(f"{base}/health") as response:
                assert response.status == 503
            async with session.get(f"{base}/v1/models") as response:
                assert response.status == 503
            await asyncio.sleep(0.05)
        async with session.get(f"{base}/metrics") as response:
            assert response.status == 200  # still scrapeable, like a loading engine

    with_server(make_server(server_faults=ServerFaults(never_ready=True)), body)


def test_crash_after_n_requests_calls_the_crash_hook_once() -> None:
    crashes: list[float] = []
    server = make_server(
        server_faults=ServerFaults(crash_after_requests=3),
        on_crash=lambda: crashes.append(1.0),
    )

    async def body(session: Session, base: str) -> None:
        payload = {"model": "chat", "prompt": "c", "max_tokens": 2}
        for _ in range(3):
            status, _ = await post(session, f"{base}/v1/completions", payload)
            assert status == 200
        await asyncio.sleep(0.1)
        assert crashes == [1.0]
        async with session.get(f"{base}/health") as response:
            assert response.status == 503

    with_server(server, body)


def test_extra_ttft_and_decode_slowdown_show_in_the_histograms() -> None:
    def mean_latencies(faults: EngineFaults) -> tuple[float, float]:
        out: list[float] = []

        async def body(session: Session, base: str) -> None:
            payload = {"model": "chat", "prompt": "f" * 400, "max_tokens": 20, "ignore_eos": True}
            for _ in range(3):
                await post(session, f"{base}/v1/completions", payload)
            families = await scrape(session, base)
            for name in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds"):
                out.append(value(families, f"{name}_sum") / value(families, f"{name}_count"))

        with_server(make_server(engine_faults=faults), body)
        return out[0], out[1]

    ttft, itl = mean_latencies(EngineFaults())
    slow_ttft, slow_itl = mean_latencies(EngineFaults(extra_ttft_s=0.5, decode_slowdown=4.0))
    assert slow_ttft - ttft == pytest.approx(0.5, abs=0.05)
    assert slow_itl / itl == pytest.approx(4.0, rel=0.25)


def test_a_client_that_goes_away_is_aborted() -> None:
    async def body(session: Session, base: str) -> None:
        payload = {
            "model": "chat",
            "prompt": "bye",
            "max_tokens": 2000,
            "ignore_eos": True,
            "stream": True,
        }
        async with session.post(f"{base}/v1/completions", json=payload) as response:
            await response.content.readline()  # the first token is out, then hang up
        for _ in range(100):
            await asyncio.sleep(0.01)
            families = await scrape(session, base)
            if value(families, "vllm:request_success_total", finished_reason="abort"):
                break
        assert value(families, "vllm:request_success_total", finished_reason="abort") == 1
        assert value(families, "vllm:num_requests_running") == 0
        assert value(families, "vllm:kv_cache_usage_perc") == 0

    with_server(make_server(), body)


def test_a_lagging_host_delays_tokens_but_not_the_reported_latencies() -> None:
    import time

    server = make_server()

    async def body(session: Session, base: str) -> None:
        payload = {"model": "chat", "prompt": "lag", "max_tokens": 60, "ignore_eos": True}
        request = asyncio.create_task(post(session, f"{base}/v1/completions", payload))
        await asyncio.sleep(0.01)
        time.sleep(0.15)  # block the event loop: 3 simulated seconds at 20x
        status, _ = await request
        assert status == 200
        families = await scrape(session, base)
        itl_sum = value(families, "vllm:inter_token_latency_seconds_sum")
        expected = sum(server.profile.decode_step_ms(1, 1 + n) for n in range(1, 60)) / 1000
        assert itl_sum == pytest.approx(expected, rel=0.01)  # no 3 s gap in the model's timeline
        assert value(families, "vllm:e2e_request_latency_seconds_sum") < 1.0

    with_server(server, body)


def test_a_late_wake_up_of_an_idle_engine_does_not_show_in_the_ttft() -> None:
    """The process stalls between a request's arrival at an idle engine and the engine loop
    waking (a busy host): 0.3 s of wall clock, 6 simulated seconds. The model's TTFT holds."""
    offset = [0.0]
    server = SimServer(
        fallback_profile(),
        SimConfig(model="meta-llama/Llama-3.1-8B-Instruct", served_model_names=("chat",),
                  time_scale=SCALE),
        clock=lambda: time.monotonic() + offset[0],
    )  # fmt: skip

    async def body(session: Session, base: str) -> None:
        await asyncio.sleep(0.05)  # the engine loop is idle, waiting
        wake = server._wakeup.set

        def stalled_wake() -> None:
            offset[0] += 0.3
            wake()

        server._wakeup.set = stalled_wake  # type: ignore[method-assign]
        payload = {"model": "chat", "prompt": "stall", "max_tokens": 4, "ignore_eos": True}
        status, _ = await post(session, f"{base}/v1/completions", payload)
        assert status == 200
        assert offset[0] >= 0.3  # the stall happened
        families = await scrape(session, base)
        assert value(families, "vllm:time_to_first_token_seconds_count") == 1
        assert value(families, "vllm:time_to_first_token_seconds_sum") < 1.0  # not 6 s

    with_server(server, body)
