"""`make demo`: local control plane + CRD + operator + an example, until it is Available."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from llmservice_dev.localcluster import LocalCluster

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "llama-3.1-8b.yaml"


def main() -> int:
    started = time.monotonic()
    print("==> local control plane (builds binaries on first use; later runs reuse them)")
    info = LocalCluster().up()
    env = {**os.environ, "KUBECONFIG": str(info.kubeconfig)}

    kubectl = info.run_kubectl

    print("==> CRD")
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds" / "llmservice.yaml"))
    info.wait_crd_established("llmservices.serving.llmservice.dev")
    print("==> operator (log: .demo-operator.log)")
    log = (ROOT / ".demo-operator.log").open("wb")
    operator = subprocess.Popen(
        [sys.executable, "-m", "llmservice_operator", "run", "--no-leader-election"],
        env={
            **env,
            "LLMSERVICE_NAMESPACES": "default",
            "LLMSERVICE_PROMETHEUS_URL": info.prometheus_url,
            "LLMSERVICE_RECONCILE_INTERVAL_SECONDS": "2",
            "LLMSERVICE_HEALTH_PORT": "0",
            "LLMSERVICE_METRICS_PORT": "0",
        },
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        print(f"==> kubectl apply -f {EXAMPLE.relative_to(ROOT)}")
        secret = kubectl(
            "create",
            "secret",
            "generic",
            "hf-token",
            "--from-literal=token=demo",
            "--dry-run=client",
            "-o",
            "yaml",
        )
        kubectl("apply", "-f", "-", stdin=secret)
        kubectl("apply", "-f", str(EXAMPLE))
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            obj = json.loads(kubectl("get", "llms", "llama-8b", "-o", "json"))
            if (obj.get("status") or {}).get("phase") == "Available":
                break
            time.sleep(1)
        else:
            print("timed out waiting for Available; see .demo-operator.log", file=sys.stderr)
            return 1
        print(kubectl("get", "llms"))
        print(kubectl("get", "deployments,pods,services", "-l", "llmservice.dev/service=llama-8b"))
        print("sizing:", json.dumps(obj["status"]["sizing"], indent=2))
        print(f"demo done in {time.monotonic() - started:.0f}s. The cluster stays up (the demo's")
        print("operator stops now); to go on, e.g. with docs/rollouts.md's walkthrough:")
        print(f"  export KUBECONFIG={info.kubeconfig} PATH={info.bin_dir}:$PATH")
        print(f"  LLMSERVICE_NAMESPACES=default LLMSERVICE_PROMETHEUS_URL={info.prometheus_url} \\")
        print("    .venv/bin/llmservice run --no-leader-election &      # the operator")
        print(f"  Prometheus: {info.prometheus_url}   simulator pods: {info.simrunner_url}/pods")
        print("  make cluster-down    # stops everything")
        return 0
    finally:
        operator.terminate()
        operator.wait(timeout=20)


if __name__ == "__main__":
    sys.exit(main())
