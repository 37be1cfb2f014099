"""What exists now for one LLMService: the one observed-state type (pure).

The Kubernetes adapter fills it in (``KubeAdapter.observe``); the reconcile's decision only
reads it, together with the LLMService body as the watch delivered it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .render.labels import REVISION

__all__ = ["ObservedState"]


@dataclass
class ObservedState:
    """The owned objects, pods and referenced Secrets of one LLMService, as plain dicts."""

    owned: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """(kind, name) -> the object, for everything the service owns."""
    pods: list[dict[str, Any]] = field(default_factory=list)
    cache_pods: list[dict[str, Any]] = field(default_factory=list)
    """The model cache's download Job pods (label ``llmservice.dev/model-cache``): not serving
    pods, so apart from ``pods``."""
    secrets: dict[str, set[str] | None] = field(default_factory=dict)
    """Secret name -> its data keys; None when the Secret does not exist."""
    missing_apis: set[str] = field(default_factory=set)
    """Kinds whose API the cluster does not serve (e.g. KEDA's ScaledObject)."""

    def deployments(self) -> dict[str, dict[str, Any]]:
        """Revision -> Deployment."""
        found: dict[str, dict[str, Any]] = {}
        for (kind, _name), obj in self.owned.items():
            if kind == "Deployment":
                revision = obj["metadata"].get("labels", {}).get(REVISION)
                if revision:
                    found[revision] = obj
        return found
