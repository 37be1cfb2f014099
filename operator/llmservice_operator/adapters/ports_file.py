"""The ports the operator's HTTP servers bound, in a small JSON file under its runtime dir.

With port 0 (hostNetwork: two replicas on one node) the kernel picks the ports, and the exec
probes (`llmservice-probe`, adapters/health_probe.py) read them here. Kept free of imports
beyond json: the kubelet runs the probe every few seconds.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pathlib costs the exec probe (health_probe.py) a tenth of its run
    from pathlib import Path

__all__ = ["PORTS_FILE_NAME", "read_ports", "write_ports"]

PORTS_FILE_NAME = "llmservice-operator-ports.json"


def write_ports(path: Path, ports: dict[str, int]) -> None:
    """Atomically, so a probe never reads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(ports))
    tmp.replace(path)


def read_ports(path: Path | str) -> dict[str, int]:
    with open(path, encoding="utf-8") as file:
        data = json.load(file)
    return {str(k): int(v) for k, v in data.items()}
