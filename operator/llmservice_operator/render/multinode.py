"""Multi-node replicas: the pieces of a LeaderWorkerSet group that need logic (pure).

A replica whose GPUs exceed one node is one LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``)
group of ``nodes_per_replica`` pods, one per node. vLLM (0.32 and 0.33 both document it) runs
it with its own multiprocessing executor across nodes, no Ray: every pod runs the same
``vllm serve`` with ``--nnodes N --node-rank R --master-addr <leader>``; rank 0, the leader,
serves HTTP, the others run ``--headless`` (engine workers, no API server). Tensor parallel
stays within a node, pipeline stages go across nodes.
"""

from __future__ import annotations

import copy
from typing import Any

from .labels import ROLE
from .shape import ServingShape

__all__ = [
    "EXCLUSIVE_TOPOLOGY_ANNOTATION",
    "GROUP_INDEX_LABEL",
    "LEADER",
    "LWS_API_VERSION",
    "LWS_KIND",
    "LWS_NAME_LABEL",
    "MASTER_PORT",
    "NODE_RANK_ENV",
    "WORKER",
    "WORKER_INDEX_LABEL",
    "leader_args",
    "worker_template",
]

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_KIND = "LeaderWorkerSet"
#: Labels the LWS controller puts on every pod of a group (the leader is worker-index 0).
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
#: One group per value of the user's topology key (spec.resources.topologyKey).
EXCLUSIVE_TOPOLOGY_ANNOTATION = "leaderworkerset.sigs.k8s.io/exclusive-topology"
#: ROLE label values: the leader serves HTTP (Services and scrapes select it), workers do not.
LEADER = "leader"
WORKER = "worker"
#: The pod's rank in its group, from the LWS worker-index label (downward API).
NODE_RANK_ENV = "LLMSERVICE_NODE_RANK"
#: The leader's address, which the LWS controller injects into every pod of a group.
LEADER_ADDRESS_ENV = "LWS_LEADER_ADDRESS"
#: vLLM's default (ParallelConfig.master_port), written out so the NetworkPolicy can say it.
MASTER_PORT = 29501


def leader_args(shape: ServingShape, require: Any) -> list[str]:
    """The multi-node flags of the leader (rank 0); ``require`` checks each flag against the
    pinned release's table (vllm/flags.py)."""
    return [
        require("--distributed-executor-backend"), "mp",
        require("--nnodes"), str(shape.nodes_per_replica),
        require("--node-rank"), "0",
        require("--master-addr"), f"$({LEADER_ADDRESS_ENV})",
        require("--master-port"), str(MASTER_PORT),
    ]  # fmt: skip


def worker_template(leader: dict[str, Any]) -> dict[str, Any]:
    """A worker pod template from the leader's: same image, resources, security context,
    /dev/shm and volumes; its rank from the LWS label; ``--headless``. Workers run no HTTP
    server, so no HTTP probes, port or drain hook: a dead worker breaks the leader's
    collectives, its /health turns 503, and the group is recreated as one
    (restartPolicy RecreateGroupOnPodRestart)."""
    worker = copy.deepcopy(leader)
    worker["metadata"]["labels"][ROLE] = WORKER
    for key in list(worker["metadata"].get("annotations") or {}):
        if key.startswith("prometheus.io/"):
            del worker["metadata"]["annotations"][key]
    container = worker["spec"]["containers"][0]
    for key in ("startupProbe", "readinessProbe", "livenessProbe", "lifecycle", "ports"):
        container.pop(key, None)
    args = list(container["args"])
    args[args.index("--node-rank") + 1] = f"$({NODE_RANK_ENV})"
    container["args"] = [*args, "--headless"]
    rank = {"fieldRef": {"fieldPath": f"metadata.labels['{WORKER_INDEX_LABEL}']"}}
    container["env"] = [*container["env"], {"name": NODE_RANK_ENV, "valueFrom": rank}]
    return worker
