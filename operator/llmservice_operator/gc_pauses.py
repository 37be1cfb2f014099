"""Short pauses of CPython's cyclic garbage collector in a process whose caches hold a cluster.

The watch caches keep every watched object as plain dicts and lists: at 1,000 services more
than a million container objects, all long-lived. A full (generation 2) collection walks
every one of them holding the GIL, so every worker and the event loop stop meanwhile (about
0.3 s per 360,000 objects on the development VM). It finds nothing there: decoded JSON has no
cycles, so reference counting frees a cached object as soon as a watch event replaces it.

:func:`settle` collects once, then moves everything alive to the permanent generation
(:func:`gc.freeze`), which later collections skip; the operator runs it once the caches have
synced and every :data:`SETTLE_INTERVAL_S` after. Its own collection walks only what was not
frozen yet: short, except the first after a burst of new services, which walks the burst's
objects once. The price: an object frozen alive that later becomes part of a garbage cycle
(a closed watch stream's, say) is not reclaimed while frozen, so every :data:`THAW_EVERY`
settles (an hour) the objects are thawed first and one full collection walks them all: one
long pause an hour instead of one every few minutes, and no leak that outlives the hour.
``llmservice_gc_frozen_objects`` counts the frozen objects still alive (every
:data:`COUNT_EVERY` settles).

:func:`measure_pauses` times every collection into ``llmservice_gc_pause_seconds`` and logs
the long ones.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

from prometheus_client import Gauge, Histogram

__all__ = [
    "COUNT_EVERY",
    "LONG_PAUSE_S",
    "SETTLE_INTERVAL_S",
    "THAW_EVERY",
    "measure_pauses",
    "settle",
]

log = logging.getLogger(__name__)

#: How often :func:`settle` runs: what was allocated since the last one is walked by the
#: collector until then.
SETTLE_INTERVAL_S = 30.0
#: Every this many settles, the frozen objects are thawed and walked once (cycles among them
#: reclaimed).
THAW_EVERY = 120
#: Every this many settles, the frozen objects still alive are counted: the count walks their
#: whole list (20-50 ms at a million objects), most of a settle's cost at rest.
COUNT_EVERY = 10
#: A collection at least this long is logged.
LONG_PAUSE_S = 0.1


def settle(frozen: Gauge | None = None, *, thaw: bool = False) -> float:
    """Collect what is not frozen yet (with ``thaw``, everything), then freeze what is alive
    and, given ``frozen``, count it there; the seconds it took."""
    started = time.perf_counter()
    if thaw:
        gc.unfreeze()
    gc.collect()
    gc.freeze()
    if frozen is not None:
        frozen.set(gc.get_freeze_count())
    return time.perf_counter() - started


class _PauseTimer:
    """A ``gc.callbacks`` entry: one collection runs at a time (it holds the GIL)."""

    def __init__(self, histogram: Histogram) -> None:
        self._histogram = histogram
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        generation = info.get("generation", 2)
        self._histogram.labels(str(generation)).observe(took)
        if took >= LONG_PAUSE_S:
            log.info("garbage collection of generation %s paused the process %.2fs "
                     "(%d objects frozen)", generation, took, gc.get_freeze_count())  # fmt: skip


def measure_pauses(histogram: Histogram) -> None:
    """Time every collection of this process into ``histogram`` (labelled by generation)."""
    if not any(isinstance(callback, _PauseTimer) for callback in gc.callbacks):
        gc.callbacks.append(_PauseTimer(histogram))
