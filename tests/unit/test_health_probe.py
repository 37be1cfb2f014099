"""The exec probe (`llmservice-probe`) against the operator's real health server on loopback:
it reads the port from the ports file, says 0 on a 200 and 1 otherwise, and stays cheap to
start (the kubelet runs it every few seconds per operator pod)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmservice_operator.adapters.health import Health, HealthServer
from llmservice_operator.adapters.health_probe import main, probe
from llmservice_operator.adapters.ports_file import PORTS_FILE_NAME, write_ports


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Health, Path]]:
    health = Health(stale_after_s=60)
    server = HealthServer(0, health, host="127.0.0.1").start()
    write_ports(tmp_path / PORTS_FILE_NAME, {"health": server.port, "metrics": 1})
    try:
        yield health, tmp_path
    finally:
        server.stop()


def test_the_probe_follows_the_servers_answers(served: tuple[Health, Path]) -> None:
    health, runtime = served
    assert probe("healthz", str(runtime)) == (True, "ok")
    ok, message = probe("readyz", str(runtime))
    assert not ok and "503" in message and "starting" in message
    health.set_role("leader")
    assert probe("readyz", str(runtime)) == (True, "leader")
    health.stale_after_s = 0.0
    ok, message = probe("healthz", str(runtime))
    assert not ok and "503" in message and "stalled" in message


def test_no_ports_file_or_nothing_listening_is_a_failure(tmp_path: Path) -> None:
    ok, message = probe("healthz", str(tmp_path))
    assert not ok and PORTS_FILE_NAME in message
    with socket.socket() as sock:  # a loopback port bound, then closed: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    write_ports(tmp_path / PORTS_FILE_NAME, {"health": port})
    ok, message = probe("healthz", str(tmp_path), timeout=2)
    assert not ok and f"127.0.0.1:{port}" in message


def test_the_command_exits_by_the_answer(
    served: tuple[Health, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _health, runtime = served
    monkeypatch.setenv("LLMSERVICE_RUNTIME_DIR", str(runtime))
    assert main(["healthz"]) == 0
    assert main(["readyz"]) == 1
    assert main(["metrics"]) == 2
    assert main([]) == 2


def test_the_probe_imports_neither_the_cli_nor_urllib() -> None:
    """What makes it cheap: a fresh interpreter loading it loads no argparse, urllib.request,
    http, kopf or kubernetes, and nothing more of ours. (An editable install's import hook
    loads pathlib and urllib.parse in site, before any of ours.)"""
    code = (
        "import sys; import llmservice_operator.adapters.health_probe; "
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('argparse', 'http', 'llmservice_operator', 'kopf', 'kubernetes') "
        "or m == 'urllib.request')))"
    )
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True).stdout.split())  # fmt: skip
    assert loaded == {
        "llmservice_operator",
        "llmservice_operator.adapters",
        "llmservice_operator.adapters.health_probe",
        "llmservice_operator.adapters.ports_file",
    }
