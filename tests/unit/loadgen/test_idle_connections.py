"""Idle keep-alive connections, over real loopback sockets: vLLM closes one after 5 s, the
simulator does the same, and the load generator drops its own side first (after 4 s) so that a
burst after an idle gap never sends on a connection the server is closing.

Against real vLLM about 3% of such a burst failed as "connection" errors before the fix. The
race is a matter of microseconds, so the test that shows it uses a server that always loses
it: it closes a connection idle for 5 s at the moment the next request arrives on it, without
answering (what vLLM does when its close and the client's send cross).
"""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp

from llmservice_operator.loadgen.client import (
    IDLE_CONNECTION_TIMEOUT_S,
    LoadConfig,
    run_load,
    static_targets,
)
from llmservice_operator.loadgen.distributions import LengthDist
from llmservice_operator.loadgen.report import LoadReport
from llmservice_operator.loadgen.schedule import RateSchedule, Segment
from llmservice_operator.sim.profile import fallback_profile
from llmservice_operator.sim.server import KEEPALIVE_TIMEOUT_S, SimConfig, SimServer, serving

#: A burst, a pause longer than the server keeps an idle connection, and a second burst.
BURST_GAP_BURST = RateSchedule(
    (Segment(0.05, 200.0), Segment(KEEPALIVE_TIMEOUT_S + 0.3, 0.0), Segment(0.05, 200.0))
)
CONFIG = LoadConfig(
    schedule=BURST_GAP_BURST,
    prompt_tokens=LengthDist("fixed", 8),
    output_tokens=LengthDist("fixed", 2),
    model="chat",
    seed=3,
    request_timeout_s=10.0,
)


def test_the_load_generator_lets_go_of_idle_connections_before_the_server_does() -> None:
    assert IDLE_CONNECTION_TIMEOUT_S < KEEPALIVE_TIMEOUT_S == 5.0


def test_the_simulator_closes_an_idle_keepalive_connection_after_5_seconds() -> None:
    async def main() -> tuple[bytes, bytes, float, bool]:
        server = SimServer(fallback_profile(), SimConfig(model="m"))
        async with serving(server) as base:
            host, port = base.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"GET /health HTTP/1.1\r\nHost: sim\r\nConnection: keep-alive\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            answered = time.monotonic()
            try:  # still open well before the 5 s
                await asyncio.wait_for(reader.read(1), timeout=KEEPALIVE_TIMEOUT_S - 1.0)
                open_at_4s = False
            except TimeoutError:
                open_at_4s = True
            rest = await asyncio.wait_for(reader.read(), timeout=5.0)  # b"" once closed
            closed_after = time.monotonic() - answered
            writer.close()
            return head, rest, closed_after, open_at_4s

    head, rest, closed_after, open_at_4s = asyncio.run(main())
    assert head.startswith(b"HTTP/1.1 200")
    assert rest == b""  # closed by the server, with nothing more said
    assert open_at_4s
    assert 4.5 <= closed_after <= 6.0


def test_a_burst_after_an_idle_gap_gets_no_connection_errors_from_the_simulator() -> None:
    async def main() -> LoadReport:
        config = SimConfig(model="m", served_model_names=("chat",), time_scale=10.0)
        async with serving(SimServer(fallback_profile(), config)) as base:
            return await run_load(CONFIG, static_targets([base]))

    report = asyncio.run(main())
    assert report.requests >= 10
    assert report.errors_by_kind == {}
    assert report.completed == report.requests


class ClosingServer:
    """Minimal HTTP/1.1 + SSE completions that close a connection idle for 5 s when the next
    request arrives on it, unanswered: the losing side of the race with vLLM's idle close."""

    def __init__(self) -> None:
        self.connections = 0
        self.closed_on_reuse = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        last = time.monotonic()
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                if time.monotonic() - last >= KEEPALIVE_TIMEOUT_S:
                    self.closed_on_reuse += 1
                    return
                chunks: list[dict[str, object]] = [
                    {"choices": [{"text": "a"}]},
                    {"choices": [{"text": "b"}]},
                ]
                chunks.append({"choices": [], "usage": {"completion_tokens": 2}})
                body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
                )
                await writer.drain()
                last = time.monotonic()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def test_the_fix_is_what_keeps_a_reused_connection_from_failing() -> None:
    """With aiohttp's default (15 s) the client reuses the idle connections and loses every
    race; with the load generator's own session (4 s) it opens fresh ones and loses none."""

    async def run(session: aiohttp.ClientSession | None) -> tuple[LoadReport, ClosingServer]:
        model = ClosingServer()
        server = await asyncio.start_server(model.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            report = await run_load(CONFIG, static_targets([f"http://127.0.0.1:{port}"]), session)
        finally:
            server.close()
            await server.wait_closed()
        return report, model

    async def main() -> tuple[tuple[LoadReport, ClosingServer], tuple[LoadReport, ClosingServer]]:
        unfixed = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        try:
            return await asyncio.gather(run(None), run(unfixed))
        finally:
            await unfixed.close()

    (fixed, fixed_server), (unfixed, unfixed_server) = asyncio.run(main())
    assert fixed.errors_by_kind == {} and fixed.completed == fixed.requests >= 10
    assert fixed_server.closed_on_reuse == 0
    assert unfixed_server.closed_on_reuse > 0
    assert unfixed.errors_by_kind == {"connection": unfixed_server.closed_on_reuse}
