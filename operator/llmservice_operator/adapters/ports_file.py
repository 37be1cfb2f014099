"""The ports the operator's HTTP servers bound, in a small JSON file under its runtime dir.

With port 0 (hostNetwork: two replicas on one node) the kernel picks the ports, and the exec
probes (`llmservice probe`) read them here. Kept free of heavy imports: the kubelet runs the
probe every few seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["PORTS_FILE_NAME", "read_ports", "write_ports"]

PORTS_FILE_NAME = "llmservice-operator-ports.json"


def write_ports(path: Path, ports: dict[str, int]) -> None:
    """Atomically, so a probe never reads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(ports))
    tmp.replace(path)


def read_ports(path: Path) -> dict[str, int]:
    data = json.loads(path.read_text())
    return {str(k): int(v) for k, v in data.items()}
