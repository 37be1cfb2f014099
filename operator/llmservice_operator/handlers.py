"""Thin kopf handlers: every watch event only enqueues a key; workers run the one reconcile.

Why not `@kopf.daemon`/`@kopf.timer`: they put finalizers on every object, so deleting an
LLMService hangs while the operator is down. A work queue keyed by namespace/name (the
controller-runtime model) needs no finalizers: owner references and the garbage collector
clean up.

What wakes a service:
- its LLMService changed (kopf's watch), unless the change is our own status write;
- one of its objects or pods changed (the adapter's watch caches, adapters/informer.py);
- its next due time: an autoscaling evaluation, an analysis measurement, a pause's end, a
  deadline (each reconcile says when; one timer per service, the earliest wins);
- a background job it waits for finished (adapters/background.py);
- the end of a wave of new services, when its first status was held back (arrivals.py);
- an error: retried with per-service exponential backoff, 5 ms doubling to about 1,000 s
  (controller-runtime's default), jittered, and not before a 429's Retry-After (backoff.py);
  reset by the next success;
- the resync (`reconcileIntervalSeconds`, minutes): a safety net only, for a service that
  nothing else reconciled in that long.

What forgets one: its DELETED event; or, for a deletion kopf never told (it lists again after
its watch expires, and tells only what it finds), a 404 that a LIST of them confirms (one
for every 404 met meanwhile: confirm_suspects), and the look that follows each listing
(forget_vanished). A service whose namespace is being deleted is not retried: kopf stops
watching a namespace once it is terminating (its DELETED events never come), so the look
is repeated until the service is gone.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from .adapters.background import BackgroundIO
from .adapters.event_poster import EventPoster
from .adapters.kube import CacheNotSynced, KubeAdapter, version_number
from .adapters.metrics import OperatorMetrics
from .api import GROUP, PLURAL, VERSION
from .arrivals import Wave
from .backoff import retry
from .gc_pauses import COUNT_EVERY, SETTLE_INTERVAL_S, THAW_EVERY, measure_pauses, settle
from .laps import Laps
from .reconcile import Reconciler, namespace_terminating
from .render.labels import SERVICE
from .settings import OperatorSettings
from .workqueue import ROUTINE, WorkQueue, priority_of

__all__ = [
    "OperatorState",
    "confirm_suspects",
    "forget_vanished",
    "register",
]

log = logging.getLogger(__name__)

Key = tuple[str, str]
#: A reconcile at least this long is logged, with its time in the queue.
SLOW_RECONCILE_S = 0.5
#: How long start-up waits for the watch caches' first lists before reconciling anyway
#: (a reconcile then fails with CacheNotSynced and is retried with backoff).
SYNC_TIMEOUT_S = 60.0
#: After kopf lists the LLMServices, how long before the look for those deleted unseen (the
#: listing's events, one per object, are handled by then).
SWEEP_AFTER_LIST_S = 30.0
#: How often per resync interval the resync looks for services not reconciled in one.
RESYNC_LOOKS = 10
#: After a reconcile meets a 404, how long the one LIST that confirms it waits for others.
CONFIRM_AFTER_S = 0.5


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf's diff-base, for handlers that react to changes: we have only an event handler,
    so none is kept. The default one deep-copies every event's whole body (its status too) to
    find a diff that nothing reads: a tenth of the operator's CPU at rest at 1,000 services."""

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None
    ) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


@dataclass
class OperatorState:
    """In-memory only: everything that must survive a restart lives in the cluster."""

    settings: OperatorSettings
    metrics: OperatorMetrics
    bodies: dict[Key, dict[str, Any]] = field(default_factory=dict)
    queue: WorkQueue | None = None
    #: Keys a worker is reconciling now, and those asked for again meanwhile: one key is never
    #: reconciled by two workers at once (both would act on the same status: double smoke
    #: tests, measurements and Events); it is queued again once its reconcile is done.
    processing: set[Key] = field(default_factory=set)
    dirty: set[Key] = field(default_factory=set)
    reconciler: Reconciler | None = None
    kube: KubeAdapter | None = None
    background: BackgroundIO | None = None
    #: Posts the reconciles' Events off the workers (made with the first ones).
    events: EventPoster | None = None
    #: Called every few seconds from the event loop: the leader's liveness (adapters/health.py).
    heartbeat: Callable[[], None] | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    failures: dict[Key, int] = field(default_factory=dict)
    #: The backoff's jitter, drawn from [0, 1) (tests give a seeded random.Random's).
    jitter: Callable[[], float] = field(default_factory=lambda: random.Random().random)
    #: Keys an API server asked to wait (Retry-After): not reconciled before this loop time.
    not_before: dict[Key, float] = field(default_factory=dict)
    #: One timer per key: (when, handle); a later due time never replaces an earlier one.
    timers: dict[Key, tuple[float, asyncio.TimerHandle]] = field(default_factory=dict)
    loop: asyncio.AbstractEventLoop | None = None
    #: The look for services deleted unseen, due SWEEP_AFTER_LIST_S after kopf listed them.
    sweep: asyncio.Task[None] | None = None
    #: Keys whose namespace is being deleted: the sweep looks until they are gone.
    terminating: set[Key] = field(default_factory=set)
    #: Keys whose reconcile met a 404, with its error, until confirm_suspects looks.
    suspects: dict[Key, Exception] = field(default_factory=dict)
    confirming: asyncio.Task[None] | None = None
    #: Keys from other threads, in order, not yet enqueued on the loop (enqueue_threadsafe).
    handed_over: dict[Key, None] = field(default_factory=dict)
    handed_over_lock: threading.Lock = field(default_factory=threading.Lock)
    #: New services arriving at once (arrivals.py); the reconciler reads `wave.active`.
    wave: Wave = field(default_factory=Wave)
    #: Services whose first status was held back during a wave, with the generation acted on:
    #: routine work now (their objects are applied), reconciled again when the wave has passed.
    held: dict[Key, int | None] = field(default_factory=dict)
    release: asyncio.TimerHandle | None = None
    #: When each service was last reconciled (time.monotonic): the resync skips the recent.
    reconciled_at: dict[Key, float] = field(default_factory=dict)
    #: The fence: whether this replica holds the Lease now (adapters/leader.py).
    leading: Callable[[], bool] = field(default=lambda: True)

    def enqueue(self, key: Key, priority: int | None = None) -> None:
        if self.queue is None:
            return
        if key in self.processing:
            self.dirty.add(key)
            return
        body = self.bodies.get(key)
        if priority is None:
            held = key in self.held and self.held[key] == _generation(body)
            priority = ROUTINE if held else priority_of(body)
        self.queue.put(key, priority)

    def hold(self, key: Key, generation: int | None) -> None:
        """``key``'s first status waits for the wave to pass (then it is reconciled again)."""
        self.held[key] = generation
        if self.release is None:
            self._release_when_the_wave_ends()

    def _release_when_the_wave_ends(self) -> None:
        loop = asyncio.get_running_loop()
        self.release = loop.call_later(self.wave.remaining_s(), self._release_held)

    def _release_held(self) -> None:
        if self.wave.active():  # more services came meanwhile: the wave goes on
            self._release_when_the_wave_ends()
            return
        self.release = None
        held, self.held = self.held, {}
        for key in held:
            self.enqueue(key, ROUTINE)

    def enqueue_threadsafe(self, key: Key) -> None:
        """From a watch or job thread. Keys handed over between two turns of the event loop
        wake it once: a thousand new services make thousands of pod and Deployment events a
        second, and a wake-up each (a write to the loop's socket, a callback) was 6% of the
        operator's CPU."""
        if self.loop is None:
            return
        with self.handed_over_lock:
            wake = not self.handed_over
            self.handed_over[key] = None
        if wake:
            self.loop.call_soon_threadsafe(self._take_handed_over)

    def _take_handed_over(self) -> None:
        with self.handed_over_lock:
            keys, self.handed_over = self.handed_over, {}
        for key in keys:
            self.enqueue(key)

    def enqueue_all(self) -> None:
        for key in list(self.bodies):
            self.enqueue(key)

    def enqueue_all_threadsafe(self) -> None:
        """From a watch thread: every known service (a kind they may want is served again)."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.enqueue_all)

    def schedule(self, key: Key, delay_s: float) -> None:
        """Reconcile ``key`` in ``delay_s`` (or earlier, if it is already due earlier)."""
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.0, delay_s)
        existing = self.timers.get(key)
        if existing is not None:
            if existing[0] <= when:
                return
            existing[1].cancel()
        self.timers[key] = (when, loop.call_at(when, self._fire, key))

    def _fire(self, key: Key) -> None:
        self.timers.pop(key, None)
        self.enqueue(key)

    def sweep_soon(self) -> None:
        """kopf listed the LLMServices (at start, or again after its watch expired), or a
        service's namespace is being deleted: a little later, forget those no longer there
        (forget_vanished); again every SWEEP_AFTER_LIST_S while a service of a namespace being
        deleted is kept."""
        if self.sweep is not None and not self.sweep.done():
            return

        async def sweep() -> None:
            while True:
                await asyncio.sleep(SWEEP_AFTER_LIST_S)
                await forget_vanished(self)
                self.terminating.intersection_update(self.bodies)
                if not self.terminating:
                    return

        self.sweep = asyncio.get_running_loop().create_task(sweep())

    def suspect(self, key: Key, err: Exception) -> None:
        """``key``'s reconcile met a 404: confirm_suspects soon tells whether it is gone."""
        self.suspects[key] = err
        if self.confirming is None or self.confirming.done():
            self.confirming = asyncio.get_running_loop().create_task(confirm_suspects(self))

    def forget(self, key: Key) -> None:
        self.bodies.pop(key, None)
        self.held.pop(key, None)
        self.reconciled_at.pop(key, None)
        self.terminating.discard(key)
        self.failures.pop(key, None)
        self.not_before.pop(key, None)
        timer = self.timers.pop(key, None)
        if timer is not None:
            timer[1].cancel()
        if self.reconciler is not None:
            self.reconciler.forget(key)


async def _worker(state: OperatorState) -> None:
    assert state.queue is not None and state.reconciler is not None and state.kube is not None
    while True:
        key, waited = await state.queue.get_timed()
        state.metrics.queue_wait.observe(waited)
        state.processing.add(key)
        started = time.monotonic()
        laps: Laps | None = None
        try:
            laps = await _process(state, key)
        finally:
            took = time.monotonic() - started
            if took >= SLOW_RECONCILE_S:
                log.info("%s/%s: reconciled in %.2fs after %.2fs in the queue (%s)", *key, took,
                         waited, laps or "failed")  # fmt: skip
            state.processing.discard(key)
            if key in state.dirty:
                state.dirty.discard(key)
                state.enqueue(key)


async def _process(state: OperatorState, key: Key) -> Laps | None:
    """Reconcile ``key`` once; where its time went (None when it did not run or failed)."""
    assert state.reconciler is not None and state.kube is not None
    body = state.bodies.get(key)
    if body is None:
        return None
    if body.get("metadata", {}).get("deletionTimestamp") or key in state.terminating:
        return None  # going: a namespace being deleted refuses every create (the sweep looks)
    if not state.leading():  # the Lease lapsed: another replica may act (this one exits)
        log.warning("%s/%s: not reconciled: this replica's Lease has lapsed", *key)
        return None
    if _asked_to_wait(state, key):
        return None
    try:
        result = await asyncio.to_thread(state.reconciler.reconcile, body)
    except Exception as err:  # noqa: BLE001 - one bad object must not stop the worker
        if namespace_terminating(err):
            # Retrying would only be refused again, a thousand times over when a namespace of
            # services goes. kopf stops watching a namespace once it is terminating, so the
            # service's DELETED event may never come: the sweep's LIST forgets it.
            log.info("%s/%s: its namespace is being deleted; not retried", *key)
            state.failures.pop(key, None)
            state.terminating.add(key)
            state.sweep_soon()
        elif _not_found(err):
            state.suspect(key, err)  # gone, or one of its objects? One LIST for all such keys
        else:
            _retry_later(state, key, err)
        return None
    state.failures.pop(key, None)
    state.reconciled_at[key] = time.monotonic()
    if result.status_held:
        state.hold(key, _generation(body))
    else:
        state.held.pop(key, None)
    if result.events:
        if state.events is None:
            state.events = EventPoster(state.kube.post_event)
        state.events.post(body, result.events)
    if result.updated_body is not None and _newer(result.updated_body, state.bodies.get(key)):
        state.bodies[key] = result.updated_body
        if _generation(result.updated_body) != _generation(body):
            # A spec change landed while this reconcile ran, and our status write came back
            # with it: its own watch event is now older than the cache, so it enqueues nothing.
            state.enqueue(key)
    if result.requeue_at is not None:
        state.schedule(key, (result.requeue_at - datetime.now(UTC)).total_seconds())
    return result.laps


def remember(state: OperatorState, key: Key, body: dict[str, Any]) -> bool:
    """Cache a watched body, unless our own status write already gave a newer one (the watch
    can deliver an older version after it: reconciling that stale status would redo steps).
    True when the body is news (not the echo of our own write)."""
    cached = state.bodies.get(key)
    if cached is None or _newer(body, cached):
        state.bodies[key] = body
        return True
    return False


def _newer(candidate: dict[str, Any], cached: dict[str, Any] | None) -> bool:
    if cached is None:
        return False  # deleted meanwhile: keep it deleted
    old = version_number(cached.get("metadata", {}).get("resourceVersion", ""))
    return (
        old >= 0 and version_number(candidate.get("metadata", {}).get("resourceVersion", "")) > old
    )


def _generation(body: dict[str, Any] | None) -> int | None:
    generation = ((body or {}).get("metadata") or {}).get("generation")
    return generation if isinstance(generation, int) else None


def _not_found(err: Exception) -> bool:
    """A 404: the namespace, the LLMService or one of its objects is not there."""
    return isinstance(err, ApiException) and err.status == 404


def _retry_later(state: OperatorState, key: Key, err: Exception) -> None:
    """Per-key exponential backoff, jittered; not before a Retry-After the server gave."""
    failures = state.failures.get(key, 0) + 1
    state.failures[key] = failures
    status, retry_after = _asked_wait(err)
    again = retry(failures, state.jitter(), status, retry_after, datetime.now(UTC))
    if again.not_before_s is not None:
        loop = asyncio.get_running_loop()
        state.not_before[key] = loop.time() + again.not_before_s
    level = logging.INFO if isinstance(err, CacheNotSynced) else logging.WARNING
    log.log(level, "reconcile of %s/%s failed (retry %d in %.3gs): %s", *key, failures,
            again.delay_s, err)  # fmt: skip
    state.schedule(key, again.delay_s)


def _asked_wait(err: Exception) -> tuple[int | None, str | None]:
    """An API error's status and Retry-After header (None, None: the server did not answer)."""
    if not isinstance(err, ApiException):
        return None, None
    headers = err.headers or {}
    wait = next((str(v) for k, v in headers.items() if str(k).lower() == "retry-after"), None)
    return err.status, wait


def _asked_to_wait(state: OperatorState, key: Key) -> bool:
    """The API server asked ``key``'s last reconcile to wait, and it is not over: reconciled
    when it is (whatever woke it meanwhile)."""
    until = state.not_before.get(key)
    if until is None:
        return False
    left = until - asyncio.get_running_loop().time()
    if left <= 0:
        del state.not_before[key]
        return False
    state.schedule(key, left)
    return True


async def confirm_suspects(state: OperatorState) -> None:
    """Tell the services whose reconcile met a 404 (their namespace, their LLMService or one
    of their objects is not there) that are gone from those that are not: one metadata LIST
    for every key suspected meanwhile, not one per key (a namespace of a thousand services
    deleted while kopf's watch missed it made a thousand LISTs). The gone are forgotten; the
    rest are retried with backoff."""
    assert state.kube is not None
    while state.suspects:
        await asyncio.sleep(CONFIRM_AFTER_S)
        suspects, state.suspects = state.suspects, {}
        try:
            listed: tuple[dict[Key, str], str] | None = await asyncio.to_thread(
                state.kube.llmservice_versions
            )
        except Exception as list_err:  # noqa: BLE001 - not known to be gone: keep them
            log.warning("could not list the LLMServices: %s", list_err)
            listed = None
        for key, err in suspects.items():
            body = state.bodies.get(key)
            if body is None:
                continue  # forgotten meanwhile (its DELETED event)
            if listed is not None and _gone(key, body, *listed):
                _forget_unseen_deletion(state, key)
            else:
                _retry_later(state, key, err)


def _gone(key: Key, body: dict[str, Any], present: dict[Key, str], listed_at: str) -> bool:
    """Not in a LIST taken after the cached body (a body newer than the list was created, or
    seen, after it was taken)."""
    version = str(body.get("metadata", {}).get("resourceVersion", ""))
    return key not in present and version_number(version) <= version_number(listed_at)


async def forget_vanished(state: OperatorState) -> None:
    """Forget the services deleted while the LLMService watch was being listed again.

    kopf lists again when its watch expires (410 Gone) or breaks, and tells each object it
    finds, never one deleted meanwhile: its cached body would stay, and the operator would
    reconcile a ghost for ever (re-creating objects the garbage collector removes, or failing
    with backoff in a namespace that is gone). One LIST of metadata; a body newer than it is
    kept (created, or seen, after it was taken)."""
    assert state.kube is not None
    try:
        present, listed_at = await asyncio.to_thread(state.kube.llmservice_versions)
    except Exception as err:  # noqa: BLE001 - the next resync tries again
        log.warning("could not list the LLMServices: %s", err)
        return
    for key, body in list(state.bodies.items()):
        if _gone(key, body, present, listed_at):
            _forget_unseen_deletion(state, key)


def _forget_unseen_deletion(state: OperatorState, key: Key) -> None:
    log.info("%s/%s is gone (its deletion was not seen); forgotten", *key)
    state.forget(key)


async def _resync(state: OperatorState, clock: Callable[[], float] = time.monotonic) -> None:
    """The safety net: every service that nothing reconciled for a whole interval (its own
    due times, its objects' changes) is reconciled. Looked for every tenth of an interval, so
    the services due are spread out, not a thousand reconciles at once."""
    interval = state.settings.reconcile_interval_seconds
    while True:
        await asyncio.sleep(interval / RESYNC_LOOKS)
        state.metrics.managed_services.set(len(state.bodies))
        stale = clock() - interval
        for key in list(state.bodies):
            if state.reconciled_at.get(key, -math.inf) <= stale:
                state.reconciled_at[key] = clock()  # asked for: not again before its turn
                state.enqueue(key)


async def _settle_gc(state: OperatorState) -> None:
    """Keep the collector's full walks off the cached objects (gc_pauses)."""
    for round_ in itertools.count(1):
        counted = state.metrics.gc_frozen if round_ % COUNT_EVERY == 1 else None
        settle(counted, thaw=round_ % THAW_EVERY == 0)
        await asyncio.sleep(SETTLE_INTERVAL_S)


async def _heartbeat(beat: Callable[[], None], period_s: float = 5.0) -> None:
    while True:
        beat()
        await asyncio.sleep(period_s)


def _owner_changed(state: OperatorState) -> Callable[[dict[str, Any]], None]:
    """An owned object or pod changed (on a watch thread): reconcile its service."""

    def changed(obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        service = (meta.get("labels") or {}).get(SERVICE)
        if service:
            state.enqueue_threadsafe((meta.get("namespace", ""), service))

    return changed


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
        settings.persistence.diffbase_storage = NoDiffBase()
        if state.kube is None or state.reconciler is None:  # built by `llmservice run`
            raise kopf.PermanentError("the operator state has no Kubernetes adapter")
        state.loop = asyncio.get_running_loop()
        # The reconciles run on the loop's default executor (asyncio.to_thread), which has
        # min(32, cores + 4) threads: on a 2-core node fewer than 8 workers would need.
        state.loop.set_default_executor(
            ThreadPoolExecutor(state.settings.workers + 2, thread_name_prefix="reconcile")
        )
        state.queue = WorkQueue()
        if state.background is not None:
            state.background.set_notify(state.enqueue_threadsafe)
        watches = state.kube.start_watches(_owner_changed(state), state.enqueue_all_threadsafe)
        synced = await asyncio.to_thread(watches.wait_synced, SYNC_TIMEOUT_S)
        if not synced:
            log.warning("the watch caches did not list everything in %.0fs", SYNC_TIMEOUT_S)
        loop = state.loop
        state.tasks = [
            loop.create_task(_worker(state)) for _worker_index in range(state.settings.workers)
        ]
        state.tasks.append(loop.create_task(_resync(state)))
        measure_pauses(state.metrics.gc_pause)
        state.tasks.append(loop.create_task(_settle_gc(state)))
        if state.heartbeat is not None:
            state.tasks.append(loop.create_task(_heartbeat(state.heartbeat)))

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        # Ours, not kopf's: left running, kopf would wait 5 s for them as "hung" tasks and the
        # standby would take over that much later.
        for task in (state.sweep, state.confirming):
            if task is not None:
                state.tasks.append(task)
        for task in state.tasks:
            task.cancel()
        await asyncio.gather(*state.tasks, return_exceptions=True)
        state.tasks.clear()
        if state.kube is not None:
            state.kube.stop_watches()
        if state.background is not None:
            state.background.shutdown()
        if state.events is not None:
            await asyncio.to_thread(state.events.shutdown)

    # async: kopf runs a sync handler on its executor's threads, and the state (the queue, the
    # cached bodies, the timers) belongs to the event loop, not thread-safe.
    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def llmservice_event(type: str, body: kopf.Body, **_: Any) -> None:
        meta = body.get("metadata", {})
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if type == "DELETED":
            state.forget(key)
            return
        if type is None:  # found by a listing, not a watch: was anything deleted unseen?
            state.sweep_soon()
        # kopf watches no terminating namespace: one it tells of is not (or was made again).
        state.terminating.discard(key)
        if type == "ADDED" and key not in state.bodies and not body.get("status"):
            state.wave.arrived()  # a new service, just created
        if remember(state, key, dict(body)):
            state.enqueue(key)
