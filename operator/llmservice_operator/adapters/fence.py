"""The fence on the reconcile's writes: a replica whose Lease has lapsed writes nothing.

The work queue does not start a reconcile without the Lease (handlers.py); this catches one
that started with it and is still running when it lapses (the leader stops at its renew
deadline, before any other replica may take the Lease: adapters/leader.py). Reads pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..observed import ObservedState
    from .kube import KubeAdapter

__all__ = ["FencedKube", "NotLeading"]


class NotLeading(RuntimeError):
    """A write refused: this replica does not hold the Lease (any more)."""


class FencedKube:
    """``kube``'s calls that a reconcile makes (reconcile.KubeApi); each write first asks
    ``leading()`` and raises NotLeading when it says no."""

    def __init__(self, kube: KubeAdapter, leading: Callable[[], bool]) -> None:
        self._kube = kube
        self._leading = leading

    def _fence(self, what: str) -> None:
        if not self._leading():
            raise NotLeading(f"{what} not sent: this replica's Lease has lapsed")

    def observe(self, namespace: str, name: str, secret_names: list[str]) -> ObservedState:
        return self._kube.observe(namespace, name, secret_names)

    def read_secret_value(self, namespace: str, name: str, key: str) -> str | None:
        return self._kube.read_secret_value(namespace, name, key)

    def apply(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        self._fence("apply")
        return self._kube.apply(obj)

    def existing(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        return self._kube.existing(api_version, kind, namespace, name)

    def delete(
        self, api_version: str, kind: str, namespace: str, name: str, uid: str | None = None
    ) -> None:
        self._fence("delete")
        self._kube.delete(api_version, kind, namespace, name, uid)

    def scale_deployment(
        self, namespace: str, name: str, replicas: int, kind: str = "Deployment"
    ) -> None:
        self._fence("scale")
        self._kube.scale_deployment(namespace, name, replicas, kind)

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        self._fence("status write")
        return self._kube.patch_status(namespace, name, status)

    def remove_annotation(self, namespace: str, name: str, key: str) -> None:
        self._fence("annotation removal")
        self._kube.remove_annotation(namespace, name, key)

    def post_event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self._fence("event")
        self._kube.post_event(obj, type_, reason, message)
