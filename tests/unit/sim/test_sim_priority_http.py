"""Priority over HTTP: the body's `priority`, vLLM's X-Vllm-Priority header, the CLI flag."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from llmservice_operator.commands.sim import options_from
from llmservice_operator.sim.engine import SchedulingPolicy
from llmservice_operator.sim.profile import fallback_profile
from llmservice_operator.sim.server import (
    PRIORITY_HEADER,
    SimConfig,
    SimServer,
    request_priority,
    serving,
)


def test_priority_comes_from_the_header_then_the_body() -> None:
    assert request_priority({}, {}) == 0
    assert request_priority({"priority": -3}, {}) == -3
    assert request_priority({"priority": 5}, {PRIORITY_HEADER: "1"}) == 1
    assert request_priority({"priority": 5}, {PRIORITY_HEADER: "high"}) == 5  # vLLM ignores it


@pytest.mark.parametrize("bad", ["1", 1.5, True, 2**63])
def test_a_priority_that_is_not_an_int64_is_refused(bad: Any) -> None:
    with pytest.raises(Exception, match="priority must be a 64-bit integer"):
        request_priority({"priority": bad}, {})


def test_the_cli_takes_vllms_scheduling_policy_flag() -> None:
    model = "meta-llama/Llama-3.1-8B-Instruct"
    assert options_from([model], {}).scheduling_policy == "fcfs"
    options = options_from([model, "--scheduling-policy", "priority"], {})
    assert options.scheduling_policy == "priority"
    assert "--scheduling-policy" not in " ".join(options.ignored)


def _finish_order(policy: SchedulingPolicy) -> list[str]:
    """One batch slot, one long request running; three more queued with priorities 10, 0, 5."""
    profile = fallback_profile(max_num_seqs=1)
    server = SimServer(profile, SimConfig(model="m", time_scale=20.0, scheduling_policy=policy))
    order: list[str] = []

    async def send(session: aiohttp.ClientSession, base: str, name: str, **extra: Any) -> None:
        headers = extra.pop("headers", {})
        body = {"model": "m", "prompt": name, "max_tokens": 40, "ignore_eos": True, **extra}
        async with session.post(f"{base}/v1/completions", json=body, headers=headers) as response:
            assert response.status == 200, await response.text()
        order.append(name)

    async def main() -> None:
        async with serving(server) as base, aiohttp.ClientSession() as session:
            first = asyncio.create_task(send(session, base, "first", max_tokens=1000))
            await asyncio.sleep(0.02)
            rest = []
            for name, extra in (
                ("batch", {"priority": 10}),
                ("mid", {"priority": 5}),
                ("online", {"headers": {PRIORITY_HEADER: "0"}}),
            ):
                rest.append(asyncio.create_task(send(session, base, name, **extra)))
                await asyncio.sleep(0.005)  # arrival order: batch, mid, online
            await asyncio.gather(first, *rest)

    asyncio.run(main())
    return order


def test_priority_scheduling_over_http() -> None:
    assert _finish_order("priority") == ["first", "online", "mid", "batch"]


def test_fcfs_over_http_ignores_priority() -> None:
    assert _finish_order("fcfs") == ["first", "batch", "mid", "online"]
