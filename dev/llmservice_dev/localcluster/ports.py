"""Free loopback ports for the local components (and the tests' own servers)."""

from __future__ import annotations

import socket

__all__ = ["free_port", "free_ports"]


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 now (all held at once, so no repeats)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()


def free_port() -> int:
    """One port free on 127.0.0.1 now."""
    [port] = free_ports(1)
    return port
