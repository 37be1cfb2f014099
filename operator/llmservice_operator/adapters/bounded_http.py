"""HTTP reads with a ceiling on bytes and on time, for answers the operator does not control:
a tenant's pods (smoke tests, ``/metrics``) and Prometheus (whose answers a tenant's queries
shape).

A client timeout (``requests``', urllib3's) bounds each socket read, not the answer: a server
that sends a byte a second never times out, and reading "the body" reads whatever size it is.
Here:

- the whole exchange (connect, request, headers, body) ends by ``Limits.total_s``: a watchdog
  shuts the socket down at the deadline, so a read blocked on it returns at once;
- the body is read in pieces and refused past ``Limits.max_bytes`` (a Content-Length above it
  is refused before any of it is read);
- compression is not asked for, and an answer compressed anyway is refused: a few KiB of gzip
  inflate to GiB, past any count of the bytes on the wire.

Over either limit, or compressed, is :class:`ReadRefused`. Each request has a connection of its
own, closed after it (``Connection: close``): nothing is pooled between tenants.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import urlsplit

__all__ = ["ERRORS", "BoundedResponse", "Limits", "ReadRefused", "open_url"]

#: The most one read asks for: what arrived is handed on at once (a stream's first token).
_PIECE = 64 * 1024


class ReadRefused(Exception):
    """The answer is over its byte or time budget, or compressed: it was not read further."""


#: Everything a bounded request can raise: no answer (OSError, a malformed one: HTTPException,
#: a bad URL: ValueError), or one refused.
ERRORS: tuple[type[Exception], ...] = (
    OSError,
    http.client.HTTPException,
    ValueError,
    ReadRefused,
)


@dataclass(frozen=True)
class Limits:
    max_bytes: int
    """The body's size, after which it is refused (the headers are bounded by http.client:
    100 lines of at most 64 KiB)."""
    total_s: float
    """Connect to last byte."""
    connect_s: float
    """Of ``total_s``, the most the connection may take."""


class _Watchdog:
    """Shuts ``sock`` down at ``deadline`` (time.monotonic), unless cancelled before."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.fired = False
        self._deadline = deadline
        self._sock = sock
        self._lock = threading.Lock()
        self._cancelled = False
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:  # not after cancel(): the socket may be closed, its number reused
            if self._cancelled:
                return
            self.fired = True
            # The plain socket's shutdown: an SSLSocket's own drops its TLS state under the
            # reader. An error: the peer closed it already.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(self._sock, socket.SHUT_RDWR)

    def expired(self) -> bool:
        """The deadline has passed (the socket's own timeout, set to it too, may come first)."""
        return self.fired or time.monotonic() >= self._deadline

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
        self._timer.cancel()


class BoundedResponse:
    """An answer's status and headers; its body through :meth:`pieces`, :meth:`read`,
    :meth:`lines` or :meth:`prefix`. A context manager: leaving it closes the connection."""

    def __init__(
        self,
        connection: http.client.HTTPConnection,
        response: http.client.HTTPResponse,
        limits: Limits,
        watchdog: _Watchdog,
    ) -> None:
        self.status = response.status
        self.headers = response.headers
        self._connection = connection
        self._response = response
        self._limits = limits
        self._watchdog = watchdog
        self._read = 0

    def __enter__(self) -> BoundedResponse:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._watchdog.cancel()
        self._connection.close()

    def _late(self) -> ReadRefused:
        return ReadRefused(f"the answer took longer than {self._limits.total_s:g} s")

    def pieces(self) -> Iterator[bytes]:
        """The body as it arrives; ReadRefused once it is over a limit or compressed."""
        encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding != "identity":
            raise ReadRefused(f"the answer is compressed ({encoding}), which was not asked for")
        while True:
            try:
                piece = self._response.read1(_PIECE)
            except Exception as err:  # the watchdog's shutdown reads as any error
                if self._watchdog.expired():
                    raise self._late() from err
                raise
            if self._watchdog.expired():  # ... or as the end of a body that has no length
                raise self._late()
            if not piece:
                return
            self._read += len(piece)
            if self._read > self._limits.max_bytes:
                raise ReadRefused(f"the answer is larger than {self._limits.max_bytes} bytes")
            yield piece

    def read(self) -> bytes:
        """The whole body; ReadRefused when it is over a limit (known before reading it when
        the Content-Length says so)."""
        length = self._response.length
        if length is not None and length > self._limits.max_bytes:
            raise ReadRefused(
                f"the answer is larger than {self._limits.max_bytes} bytes ({length})"
            )
        return b"".join(self.pieces())

    def prefix(self, size: int) -> bytes:
        """At most the body's first ``size`` bytes, the rest not read (an error page's start);
        what came before a limit was met."""
        kept = bytearray()
        try:
            for piece in self.pieces():
                kept += piece
                if len(kept) >= size:
                    break
        except ERRORS:
            pass
        return bytes(kept[:size])

    def lines(self) -> Iterator[bytes]:
        """The body's lines, without their ending (``\\n`` or ``\\r\\n``), as they arrive."""
        pending = bytearray()
        for piece in self.pieces():
            pending += piece
            if b"\n" not in piece:
                continue  # a line longer than a piece grows, without being searched again
            *complete, rest = bytes(pending).split(b"\n")
            pending = bytearray(rest)
            for line in complete:
                yield line.removesuffix(b"\r")
        if pending:
            yield bytes(pending).removesuffix(b"\r")


def open_url(
    method: str,
    url: str,
    limits: Limits,
    *,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    verify_tls: bool = True,
) -> BoundedResponse:
    """Send one request; its answer once the headers are in (within ``limits.total_s`` of the
    call). Raises one of :data:`ERRORS`."""
    started = time.monotonic()
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port
    timeout = min(limits.connect_s, limits.total_s)
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        context = ssl.create_default_context()
        if not verify_tls:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        connection = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
    elif parts.scheme == "http":
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
    else:
        raise ValueError(f"not an http(s) URL: {url}")
    try:
        connection.connect()
    except BaseException:
        connection.close()
        raise
    assert connection.sock is not None
    watchdog = _Watchdog(connection.sock, started + limits.total_s)
    # Each read waits at most what is left; the watchdog ends them all at the deadline.
    connection.sock.settimeout(max(0.001, started + limits.total_s - time.monotonic()))
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    sent = {"Accept-Encoding": "identity", "Connection": "close", **(headers or {})}
    try:
        connection.request(method, target, body=body, headers=sent)
        response = connection.getresponse()
        if watchdog.expired():  # the shutdown ended the head early, and it parsed
            raise ReadRefused(f"no answer within {limits.total_s:g} s")
    except Exception as err:
        watchdog.cancel()
        connection.close()
        if watchdog.expired() and not isinstance(err, ReadRefused):
            raise ReadRefused(f"no answer within {limits.total_s:g} s") from err
        raise
    return BoundedResponse(connection, response, limits, watchdog)
