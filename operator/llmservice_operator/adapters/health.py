"""The operator's own HTTP endpoints: ``/healthz`` and ``/readyz`` on the health port,
``/metrics`` on the metrics port (both may share one port).

They are served from a thread that starts before leader election, so a standby answers its
probes while it waits for the Lease. ``/healthz`` tells the truth about the process: it is 200
only while the work that matters beats (the lease loop of a standby, the event loop of the
leader) and turns 503 once that stops for longer than ``stale_after_s``. ``/readyz`` is 200 once
the process has reached the API server and either stands by or leads; its body and the
``llmservice_leader`` gauge say which.

With port 0 the kernel picks a free port (`port` says which); `llmservice run` writes the ports
in use to a file (adapters/ports_file.py) so that exec probes can find them. Two hostNetwork
replicas on one node need that: they cannot bind the same port.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["Health", "HealthServer"]

log = logging.getLogger(__name__)


@dataclass
class Health:
    """What the probes report; `beat()` is called by whatever must keep running."""

    stale_after_s: float = 60.0
    role: str = "starting"
    _last_beat: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def beat(self) -> None:
        with self._lock:
            self._last_beat = time.monotonic()

    def set_role(self, role: str) -> None:
        """`standby` or `leader` (ready), `stopping` (not ready)."""
        with self._lock:
            self.role = role
            self._last_beat = time.monotonic()

    def alive(self) -> bool:
        with self._lock:
            return time.monotonic() - self._last_beat <= self.stale_after_s

    def ready(self) -> bool:
        with self._lock:
            role = self.role
        return role in ("standby", "leader") and self.alive()


def _handler(health: Health, registry: CollectorRegistry | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                ok = health.alive()
                self._send(200 if ok else 503, "ok\n" if ok else "stalled\n")
            elif path == "/readyz":
                ok = health.ready()
                self._send(200 if ok else 503, f"{health.role}\n")
            elif path == "/metrics" and registry is not None:
                self._send(200, generate_latest(registry).decode(), CONTENT_TYPE_LATEST)
            else:
                self._send(404, "not found\n")

        def _send(self, code: int, body: str, content_type: str = "text/plain") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("%s " + format, self.address_string(), *args)

    return Handler


class HealthServer:
    """One threaded HTTP server; `port` is the bound port (useful when asked for 0)."""

    def __init__(
        self,
        port: int,
        health: Health,
        registry: CollectorRegistry | None = None,
        host: str = "0.0.0.0",
    ) -> None:
        self._server = ThreadingHTTPServer((host, port), _handler(health, registry))
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"http-{self.port}", daemon=True
        )

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
