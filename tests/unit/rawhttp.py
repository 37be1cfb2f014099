"""A unit-test helper: an HTTP server on a raw socket, answering each request however a test
says, byte by byte if need be (a body that never ends, one byte a second, gzip, a false
Content-Length): what a well-behaved server library would not let a test send."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

#: ``answer(connection, request, stop)``: write the answer to ``connection``. ``request`` is
#: the request's bytes (head and body); ``stop`` is set when the test ends (wait on it to hang).
Answer = Callable[[socket.socket, bytes, threading.Event], None]


def head(status: int = 200, **headers: str) -> bytes:
    """A response head: ``content_type="x"`` is sent as ``Content-Type: x``."""
    lines = [f"HTTP/1.1 {status} X"]
    lines += [f"{name.replace('_', '-').title()}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunk(data: bytes) -> bytes:
    """One piece of a chunked body."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class RawServer:
    def __init__(self, answer: Answer, host: str = "127.0.0.1", port: int = 0) -> None:
        self.answer = answer
        self.stop = threading.Event()
        self.requests: list[bytes] = []
        self._listener = socket.create_server((host, port))
        self.port: int = self._listener.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        with connection:
            request = self._read_request(connection)
            self.requests.append(request)
            with contextlib.suppress(OSError):  # the client went away: what tests make it do
                self.answer(connection, request, self.stop)

    @staticmethod
    def _read_request(connection: socket.socket) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            piece = connection.recv(65536)
            if not piece:
                return data
            data += piece
        head_, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head_.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            piece = connection.recv(65536)
            if not piece:
                break
            body += piece
        return head_ + b"\r\n\r\n" + body

    def close(self) -> None:
        self.stop.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self._listener.close()


def serving() -> Iterator[Callable[..., RawServer]]:
    """For a test module's fixture: ``start(answer, host, port)`` starts a server, each closed
    when the test ends."""
    servers: list[RawServer] = []

    def start(answer: Answer, host: str = "127.0.0.1", port: int = 0) -> RawServer:
        server = RawServer(answer, host, port)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


#: How much later than its limit a cut may come on a busy test machine.
LATE_S = 1.5


def endless(connection: socket.socket, _request: bytes, stop: threading.Event) -> None:
    """A chunked body that never ends, as fast as the client reads it."""
    connection.sendall(head(transfer_encoding="chunked"))
    piece = chunk(b"x" * 4096)
    while not stop.is_set():
        connection.sendall(piece)


def dripping(connection: socket.socket, _request: bytes, stop: threading.Event) -> None:
    """A chunked body of one byte every 50 ms, for ever: no single read ever times out."""
    connection.sendall(head(transfer_encoding="chunked"))
    while not stop.wait(0.05):
        connection.sendall(chunk(b"x"))


def silent(_connection: socket.socket, _request: bytes, stop: threading.Event) -> None:
    stop.wait(30)


def took(started: float) -> float:
    return time.monotonic() - started
