"""The Inference Extension's endpoint picker (v1.0.0, built from its Go module by
hack/build-epp.sh) picks a simulator pod by queue depth.

The operator renders the pool and its picker; the test runs the real picker binary as a host
process with the rendered Deployment's flags (ports moved to free loopback ones, plaintext
gRPC), talking to the local API server with the cluster's kubeconfig and scraping the
simulator pods' ``/metrics`` on their loopback pod IPs. The test harness is the gateway: it
asks the picker over ext_proc (tests/integration/ext_proc.py), then sends the request to the
picked pod. One pod is kept busy (more long requests than its ``maxNumSeqs``, so
``vllm:num_requests_waiting`` > 0): the picker must send new requests to the other.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc  # type: ignore[import-untyped]
import pytest

from llmservice_dev.localcluster import ClusterInfo
from llmservice_dev.localcluster.ports import free_port

from .ext_proc import pick_endpoint
from .operator_fixtures import ROOT, OperatorFactory, wait_for
from .test_operator import _apply
from .test_scalers import third_party_crds  # noqa: F401  (InferencePool and HTTPRoute CRDs)
from .test_sim_e2e import is_ready, llmservice, pods

NAME = "picked"
MAX_NUM_SEQS = 1


@pytest.fixture(scope="session")
def epp_binary() -> str:
    out = subprocess.run(
        ["bash", str(ROOT / "hack" / "build-epp.sh")], capture_output=True, text=True, check=True
    )
    return out.stdout.strip().splitlines()[-1]


def _flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def _host_args(args: list[str], ports: dict[str, int]) -> list[str]:
    """The rendered flags, with free loopback ports and plaintext gRPC (the harness speaks
    plaintext; in a cluster the gateway speaks TLS to the picker)."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg.lstrip("-") in ports:
            out += [arg, str(ports[arg.lstrip("-")])]
            skip = True
        elif arg.startswith("--secure-serving"):
            out.append("--secure-serving=false")
        else:
            out.append(args[i])
    return out


@pytest.fixture
def picker_process(epp_binary: str, cluster: ClusterInfo, tmp_path: Any) -> Iterator[Any]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(args: list[str]) -> tuple[str, subprocess.Popen[bytes]]:
        ports = {
            "grpc-port": free_port(),
            "grpc-health-port": free_port(),
            "metrics-port": free_port(),
        }
        log = (tmp_path / "epp.log").open("wb")
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
        proc = subprocess.Popen(
            [epp_binary, *_host_args(args, ports)], stdout=log, stderr=subprocess.STDOUT, env=env
        )
        procs.append(proc)
        return f"127.0.0.1:{ports['grpc-port']}", proc

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


def _first_pick(target: str, model: str) -> str:
    """A pick, or "" while the picker is still starting: its gRPC port not yet open, or its
    caches not yet holding the pool and its pods (it answers with an error status then)."""
    try:
        return pick_endpoint(target, model, "warm up")
    except grpc.RpcError:
        return ""


def _waiting(ip: str, port: int) -> float:
    with urllib.request.urlopen(f"http://{ip}:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:num_requests_waiting")
    ]
    return sum(values)


def _complete(url: str, model: str, max_tokens: int) -> int:
    body = {"model": model, "prompt": "hello " * 16, "max_tokens": max_tokens, "ignore_eos": True}
    request = urllib.request.Request(
        f"{url}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            response.read()
            return int(response.status)
    except OSError:
        return 0


def _keep_busy(url: str, model: str, stop: threading.Event) -> None:
    """Long requests back to back until ``stop``: with more of these than maxNumSeqs the pod
    keeps a queue."""
    while not stop.is_set():
        _complete(url, model, 3000)


def test_the_picker_sends_requests_away_from_the_queued_pod(
    namespace: str,
    kubectl: Any,
    kubectl_json: Any,
    operators: OperatorFactory,
    third_party_crds: None,  # noqa: F811
    picker_process: Any,
) -> None:
    operators.start(namespace)
    doc = llmservice(NAME, namespace, replicas=2, gpu="L4")
    doc["spec"]["engine"]["maxNumSeqs"] = MAX_NUM_SEQS
    doc["spec"]["rollout"] = {"gatewayParentRef": {"name": "inference-gateway"}}
    doc["spec"]["serving"] = {"inferencePool": {}}
    _apply(kubectl, doc)
    ready = wait_for(
        "two Ready simulator pods",
        lambda: (
            len([p for p in pods(kubectl_json, namespace, NAME) if is_ready(p)]) == 2
            and [p for p in pods(kubectl_json, namespace, NAME) if is_ready(p)]
        ),
        180,
    )
    picker = wait_for(
        "the rendered picker",
        lambda: kubectl_json("-n", namespace, "deployment", f"{NAME}-epp"),
        60,
    )
    args: list[str] = picker["spec"]["template"]["spec"]["containers"][0]["args"]
    assert _flag(args, "--pool-name") == NAME
    target, proc = picker_process(args)
    [serving] = [
        d
        for d in kubectl_json("-n", namespace, "deployments")["items"]
        if "llmservice.dev/revision" in d["metadata"]["labels"]
    ]
    model = _flag(
        serving["spec"]["template"]["spec"]["containers"][0]["args"], "--served-model-name"
    )
    port = 8000
    ips = sorted(p["status"]["podIP"] for p in ready)
    endpoints = {f"{ip}:{port}" for ip in ips}

    first = wait_for(
        "the picker's first answer",
        lambda: proc.poll() is None and _first_pick(target, model),
        90,
        interval=1,
    )
    assert first in endpoints, (first, endpoints)

    busy, idle = ips
    stop = threading.Event()
    threads = [
        threading.Thread(
            target=_keep_busy, args=(f"http://{busy}:{port}", model, stop), daemon=True
        )
        for _ in range(MAX_NUM_SEQS + 4)
    ]
    for thread in threads:
        thread.start()
    try:
        wait_for("a queue on the busy pod", lambda: _waiting(busy, port) >= 3, 60)
        time.sleep(1)  # the picker scrapes every 50 ms
        picks = []
        for i in range(8):
            queued = _waiting(busy, port)
            picks.append(pick_endpoint(target, model, f"question {i}"))
            assert queued >= 1, f"the busy pod's queue drained ({queued}): the check is void"
        assert set(picks) == {f"{idle}:{port}"}, (picks, busy, idle)
        assert _complete(f"http://{picks[0]}", model, 8) == 200
    finally:
        stop.set()
