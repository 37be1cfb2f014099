"""Apply 50 LLMServices at once; report apply->Deployment and apply->Available latencies
(p50/p99) and the operator's peak RSS. Printed, not asserted.

    python -m benchmarks.operator_scale [--count 50]

Uses the local control plane (started if needed) and a fresh namespace.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from kubernetes import client, config, watch

from llmservice_dev.localcluster import LocalCluster
from llmservice_operator.api import GROUP, PLURAL, VERSION
from llmservice_operator.render.labels import SERVICE

ROOT = Path(__file__).resolve().parents[1]
#: GPU type per service, within the local cluster's fake capacity (32 H100, 16 L40S, 8 L4).
CAPACITY = [("H100-80GB", 26), ("L40S", 16), ("L4", 8)]


def _service(namespace: str, index: int, gpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "serving.llmservice.dev/v1alpha1",
        "kind": "LLMService",
        "metadata": {"name": f"bench-{index:03d}", "namespace": namespace},
        "spec": {
            "model": {"id": "meta-llama/Llama-3.1-8B-Instruct"},
            # The control plane and the operator are measured, not 50 simulator processes on
            # this machine's cores: the local cluster's runner marks these pods Ready at once.
            "engine": {
                "maxModelLen": 4096,
                "env": [{"name": "LLMSERVICE_SIM_NO_PROCESS", "value": "1"}],
            },
            "resources": {"gpu": gpu},
        },
    }


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def first_seen(
    list_call: Callable[..., Any],
    args: tuple[Any, ...],
    name_of: Callable[[Any], str | None],
    seen: dict[str, float],
    stop: threading.Event,
) -> None:
    """Watch ``list_call(*args)`` until ``stop``; record (monotonic clock) the first event in
    which ``name_of`` names each object."""
    while not stop.is_set():
        for event in watch.Watch().stream(list_call, *args, timeout_seconds=30):  # type: ignore[no-untyped-call]
            name = name_of(event["object"])
            if name:
                seen.setdefault(name, time.monotonic())
            if stop.is_set():
                return


def owning_service(deployment: Any) -> str | None:
    labels: dict[str, str] = deployment.metadata.labels or {}
    return labels.get(SERVICE)


def available_service(body: dict[str, Any]) -> str | None:
    available = (body.get("status") or {}).get("phase") == "Available"
    return str(body["metadata"]["name"]) if available else None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--workers", type=int, default=4, help="the operator's LLMSERVICE_WORKERS")
    args = parser.parse_args()
    gpus = [g for g, n in CAPACITY for _ in range(n)][: args.count]
    info = LocalCluster().up()
    env = {**os.environ, "KUBECONFIG": str(info.kubeconfig)}

    kubectl = info.run_kubectl
    api = config.new_client_from_config(config_file=str(info.kubeconfig))  # type: ignore[no-untyped-call]

    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds" / "llmservice.yaml"))
    kubectl("wait", "--for=condition=Established", "crd/llmservices.serving.llmservice.dev")
    kubectl("create", "namespace", namespace)
    log = Path(tempfile.mkstemp(prefix="bench-operator-", suffix=".log")[1])
    operator = subprocess.Popen(
        [sys.executable, "-m", "llmservice_operator", "run", "--no-leader-election"],
        env={
            **env,
            "LLMSERVICE_NAMESPACES": namespace,
            "LLMSERVICE_PROMETHEUS_URL": info.prometheus_url,
            "LLMSERVICE_HEALTH_PORT": "0",
            "LLMSERVICE_METRICS_PORT": "0",
            "LLMSERVICE_RECONCILE_INTERVAL_SECONDS": "5",
            "LLMSERVICE_WORKERS": str(args.workers),
        },
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    peak_rss = 0
    stop = threading.Event()

    def sample_rss() -> None:
        nonlocal peak_rss
        proc = psutil.Process(operator.pid)
        while not stop.is_set():
            try:
                peak_rss = max(peak_rss, proc.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.2)

    threading.Thread(target=sample_rss, daemon=True).start()
    try:
        time.sleep(3)  # the operator's watches are up
        docs = "\n---\n".join(json.dumps(_service(namespace, i, gpu)) for i, gpu in enumerate(gpus))
        created: dict[str, float] = {}
        available: dict[str, float] = {}
        deployments = client.AppsV1Api(api).list_namespaced_deployment
        services = client.CustomObjectsApi(api).list_namespaced_custom_object
        for call, call_args, name_of, seen in (
            (deployments, (namespace,), owning_service, created),
            (services, (GROUP, VERSION, namespace, PLURAL), available_service, available),
        ):
            threading.Thread(
                target=first_seen, args=(call, call_args, name_of, seen, stop), daemon=True
            ).start()
        time.sleep(1)  # the benchmark's own watches are up
        applied_at = time.monotonic()
        kubectl("apply", "-f", "-", stdin=docs)
        deadline = applied_at + args.timeout
        while len(available) < len(gpus) and time.monotonic() < deadline:
            time.sleep(0.1)
        created = {k: v - applied_at for k, v in created.items()}
        available = {k: v - applied_at for k, v in available.items()}
    finally:
        stop.set()
        operator.terminate()
        operator.wait(timeout=30)
        kubectl("delete", "namespace", namespace, "--wait=false")
    print(
        f"LLMServices applied at once: {len(gpus)}, operator workers: {args.workers} "
        "(times from watch events)"
    )
    print(f"{'measure':<34}{'n':>4}{'p50 s':>9}{'p99 s':>9}{'max s':>9}")
    for label, values in (
        ("apply -> Deployment created", created),
        ("apply -> status Available", available),
    ):
        xs = list(values.values())
        if xs:
            print(
                f"{label:<34}{len(xs):>4}{_percentile(xs, 50):>9.2f}"
                f"{_percentile(xs, 99):>9.2f}{max(xs):>9.2f}"
            )
        else:
            print(f"{label:<34}{0:>4}{'-':>9}{'-':>9}{'-':>9}")
    print(
        f"operator peak RSS: {peak_rss / 2**20:.0f} MiB  (median of created: "
        f"{statistics.median(created.values()) if created else float('nan'):.2f} s)"
    )
    return 0 if len(available) == len(gpus) else 1


if __name__ == "__main__":
    sys.exit(main())
