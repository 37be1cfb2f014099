"""adapters/bounded_http.py: an answer the operator does not control is read within a byte
limit and a deadline, however its server misbehaves (tried against a raw server)."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from llmservice_operator.adapters.bounded_http import (
    BoundedResponse,
    Limits,
    ReadRefused,
    open_url,
)

from .rawhttp import LATE_S, RawServer, dripping, endless, head, serving, silent, took

LIMITS = Limits(max_bytes=64 * 1024, total_s=1.0, connect_s=0.5)


@pytest.fixture
def serve() -> Iterator[Callable[..., RawServer]]:
    yield from serving()


def test_a_body_past_its_byte_limit_is_refused(serve: Callable[..., RawServer]) -> None:
    server = serve(endless)
    handed_on: list[int] = []

    def read_all(response: BoundedResponse) -> None:
        for piece in response.pieces():
            handed_on.append(len(piece))

    with (
        open_url("GET", server.url, LIMITS) as response,
        pytest.raises(ReadRefused, match="larger than 65536 bytes"),
    ):
        read_all(response)
    assert sum(handed_on) <= LIMITS.max_bytes  # what was handed on never passed the limit


def test_a_content_length_past_the_limit_is_refused_before_reading(
    serve: Callable[..., RawServer],
) -> None:
    def huge(connection: socket.socket, _request: bytes, stop: threading.Event) -> None:
        connection.sendall(head(content_length=str(10**9)))
        stop.wait(30)  # reading any of it would wait here

    server = serve(huge)
    started = time.monotonic()
    with (
        open_url("GET", server.url, LIMITS) as response,
        pytest.raises(ReadRefused, match=r"larger than 65536 bytes \(1000000000\)"),
    ):
        response.read()
    assert took(started) < 0.5


def test_a_body_that_drips_is_cut_at_the_deadline(serve: Callable[..., RawServer]) -> None:
    server = serve(dripping)
    started = time.monotonic()
    with (
        open_url("GET", server.url, LIMITS) as response,
        pytest.raises(ReadRefused, match="took longer than 1 s"),
    ):
        response.read()
    assert LIMITS.total_s - 0.1 <= took(started) < LIMITS.total_s + LATE_S


def test_an_answer_that_never_starts_is_cut_at_the_deadline(
    serve: Callable[..., RawServer],
) -> None:
    server = serve(silent)
    started = time.monotonic()
    with pytest.raises(ReadRefused, match="no answer within 1 s"):
        open_url("GET", server.url, LIMITS)
    assert took(started) < LIMITS.total_s + LATE_S


def test_a_head_that_drips_is_cut_at_the_deadline(serve: Callable[..., RawServer]) -> None:
    """One header line, a byte every 50 ms: every socket read is quick, and the line (up to
    64 KiB) would take nearly an hour. Only the watchdog ends it."""

    def slow_head(connection: socket.socket, _request: bytes, stop: threading.Event) -> None:
        connection.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        while not stop.wait(0.05):
            connection.sendall(b"x")

    server = serve(slow_head)
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            open_url("GET", server.url, LIMITS).close()
        except BaseException as err:  # noqa: BLE001 - handed to the test
            outcome.append(err)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(LIMITS.total_s + LATE_S)
    assert not thread.is_alive(), "still reading the head"
    assert len(outcome) == 1 and isinstance(outcome[0], ReadRefused)


def test_a_body_ended_by_the_deadline_is_not_taken_for_a_whole_one(
    serve: Callable[..., RawServer],
) -> None:
    """Without a length the body ends when the connection does: the watchdog's shutdown looks
    just like that, and must not pass for the end of the answer."""

    def unending(connection: socket.socket, _request: bytes, stop: threading.Event) -> None:
        connection.sendall(head(connection="close") + b"half of it")
        stop.wait(30)

    server = serve(unending)
    with (
        open_url("GET", server.url, LIMITS) as response,
        pytest.raises(ReadRefused, match="took longer"),
    ):
        response.read()


def test_compression_is_not_asked_for_and_refused(serve: Callable[..., RawServer]) -> None:
    bomb = gzip.compress(b"\0" * 10_000_000)  # 10 MB in about 10 KB

    def zipped(connection: socket.socket, _request: bytes, _stop: threading.Event) -> None:
        connection.sendall(head(content_encoding="gzip", content_length=str(len(bomb))) + bomb)

    server = serve(zipped)
    with (
        open_url("GET", server.url, LIMITS) as response,
        pytest.raises(ReadRefused, match="compressed"),
    ):
        response.read()
    assert b"accept-encoding: identity" in server.requests[0].lower()
