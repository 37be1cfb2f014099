"""The fake GPU nodes kwok manages in the local cluster."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"
L4 = "NVIDIA-L4"
L40S = "NVIDIA-L40S"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_ANNOTATION_VALUE = "fake"
#: Pods on node ``i`` (1-based) get IPs from ``127.1.i.0/24``; pods on other kwok nodes
#: from POD_FALLBACK_CIDR. All of 127.0.0.0/8 is routed to ``lo`` on Linux, so a process
#: can bind a pod's IP without any network setup.
POD_CIDR_PREFIX = "127.1"
POD_FALLBACK_CIDR = "127.2.0.0/16"
NODE_IP = "127.0.0.1"
ZONE_LABEL = "topology.kubernetes.io/zone"


@dataclass(frozen=True)
class FakeNodeSpec:
    """One fake node: its name, GPU product and capacity."""

    name: str
    gpu_product: str
    gpus: int
    gpu_memory_mib: int
    cpu: str
    memory: str
    pods: int = 110
    instance_type: str = ""
    zone: str = ""


#: Six 8x H100 nodes, two per zone: a multi-node replica of two nodes (one LeaderWorkerSet
#: group, one zone with the exclusive-topology annotation), two groups and a canary group
#: fit at once (tests/integration/test_multinode.py).
DEFAULT_NODES: tuple[FakeNodeSpec, ...] = (
    *(
        FakeNodeSpec(
            f"gpu-h100-{i}",
            H100,
            8,
            81559,
            "192",
            "2048Gi",
            110,
            "p5.48xlarge",
            zone=f"zone-{'abc'[i // 2]}",
        )
        for i in range(6)
    ),
    *(
        FakeNodeSpec(f"gpu-l4-{i}", L4, 4, 23034, "48", "192Gi", 110, "g6.12xlarge")
        for i in range(2)
    ),
    *(
        FakeNodeSpec(f"gpu-l40s-{i}", L40S, 8, 46068, "96", "768Gi", 110, "g6e.48xlarge")
        for i in range(2)
    ),
)


def pod_cidr(index: int) -> str:
    """The loopback pod CIDR of the ``index``-th (0-based) node: ``127.1.1.0/24`` to
    ``127.1.255.0/24``, then (a benchmark's hundreds of nodes) ``127.3.0.0/24`` onwards, past
    POD_FALLBACK_CIDR."""
    if index < 255:
        return f"{POD_CIDR_PREFIX}.{index + 1}.0/24"
    beyond = index - 255
    return f"127.{3 + beyond // 256}.{beyond % 256}.0/24"


def node_manifest(spec: FakeNodeSpec, index: int) -> dict[str, Any]:
    """A Node object kwok will adopt (by annotation) and keep Ready."""
    resources = {
        "cpu": spec.cpu,
        "memory": spec.memory,
        "pods": str(spec.pods),
        "ephemeral-storage": "1Ti",
        GPU_RESOURCE: str(spec.gpus),
    }
    labels = {
        "type": "kwok",
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/role": "agent",
        "node-role.kubernetes.io/agent": "",
        GPU_PRODUCT_LABEL: spec.gpu_product,
        "nvidia.com/gpu.count": str(spec.gpus),
        "nvidia.com/gpu.memory": str(spec.gpu_memory_mib),
        "nvidia.com/gpu.present": "true",
    }
    if spec.instance_type:
        labels["node.kubernetes.io/instance-type"] = spec.instance_type
    if spec.zone:
        labels[ZONE_LABEL] = spec.zone
    cidr = pod_cidr(index)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "labels": labels,
            "annotations": {
                KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE,
                "node.alpha.kubernetes.io/ttl": "0",
            },
        },
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "addresses": [
                {"type": "InternalIP", "address": NODE_IP},
                {"type": "Hostname", "address": spec.name},
            ],
        },
    }
