"""KubeAdapter.observe keeps a LeaderWorkerSet's worker pods apart from the serving pods, and
reports the LWS kind missing where the cluster does not serve it (as for ScaledObject)."""

from __future__ import annotations

from typing import Any

from llmservice_operator.adapters.informer import Kind
from llmservice_operator.adapters.kube import OWNED_KINDS, KubeAdapter
from llmservice_operator.render.labels import ROLE, SERVICE

OWNER = [{"kind": "LLMService", "name": "big"}]


def _pod(name: str, role: str | None) -> dict[str, Any]:
    labels = {SERVICE: "big", **({ROLE: role} if role else {})}
    return {"metadata": {"name": name, "labels": labels}}


class _Watches:
    def __init__(self, served_lws: bool) -> None:
        self.served_lws = served_lws

    def synced(self) -> bool:
        return True

    def owned_by(self, kind: Kind, namespace: str, name: str) -> list[dict[str, Any]] | None:
        if kind.kind == "Pod":
            return [_pod("big-a-0", "leader"), _pod("big-a-0-1", "worker"), _pod("small", None)]
        if kind.kind == "LeaderWorkerSet":
            if not self.served_lws:
                return None
            labels = {SERVICE: "big", "llmservice.dev/revision": "a"}
            return [{"metadata": {"name": "big-a", "labels": labels, "ownerReferences": OWNER}}]
        return []


def _adapter(served_lws: bool) -> KubeAdapter:
    adapter = KubeAdapter.__new__(KubeAdapter)  # no API server: only the caches are read
    adapter._watches = _Watches(served_lws)  # type: ignore[assignment]
    return adapter


def test_worker_pods_are_not_serving_pods() -> None:
    observed = _adapter(True).observe("ml", "big", [])
    assert [p["metadata"]["name"] for p in observed.pods] == ["big-a-0", "small"]
    assert [p["metadata"]["name"] for p in observed.worker_pods] == ["big-a-0-1"]
    assert observed.workload_kinds() == {"a": "LeaderWorkerSet"}
    assert set(observed.deployments()) == {"a"}


def test_a_cluster_without_leaderworkerset_reports_the_kind_missing() -> None:
    assert ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet") in OWNED_KINDS
    observed = _adapter(False).observe("ml", "big", [])
    assert "LeaderWorkerSet" in observed.missing_apis
    assert observed.deployments() == {}
