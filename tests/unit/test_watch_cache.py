"""The watch-fed caches (adapters/informer.py) and the apply that writes only on change
(adapters/kube.py AppliedLedger), against fake list/watch endpoints."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

from llmservice_operator.adapters.informer import Informer, InformerSet, Kind, RawWatcher
from llmservice_operator.adapters.kube import AppliedLedger, KubeAdapter, served_kind

DEPLOYMENT = Kind("apps/v1", "Deployment")
LABEL = "llmservice.dev/service"


def obj(name: str, rv: int, service: str = "chat", namespace: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": str(rv),
            "generation": 1,
            "labels": {LABEL: service},
            "managedFields": [{"manager": "x"}],
        },
    }


@dataclass
class Response:
    data: bytes


@dataclass
class FakeApi:
    """A list, then scripted watch streams: each a list of events or an exception to raise."""

    items: list[dict[str, Any]]
    streams: list[list[dict[str, Any]] | Exception]
    stop: threading.Event
    lists: int = 0
    watched_from: list[str] = field(default_factory=list)

    def get(self, namespace: Any, label_selector: str, serialize: bool) -> Response:
        self.lists += 1
        listed = {"metadata": {"resourceVersion": str(10 * self.lists)}, "items": self.items}
        return Response(json.dumps(listed).encode())

    def watch(self, resource: Any, resource_version: str, **_: Any) -> Iterator[dict[str, Any]]:
        self.watched_from.append(resource_version)
        if not self.streams:
            self.stop.set()
            return iter(())
        stream = self.streams.pop(0)
        if isinstance(stream, Exception):
            raise stream
        return iter(stream)


def informer(
    api: FakeApi, changes: list[str], resolve: Any = None, found: list[int] | None = None
) -> Informer:
    return Informer(
        DEPLOYMENT,
        None,
        LABEL,
        resolve or (lambda _v, _k: api),
        lambda _v, _k: None,
        api,
        lambda o: changes.append(o["metadata"]["name"]),
        rediscover_s=0.01,
        on_found=None if found is None else lambda: found.append(1),
    )


def test_lists_then_watches_keeps_the_store_and_index_and_tells_each_change() -> None:
    stop = threading.Event()
    events = [
        {"type": "ADDED", "raw_object": obj("chat-b", 11)},
        {"type": "MODIFIED", "raw_object": obj("chat-a", 12)},
        {"type": "BOOKMARK", "raw_object": {"metadata": {"resourceVersion": "13"}}},
        {"type": "ADDED", "raw_object": obj("other-a", 14, service="other")},
        {"type": "DELETED", "raw_object": obj("chat-b", 15)},
    ]
    api = FakeApi([obj("chat-a", 5)], [events], stop)
    changes: list[str] = []
    found: list[int] = []
    cache = informer(api, changes, found=found)
    cache.run(stop)
    assert cache.synced.is_set() and not cache.missing and not found
    assert api.watched_from[0] == "10"  # watched from the list's resourceVersion
    assert [o["metadata"]["name"] for o in cache.owned_by("ml", "chat")] == ["chat-a"]
    assert cache.owned_by("ml", "chat")[0]["metadata"]["resourceVersion"] == "12"
    assert [o["metadata"]["name"] for o in cache.owned_by("ml", "other")] == ["other-a"]
    assert "managedFields" not in cache.get("ml", "chat-a")["metadata"]  # type: ignore[index]
    # the listing, then every event but the bookmark; and the final re-list
    assert changes[:5] == ["chat-a", "chat-b", "chat-a", "other-a", "chat-b"]


def test_an_expired_watch_is_listed_again_and_what_changed_meanwhile_is_told() -> None:
    stop = threading.Event()
    gone = ApiException(status=410, reason="Gone")
    api = FakeApi([obj("chat-a", 5)], [gone], stop)
    changes: list[str] = []
    cache = informer(api, changes)
    api_items_after = [obj("chat-a", 20)]

    def get(namespace: Any, label_selector: str, serialize: bool) -> Response:
        api.lists += 1
        items = [obj("chat-a", 5)] if api.lists == 1 else api_items_after
        listed = {"metadata": {"resourceVersion": str(10 * api.lists)}, "items": items}
        return Response(json.dumps(listed).encode())

    api.get = get  # type: ignore[method-assign]
    cache.run(stop)
    assert api.lists == 2
    assert changes == ["chat-a", "chat-a"]  # listed, then changed while not watched
    assert cache.get("ml", "chat-a")["metadata"]["resourceVersion"] == "20"  # type: ignore[index]


def test_a_kind_the_cluster_does_not_serve_is_missing_and_looked_for_again() -> None:
    stop = threading.Event()
    tries: list[int] = []
    api = FakeApi([obj("chat-a", 5)], [], stop)

    def resolve(_v: str, _k: str) -> Any:
        tries.append(1)
        if len(tries) < 3:
            raise ResourceNotFoundError("not served")
        return api

    found: list[int] = []
    cache = informer(api, [], resolve, found)
    cache.run(stop)
    assert len(tries) == 3 and cache.synced.is_set()
    assert not cache.missing  # installed later: found without a restart
    # ...and said so once: the services that want the kind have nothing of it to wake them
    assert found == [1]
    assert [o["metadata"]["name"] for o in cache.owned_by("ml", "chat")] == ["chat-a"]
    informers = InformerSet({DEPLOYMENT: [cache]})
    assert informers.owned_by(DEPLOYMENT, "ml", "chat") is not None
    cache.missing = True
    assert informers.owned_by(DEPLOYMENT, "ml", "chat") is None


def _applied(rv: int, generation: int) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": str(rv), "generation": generation}}


def test_the_ledger_applies_only_what_changed_or_was_changed_by_someone() -> None:
    ledger = AppliedLedger()
    key = ("Deployment", "ml", "chat")
    desired = {"kind": "Deployment", "spec": {"replicas": 1}}
    assert ledger.needed(key, desired, None)  # never applied
    ledger.record(key, desired, _applied(10, 3))
    assert not ledger.needed(key, desired, _applied(10, 3))  # the cache caught up
    assert not ledger.needed(key, desired, _applied(9, 2))  # the cache still lags our write
    assert not ledger.needed(key, desired, _applied(12, 3))  # only its status moved
    assert ledger.needed(key, desired, _applied(13, 4))  # someone edited its spec
    assert ledger.needed(key, desired, None)  # someone deleted it
    assert ledger.needed(key, {**desired, "spec": {"replicas": 2}}, _applied(10, 3))
    ledger.moved(key, _applied(14, 4))  # our autoscaler's replicas write
    assert not ledger.needed(key, desired, _applied(14, 4))
    ledger.forget(key)
    assert ledger.needed(key, desired, _applied(14, 4))


def test_a_kind_without_generation_is_followed_by_resource_version() -> None:
    ledger = AppliedLedger()
    key = ("Service", "ml", "chat")
    desired = {"kind": "Service", "spec": {"selector": {"a": "b"}}}
    ledger.record(key, desired, {"metadata": {"resourceVersion": "30"}})
    assert not ledger.needed(key, desired, {"metadata": {"resourceVersion": "30"}})
    assert ledger.needed(key, desired, {"metadata": {"resourceVersion": "31"}})


class _Stream:
    """A watch response: newline-delimited JSON events, in one chunk."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self._data = b"".join(json.dumps(e).encode() + b"\n" for e in events)

    def stream(self, amt: Any = None, decode_content: Any = None) -> Iterator[bytes]:
        yield self._data

    def close(self) -> None: ...

    def release_conn(self) -> None: ...


def test_the_raw_watcher_streams_plain_dicts_from_the_resources_list_call() -> None:
    calls: list[dict[str, Any]] = []

    class Resource:
        def get(self, **kwargs: Any) -> _Stream:
            calls.append(kwargs)
            return _Stream([{"type": "ADDED", "object": obj("chat-a", 7)}])

    [event] = list(RawWatcher().watch(Resource(), namespace="ml", label_selector=LABEL,
                                      resource_version="6", timeout=30,
                                      allow_watch_bookmarks=True))  # fmt: skip
    assert event["type"] == "ADDED"
    assert type(event["raw_object"]) is dict and event["raw_object"] == obj("chat-a", 7)
    assert type(event["object"]) is dict  # not a ResourceInstance copy
    [call] = calls
    assert call["watch"] is True and call["serialize"] is False
    assert (call["namespace"], call["label_selector"], call["resource_version"]) == (
        "ml",
        LABEL,
        "6",
    )
    assert call["timeout_seconds"] == 30 and call["allow_watch_bookmarks"] is True


def test_a_kind_is_served_when_its_group_versions_document_lists_it() -> None:
    """The discovery document of apps/v1, as the API server serves it (abridged)."""
    apps_v1 = {
        "kind": "APIResourceList",
        "groupVersion": "apps/v1",
        "resources": [
            {"name": "deployments", "kind": "Deployment", "namespaced": True},
            {"name": "deployments/scale", "kind": "Scale", "group": "autoscaling"},
            {"name": "deployments/status", "kind": "Deployment"},
        ],
    }
    assert served_kind(apps_v1, "Deployment")
    assert not served_kind(apps_v1, "Scale")  # a subresource only
    assert not served_kind(apps_v1, "ScaledObject")
    assert not served_kind({"resources": None}, "Deployment")


class FakeDiscovery:
    """The dynamic client as _resource uses it: one group version's document per request,
    and its own (whole) discovery behind ``resources.get``."""

    def __init__(self) -> None:
        self.documents: dict[str, dict[str, Any]] = {}
        self.requests: list[str] = []
        self.whole: list[tuple[str, str]] = []
        self.resources = self

    def request(self, method: str, path: str, serialize: bool = True) -> Any:
        self.requests.append(path)
        if path not in self.documents:
            raise NotFoundError(ApiException(status=404, reason="Not Found"))  # type: ignore[no-untyped-call]
        return SimpleNamespace(data=json.dumps(self.documents[path]).encode())

    def get(self, api_version: str, kind: str) -> str:
        self.whole.append((api_version, kind))
        return f"resource {api_version} {kind}"


def test_a_missing_kind_is_asked_of_its_group_version_alone_and_found_once_installed() -> None:
    discovery = FakeDiscovery()
    adapter = KubeAdapter.__new__(KubeAdapter)
    adapter._dynamic = discovery  # type: ignore[assignment]
    adapter._discovery_lock = threading.Lock()
    adapter._resources = {}
    for _ in range(2):  # KEDA not installed: two looks, 30 s apart
        with pytest.raises(ResourceNotFoundError):
            adapter._resource("keda.sh/v1alpha1", "ScaledObject")
        adapter._forget("keda.sh/v1alpha1", "ScaledObject")
    assert discovery.requests == ["/apis/keda.sh/v1alpha1"] * 2
    assert discovery.whole == []  # the whole discovery was never fetched for it
    discovery.documents["/apis/keda.sh/v1alpha1"] = {
        "resources": [{"name": "scaledobjects", "kind": "ScaledObject"}]
    }
    assert adapter._resource("keda.sh/v1alpha1", "ScaledObject").endswith("ScaledObject")
    assert adapter._resource("keda.sh/v1alpha1", "ScaledObject")  # remembered: no request
    assert discovery.requests == ["/apis/keda.sh/v1alpha1"] * 3
    discovery.documents["/api/v1"] = {"resources": [{"name": "pods", "kind": "Pod"}]}
    assert adapter._resource("v1", "Pod")
    assert discovery.requests[-1] == "/api/v1"
    with pytest.raises(ResourceNotFoundError):  # a kind its group version does not list
        adapter._resource("v1", "Widget")
