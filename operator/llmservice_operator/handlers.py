"""Thin kopf handlers: every watch event only enqueues a key; workers run the one reconcile.

Why not `@kopf.daemon`/`@kopf.timer`: they put finalizers on every object, so deleting an
LLMService hangs while the operator is down. A work queue keyed by namespace/name (the
controller-runtime model) needs no finalizers: owner references and the garbage collector
clean up, and a periodic resync makes the loop level-based.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf

from .adapters.kube import KubeAdapter
from .adapters.metrics import OperatorMetrics
from .api import GROUP, PLURAL, VERSION
from .events import Event
from .reconcile import Reconciler
from .render.labels import MANAGED_BY, SERVICE
from .settings import OperatorSettings

__all__ = ["OperatorState", "register"]

log = logging.getLogger(__name__)

Key = tuple[str, str]


@dataclass
class OperatorState:
    """In-memory only: everything that must survive a restart lives in the cluster."""

    settings: OperatorSettings
    metrics: OperatorMetrics
    bodies: dict[Key, dict[str, Any]] = field(default_factory=dict)
    queue: asyncio.Queue[Key] | None = None
    queued: set[Key] = field(default_factory=set)
    #: Keys a worker is reconciling now, and those asked for again meanwhile: one key is never
    #: reconciled by two workers at once (both would act on the same status: double smoke
    #: tests, measurements and Events); it is queued again once its reconcile is done.
    processing: set[Key] = field(default_factory=set)
    dirty: set[Key] = field(default_factory=set)
    reconciler: Reconciler | None = None
    kube: KubeAdapter | None = None
    #: Called every few seconds from the event loop: the leader's liveness (adapters/health.py).
    heartbeat: Callable[[], None] | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def enqueue(self, key: Key) -> None:
        if self.queue is None or key in self.queued:
            return
        if key in self.processing:
            self.dirty.add(key)
            return
        self.queued.add(key)
        self.queue.put_nowait(key)


def _post_events(kube: KubeAdapter, body: dict[str, Any], events: list[Event]) -> None:
    for event in events:
        kube.post_event(body, event.type, event.reason, event.message)


async def _worker(state: OperatorState) -> None:
    assert state.queue is not None and state.reconciler is not None and state.kube is not None
    while True:
        key = await state.queue.get()
        state.queued.discard(key)
        state.processing.add(key)
        try:
            await _process(state, key)
        finally:
            state.processing.discard(key)
            if key in state.dirty:
                state.dirty.discard(key)
                state.enqueue(key)


async def _process(state: OperatorState, key: Key) -> None:
    assert state.reconciler is not None and state.kube is not None
    body = state.bodies.get(key)
    if body is None:
        return
    if body.get("metadata", {}).get("deletionTimestamp"):
        return
    try:
        result = await asyncio.to_thread(state.reconciler.reconcile, body)
        await asyncio.to_thread(_post_events, state.kube, body, result.events)
        if result.updated_body is not None and _newer(result.updated_body, state.bodies.get(key)):
            state.bodies[key] = result.updated_body
        if result.requeue_at is not None:
            delay = (result.requeue_at - datetime.now(UTC)).total_seconds()
            asyncio.get_running_loop().call_later(max(0.0, delay), state.enqueue, key)
    except Exception as err:  # noqa: BLE001 - one bad object must not stop the worker
        log.warning("reconcile of %s/%s failed, retrying: %s", key[0], key[1], err)
        loop = asyncio.get_running_loop()
        loop.call_later(min(30.0, state.settings.reconcile_interval_seconds), state.enqueue, key)


def remember(state: OperatorState, key: Key, body: dict[str, Any]) -> None:
    """Cache a watched body, unless our own status write already gave a newer one (the watch
    can deliver an older version after it: reconciling that stale status would redo steps)."""
    cached = state.bodies.get(key)
    if cached is None or not _newer(cached, body):
        state.bodies[key] = body


def _newer(candidate: dict[str, Any], cached: dict[str, Any] | None) -> bool:
    """resourceVersions are opaque, but etcd's are increasing integers in practice."""
    if cached is None:
        return False  # deleted meanwhile: keep it deleted
    new = candidate.get("metadata", {}).get("resourceVersion", "")
    old = cached.get("metadata", {}).get("resourceVersion", "")
    if new.isdigit() and old.isdigit():
        return int(new) > int(old)
    return False


async def _heartbeat(beat: Callable[[], None], period_s: float = 5.0) -> None:
    while True:
        beat()
        await asyncio.sleep(period_s)


async def _resync(state: OperatorState) -> None:
    while True:
        await asyncio.sleep(state.settings.reconcile_interval_seconds)
        state.metrics.managed_services.set(len(state.bodies))
        for key in list(state.bodies):
            state.enqueue(key)


def register(registry: kopf.OperatorRegistry, state: OperatorState) -> None:
    """Attach the handlers to a kopf registry (one per operator process)."""

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # A private registry has none of kopf's default login handlers: use the same
        # in-cluster / kubeconfig loading as the Kubernetes client.
        info: kopf.ConnectionInfo | None = kopf.login_via_client(**kwargs)
        return info

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        if state.kube is None or state.reconciler is None:  # built by `llmservice run`
            raise kopf.PermanentError("the operator state has no Kubernetes adapter")
        state.queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        state.tasks = [
            loop.create_task(_worker(state)) for _worker_index in range(state.settings.workers)
        ]
        state.tasks.append(loop.create_task(_resync(state)))
        if state.heartbeat is not None:
            state.tasks.append(loop.create_task(_heartbeat(state.heartbeat)))

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        # Ours, not kopf's: left running, kopf would wait 5 s for them as "hung" tasks and the
        # standby would take over that much later.
        for task in state.tasks:
            task.cancel()
        await asyncio.gather(*state.tasks, return_exceptions=True)
        state.tasks.clear()

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    def llmservice_event(type: str, body: kopf.Body, **_: Any) -> None:
        meta = body.get("metadata", {})
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if type == "DELETED":
            state.bodies.pop(key, None)
            return
        remember(state, key, dict(body))
        state.enqueue(key)

    def _owner_event(body: kopf.Body, **_: Any) -> None:
        meta = body.get("metadata", {})
        service = (meta.get("labels") or {}).get(SERVICE)
        if service:
            state.enqueue((meta.get("namespace", ""), service))

    labels = {"app.kubernetes.io/managed-by": MANAGED_BY}
    kopf.on.event("apps", "v1", "deployments", labels=labels, registry=registry)(_owner_event)
    kopf.on.event("v1", "services", labels=labels, registry=registry)(_owner_event)
    kopf.on.event("v1", "pods", labels={SERVICE: kopf.PRESENT}, registry=registry)(_owner_event)
