"""The work queue: one key is never reconciled by two workers at once, and a watch event older
than the operator's own status write does not replace it."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import threading
import time
from datetime import datetime
from typing import Any

import kopf
import pytest
from kubernetes.client.exceptions import ApiException

from llmservice_operator import handlers
from llmservice_operator.adapters.metrics import OperatorMetrics
from llmservice_operator.events import Event
from llmservice_operator.handlers import (
    OperatorState,
    _worker,
    register,
    remember,
)
from llmservice_operator.laps import Laps
from llmservice_operator.reconcile import ReconcileResult
from llmservice_operator.settings import OperatorSettings
from llmservice_operator.workqueue import ROUTINE, SPEC_CHANGED, WorkQueue, priority_of

KEY = ("ml", "chat")


class SlowReconciler:
    """Records how many reconciles of a key overlap; each takes 50 ms."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.calls = 0

    def reconcile(self, body: dict[str, Any]) -> ReconcileResult:
        with self.lock:
            self.running += 1
            self.calls += 1
            self.most = max(self.most, self.running)
        laps = Laps()
        time.sleep(0.05)  # as if waiting on the API server: off the CPU
        laps.lap("apply")
        laps.stop()
        with self.lock:
            self.running -= 1
        return ReconcileResult([], False, 0, 0, None, laps=laps)


class NoEvents:
    def post_event(self, *_: Any) -> None:
        pass


def _state() -> OperatorState:
    # Backoff without its jitter's spread (each delay its full step): the retries' timing is
    # the same every run.
    return OperatorState(
        settings=OperatorSettings(), metrics=OperatorMetrics.create(), jitter=lambda: 0.99
    )


def _body(resource_version: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ml", "name": "chat", "resourceVersion": resource_version}}


def _working_state(reconciler: Any, body: dict[str, Any]) -> OperatorState:
    """A state whose workers reconcile ``body`` (KEY) with ``reconciler``; Events dropped."""
    state = _state()
    state.reconciler = reconciler
    state.kube = NoEvents()  # type: ignore[assignment]
    state.queue = WorkQueue()
    state.bodies[KEY] = body
    return state


def _llmservice_event_handler(state: OperatorState) -> Any:
    """kopf's handler of LLMService events, registered for ``state``."""
    registry = kopf.OperatorRegistry()
    register(registry, state)
    (handler,) = [
        h for h in registry._watching.get_all_handlers() if h.id.endswith("llmservice_event")
    ]
    return handler


def test_a_key_is_reconciled_by_one_worker_at_a_time_and_again_when_asked_meanwhile() -> None:
    async def scenario() -> SlowReconciler:
        reconciler = SlowReconciler()
        state = _working_state(reconciler, _body("1"))
        workers = [asyncio.create_task(_worker(state)) for _ in range(4)]
        state.enqueue(KEY)
        await asyncio.sleep(0.01)  # a worker has it now
        for _ in range(5):  # events while it runs: one more reconcile, after this one
            state.enqueue(KEY)
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.3)
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        assert not state.processing and not state.dirty and not len(state.queue)
        return reconciler

    reconciler = asyncio.run(scenario())
    assert reconciler.most == 1
    assert reconciler.calls == 2


class SizedReconciler:
    """Every reconcile says one Event."""

    def reconcile(self, body: dict[str, Any]) -> ReconcileResult:
        return ReconcileResult([Event("Normal", "Sized", "1x H100")], False, 0, 0, None)


class SlowEvents:
    """An API server that answers Events only once ``release`` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.posted: list[str] = []

    def post_event(self, obj: dict[str, Any], type_: str, reason: str, message: str,
                   at: datetime | None = None) -> None:  # fmt: skip
        self.release.wait(5)
        self.posted.append(reason)


def test_a_worker_does_not_wait_for_the_events_of_its_reconcile() -> None:
    async def scenario() -> tuple[SlowEvents, OperatorState]:
        state = _state()
        state.reconciler = SizedReconciler()  # type: ignore[assignment]
        kube = SlowEvents()
        state.kube = kube  # type: ignore[assignment]
        state.queue = WorkQueue()
        state.bodies[KEY] = _body("1")
        worker = asyncio.create_task(_worker(state))
        state.enqueue(KEY)
        for _ in range(100):
            await asyncio.sleep(0.01)
            if not state.processing and not len(state.queue):
                break
        assert not state.processing, "the worker is still busy with the key"
        assert kube.posted == []  # its Event is still on its way
        kube.release.set()
        assert state.events is not None
        await asyncio.to_thread(state.events.shutdown)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        return kube, state

    kube, _ = asyncio.run(scenario())
    assert kube.posted == ["Sized"]


def test_a_stale_watch_event_does_not_replace_our_newer_status() -> None:
    state = _state()
    remember(state, KEY, _body("10"))
    state.bodies[KEY] = _body("12")  # the reconcile's status write came back as 12
    remember(state, KEY, _body("11"))  # the watch catches up with an older version
    assert state.bodies[KEY]["metadata"]["resourceVersion"] == "12"
    remember(state, KEY, _body("12"))
    remember(state, KEY, _body("13"))
    assert state.bodies[KEY]["metadata"]["resourceVersion"] == "13"


def test_our_own_status_write_coming_back_is_not_news() -> None:
    state = _state()
    assert remember(state, KEY, _body("10"))  # first seen
    state.bodies[KEY] = _body("12")  # our status write returned 12
    assert not remember(state, KEY, _body("12"))  # its watch event: no reconcile
    assert remember(state, KEY, _body("13"))  # someone else's change


def test_one_timer_per_service_and_the_earliest_due_time_wins() -> None:
    async def scenario() -> list[tuple[str, str]]:
        state = _state()
        state.queue = WorkQueue()
        state.schedule(KEY, 0.2)
        state.schedule(KEY, 5.0)  # later: the earlier one stays
        state.schedule(KEY, 0.05)  # earlier: replaces it
        assert len(state.timers) == 1
        await asyncio.sleep(0.1)
        fired = [state.queue.get_nowait() for _ in range(len(state.queue))]
        await asyncio.sleep(0.2)  # the replaced 0.2 s timer does not fire again
        fired += [state.queue.get_nowait() for _ in range(len(state.queue))]
        return fired

    assert asyncio.run(scenario()) == [KEY]


def test_keys_handed_over_by_other_threads_are_enqueued_in_order_with_one_wake_up() -> None:
    async def scenario() -> tuple[list[tuple[str, str]], int]:
        state = _state()
        state.queue = WorkQueue()
        loop = asyncio.get_running_loop()
        state.loop = loop
        wake_ups = []
        original = loop.call_soon_threadsafe

        def counted(*args: Any) -> Any:
            wake_ups.append(args)
            return original(*args)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        keys = [("ml", f"s{i}") for i in range(50)]

        def watch_thread() -> None:  # a flurry of pod events between two turns of the loop
            for key in [*keys, keys[3]]:
                state.enqueue_threadsafe(key)

        thread = threading.Thread(target=watch_thread)
        thread.start()
        thread.join()  # the loop has not turned meanwhile: nothing is enqueued yet
        assert not len(state.queue)
        await asyncio.sleep(0)
        taken = [state.queue.get_nowait() for _ in range(len(state.queue))]
        state.enqueue_threadsafe(keys[0])  # after the batch: wakes the loop again
        await asyncio.sleep(0)
        taken += [state.queue.get_nowait() for _ in range(len(state.queue))]
        return taken, len(wake_ups)

    taken, wake_ups = asyncio.run(scenario())
    assert taken == [("ml", f"s{i}") for i in range(50)] + [("ml", "s0")]
    assert wake_ups == 2


def _service(name: str, generation: int, observed: int | None) -> dict[str, Any]:
    status = {} if observed is None else {"status": {"observedGeneration": observed}}
    return {"metadata": {"namespace": "ml", "name": name, "generation": generation}, **status}


def test_a_spec_not_acted_on_yet_is_urgent() -> None:
    assert priority_of(_service("new", 1, None)) == SPEC_CHANGED
    assert priority_of(_service("edited", 3, 2)) == SPEC_CHANGED
    assert priority_of(_service("done", 3, 3)) == ROUTINE
    assert priority_of(None) == ROUTINE


def test_the_queue_serves_spec_changes_first_each_key_once_and_moves_a_key_up() -> None:
    queue = WorkQueue()
    a, b, c = ("ml", "a"), ("ml", "b"), ("ml", "c")
    queue.put(a, ROUTINE)
    queue.put(b, ROUTINE)
    queue.put(a, ROUTINE)  # already waiting: keeps its place
    queue.put(c, SPEC_CHANGED)
    queue.put(b, SPEC_CHANGED)  # more urgent now: moves up, behind c
    assert len(queue) == 3 and b in queue
    assert [queue.get_nowait() for _ in range(len(queue))] == [c, b, a]
    assert not len(queue)
    queue.put(b, ROUTINE)  # its stale entry is gone: put again, served once
    assert [queue.get_nowait() for _ in range(len(queue))] == [b]


def test_the_queue_says_how_long_a_key_waited_since_it_was_first_put() -> None:
    now = [100.0]
    queue = WorkQueue(clock=lambda: now[0])
    a, b = ("ml", "a"), ("ml", "b")

    async def scenario() -> list[tuple[tuple[str, str], float]]:
        queue.put(a, ROUTINE)
        now[0] = 102.0
        queue.put(b, ROUTINE)
        queue.put(a, SPEC_CHANGED)  # moves up, but has waited since its first put
        now[0] = 105.5
        taken = [await queue.get_timed(), await queue.get_timed()]
        queue.put(a, ROUTINE)  # served: a new wait starts now
        now[0] = 106.0
        return [*taken, await queue.get_timed()]

    assert asyncio.run(scenario()) == [(a, 5.5), (b, 3.5), (a, 0.5)]


def test_workers_take_new_services_before_routine_work() -> None:
    async def scenario() -> list[str]:
        state = _state()
        order: list[str] = []

        class Recording:
            def reconcile(self, body: dict[str, Any]) -> ReconcileResult:
                order.append(body["metadata"]["name"])
                return ReconcileResult(
                    [], wrote_status=False, applied=0, deleted=0, requeue_at=None
                )

        state.reconciler = Recording()  # type: ignore[assignment]
        state.kube = NoEvents()  # type: ignore[assignment]
        state.queue = WorkQueue()
        for i in range(3):
            key = ("ml", f"done-{i}")
            state.bodies[key] = _service(key[1], 2, 2)
            state.enqueue(key)
        state.bodies[("ml", "new")] = _service("new", 1, None)
        state.enqueue(("ml", "new"))
        worker = asyncio.create_task(_worker(state))
        await asyncio.sleep(0.1)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        return order

    assert asyncio.run(scenario()) == ["new", "done-0", "done-1", "done-2"]


def test_a_worker_records_the_queue_wait_and_logs_a_slow_reconcile(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(handlers, "SLOW_RECONCILE_S", 0.04)  # SlowReconciler takes 50 ms

    async def scenario() -> OperatorState:
        state = _state()
        state.reconciler = SlowReconciler()  # type: ignore[assignment]
        state.kube = NoEvents()  # type: ignore[assignment]
        state.queue = WorkQueue()
        state.bodies[KEY] = _body("1")
        state.enqueue(KEY)
        await asyncio.sleep(0.2)  # waits this long before a worker starts
        worker = asyncio.create_task(_worker(state))
        await asyncio.sleep(0.2)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        return state

    with caplog.at_level(logging.INFO, logger="llmservice_operator.handlers"):
        state = asyncio.run(scenario())
    [sample] = [
        s for m in state.metrics.queue_wait.collect() for s in m.samples if s.name.endswith("_sum")
    ]
    assert 0.15 <= sample.value < 1.0
    [line] = [r.getMessage() for r in caplog.records if "reconciled in" in r.getMessage()]
    assert line.startswith("ml/chat: reconciled in 0.0") and "in the queue" in line, line
    # Where the time went: the step that waited, and how little of it was on the CPU.
    assert "(apply 0.05s; 0.00s on the CPU)" in line, line


def test_kopf_keeps_no_diff_base_for_our_event_handler() -> None:
    """What kopf's change detection reads is empty: no copy of the body per watch event, and no
    last-handled annotation written. Its old state is None, as the default storage's is for an
    object that never had the annotation (only change handlers write it)."""
    import kopf

    from llmservice_operator.handlers import NoDiffBase

    storage = NoDiffBase()
    body = kopf.Body({"metadata": {"name": "chat"}, "spec": {"a": 1}, "status": {"b": [1] * 1000}})
    assert storage.fetch(body=body) is None
    assert storage.build(body=body) == {}
    assert kopf.AnnotationsDiffBaseStorage().fetch(body=body) is None
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=storage.build(body=body))
    assert not patch


def test_the_llmservice_event_handler_runs_on_the_event_loop() -> None:
    """kopf runs a sync handler on its executor's threads; the queue and the timers belong to
    the event loop (not thread-safe). An async handler enqueues on the loop itself, and a
    worker waiting for work wakes at once."""

    async def scenario() -> tuple[tuple[str, str], int]:
        state = _state()
        state.queue = WorkQueue()
        handler = _llmservice_event_handler(state)
        assert inspect.iscoroutinefunction(handler.fn)
        waiting = asyncio.create_task(state.queue.get())
        await asyncio.sleep(0)
        await handler.fn(type="ADDED", body=_body("7"))
        key = await asyncio.wait_for(waiting, timeout=1)
        await handler.fn(type="DELETED", body=_body("8"))
        return key, len(state.bodies)

    key, cached = asyncio.run(scenario())
    assert key == KEY and cached == 0


def test_the_collector_is_settled_every_round_thawed_and_counted_every_few(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rounds_seen: list[tuple[bool, bool]] = []  # (counted, thawed)
    monkeypatch.setattr(handlers, "SETTLE_INTERVAL_S", 0.0)
    monkeypatch.setattr(handlers, "THAW_EVERY", 3)
    monkeypatch.setattr(handlers, "COUNT_EVERY", 4)

    def settle(gauge: object, *, thaw: bool) -> None:
        rounds_seen.append((gauge is not None, thaw))

    monkeypatch.setattr(handlers, "settle", settle)

    async def rounds() -> None:
        task = asyncio.create_task(handlers._settle_gc(_state()))
        while len(rounds_seen) < 7:
            await asyncio.sleep(0)
        task.cancel()

    asyncio.run(rounds())
    counted, thawed = zip(*rounds_seen[:7], strict=True)
    assert thawed == (False, False, True, False, False, True, False)
    assert counted == (True, False, False, False, True, False, False)


class GhostCluster:
    """The API server as the ghost-hunting code sees it: which LLMServices exist, and the
    list's resourceVersion."""

    def __init__(self, present: dict[tuple[str, str], str], listed_at: str = "10") -> None:
        self.present = present
        self.listed_at = listed_at
        self.lists = 0

    def llmservice_versions(self) -> tuple[dict[tuple[str, str], str], str]:
        self.lists += 1
        return dict(self.present), self.listed_at

    def post_event(self, *_: Any) -> None:
        pass


class NotFoundReconciler:
    """Every reconcile fails as one does in a namespace that is gone."""

    def __init__(self) -> None:
        self.calls = 0

    def reconcile(self, body: dict[str, Any]) -> ReconcileResult:
        self.calls += 1
        raise ApiException(status=404, reason="Not Found")

    def forget(self, key: tuple[str, str]) -> None:
        pass


def _run_once(
    cluster: GhostCluster,
    keys: tuple[tuple[str, str], ...] = (KEY,),
    reconciler: Any = None,
    seconds: float = 0.1,
) -> tuple[OperatorState, Any]:
    async def scenario() -> tuple[OperatorState, Any]:
        state = _state()
        state.reconciler = reconciler or NotFoundReconciler()
        state.kube = cluster  # type: ignore[assignment]
        state.queue = WorkQueue()
        for key in keys:
            state.bodies[key] = _body("5")
        workers = [asyncio.create_task(_worker(state)) for _ in range(4)]
        for key in keys:
            state.enqueue(key)
        await asyncio.sleep(seconds)
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        for _, timer in state.timers.values():
            timer.cancel()
        if state.confirming is not None:
            state.confirming.cancel()
        return state, state.reconciler

    return asyncio.run(scenario())


@pytest.fixture
def quick_confirm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handlers, "CONFIRM_AFTER_S", 0.01)


@pytest.mark.usefixtures("quick_confirm")
def test_a_service_whose_deletion_was_not_seen_is_forgotten_at_its_first_404() -> None:
    """kopf's listing after an expired watch never tells a deletion: the 404 its reconcile
    meets, confirmed by a LIST of the LLMServices, forgets it (no retries in a namespace that
    is gone)."""
    state, reconciler = _run_once(GhostCluster(present={}))
    assert KEY not in state.bodies
    assert KEY not in state.timers and KEY not in state.failures
    assert reconciler.calls == 1


@pytest.mark.usefixtures("quick_confirm")
def test_a_404_for_a_service_that_is_still_there_is_retried_with_backoff() -> None:
    cluster = GhostCluster(present={KEY: "5"})
    state, reconciler = _run_once(cluster)
    assert KEY in state.bodies
    assert reconciler.calls > 1  # 5 ms, 10 ms, 20 ms... each after its LIST
    assert state.failures[KEY] == reconciler.calls == cluster.lists and KEY in state.timers


def test_the_404s_of_many_services_are_confirmed_by_one_list() -> None:
    """A namespace of services deleted unseen: one LIST for all their 404s, not one each."""
    keys = tuple(("gone", f"s{i}") for i in range(40))
    cluster = GhostCluster(present={keys[0]: "5"})
    state, reconciler = _run_once(cluster, keys, seconds=handlers.CONFIRM_AFTER_S + 0.2)
    assert reconciler.calls == 40 + 1  # each once, then the one still there on its retry
    assert cluster.lists == 1
    assert set(state.bodies) == {keys[0]} and state.failures == {keys[0]: 1}


def test_kopf_telling_of_a_service_ends_its_namespace_being_deleted() -> None:
    """kopf watches no terminating namespace: a service it tells of is in one made again."""
    state = _state()
    state.queue = WorkQueue()
    state.terminating.add(KEY)
    handler = _llmservice_event_handler(state)
    asyncio.run(handler.fn(type="ADDED", body=_body("20")))
    assert KEY not in state.terminating and KEY in state.queue


class TerminatingReconciler(NotFoundReconciler):
    """Every reconcile is refused as a create in a namespace being deleted is."""

    def reconcile(self, body: dict[str, Any]) -> ReconcileResult:
        self.calls += 1
        err = ApiException(status=403, reason="Forbidden")
        err.body = json.dumps({"kind": "Status", "code": 403, "reason": "Forbidden",
                               "details": {"causes": [{"reason": "NamespaceTerminating",
                                                       "field": "metadata.namespace"}]}})  # fmt: skip
        raise err


def test_a_service_whose_namespace_is_being_deleted_is_not_retried_and_looked_for_until_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kopf stops watching a terminating namespace, so the DELETED events of its services may
    never come: no retry, and the look (one LIST) is repeated until the service is gone."""
    monkeypatch.setattr(handlers, "SWEEP_AFTER_LIST_S", 0.05)
    cluster = GhostCluster(present={KEY: "5"}, listed_at="9")

    async def scenario() -> tuple[OperatorState, TerminatingReconciler, list[int]]:
        state = _state()
        reconciler = TerminatingReconciler()
        state.reconciler = reconciler  # type: ignore[assignment]
        state.kube = cluster  # type: ignore[assignment]
        state.queue = WorkQueue()
        state.bodies[KEY] = _body("5")
        worker = asyncio.create_task(_worker(state))
        state.enqueue(KEY)
        await asyncio.sleep(0.01)
        for _ in range(3):  # its pods and Deployment deleted: not reconciled again
            state.enqueue(KEY)
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # a look or two: it is still there
        looks = [cluster.lists]
        assert KEY in state.bodies and KEY not in state.timers and KEY not in state.failures
        cluster.present = {}  # the namespace is gone
        await asyncio.sleep(0.1)
        looks.append(cluster.lists)
        await asyncio.sleep(0.15)  # nothing left to look for: no more LISTs
        looks.append(cluster.lists)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        return state, reconciler, looks

    state, reconciler, looks = asyncio.run(scenario())
    assert reconciler.calls == 1
    assert looks[0] >= 1 and looks[2] == looks[1] > looks[0]
    assert KEY not in state.bodies and not state.terminating


def test_the_look_after_a_listing_forgets_what_the_list_no_longer_has() -> None:
    """A body older than the list and absent from it is a deletion not seen; one newer than
    the list was created after it, and one the list has is there."""
    kept, gone, newer = ("ml", "kept"), ("ml", "gone"), ("ml", "newer")
    cluster = GhostCluster(present={kept: "4"}, listed_at="10")

    async def scenario() -> OperatorState:
        state = _state()
        state.kube = cluster  # type: ignore[assignment]
        for (namespace, name), version in ((kept, "4"), (gone, "7"), (newer, "11")):
            state.bodies[(namespace, name)] = {
                "metadata": {"namespace": namespace, "name": name, "resourceVersion": version}
            }
        await handlers.forget_vanished(state)
        return state

    state = asyncio.run(scenario())
    assert set(state.bodies) == {kept, newer}
    assert cluster.lists == 1


def test_kopfs_listing_of_a_service_brings_one_look_for_deletions_not_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Objects found by a listing come as type None; the look follows once per listing (not
    once per object), and a watch event brings none."""
    monkeypatch.setattr(handlers, "SWEEP_AFTER_LIST_S", 0.05)
    cluster = GhostCluster(present={KEY: "7"}, listed_at="9")

    async def scenario() -> OperatorState:
        state = _state()
        state.queue = WorkQueue()
        state.kube = cluster  # type: ignore[assignment]
        handler = _llmservice_event_handler(state)
        await handler.fn(type="ADDED", body=_body("6"))
        await asyncio.sleep(0.1)
        assert cluster.lists == 0
        state.bodies[("ml", "ghost")] = {
            "metadata": {"namespace": "ml", "name": "ghost", "resourceVersion": "3"}
        }
        for _ in range(3):
            await handler.fn(type=None, body=_body("7"))
        await asyncio.sleep(0.2)
        return state

    state = asyncio.run(scenario())
    assert cluster.lists == 1
    assert set(state.bodies) == {KEY}


def _new_body(generation: int) -> dict[str, Any]:
    return {**_body("5"), "metadata": {**_body("5")["metadata"], "generation": generation}}


def test_a_held_service_is_routine_work_until_the_wave_passes_then_reconciled_again() -> None:
    async def scenario() -> None:
        state = _state()
        state.loop = asyncio.get_running_loop()
        state.queue = WorkQueue()
        state.bodies[KEY] = _new_body(1)
        assert priority_of(state.bodies[KEY]) == SPEC_CHANGED  # no status yet
        state.wave.until = time.monotonic() + 0.3
        state.hold(KEY, 1)
        state.enqueue(KEY)  # its Deployment changed: not ahead of new services
        assert state.queue._waiting[KEY] == ROUTINE
        assert state.queue.get_nowait() == KEY
        await asyncio.sleep(0.1)
        state.wave.until = time.monotonic() + 0.5  # another service came: the wave goes on
        await asyncio.sleep(0.3)
        assert KEY not in state.queue and KEY in state.held
        await asyncio.sleep(0.5)
        assert KEY in state.queue and state.queue._waiting[KEY] == ROUTINE
        assert not state.held and state.release is None

    asyncio.run(scenario())


def test_a_held_service_whose_spec_changed_is_not_routine() -> None:
    async def scenario() -> None:
        state = _state()
        state.queue = WorkQueue()
        state.bodies[KEY] = _new_body(2)
        state.wave.until = time.monotonic() + 10
        state.hold(KEY, 1)
        state.enqueue(KEY)
        assert state.queue._waiting[KEY] == SPEC_CHANGED
        state.forget(KEY)
        assert not state.held
        assert state.release is not None
        state.release.cancel()

    asyncio.run(scenario())


def test_only_a_newly_created_service_counts_toward_a_wave() -> None:
    state = _state()
    state.queue = WorkQueue()
    handler = _llmservice_event_handler(state)

    def body(name: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
        made = {"metadata": {"namespace": "ml", "name": name, "resourceVersion": "5"}}
        return {**made, "status": status} if status else made

    async def events() -> None:
        await handler.fn(type=None, body=body("listed"))  # found by kopf's listing
        await handler.fn(type="ADDED", body=body("old", {"observedGeneration": 1}))
        await handler.fn(type="ADDED", body=body("new"))
        await handler.fn(type="MODIFIED", body=body("new"))
        await handler.fn(type="ADDED", body=body("new"))  # told again: not new

    asyncio.run(events())
    assert len(state.wave.arrivals) == 1


class HoldingReconciler:
    """The first reconcile holds the service's first status back; the next writes it."""

    def __init__(self) -> None:
        self.calls = 0

    def reconcile(self, body: dict[str, Any]) -> ReconcileResult:
        self.calls += 1
        return ReconcileResult([], self.calls > 1, 4, 0, None, status_held=self.calls == 1)


def test_a_reconcile_that_held_the_status_back_holds_the_service_until_one_writes_it() -> None:
    async def scenario() -> list[bool]:
        state = _state()
        state.reconciler = HoldingReconciler()  # type: ignore[assignment]
        state.kube = NoEvents()  # type: ignore[assignment]
        state.queue = WorkQueue()
        state.bodies[KEY] = _new_body(1)
        state.wave.until = time.monotonic() + 10
        worker = asyncio.create_task(_worker(state))
        seen = []
        for _ in range(2):
            state.enqueue(KEY)
            await asyncio.sleep(0.05)
            seen.append(KEY in state.held)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        return [*seen, KEY in state.reconciled_at]  # the resync leaves it be for an interval

    assert asyncio.run(scenario()) == [True, False, True]


def test_the_resync_wakes_only_the_services_nothing_reconciled_for_an_interval() -> None:
    async def scenario() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
        now = [1000.0]
        state = OperatorState(
            settings=OperatorSettings(reconcile_interval_seconds=0.5),
            metrics=OperatorMetrics.create(),
        )
        state.queue = WorkQueue()
        recent, stale, never = ("ml", "recent"), ("ml", "stale"), ("ml", "never")
        for key in (recent, stale, never):
            state.bodies[key] = _body("5")
        state.reconciled_at[recent] = now[0] - 0.1  # its autoscaler evaluated it just now
        state.reconciled_at[stale] = now[0] - 0.6
        resync = asyncio.create_task(handlers._resync(state, clock=lambda: now[0]))
        await asyncio.sleep(0.08)  # one look (every tenth of the interval)
        first = {k for k in (recent, stale, never) if k in state.queue}
        while len(state.queue):
            state.queue.get_nowait()
        now[0] += 0.45  # the recent one's interval is over; the others were just asked for
        await asyncio.sleep(0.08)
        second = {k for k in (recent, stale, never) if k in state.queue}
        resync.cancel()
        await asyncio.gather(resync, return_exceptions=True)
        return first, second

    first, second = asyncio.run(scenario())
    assert first == {("ml", "stale"), ("ml", "never")}
    assert second == {("ml", "recent")}


class StatusWriter:
    """Each reconcile writes the status; the API server answers with the object as it is then.
    Before the first answer a person changes the spec (generation 1 -> 2)."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.version = 10

    def reconcile(self, body: dict[str, Any]) -> ReconcileResult:
        generation = body["metadata"]["generation"]
        self.seen.append(generation)
        self.version += 2  # the spec change (+1), then our status write (+1)
        stored = {"metadata": {**body["metadata"], "generation": 2,
                               "resourceVersion": str(self.version)}}  # fmt: skip
        return ReconcileResult([], False, 0, 0, None, updated_body=stored)


def test_a_spec_change_that_came_back_with_our_status_write_is_reconciled() -> None:
    """The watch event of the spec change comes after our write's answer, which carries it:
    that event is older than the cache (not news), so the reconcile itself asks for another."""

    async def scenario() -> StatusWriter:
        reconciler = StatusWriter()
        state = _working_state(
            reconciler, {"metadata": {**_body("10")["metadata"], "generation": 1}}
        )
        worker = asyncio.create_task(_worker(state))
        state.enqueue(KEY)
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(reconciler.seen) >= 2:
                break
        late = {"metadata": {**_body("11")["metadata"], "generation": 2}}
        assert not remember(state, KEY, late)  # the spec change's own event: not news
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        return reconciler

    assert asyncio.run(scenario()).seen[:2] == [1, 2]
