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
from pathlib import Path
from typing import Any

import psutil
from kubernetes import client, config, watch
from kubernetes.client import ApiClient

from llmservice_operator.api import GROUP, PLURAL, VERSION
from llmservice_operator.localcluster import LocalCluster

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


def watch_created(
    api: ApiClient, namespace: str, seen: dict[str, float], stop: threading.Event
) -> None:
    """First time a Deployment of each service is seen (monotonic clock)."""
    apps = client.AppsV1Api(api)
    while not stop.is_set():
        for event in watch.Watch().stream(  # type: ignore[no-untyped-call]
            apps.list_namespaced_deployment, namespace, timeout_seconds=30
        ):
            labels = event["object"].metadata.labels or {}
            owner = labels.get("llmservice.dev/service")
            if owner:
                seen.setdefault(owner, time.monotonic())


def watch_available(
    api: ApiClient,
    namespace: str,
    seen: dict[str, float],
    expected: int,
    done: threading.Event,
    stop: threading.Event,
) -> None:
    """First time each LLMService reports phase Available (monotonic clock)."""
    custom = client.CustomObjectsApi(api)
    while not stop.is_set() and not done.is_set():
        for event in watch.Watch().stream(  # type: ignore[no-untyped-call]
            custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            timeout_seconds=30,
        ):
            body = event["object"]
            if (body.get("status") or {}).get("phase") == "Available":
                seen.setdefault(body["metadata"]["name"], time.monotonic())
            if len(seen) >= expected:
                done.set()
                return


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
        done = threading.Event()
        watchers = [
            threading.Thread(
                target=watch_created, args=(api, namespace, created, stop), daemon=True
            ),
            threading.Thread(
                target=watch_available,
                args=(api, namespace, available, len(gpus), done, stop),
                daemon=True,
            ),
        ]
        for watcher in watchers:
            watcher.start()
        time.sleep(1)  # the benchmark's own watches are up
        applied_at = time.monotonic()
        kubectl("apply", "-f", "-", stdin=docs)
        done.wait(timeout=args.timeout)
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
