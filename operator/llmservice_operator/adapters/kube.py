"""The only code that talks to the Kubernetes API.

Every call the operator makes is here. The Helm chart's RBAC grants exactly what these calls
(and kopf's watches) need: with LLMSERVICE_NAMESPACES set, every call is namespaced (one watch
per kind and namespace, reads and writes in the service's namespace) and only kopf lists and
watches CRDs and namespaces cluster-wide. The integration suite runs the chart-installed
operator (namespaced) and fails on any request the API server refuses (its audit log).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

from ..api import API_VERSION, KIND
from ..api.timestamps import to_rfc3339
from ..observed import ObservedState
from ..render.cache_layout import CACHE_LABEL
from ..render.labels import ROLE, SERVICE
from ..render.multinode import LWS_API_VERSION, LWS_KIND, WORKER
from .informer import Informer, InformerSet, Kind, RawWatcher

__all__ = [
    "API_READ_TIMEOUT_S",
    "AUTOSCALER_FIELD_MANAGER",
    "FIELD_MANAGER",
    "AppliedLedger",
    "CacheNotSynced",
    "OWNED_KINDS",
    "KubeAdapter",
    "TimedApiClient",
    "load_kube_config",
]

log = logging.getLogger(__name__)

FIELD_MANAGER = "llmservice-operator"
#: A LIST answered with each object's metadata only (what kubectl get -o name asks for).
PARTIAL_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
#: A second manager for Deployment.spec.replicas: the rendered object leaves it out.
AUTOSCALER_FIELD_MANAGER = "llmservice-autoscaler"

#: (apiVersion, kind) of everything the operator creates, in apply order.
OWNED_KINDS: tuple[tuple[str, str], ...] = (
    ("apps/v1", "Deployment"),
    # Multi-node replicas, where the cluster runs the LWS controller (optional, like KEDA's).
    (LWS_API_VERSION, LWS_KIND),
    ("v1", "Service"),
    ("policy/v1", "PodDisruptionBudget"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("gateway.networking.k8s.io/v1", "HTTPRoute"),
    # spec.serving.inferencePool (render/inference_pool.py): the pickers' identity and
    # rights first, then the pools, where the extension's CRD is served.
    ("v1", "ServiceAccount"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("inference.networking.k8s.io/v1", "InferencePool"),
    ("inference.networking.x-k8s.io/v1alpha2", "InferenceObjective"),  # spec.serving.tiers
    ("v1", "PersistentVolumeClaim"),  # the model cache (render/model_cache.py)
    ("monitoring.coreos.com/v1", "PrometheusRule"),  # alerts, where the CRD is served
    ("batch/v1", "Job"),  # a preview's load test (render/load_test.py), the model cache's download
)


#: The read timeout of every API call that gives none (each socket read; a watch gives its
#: own): longer than the API server queues a request (API Priority and Fairness waits at most
#: 15 s by default), shorter than the server's own 60 s request timeout.
API_READ_TIMEOUT_S = 30.0


class TimedApiClient(client.ApiClient):
    """An ApiClient whose every request has a timeout. The kubernetes client has none by
    default (a hung API server holds the calling thread for ever) and no setting for one: each
    call may pass ``_request_timeout``. Every call, of a typed API (CoreV1Api, ...) or of the
    dynamic client (discovery included), goes through :meth:`call_api`, which gives the
    default to a call that passed none."""

    def __init__(
        self,
        request_timeout: tuple[float, float],
        configuration: client.Configuration | None = None,
    ) -> None:
        super().__init__(configuration)
        #: (connect, read) seconds, as ``_request_timeout`` takes them.
        self.request_timeout = request_timeout

    def call_api(
        self,
        method: str,
        url: str,
        header_params: dict[str, Any] | None = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        timeout = _request_timeout or self.request_timeout
        return super().call_api(
            method, url, header_params, body, post_params, _request_timeout=timeout
        )


def load_kube_config(connect_timeout_s: float = 10.0) -> client.ApiClient:
    """In-cluster config when running in a pod, else $KUBECONFIG / ~/.kube/config; every call
    connects within ``connect_timeout_s`` and waits at most API_READ_TIMEOUT_S for each read."""
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    return TimedApiClient((connect_timeout_s, API_READ_TIMEOUT_S))


class CacheNotSynced(RuntimeError):
    """The watch caches have not listed every kind yet (start-up): try again shortly."""


@dataclass
class _Applied:
    """What we last applied to one object: the desired object's hash, and the object's
    generation (its resourceVersion for kinds without one) right after."""

    digest: str
    marker: int


class AppliedLedger:
    """What the operator last applied, per object, to tell an apply that changes nothing.

    An apply is needed when the desired object differs from the last one applied (its hash),
    when the object is gone, or when someone changed it since (its generation, or for kinds
    without one its resourceVersion, moved past what our apply left). A cached copy older than
    our own write (the watch lags) is not a change. After a restart the ledger is empty: every
    object is applied once, and a server-side apply that changes nothing writes nothing.
    """

    def __init__(self) -> None:
        self._applied: dict[tuple[str, str, str], _Applied] = {}
        self._lock = threading.Lock()

    def needed(self, key: tuple[str, str, str], obj: dict[str, Any], current: Any) -> bool:
        with self._lock:
            last = self._applied.get(key)
        if last is None or current is None or last.digest != _digest(obj):
            return True
        return _marker(current) > last.marker

    def record(
        self, key: tuple[str, str, str], obj: dict[str, Any], result: dict[str, Any]
    ) -> None:
        with self._lock:
            self._applied[key] = _Applied(_digest(obj), _marker(result))

    def moved(self, key: tuple[str, str, str], result: dict[str, Any]) -> None:
        """Our own other write (the autoscaler's replicas) moved the object's generation."""
        with self._lock:
            last = self._applied.get(key)
            if last is not None:
                self._applied[key] = _Applied(last.digest, _marker(result))

    def forget(self, key: tuple[str, str, str]) -> None:
        with self._lock:
            self._applied.pop(key, None)


class KubeAdapter:
    """Reads from watch-fed caches (adapters/informer.py), writes only what changed.

    Secrets are read when a spec references them, and a read is reused for `secret_ttl_s`
    (one that did not exist for 10 s: it is probably being created).
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        cache_dir: Path | None = None,
        *,
        namespaces: Sequence[str] = (),
        secret_ttl_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
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
        self._namespaces = tuple(namespaces)
        self._watches: InformerSet | None = None
        self._ledger = AppliedLedger()
        self._secrets: dict[tuple[str, str], tuple[float, set[str] | None]] = {}
        self._secret_ttl_s = secret_ttl_s
        self._clock = clock

    def _resource(self, api_version: str, kind: str) -> Any:
        """The dynamic client's resource; ResourceNotFoundError when the cluster does not serve
        the kind (looked up again after `_forget`)."""
        key = (api_version, kind)
        with self._discovery_lock:
            if key not in self._resources:
                try:
                    # A kind looked for again every 30 s (KEDA not installed yet) is asked
                    # of its group's own discovery document: the dynamic client, not finding
                    # it, would fetch its whole discovery twice (it refreshes on a miss).
                    if not self._served(api_version, kind):
                        raise ResourceNotFoundError(f"{api_version} {kind}")
                    self._resources[key] = self._dynamic.resources.get(
                        api_version=api_version, kind=kind
                    )
                except ResourceNotFoundError:
                    self._resources[key] = None
            found = self._resources[key]
        if found is None:
            raise ResourceNotFoundError(f"{api_version} {kind} is not served by this cluster")
        return found

    def _served(self, api_version: str, kind: str) -> bool:
        """Whether the cluster serves ``kind`` in ``api_version``, from that group version's
        discovery document (one small request: ``/apis/GROUP/VERSION``)."""
        path = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
        try:
            response = self._dynamic.request("get", path, serialize=False)
        except NotFoundError:
            return False
        return served_kind(json.loads(response.data), kind)

    def _forget(self, api_version: str, kind: str) -> None:
        """The next lookup of the kind asks the cluster again (its CRD came or went)."""
        with self._discovery_lock:
            self._resources.pop((api_version, kind), None)

    # ------------------------------------------------------------------ watches
    def start_watches(
        self,
        on_change: Callable[[dict[str, Any]], None],
        on_found: Callable[[], None] | None = None,
    ) -> InformerSet:
        """List and watch every owned kind and the services' pods; `on_change(obj)` for each
        change, `on_found()` when a kind that was missing is served again (both from the
        watch threads)."""
        kinds = [Kind(v, k) for v, k in (*OWNED_KINDS, ("v1", "Pod"))]
        namespaces: Sequence[str | None] = self._namespaces or (None,)
        self._watches = InformerSet(
            {
                kind: [
                    Informer(
                        kind,
                        ns,
                        SERVICE,
                        self._resource,
                        self._forget,
                        RawWatcher(),
                        on_change,
                        on_found=on_found,
                    )
                    for ns in namespaces
                ]
                for kind in kinds
            }
        )
        self._watches.start()
        return self._watches

    def stop_watches(self) -> None:
        if self._watches is not None:
            self._watches.stop.set()

    def observe(self, namespace: str, name: str, secret_names: list[str]) -> ObservedState:
        """The core's observed state of one LLMService, from the caches: no request, but for
        a referenced Secret not read within its TTL."""
        watches = self._watches
        if watches is None or not watches.synced():
            raise CacheNotSynced("the watch caches are still listing")
        state = ObservedState()
        for api_version, kind in OWNED_KINDS:
            items = watches.owned_by(Kind(api_version, kind), namespace, name)
            if items is None:
                state.missing_apis.add(kind)
                continue
            for item in items:
                if _owned_by(item, name):
                    state.owned[(kind, item["metadata"]["name"])] = item
        for pod in watches.owned_by(Kind("v1", "Pod"), namespace, name) or []:
            labels = pod["metadata"].get("labels") or {}
            if CACHE_LABEL in labels:
                state.cache_pods.append(pod)
            elif labels.get(ROLE) == WORKER:
                state.worker_pods.append(pod)
            else:
                state.pods.append(pod)
        for secret in secret_names:
            state.secrets[secret] = self._secret_keys(namespace, secret)
        return state

    def _secret_keys(self, namespace: str, name: str) -> set[str] | None:
        now = self._clock()
        cached = self._secrets.get((namespace, name))
        if cached is not None:
            read_at, keys = cached
            if now - read_at < (self._secret_ttl_s if keys is not None else 10.0):
                return keys
        try:
            found = self._core.read_namespaced_secret(name, namespace)
        except client.ApiException as err:
            if err.status != 404:
                raise
            keys = None
        else:
            keys = set((found.data or {}).keys())
        self._secrets[(namespace, name)] = (now, keys)
        return keys

    # ------------------------------------------------------------------ writes
    def apply(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Server-side apply under FIELD_MANAGER, unless it would change nothing
        (:class:`AppliedLedger`). The object as the API server returned it; None when not
        applied."""
        meta = obj["metadata"]
        key = (obj["kind"], meta.get("namespace", ""), meta["name"])
        current = self._cached(obj["kind"], obj["apiVersion"], key[1], key[2])
        if not self._ledger.needed(key, obj, current):
            return None
        resource = self._resource(obj["apiVersion"], obj["kind"])
        applied: dict[str, Any] = resource.server_side_apply(
            body=obj,
            namespace=meta.get("namespace"),
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
            serializer=_plain,
        )
        self._ledger.record(key, obj, applied)
        return applied

    def _cached(self, kind: str, api_version: str, namespace: str, name: str) -> Any:
        if self._watches is None:
            return None
        return self._watches.get(Kind(api_version, kind), namespace, name)

    def existing(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        """The object of that name, as its owner references tell whose it is: the watch
        cache's copy (no request) when it carries our label, else one GET; None when free."""
        cached = self._cached(kind, api_version, namespace, name)
        if cached is not None:
            return dict(cached)
        try:
            found = self._resource(api_version, kind).get(
                name=name, namespace=namespace, serializer=_plain
            )
        except NotFoundError:
            return None
        return dict(found)

    def delete(
        self, api_version: str, kind: str, namespace: str, name: str, uid: str | None = None
    ) -> None:
        """Delete, in the background; ``uid``: only that very object (the API server refuses
        with a 409 if the name now holds another, e.g. one made since our cache saw ours)."""
        self._ledger.forget((kind, namespace, name))
        resource = self._resource(api_version, kind)
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            resource.delete(name=name, namespace=namespace, body=body)
        except NotFoundError:
            log.debug("%s %s/%s already gone", kind, namespace, name)

    def scale_deployment(
        self, namespace: str, name: str, replicas: int, kind: str = "Deployment"
    ) -> None:
        """Write replicas as the autoscaler's own field manager (one writer per field). ``kind``
        LeaderWorkerSet: its spec.replicas, which counts groups."""
        api_version = LWS_API_VERSION if kind == LWS_KIND else "apps/v1"
        resource = self._resource(api_version, kind)
        body = {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas},
        }
        scaled = resource.server_side_apply(
            body=body,
            namespace=namespace,
            field_manager=AUTOSCALER_FIELD_MANAGER,
            force_conflicts=True,
            serializer=_plain,
        )
        # Our own write moved the generation: not a change someone made to what we applied.
        self._ledger.moved((kind, namespace, name), scaled)

    def post_event(
        self, obj: dict[str, Any], type_: str, reason: str, message: str, at: datetime | None = None
    ) -> None:
        """A core/v1 Event on the LLMService, as `kubectl describe` shows them (``at``: when
        it happened; now by default)."""
        body = _event_body(obj, type_, reason, message, at or datetime.now(UTC))
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
        updated: dict[str, Any] = resource.status.patch(
            body={"status": status},
            name=name,
            namespace=namespace,
            content_type="application/merge-patch+json",
            serializer=_plain,
        )
        return updated

    def llmservice_versions(self) -> tuple[dict[tuple[str, str], str], str]:
        """Every LLMService the operator watches, by (namespace, name), with its
        resourceVersion; and the list's own resourceVersion. One LIST per watched namespace
        (or one for the cluster)."""
        found: dict[tuple[str, str], str] = {}
        list_version = ""
        for namespace in self._namespaces or (None,):
            listed = self._llmservice_metadata(namespace)
            for item in listed.get("items") or []:
                meta = item["metadata"]
                found[(meta["namespace"], meta["name"])] = str(meta.get("resourceVersion", ""))
            list_version = max(
                list_version, str(listed.get("metadata", {}).get("resourceVersion", "")),
                key=version_number,
            )  # fmt: skip
        return found, list_version

    def _llmservice_metadata(self, namespace: str | None) -> dict[str, Any]:
        """A LIST of LLMServices answered with each one's metadata only."""
        response = self._resource(API_VERSION, KIND).get(
            namespace=namespace,
            serialize=False,
            header_params={"Accept": PARTIAL_METADATA_LIST},
        )
        listed: dict[str, Any] = json.loads(response.data)
        return listed


def _plain(_client: Any, data: dict[str, Any]) -> dict[str, Any]:
    """The dynamic client's answer as the JSON dict it is. Its default ResourceInstance
    wraps every nested field in an object, then to_dict() unwraps them again: most of a
    status write's CPU at a thousand services."""
    return data


def version_number(version: str) -> int:
    """A resourceVersion's order (-1: not a number). They are opaque, but etcd's are
    increasing integers in practice."""
    return int(version) if version.isdigit() else -1


def _digest(obj: dict[str, Any]) -> str:
    return hashlib.sha256(
        json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def served_kind(resource_list: dict[str, Any], kind: str) -> bool:
    """Whether an APIResourceList (a group version's discovery document) has ``kind`` as a
    resource of its own (not a subresource such as ``deployments/scale``)."""
    return any(
        r.get("kind") == kind and "/" not in str(r.get("name", ""))
        for r in resource_list.get("resources") or []
    )


def _marker(obj: dict[str, Any]) -> int:
    """generation, or resourceVersion for kinds without one (a Service): both grow."""
    meta = obj.get("metadata") or {}
    value = meta.get("generation") or meta.get("resourceVersion") or 0
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _owned_by(obj: dict[str, Any], service_name: str) -> bool:
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") == KIND and ref.get("name") == service_name:
            return True
    return False


def _event_body(
    obj: dict[str, Any], type_: str, reason: str, message: str, at: datetime
) -> dict[str, Any]:
    meta = obj["metadata"]
    now = to_rfc3339(at)
    return {
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion") or API_VERSION,
            "kind": obj.get("kind") or KIND,
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
