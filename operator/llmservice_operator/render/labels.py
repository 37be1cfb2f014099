"""Label and annotation keys: one place, because selectors in several objects must agree."""

from __future__ import annotations

__all__ = [
    "MANAGED_BY",
    "REVISION",
    "ROLE",
    "SERVICE",
    "selector_labels",
    "revision_selector",
]

SERVICE = "llmservice.dev/service"
REVISION = "llmservice.dev/revision"
ROLE = "llmservice.dev/role"
MANAGED_BY = "llmservice-operator"


def selector_labels(service: str) -> dict[str, str]:
    """Selects every serving pod of the service, whatever its revision."""
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": service,
        SERVICE: service,
    }


def revision_selector(service: str, revision: str) -> dict[str, str]:
    return {**selector_labels(service), REVISION: revision}
