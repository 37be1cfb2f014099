"""When a failed reconcile is tried again: jittered exponential backoff per service, and not
before an API server's Retry-After (backoff.py; the handlers' retries)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from llmservice_operator.adapters.metrics import OperatorMetrics
from llmservice_operator.backoff import (
    BACKOFF_MAX_S,
    RETRY_AFTER_MAX_S,
    Retry,
    backoff_seconds,
    retry,
    retry_after_seconds,
)
from llmservice_operator.handlers import OperatorState, _worker
from llmservice_operator.reconcile import ReconcileResult
from llmservice_operator.settings import OperatorSettings
from llmservice_operator.workqueue import WorkQueue

NOW = datetime(2026, 10, 21, 7, 28, tzinfo=UTC)
KEY = ("ml", "chat")


def step(failures: int) -> float:
    return min(BACKOFF_MAX_S, 0.005 * 2 ** (failures - 1))


def test_each_delay_is_drawn_from_the_upper_half_of_its_doubling_step() -> None:
    for failures in range(1, 30):
        assert backoff_seconds(failures, 0.0) == step(failures) / 2
        assert backoff_seconds(failures, 0.5) == step(failures) * 0.75
        assert step(failures) * 0.99 < backoff_seconds(failures, 0.999) < step(failures)
    assert step(19) == BACKOFF_MAX_S == 1000.0  # about 1,000 s from the 19th failure on
    assert backoff_seconds(10**9, 0.5) == 750.0  # no overflow, however many


def test_services_failing_together_come_back_apart_and_a_seed_repeats_it() -> None:
    draws = random.Random(38)
    first = [backoff_seconds(1, draws.random()) for _ in range(1000)]
    assert all(0.0025 <= d < 0.005 for d in first)
    assert len(set(first)) == 1000 and max(first) - min(first) > 0.002
    again = random.Random(38)
    assert [backoff_seconds(1, again.random()) for _ in range(1000)] == first


def test_retry_after_is_seconds_or_an_http_date() -> None:
    assert retry_after_seconds("7", NOW) == 7.0
    assert retry_after_seconds(" 2.5 ", NOW) == 2.5
    assert retry_after_seconds("Wed, 21 Oct 2026 07:28:30 GMT", NOW) == 30.0
    assert retry_after_seconds("Wed, 21 Oct 2026 07:27:00 GMT", NOW) == 0.0  # past
    for unreadable in (None, "", "soon", "-1", "nan", "inf"):
        assert retry_after_seconds(unreadable, NOW) is None, unreadable


def test_a_429_is_not_retried_before_its_retry_after_nor_after_the_cap() -> None:
    assert retry(1, 0.0, 429, "7", NOW) == Retry(7.0, 7.0)
    late = retry(1, 0.999, 429, "7", NOW)  # spread after the wait, as the backoff is
    assert late.not_before_s == 7.0 and 7.0 < late.delay_s <= 10.5
    assert retry(1, 0.3, 429, "3600", NOW) == Retry(RETRY_AFTER_MAX_S, RETRY_AFTER_MAX_S)
    assert RETRY_AFTER_MAX_S == 60.0
    longer = retry(20, 0.0, 429, "1", NOW)  # the backoff asks for longer: it wins
    assert longer == Retry(500.0, 1.0)
    assert retry(1, 0.0, 503, "2", NOW) == Retry(2.0, 2.0)  # a 5xx's too, as client-go


def test_without_a_wait_asked_for_it_is_the_backoff() -> None:
    plain = Retry(backoff_seconds(3, 0.25))
    assert retry(3, 0.25, 429, None, NOW) == plain
    assert retry(3, 0.25, 429, "soon", NOW) == plain
    assert retry(3, 0.25, 409, "2", NOW) == plain  # a conflict does not ask to wait
    assert retry(3, 0.25, None, None, NOW) == plain  # no answer at all


# -- the handlers' retries ----------------------------------------------------------------------


def _throttled(retry_after: str | None) -> ApiException:
    err = ApiException(status=429, reason="Too Many Requests")
    err.headers = {} if retry_after is None else {"Retry-After": retry_after}
    return err


class FailingFirst:
    """The first reconcile fails with ``error``; every later one succeeds."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.calls = 0

    def reconcile(self, body: dict[str, Any]) -> ReconcileResult:
        self.calls += 1
        if self.calls == 1:
            raise self.error
        return ReconcileResult([], False, 0, 0, None)

    def forget(self, key: tuple[str, str]) -> None:
        pass


@dataclass
class RecordingState(OperatorState):
    delays: list[float] = field(default_factory=list)

    def schedule(self, key: tuple[str, str], delay_s: float) -> None:
        self.delays.append(delay_s)
        super().schedule(key, delay_s)


def _state(reconciler: FailingFirst, jitter: float) -> RecordingState:
    state = RecordingState(
        settings=OperatorSettings(), metrics=OperatorMetrics.create(), jitter=lambda: jitter
    )
    state.reconciler = reconciler  # type: ignore[assignment]
    state.kube = object()  # type: ignore[assignment]
    state.queue = WorkQueue()
    state.bodies[KEY] = {"metadata": {"namespace": "ml", "name": "chat"}}
    return state


async def _until(done: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not done():
        assert asyncio.get_running_loop().time() < deadline, "not in time"
        await asyncio.sleep(0.01)


def test_a_failed_reconcile_is_retried_after_its_jittered_backoff() -> None:
    async def scenario(jitter: float) -> list[float]:
        reconciler = FailingFirst(ApiException(status=500, reason="Internal Server Error"))
        state = _state(reconciler, jitter)
        worker = asyncio.create_task(_worker(state))
        state.enqueue(KEY)
        await _until(lambda: reconciler.calls == 2 and KEY not in state.failures)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        return state.delays

    assert asyncio.run(scenario(0.0)) == [0.0025]
    assert asyncio.run(scenario(0.5)) == [0.00375]


@pytest.mark.parametrize("retry_after", ["1", None])
def test_a_429_waits_for_its_retry_after_whatever_wakes_the_service(
    retry_after: str | None,
) -> None:
    async def scenario() -> tuple[float, RecordingState]:
        reconciler = FailingFirst(_throttled(retry_after))
        state = _state(reconciler, 0.0)
        loop = asyncio.get_running_loop()
        worker = asyncio.create_task(_worker(state))
        state.enqueue(KEY)
        await _until(lambda: reconciler.calls >= 1)  # the 429
        throttled_at = loop.time()
        state.enqueue(KEY)  # its pods changed: a wake-up before the wait is over
        await _until(lambda: reconciler.calls >= 2)
        waited = loop.time() - throttled_at
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        return waited, state

    waited, state = asyncio.run(scenario())
    if retry_after is None:  # nothing asked to wait: the backoff's 2.5 ms
        assert waited < 0.5 and state.delays == [0.0025]
        return
    assert waited >= 0.95  # not at the wake-up: after the Retry-After
    assert state.delays[0] == 1.0  # the retry: not before the Retry-After
    assert 0.5 < state.delays[1] < 1.0  # the wake-up, put off until then
    assert KEY not in state.not_before and KEY not in state.failures
