"""A counter's per-second rate over its readings of the last window, as Prometheus'
``rate(counter[1m])`` reads it from its scrapes (pure: ``now`` and the readings are arguments).

The operator computes it itself when it scrapes the pods' ``/metrics`` directly
(``metricsSource: pods``), and the autoscaling benchmark for its simulated Prometheus.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["RATE_WINDOW_SECONDS", "Reading", "counter_rate"]

#: The window of the rates the policy reads (``rate(vllm:request_success_total[1m])`` and the
#: like): rates observed closer together than this share events, so their errors correlate.
RATE_WINDOW_SECONDS = 60.0

#: (time in seconds, the counter's value then)
Reading = tuple[float, float]


def counter_rate(
    readings: Sequence[Reading], now: float, window: float = RATE_WINDOW_SECONDS
) -> tuple[list[Reading], float | None]:
    """The readings still needed (those of the last ``window`` seconds and the newest one
    before it) and the rate from the oldest of them to the newest: None with fewer than two
    readings or none later than the first. A reading lower than the one before it (the
    process restarted and its counter began again at 0) drops everything before it."""
    kept: list[Reading] = []
    for reading in readings:
        if kept and reading[1] < kept[-1][1]:
            kept = []
        kept.append(reading)
    while len(kept) > 2 and kept[1][0] <= now - window:
        del kept[0]
    if len(kept) < 2:
        return kept, None
    (t0, c0), (t1, c1) = kept[0], kept[-1]
    return kept, (c1 - c0) / (t1 - t0) if t1 > t0 else None
