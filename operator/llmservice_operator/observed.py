"""What exists now for one LLMService: the one observed-state type (pure).

The Kubernetes adapter fills it in (``KubeAdapter.observe``); the reconcile's decision only
reads it, together with the LLMService body as the watch delivered it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .render.labels import REVISION
from .render.load_test import LOAD_REVISION

#: The kinds a revision's workload may be (kind -> apiVersion): a Deployment, or a LeaderWorkerSet when a replica
#: spans nodes (render/multinode.py). Both are named ``<service>-<revision>`` and carry
#: spec.replicas and status.replicas/readyReplicas, the LWS counting whole groups.
WORKLOAD_KINDS: dict[str, str] = {
    "Deployment": "apps/v1",
    "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1",
}

__all__ = ["WORKLOAD_KINDS", "ObservedState"]


@dataclass
class ObservedState:
    """The owned objects, pods and referenced Secrets of one LLMService, as plain dicts."""

    owned: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """(kind, name) -> the object, for everything the service owns."""
    pods: list[dict[str, Any]] = field(default_factory=list)
    """The serving pods: a Deployment's, and the leaders of LeaderWorkerSet groups (only a
    leader serves HTTP: readiness, scrapes and smoke tests go to it)."""
    worker_pods: list[dict[str, Any]] = field(default_factory=list)
    """The non-leader pods of LeaderWorkerSet groups (label ``llmservice.dev/role: worker``)."""
    cache_pods: list[dict[str, Any]] = field(default_factory=list)
    """The model cache's download Job pods (label ``llmservice.dev/model-cache``): not serving
    pods, so apart from ``pods``."""
    secrets: dict[str, set[str] | None] = field(default_factory=dict)
    """Secret name -> its data keys; None when the Secret does not exist."""
    missing_apis: set[str] = field(default_factory=set)
    """Kinds whose API the cluster does not serve (e.g. KEDA's ScaledObject)."""

    def workload_kinds(self) -> dict[str, str]:
        """Revision -> the kind of its workload."""
        found: dict[str, str] = {}
        for (kind, _name), obj in self.owned.items():
            revision = obj["metadata"].get("labels", {}).get(REVISION)
            if kind in WORKLOAD_KINDS and revision:
                found[revision] = kind
        return found

    def deployments(self) -> dict[str, dict[str, Any]]:
        """Revision -> its workload (Deployment or LeaderWorkerSet, see WORKLOAD_KINDS)."""
        found: dict[str, dict[str, Any]] = {}
        for (kind, _name), obj in self.owned.items():
            if kind in WORKLOAD_KINDS:
                revision = obj["metadata"].get("labels", {}).get(REVISION)
                if revision:
                    found[revision] = obj
        return found

    def load_tests_ready(self) -> frozenset[str]:
        """Revisions whose blueGreen load test Job (render/load_test.py) has a Ready pod."""
        found: set[str] = set()
        for (kind, _name), obj in self.owned.items():
            template = (obj.get("spec") or {}).get("template") or {}
            labels = (template.get("metadata") or {}).get("labels") or {}
            revision = labels.get(LOAD_REVISION)
            if kind == "Job" and revision and int((obj.get("status") or {}).get("ready") or 0):
                found.add(revision)
        return frozenset(found)
