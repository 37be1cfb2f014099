"""A real local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok fake GPU nodes) for integration tests and the demo.

    from llmservice_dev.localcluster import LocalCluster, ensure_binaries
    info = LocalCluster().up()          # ClusterInfo(kubeconfig, server, token, bin_dir, ...)
    LocalCluster().down()

or ``llmservice-dev cluster up|down|status|build`` (:mod:`llmservice_dev.cli`).
"""

from .binaries import BinariesError, Versions, bin_dir, ensure_binaries, pinned_versions
from .cluster import ClusterError, ClusterInfo, LocalCluster, default_state_dir
from .nodes import DEFAULT_NODES, GPU_PRODUCT_LABEL, GPU_RESOURCE, H100, L4, FakeNodeSpec

__all__ = [
    "DEFAULT_NODES",
    "GPU_PRODUCT_LABEL",
    "GPU_RESOURCE",
    "H100",
    "L4",
    "BinariesError",
    "ClusterError",
    "ClusterInfo",
    "FakeNodeSpec",
    "LocalCluster",
    "Versions",
    "bin_dir",
    "default_state_dir",
    "ensure_binaries",
    "pinned_versions",
]
