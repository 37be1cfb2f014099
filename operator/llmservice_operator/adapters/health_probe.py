"""``llmservice-probe healthz|readyz``: the exec probe of an operator on hostNetwork.

With hostNetwork two replicas on one node cannot share a port, so each binds free ports and
writes them to a file (:mod:`.ports_file`); this reads that file and asks the endpoint over a
plain socket. The kubelet runs it every few seconds per operator pod, so it imports only
``json``, ``os``, ``socket`` and ``sys``: about a quarter of the CPU that ``llmservice probe``
(argparse, urllib, the CLI) costs for the same answer. Exit 0 on a 200, else 1 with one line.
"""

from __future__ import annotations

import os
import socket
import sys

from .ports_file import PORTS_FILE_NAME, read_ports

__all__ = ["ENDPOINTS", "main", "probe"]

ENDPOINTS = ("healthz", "readyz")
#: Bytes read of the answer: its status line and the one-line body the health server sends.
MAX_ANSWER = 4096


def probe(endpoint: str, runtime_dir: str, timeout: float = 3.0) -> tuple[bool, str]:
    """(answered 200, what it said or why not)."""
    ports_file = os.path.join(runtime_dir, PORTS_FILE_NAME)
    try:
        port = read_ports(ports_file)["health"]
    except (OSError, ValueError, KeyError) as err:
        return False, f"no ports in {ports_file}: {err}"
    url = f"http://127.0.0.1:{port}/{endpoint}"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
            conn.sendall(f"GET /{endpoint} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
            answer = b""
            while len(answer) < MAX_ANSWER:
                chunk = conn.recv(MAX_ANSWER - len(answer))
                if not chunk:
                    break
                answer += chunk
    except OSError as err:
        return False, f"{url}: {err}"
    head, _, body = answer.decode(errors="replace").partition("\r\n\r\n")
    status = head.split("\r\n", 1)[0].split(" ", 2)
    text = body.strip()
    if len(status) >= 2 and status[1] == "200":
        return True, text
    return False, f"{url}: {' '.join(status[1:]) or 'no answer'} {text}".strip()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in ENDPOINTS:
        print(f"usage: llmservice-probe {'|'.join(ENDPOINTS)}", file=sys.stderr)
        return 2
    runtime_dir = os.environ.get("LLMSERVICE_RUNTIME_DIR") or "/tmp"
    ok, message = probe(args[0], runtime_dir)
    print(message if ok else f"llmservice-probe: {message}", file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
