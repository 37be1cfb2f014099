"""The only code that talks to the Kubernetes API.

Every call the operator makes is here. The Helm chart's ClusterRole grants exactly what these
calls (and kopf's watches) need: the integration suite runs the chart-installed operator under
it and fails on any request the API server refuses (its audit log).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

from ..api import API_VERSION, KIND
from ..api.timestamps import to_rfc3339
from ..observed import ObservedState
from ..render.labels import SERVICE

__all__ = [
    "AUTOSCALER_FIELD_MANAGER",
    "FIELD_MANAGER",
    "OWNED_KINDS",
    "KubeAdapter",
    "load_kube_config",
]

log = logging.getLogger(__name__)

FIELD_MANAGER = "llmservice-operator"
#: A second manager for Deployment.spec.replicas: the rendered object leaves it out.
AUTOSCALER_FIELD_MANAGER = "llmservice-autoscaler"

#: (apiVersion, kind) of everything the operator creates, in apply order.
OWNED_KINDS: tuple[tuple[str, str], ...] = (
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("policy/v1", "PodDisruptionBudget"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("gateway.networking.k8s.io/v1", "HTTPRoute"),
)


def load_kube_config() -> client.ApiClient:
    """In-cluster config when running in a pod, else $KUBECONFIG / ~/.kube/config."""
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


class KubeAdapter:
    def __init__(self, api_client: client.ApiClient, cache_dir: Path | None = None) -> None:
        # The dynamic client's default discovery cache is a file in /tmp shared by every process
        # that talks to the same server URL: one that outlived an uninstalled CRD (or another
        # cluster at that URL) makes every list of that kind a 404. Ours lives and dies with us,
        # under `cache_dir` (the chart's writable emptyDir; the root filesystem is read-only).
        cache_dir = Path(tempfile.mkdtemp(prefix="llmservice-operator-discovery-", dir=cache_dir))
        weakref.finalize(self, shutil.rmtree, cache_dir, ignore_errors=True)
        self._dynamic = DynamicClient(  # type: ignore[no-untyped-call]
            api_client, cache_file=str(cache_dir / "discovery.json")
        )
        self._core = client.CoreV1Api(api_client)
        # The dynamic client's discovery cache is not thread-safe; reconciles run in threads.
        self._discovery_lock = threading.Lock()
        self._resources: dict[tuple[str, str], Any] = {}

    def _resource(self, api_version: str, kind: str) -> Any:
        key = (api_version, kind)
        with self._discovery_lock:
            if key not in self._resources:
                try:
                    self._resources[key] = self._dynamic.resources.get(
                        api_version=api_version, kind=kind
                    )
                except ResourceNotFoundError:
                    # Remembered until restart: installing KEDA or Gateway API later needs
                    # an operator restart to be picked up (documented in the README).
                    self._resources[key] = None
            found = self._resources[key]
        if found is None:
            raise ResourceNotFoundError(f"{api_version} {kind} is not served by this cluster")
        return found

    def _forget(self, api_version: str, kind: str) -> None:
        with self._discovery_lock:
            self._resources.pop((api_version, kind), None)
            self._dynamic.resources.invalidate_cache()

    def observe(self, namespace: str, name: str, secret_names: list[str]) -> ObservedState:
        """The core's observed state of one LLMService: its owned objects, pods and Secrets."""
        state = ObservedState()
        selector = f"{SERVICE}={name}"
        for api_version, kind in OWNED_KINDS:
            try:
                resource = self._resource(api_version, kind)
            except ResourceNotFoundError:
                state.missing_apis.add(kind)
                continue
            try:
                listed = resource.get(namespace=namespace, label_selector=selector).to_dict()
            except NotFoundError:
                # Discovered earlier, no longer served (its CRD was deleted): find out again.
                self._forget(api_version, kind)
                state.missing_apis.add(kind)
                continue
            for item in listed.get("items", []):
                if _owned_by(item, name):
                    state.owned[(kind, item["metadata"]["name"])] = item
        pods = self._core.list_namespaced_pod(namespace, label_selector=selector)
        state.pods = [self._core.api_client.sanitize_for_serialization(p) for p in pods.items]
        for secret in secret_names:
            try:
                found = self._core.read_namespaced_secret(secret, namespace)
            except client.ApiException as err:
                if err.status != 404:
                    raise
                state.secrets[secret] = None
            else:
                state.secrets[secret] = set((found.data or {}).keys())
        return state

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply under FIELD_MANAGER; a no-op apply does not bump resourceVersion."""
        resource = self._resource(obj["apiVersion"], obj["kind"])
        applied = resource.server_side_apply(
            body=obj,
            namespace=obj["metadata"].get("namespace"),
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )
        result: dict[str, Any] = applied.to_dict()
        return result

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        resource = self._resource(api_version, kind)
        try:
            resource.delete(
                name=name, namespace=namespace, body={"propagationPolicy": "Background"}
            )
        except NotFoundError:
            log.debug("%s %s/%s already gone", kind, namespace, name)

    def scale_deployment(self, namespace: str, name: str, replicas: int) -> None:
        """Write replicas as the autoscaler's own field manager (one writer per field)."""
        resource = self._resource("apps/v1", "Deployment")
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas},
        }
        resource.server_side_apply(
            body=body,
            namespace=namespace,
            field_manager=AUTOSCALER_FIELD_MANAGER,
            force_conflicts=True,
        )

    def post_event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """A core/v1 Event on the LLMService, as `kubectl describe` shows them."""
        body = _event_body(obj, type_, reason, message)
        self._core.create_namespaced_event(obj["metadata"]["namespace"], body)  # type: ignore[arg-type]

    def read_secret_value(self, namespace: str, name: str, key: str) -> str | None:
        """One key of a Secret, decoded (the smoke test's API key)."""
        import base64

        try:
            secret = self._core.read_namespaced_secret(name, namespace)
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        raw = (secret.data or {}).get(key)
        return base64.b64decode(raw).decode() if raw else None

    def remove_annotation(self, namespace: str, name: str, key: str) -> None:
        resource = self._resource(API_VERSION, KIND)
        resource.patch(
            body={"metadata": {"annotations": {key: None}}},
            name=name,
            namespace=namespace,
            content_type="application/merge-patch+json",
        )

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch the status subresource; returns the object as the server stored it."""
        resource = self._resource(API_VERSION, KIND)
        updated = resource.status.patch(
            body={"status": status},
            name=name,
            namespace=namespace,
            content_type="application/merge-patch+json",
        )
        result: dict[str, Any] = updated.to_dict()
        return result


def _owned_by(obj: dict[str, Any], service_name: str) -> bool:
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") == KIND and ref.get("name") == service_name:
            return True
    return False


def _event_body(obj: dict[str, Any], type_: str, reason: str, message: str) -> dict[str, Any]:
    from datetime import UTC, datetime

    meta = obj["metadata"]
    now = to_rfc3339(datetime.now(UTC))
    return {
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion", API_VERSION),
            "kind": obj.get("kind", KIND),
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
        },
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": FIELD_MANAGER},
        "reportingComponent": FIELD_MANAGER,
        "reportingInstance": FIELD_MANAGER,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
