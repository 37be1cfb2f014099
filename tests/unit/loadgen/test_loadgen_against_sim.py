"""The load generator against in-process simulators on 127.0.0.1 (time-scaled).

Fidelity check, client side (wall time x scale) against the simulator's own vLLM histograms:

* p99: PromQL's histogram_quantile only knows which bucket a value fell in and interpolates
  linearly inside it, so the stated tolerance is that the client's p99 and the histogram's
  p99 lie in the same vLLM bucket or in neighbouring ones.
* mean: exact on both sides (``_sum / _count``). TPOT within 10%; TTFT and E2E differ by the
  client's HTTP overhead, which must stay under 0.2 s simulated (20 ms wall at scale 10).

Measured here (scale 10, ~110 requests, idle host): p99 TTFT 0.16-0.18 s client vs 0.23 s
histogram (same bucket), TPOT 13-14 ms vs 24 ms (same bucket), E2E 1.23-1.27 s vs 1.41 s (same
bucket); means TPOT 8.1 ms vs 8.1 ms, TTFT 84 ms vs 58 ms, E2E 0.65 s vs 0.62 s.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import socket
from collections.abc import AsyncIterator, Sequence

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmservice_operator.loadgen.client import LoadConfig, run_load, static_targets
from llmservice_operator.loadgen.distributions import parse_length_dist
from llmservice_operator.loadgen.report import LoadReport
from llmservice_operator.loadgen.schedule import RateSchedule
from llmservice_operator.sim.profile import fallback_profile
from llmservice_operator.sim.server import ServerFaults, SimConfig, SimServer, serving

Buckets = list[tuple[float, float]]


def sim(scale: float, **faults: float) -> SimServer:
    config = SimConfig(
        model="m",
        served_model_names=("chat",),
        time_scale=scale,
        server_faults=ServerFaults(**faults),  # type: ignore[arg-type]
    )
    return SimServer(fallback_profile(), config)


@contextlib.asynccontextmanager
async def sims(*servers: SimServer) -> AsyncIterator[list[str]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(serving(s)) for s in servers]


async def histograms(base: str) -> dict[str, Buckets]:
    """Cumulative buckets per histogram, plus ``<name>_mean`` and the success total."""
    async with aiohttp.ClientSession() as session, session.get(f"{base}/metrics") as response:
        text = await response.text()
    out: dict[str, Buckets] = {}
    for family in text_string_to_metric_families(text):
        samples = {s.name: s.value for s in family.samples if "le" not in s.labels}
        if family.type == "histogram":
            out[family.name] = [
                (float(s.labels["le"]), s.value) for s in family.samples if "le" in s.labels
            ]
            mean = samples[f"{family.name}_sum"] / max(samples[f"{family.name}_count"], 1)
            out[f"{family.name}_mean"] = [(mean, 0.0)]
        elif family.name == "vllm:request_success":
            total = sum(s.value for s in family.samples if s.name.endswith("_total"))
            out[family.name] = [(0.0, total)]
    return out


def histogram_quantile(q: float, buckets: Buckets) -> float:
    """PromQL's histogram_quantile on one series of cumulative (le, count) buckets."""
    total = buckets[-1][1]
    rank = q * total
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if upper == float("inf"):
                return lower
            return lower + (upper - lower) * (rank - below) / (count - below)
        lower, below = upper, count
    return lower


def bucket_index(value: float, buckets: Buckets) -> int:
    return bisect.bisect_left([le for le, _ in buckets], value)


def config(scale: float, rate: float, duration: float, **kw: object) -> LoadConfig:
    return LoadConfig(
        schedule=RateSchedule.constant(rate, duration),
        prompt_tokens=parse_length_dist(str(kw.pop("prompt", "uniform:200:2000"))),
        output_tokens=parse_length_dist(str(kw.pop("output", "uniform:20:120"))),
        time_scale=scale,
        seed=11,
        **kw,  # type: ignore[arg-type]
    )


def test_client_p99_agrees_with_the_sims_histograms() -> None:
    # A low time scale: every wall-clock hiccup of a busy CI machine is multiplied by it in
    # the client's (simulated-time) figures, while the server's come from its own clock.
    scale = 2.0

    async def main() -> tuple[LoadReport, dict[str, Buckets]]:
        async with sims(sim(scale)) as (base,):
            report = await run_load(config(scale, rate=6.0, duration=20.0), static_targets([base]))
            return report, await histograms(base)

    report, hist = asyncio.run(main())
    assert report.errors == 0
    assert report.completed > 80
    pairs = [
        ("TTFT", report.ttft_s, "vllm:time_to_first_token_seconds"),
        ("TPOT", report.tpot_s, "vllm:request_time_per_output_token_seconds"),
        ("E2E", report.e2e_s, "vllm:e2e_request_latency_seconds"),
    ]
    for label, stats, name in pairs:
        assert stats.p99 is not None
        assert stats.mean is not None
        buckets = hist[name]
        assert buckets[-1][1] == report.completed
        server_p99 = histogram_quantile(0.99, buckets)
        gap = abs(bucket_index(stats.p99, buckets) - bucket_index(server_p99, buckets))
        assert gap <= 1, (label, stats.p99, server_p99)
        server_mean = hist[f"{name}_mean"][0][0]
        if label == "TPOT":
            assert stats.mean == pytest.approx(server_mean, rel=0.1)
        else:
            assert -0.02 <= stats.mean - server_mean <= 0.2, (label, stats.mean, server_mean)


def test_requests_go_round_robin_over_targets() -> None:
    scale = 20.0

    async def main() -> tuple[LoadReport, list[dict[str, Buckets]], list[str]]:
        async with sims(sim(scale), sim(scale)) as bases:
            load = config(scale, rate=20.0, duration=5.0, prompt="64", output="8")
            report = await run_load(load, static_targets(bases))
            return report, [await histograms(b) for b in bases], bases

    report, hists, bases = asyncio.run(main())
    assert report.errors == 0
    counts = [report.per_target[b].ok for b in bases]
    assert abs(counts[0] - counts[1]) <= 1
    assert sum(counts) == report.completed == report.requests
    for count, hist in zip(counts, hists, strict=True):
        assert hist["vllm:request_success"][0][1] == count
    assert report.output_tokens_per_s == pytest.approx(8 * report.throughput_rps)


def test_the_target_list_is_asked_for_each_request() -> None:
    scale = 20.0
    calls: list[int] = []

    async def main() -> tuple[LoadReport, list[str]]:
        async with sims(sim(scale), sim(scale)) as bases:

            def targets() -> Sequence[str]:
                calls.append(1)
                return bases[:1] if len(calls) <= 20 else bases[1:]

            load = config(scale, rate=20.0, duration=3.0, prompt="32", output="4", max_requests=40)
            return await run_load(load, targets), bases

    report, bases = asyncio.run(main())
    assert report.requests == 40
    assert report.per_target[bases[0]].requests == 19  # call 1 is for resolving the model
    assert report.per_target[bases[1]].requests == 21


def test_errors_and_dead_targets_are_reported() -> None:
    scale = 20.0
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"

    async def main() -> tuple[LoadReport, str]:
        async with sims(sim(scale), sim(scale, error_rate=1.0)) as (good, failing):
            load = config(
                scale,
                rate=20.0,
                duration=3.0,
                prompt="16",
                output="2",
                model="chat",
                max_requests=30,
            )
            return await run_load(load, static_targets([good, failing, dead])), failing

    report, failing = asyncio.run(main())
    assert report.requests == 30
    assert report.completed == 10
    assert report.errors_by_kind == {"http_500": 10, "connection": 10}
    assert report.error_rate == pytest.approx(2 / 3)
    assert report.per_target[failing].errors == 10
    assert report.per_target[dead].errors == 10


def test_chat_endpoint_and_timeouts() -> None:
    scale = 20.0

    async def main() -> tuple[LoadReport, LoadReport]:
        async with sims(sim(scale)) as (base,):
            chat = config(
                scale, 10.0, 2.0, prompt="50", output="5", endpoint="chat", max_requests=10
            )
            quick = await run_load(chat, static_targets([base]))
            # 2000 output tokens take ~14 s simulated; a 1 s (simulated) budget times out.
            slow = config(
                scale, 10.0, 1.0, prompt="50", output="2000", request_timeout_s=1.0, max_requests=3
            )
            return quick, await run_load(slow, static_targets([base]))

    quick, slow = asyncio.run(main())
    assert quick.completed == 10
    assert quick.tpot_s.count == 10
    assert slow.errors_by_kind == {"timeout": 3}
