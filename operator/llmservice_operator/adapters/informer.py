"""Watch-fed caches of the objects the operator owns (client-go's reflector and indexer, small).

One :class:`Informer` per kind (and per watched namespace, or the whole cluster): it lists the
objects that carry the ``llmservice.dev/service`` label, then watches from the list's
resourceVersion, keeping a store and an index by (namespace, service). Every change calls
``on_change`` with the object, so the service it belongs to is reconciled. A watch the server
ends is resumed from the last version it sent (bookmarks keep that fresh); one that expires
(410 Gone) or breaks is listed again, and what changed meanwhile is told. A kind the cluster does not serve (KEDA or the
Gateway API not installed, or their CRD deleted) is *missing*: its store is empty and it is
looked for again every ``rediscover_s``, so installing it later needs no restart.

Objects are stored without ``metadata.managedFields`` (most of an object's size, never read).
A reconcile reads the stores: in steady state it makes no LIST.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import urllib3
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

__all__ = ["WATCH_REQUEST_TIMEOUT", "Informer", "InformerSet", "Kind", "RawWatcher"]

log = logging.getLogger(__name__)

Key = tuple[str, str]
#: Resolves a kind to the dynamic client's resource; raises ResourceNotFoundError when the
#: cluster does not serve it. ``forget`` drops what discovery remembered about it.
Resolver = Callable[[str, str], Any]
_WATCH_TIMEOUT_S = 300
#: A watch's own (connect, read) timeouts, instead of the ApiClient's default for a call
#: (adapters/kube.py): the stream can be quiet for minutes (a kind nothing changes, between
#: bookmarks). A read waits out the server's end of the watch and 30 s more, as kopf's does.
WATCH_REQUEST_TIMEOUT = (10.0, _WATCH_TIMEOUT_S + 30.0)
_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError)


@dataclass(frozen=True)
class Kind:
    api_version: str
    kind: str


@dataclass
class Informer:
    """The objects of one kind (in one namespace, or all) labelled with ``label``."""

    kind: Kind
    namespace: str | None
    label: str
    resolve: Resolver
    forget: Callable[[str, str], None]
    dynamic: Any
    on_change: Callable[[dict[str, Any]], None]
    rediscover_s: float = 30.0
    #: Called when a missing kind is served again: every service that wants one of its kind
    #: must be reconciled, and none of them has an object of it to be woken by.
    on_found: Callable[[], None] | None = None
    store: dict[Key, dict[str, Any]] = field(default_factory=dict)
    by_service: dict[Key, set[str]] = field(default_factory=dict)
    missing: bool = False
    synced: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ------------------------------------------------------------------ reading
    def owned_by(self, namespace: str, service: str) -> list[dict[str, Any]]:
        with self._lock:
            names = sorted(self.by_service.get((namespace, service), ()))
            return [self.store[(namespace, n)] for n in names if (namespace, n) in self.store]

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self.store.get((namespace, name))

    # ------------------------------------------------------------------ the loop
    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                resource = self.resolve(self.kind.api_version, self.kind.kind)
            except ResourceNotFoundError:
                self._set_missing()
                stop.wait(self.rediscover_s)
                self.forget(self.kind.api_version, self.kind.kind)
                continue
            except _ERRORS as err:  # discovery itself failed: the API server is away
                log.warning("%s discovery: %s", self.kind.kind, err)
                stop.wait(1.0)
                continue
            try:
                version = self._list(resource)
                while not stop.is_set():  # a watch the server ends is resumed where it was
                    version = self._watch(resource, version, stop)
            except NotFoundError:  # served before, not now (its CRD was deleted)
                self.forget(self.kind.api_version, self.kind.kind)
                self._set_missing()
                stop.wait(self.rediscover_s)
            except ApiException as err:
                if err.status != 410:  # 410: the watch's version expired, list again
                    log.warning("%s watch: %s %s", self.kind.kind, err.status, err.reason)
                    stop.wait(1.0)
            except _ERRORS as err:
                log.warning("%s watch: %s; listing again", self.kind.kind, err)
                stop.wait(1.0)
            except Exception:  # a cache that stops is worse than one that retries
                log.exception("%s watch failed; listing again", self.kind.kind)
                stop.wait(1.0)

    def _list(self, resource: Any) -> str:
        response = resource.get(
            namespace=self.namespace, label_selector=self.label, serialize=False
        )
        listed = json.loads(cast(Any, response).data)
        fresh = {}
        for item in listed.get("items") or []:
            _strip(item)
            # A list's items carry no kind; the watch's do: make them alike.
            item.setdefault("apiVersion", self.kind.api_version)
            item.setdefault("kind", self.kind.kind)
            meta = item["metadata"]
            fresh[(meta.get("namespace", ""), meta["name"])] = item
        with self._lock:
            old = self.store
            found_again = self.missing
            self.store = fresh
            self.by_service = {}
            for key, item in fresh.items():
                self._index(key, item)
            self.missing = False
        self.synced.set()
        # What changed while we were not watching (and everything, the first time).
        for key in old.keys() - fresh.keys():
            self.on_change(old[key])
        for key, item in fresh.items():
            before = old.get(key)
            if before is None or _version(before) != _version(item):
                self.on_change(item)
        if found_again and self.on_found is not None:
            log.info("%s is served again", self.kind.kind)
            self.on_found()
        return str(listed.get("metadata", {}).get("resourceVersion", ""))

    def _watch(self, resource: Any, version: str, stop: threading.Event) -> str:
        """Watch from ``version`` until the server ends the watch; the last version seen."""
        from kubernetes import watch

        watcher = watch.Watch()  # type: ignore[no-untyped-call]
        stream = self.dynamic.watch(
            resource,
            namespace=self.namespace,
            label_selector=self.label,
            resource_version=version,
            timeout=_WATCH_TIMEOUT_S,
            watcher=watcher,
            allow_watch_bookmarks=True,
        )
        for event in stream:
            if stop.is_set():
                watcher.stop()  # type: ignore[no-untyped-call]
                break
            kind, obj = event.get("type"), event.get("raw_object")
            if kind == "ERROR":
                code = (obj or {}).get("code")
                raise ApiException(status=code, reason=(obj or {}).get("message"))
            if isinstance(obj, dict):
                version = _version(obj) or version
            if kind not in ("ADDED", "MODIFIED", "DELETED") or not isinstance(obj, dict):
                continue  # BOOKMARK: only its version
            _strip(obj)
            meta = obj["metadata"]
            key = (meta.get("namespace", ""), meta["name"])
            with self._lock:
                self._unindex(key)
                if kind == "DELETED":
                    self.store.pop(key, None)
                else:
                    self.store[key] = obj
                    self._index(key, obj)
            self.on_change(obj)
        return version

    def _set_missing(self) -> None:
        with self._lock:
            gone = list(self.store.values())
            self.store, self.by_service, self.missing = {}, {}, True
        self.synced.set()
        for obj in gone:
            self.on_change(obj)

    def _index(self, key: Key, obj: dict[str, Any]) -> None:
        service = (obj["metadata"].get("labels") or {}).get(self.label)
        if service:
            self.by_service.setdefault((key[0], service), set()).add(key[1])

    def _unindex(self, key: Key) -> None:
        old = self.store.get(key)
        if old is None:
            return
        service = (old["metadata"].get("labels") or {}).get(self.label)
        names = self.by_service.get((key[0], service or ""))
        if names is not None:
            names.discard(key[1])
            if not names:
                self.by_service.pop((key[0], service or ""), None)


class RawWatcher:
    """The dynamic client's ``watch``, less its wrapping of every event's object in a
    ResourceInstance: a recursive copy, made for every event, that the informer never reads
    (it keeps ``raw_object``). Its request has WATCH_REQUEST_TIMEOUT."""

    def watch(self, resource: Any, **kwargs: Any) -> Any:
        from kubernetes import watch

        watcher = kwargs.pop("watcher", None) or watch.Watch()  # type: ignore[no-untyped-call]
        return watcher.stream(
            resource.get,
            namespace=kwargs.get("namespace"),
            label_selector=kwargs.get("label_selector"),
            resource_version=kwargs.get("resource_version"),
            serialize=False,
            timeout_seconds=kwargs.get("timeout"),
            allow_watch_bookmarks=kwargs.get("allow_watch_bookmarks"),
            _request_timeout=WATCH_REQUEST_TIMEOUT,
        )


@dataclass
class InformerSet:
    """The informers of every owned kind and pods, over the watched namespaces."""

    informers: dict[Kind, list[Informer]]
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for kind, informers in self.informers.items():
            for informer in informers:
                thread = threading.Thread(
                    target=informer.run,
                    args=(self.stop,),
                    name=f"watch {kind.kind} {informer.namespace or '*'}",
                    daemon=True,
                )
                thread.start()
                self.threads.append(thread)

    def wait_synced(self, timeout_s: float) -> bool:
        return all(
            informer.synced.wait(timeout_s)
            for informers in self.informers.values()
            for informer in informers
        )

    def synced(self) -> bool:
        return all(i.synced.is_set() for infs in self.informers.values() for i in infs)

    def _for(self, kind: Kind, namespace: str) -> Informer | None:
        for informer in self.informers.get(kind, ()):
            if informer.namespace in (None, namespace):
                return informer
        return None

    def owned_by(self, kind: Kind, namespace: str, service: str) -> list[dict[str, Any]] | None:
        """The service's objects of ``kind``; None when the cluster does not serve the kind."""
        informer = self._for(kind, namespace)
        if informer is None or informer.missing:
            return None
        return informer.owned_by(namespace, service)

    def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        informer = self._for(kind, namespace)
        return None if informer is None else informer.get(namespace, name)


def _strip(obj: dict[str, Any]) -> None:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)


def _version(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))
