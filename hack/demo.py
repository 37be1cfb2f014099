"""`make demo`: the local control plane, the CRD, the operator installed by its chart on the
real node (left running), and an example until it is Available.

`make demo ENGINE=vllm` serves examples/tiny-llama-cpu.yaml with the real CPU vLLM engine
instead of the simulator, and prints a chat completion the engine answered.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from llmservice_dev.engine import engine_installed, engine_paths
from llmservice_dev.localcluster import ClusterInfo, LocalCluster
from llmservice_dev.localcluster.cluster import OPERATOR_NAMESPACE
from llmservice_dev.operator_chart import chart_values, helm_install, load_operator_image

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {
    "sim": ROOT / "examples" / "llama-3.1-8b.yaml",
    "vllm": ROOT / "examples" / "tiny-llama-cpu.yaml",
}
RELEASE = "llmservice"
LOGS = f"kubectl -n {OPERATOR_NAMESPACE} logs deploy/{RELEASE}"


def _install_operator(info: ClusterInfo) -> None:
    print("==> operator: its image on the real node, installed by its Helm chart")
    image = load_operator_image(info)
    values = chart_values(info, image, replicas=1, reconcile_interval_seconds=2)
    helm_install(info, RELEASE, values, wait=True)
    print(f"    helm release {RELEASE} in {OPERATOR_NAMESPACE} ({image}), watching every namespace")


def _wait_available(info: ClusterInfo, name: str, timeout_s: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        obj: dict[str, Any] = json.loads(info.run_kubectl("get", "llms", name, "-o", "json"))
        if (obj.get("status") or {}).get("phase") == "Available":
            return obj
        time.sleep(1)
    return None


def _chat(info: ClusterInfo, name: str) -> str:
    """One chat completion from a Ready pod of ``name`` (pod IPs are loopback addresses)."""
    pods = json.loads(
        info.run_kubectl("get", "pods", "-l", f"llmservice.dev/service={name}", "-o", "json")
    )["items"]
    ip = next(p["status"]["podIP"] for p in pods if p.get("status", {}).get("podIP"))
    body = {
        "model": name,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 24,
    }
    request = urllib.request.Request(
        f"http://{ip}:8000/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.loads(response.read())
    text = answer["choices"][0]["message"]["content"]
    return (
        f"{answer['system_fingerprint']} ({answer['usage']['completion_tokens']} tokens): {text!r}"
    )


def main() -> int:
    started = time.monotonic()
    engine = os.environ.get("ENGINE") or "sim"
    if engine not in EXAMPLES:
        print(f"demo: error: ENGINE must be sim or vllm, not {engine!r}", file=sys.stderr)
        return 1
    if engine == "vllm" and (missing := engine_installed(engine_paths())) is not None:
        print(f"demo: error: {missing}", file=sys.stderr)
        return 1
    example = EXAMPLES[engine]
    print("==> local control plane (builds binaries on first use; later runs reuse them)")
    info = LocalCluster().up()
    kubectl = info.run_kubectl
    print("==> CRD")
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds" / "llmservice.yaml"))
    info.wait_crd_established("llmservices.serving.llmservice.dev")
    _install_operator(info)
    print(f"==> kubectl apply -f {example.relative_to(ROOT)}")
    secret = kubectl(
        "create", "secret", "generic", "hf-token", "--from-literal=token=demo",
        "--dry-run=client", "-o", "yaml",
    )  # fmt: skip
    kubectl("apply", "-f", "-", stdin=secret)
    kubectl("apply", "-f", str(example))
    name = json.loads(kubectl("create", "--dry-run=client", "-f", str(example), "-o", "json"))[
        "metadata"
    ]["name"]
    obj = _wait_available(info, name, 240 if engine == "vllm" else 180)
    if obj is None:
        print(f"timed out waiting for Available; see: {LOGS}", file=sys.stderr)
        return 1
    print(kubectl("get", "llms"))
    print(kubectl("get", "deployments,pods,services", "-l", f"llmservice.dev/service={name}"))
    print("sizing:", json.dumps(obj["status"]["sizing"], indent=2))
    if engine == "vllm":
        print("==> a chat completion answered by the real engine")
        print(f"    {_chat(info, name)}")
    print(f"demo done in {time.monotonic() - started:.0f}s. The cluster and the operator stay up;")
    print("to go on, e.g. with docs/rollouts.md's walkthrough:")
    print(f"  export KUBECONFIG={info.kubeconfig} PATH={info.bin_dir}:$PATH")
    print(f"  {LOGS}      # the operator's log")
    print(f"  Prometheus: {info.prometheus_url}   simulator pods: {info.simrunner_url}/pods")
    print("  make cluster-down    # stops everything")
    return 0


if __name__ == "__main__":
    sys.exit(main())
