"""`make demo`: the local control plane, the CRD, the operator installed by its chart on the
real node (left running), and an example until it is Available."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from llmservice_dev.localcluster import LocalCluster
from llmservice_dev.localcluster.cluster import OPERATOR_NAMESPACE
from llmservice_dev.operator_chart import chart_values, helm_install, load_operator_image

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "llama-3.1-8b.yaml"
RELEASE = "llmservice"
LOGS = f"kubectl -n {OPERATOR_NAMESPACE} logs deploy/{RELEASE}"


def main() -> int:
    started = time.monotonic()
    print("==> local control plane (builds binaries on first use; later runs reuse them)")
    info = LocalCluster().up()
    kubectl = info.run_kubectl

    print("==> CRD")
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds" / "llmservice.yaml"))
    info.wait_crd_established("llmservices.serving.llmservice.dev")
    print("==> operator: its image on the real node, installed by its Helm chart")
    image = load_operator_image(info)
    values = chart_values(info, image, replicas=1, reconcile_interval_seconds=2)
    helm_install(info, RELEASE, values, wait=True)
    print(f"    helm release {RELEASE} in {OPERATOR_NAMESPACE} ({image}), watching every namespace")
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
        print(f"timed out waiting for Available; see: {LOGS}", file=sys.stderr)
        return 1
    print(kubectl("get", "llms"))
    print(kubectl("get", "deployments,pods,services", "-l", "llmservice.dev/service=llama-8b"))
    print("sizing:", json.dumps(obj["status"]["sizing"], indent=2))
    print(f"demo done in {time.monotonic() - started:.0f}s. The cluster and the operator stay up;")
    print("to go on, e.g. with docs/rollouts.md's walkthrough:")
    print(f"  export KUBECONFIG={info.kubeconfig} PATH={info.bin_dir}:$PATH")
    print(f"  {LOGS}      # the operator's log")
    print(f"  Prometheus: {info.prometheus_url}   simulator pods: {info.simrunner_url}/pods")
    print("  make cluster-down    # stops everything")
    return 0


if __name__ == "__main__":
    sys.exit(main())
