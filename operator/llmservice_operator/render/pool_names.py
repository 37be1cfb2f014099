"""Names of a service's InferencePools and their endpoint pickers (one place: the HTTPRoute,
the pools, the pickers and the InferenceObjectives of spec.serving.tiers must agree)."""

from __future__ import annotations

from typing import Any

__all__ = [
    "INFERENCE_POOL_API_GROUP",
    "INFERENCE_POOL_API_VERSION",
    "endpoint_picker_name",
    "endpoint_picker_service_account",
    "inference_pool_name",
    "inference_pool_names",
    "pool_backend_ref",
]

INFERENCE_POOL_API_GROUP = "inference.networking.k8s.io"
INFERENCE_POOL_API_VERSION = f"{INFERENCE_POOL_API_GROUP}/v1"


def inference_pool_name(service_name: str, preview: bool = False) -> str:
    """The stable revision's pool is named as the service; the candidate's (during a rollout,
    while it has a preview Service) ``<service>-preview``. Like the Services, the names stay
    and the selectors move: a promotion points the stable pool at the new revision, so an
    InferenceObjective's poolRef never has to change."""
    return f"{service_name}-preview" if preview else service_name


def inference_pool_names(service_name: str, has_preview: bool) -> list[str]:
    """The pools that exist now: the stable one, and the candidate's while it has one."""
    names = [inference_pool_name(service_name)]
    if has_preview:
        names.append(inference_pool_name(service_name, preview=True))
    return names


def endpoint_picker_name(pool_name: str) -> str:
    """The picker's Deployment and Service (the extension chart's ``<pool>-epp``)."""
    return f"{pool_name}-epp"


def endpoint_picker_service_account(service_name: str) -> str:
    """One ServiceAccount (and Role, RoleBinding) for every picker of the service."""
    return f"{service_name}-epp"


def pool_backend_ref(pool_name: str, weight: int) -> dict[str, Any]:
    """An HTTPRoute backendRef to a pool (no port: the pool's targetPorts say it)."""
    return {
        "group": INFERENCE_POOL_API_GROUP,
        "kind": "InferencePool",
        "name": pool_name,
        "weight": weight,
    }
