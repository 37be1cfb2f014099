"""What the renderer needs to know from sizing: the shape of one serving replica."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ServingShape"]


@dataclass(frozen=True)
class ServingShape:
    gpu_name: str
    #: Node label that selects this GPU, e.g. nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3.
    node_label_key: str
    node_label_value: str
    #: Extended resource the device plugin exposes: nvidia.com/gpu or amd.com/gpu.
    resource_name: str
    gpus_per_replica: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    max_num_seqs: int
    #: /dev/shm size; NCCL needs room for tensor-parallel collectives.
    shm_bytes: int
    #: Host memory one pod needs (weights are staged through page cache while loading).
    host_memory_bytes: int
    #: Nodes one replica spans: above 1 a replica is a LeaderWorkerSet group of this many pods
    #: (one per node, pipeline stages across them, tensor parallel within each).
    nodes_per_replica: int = 1

    @property
    def multi_node(self) -> bool:
        return self.nodes_per_replica > 1

    @property
    def gpus_per_pod(self) -> int:
        return self.gpus_per_replica // self.nodes_per_replica
