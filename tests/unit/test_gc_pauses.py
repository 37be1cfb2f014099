"""The collector's full walks skip what settle() froze; every collection is timed."""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Gauge, Histogram

from llmservice_operator import gc_pauses


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    yield
    gc.enable()
    gc.unfreeze()
    gc.callbacks[:] = [c for c in gc.callbacks if not isinstance(c, gc_pauses._PauseTimer)]


def _cache(n: int) -> list[dict[str, Any]]:
    """Watched objects as the caches hold them: nested dicts and lists."""
    return [
        {"metadata": {"name": f"d{i}", "labels": {"a": "b"}}, "spec": {"containers": [{}]}}
        for i in range(n)
    ]


def test_settle_freezes_what_lives_and_collects_the_cycles_first() -> None:
    registry = CollectorRegistry()
    frozen = Gauge("frozen", "", registry=registry)
    cache = _cache(20_000)
    gc.disable()  # no automatic collection may find the cycle first

    class Cycle:
        pass

    garbage = Cycle()
    garbage.me = garbage  # type: ignore[attr-defined]
    del garbage
    gc.callbacks.append(seen := _Collected())
    gc_pauses.settle(frozen)

    assert seen.collected >= 1  # the cycle was collected, not frozen
    assert gc.get_freeze_count() >= 4 * len(cache)  # each entry is 4 tracked containers
    assert registry.get_sample_value("frozen") == gc.get_freeze_count()
    # A full collection now walks only what came after: the frozen objects are out of its way.
    assert not any(obj is cache[0] for obj in gc.get_objects(generation=2))


def test_a_full_collection_after_settle_is_much_shorter() -> None:
    cache = _cache(100_000)
    started = time.perf_counter()
    gc.collect()
    before = time.perf_counter() - started
    gc_pauses.settle()
    started = time.perf_counter()
    gc.collect()
    after = time.perf_counter() - started
    assert len(cache) == 100_000
    assert after < before / 5, (before, after)


class _Collected:
    def __init__(self) -> None:
        self.collected = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "stop":
            self.collected += info["collected"]


def test_every_collection_is_timed_and_a_long_one_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    pauses = Histogram("pause", "", ["generation"], registry=registry)
    gc_pauses.measure_pauses(pauses)
    gc_pauses.measure_pauses(pauses)  # installed once however often asked
    assert sum(isinstance(c, gc_pauses._PauseTimer) for c in gc.callbacks) == 1
    gc.collect()
    assert registry.get_sample_value("pause_count", {"generation": "2"}) == 1

    timer = next(c for c in gc.callbacks if isinstance(c, gc_pauses._PauseTimer))
    with caplog.at_level(logging.INFO, logger="llmservice_operator.gc_pauses"):
        timer("start", {"generation": 2})
        time.sleep(gc_pauses.LONG_PAUSE_S + 0.02)
        timer("stop", {"generation": 2, "collected": 0, "uncollectable": 0})
    assert registry.get_sample_value("pause_count", {"generation": "2"}) == 2
    assert registry.get_sample_value("pause_sum", {"generation": "2"}) >= gc_pauses.LONG_PAUSE_S
    assert "garbage collection of generation 2 paused the process" in caplog.text


def test_a_cycle_frozen_alive_is_reclaimed_at_the_next_thaw() -> None:
    import weakref

    class Node:
        pass

    node = Node()
    node.me = node  # type: ignore[attr-defined]
    alive = weakref.ref(node)
    gc_pauses.settle()  # frozen while alive
    del node
    gc_pauses.settle()
    assert alive() is not None  # unreachable, but frozen: no walk finds it
    gc_pauses.settle(thaw=True)
    assert alive() is None
