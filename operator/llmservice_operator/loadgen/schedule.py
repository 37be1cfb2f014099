"""Arrival-rate schedules and the Poisson arrivals they produce.

A schedule is a list of segments, each a duration and a rate (requests per second); a file
holds them as YAML::

    - {duration_s: 60, rate: 2}     # warm up
    - {duration_s: 10, rate: 20}    # burst
    - {duration_s: 60, rate: 2}

Arrivals within a segment are a Poisson process at its rate (exponential gaps); since the
exponential is memoryless, restarting the draw at each segment boundary is exact.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = ["RateSchedule", "Segment", "load_schedule", "parse_schedule"]


@dataclass(frozen=True)
class Segment:
    duration_s: float
    rate: float

    def __post_init__(self) -> None:
        if not (self.duration_s > 0 and math.isfinite(self.duration_s)):
            raise ValueError(f"segment duration_s must be > 0, got {self.duration_s}")
        if not (self.rate >= 0 and math.isfinite(self.rate)):
            raise ValueError(f"segment rate must be >= 0, got {self.rate}")


@dataclass(frozen=True)
class RateSchedule:
    segments: tuple[Segment, ...]

    def __post_init__(self) -> None:
        if not self.segments:
            raise ValueError("a schedule needs at least one segment")

    @classmethod
    def constant(cls, rate: float, duration_s: float) -> RateSchedule:
        return cls((Segment(duration_s, rate),))

    @property
    def duration_s(self) -> float:
        return sum(s.duration_s for s in self.segments)

    def expected_requests(self) -> float:
        return sum(s.duration_s * s.rate for s in self.segments)

    def rate_at(self, t: float) -> float:
        start = 0.0
        for segment in self.segments:
            if start <= t < start + segment.duration_s:
                return segment.rate
            start += segment.duration_s
        return 0.0

    def arrival_times(self, rng: random.Random, max_requests: int | None = None) -> list[float]:
        """Seconds from the start at which requests are sent, at most ``max_requests``."""
        times: list[float] = []
        start = 0.0
        for segment in self.segments:
            end = start + segment.duration_s
            if segment.rate > 0:
                t = start + rng.expovariate(segment.rate)
                while t < end:
                    if max_requests is not None and len(times) >= max_requests:
                        return times
                    times.append(t)
                    t += rng.expovariate(segment.rate)
            start = end
        return times


def parse_schedule(data: Any) -> RateSchedule:
    """From the YAML shape: a list of ``{duration_s, rate}`` (or ``{segments: [...]}``)."""
    if isinstance(data, Mapping) and "segments" in data:
        data = data["segments"]
    if not isinstance(data, list):
        raise ValueError("a schedule is a YAML list of {duration_s, rate} segments")
    segments: list[Segment] = []
    for index, item in enumerate(data):
        if not isinstance(item, Mapping) or set(item) != {"duration_s", "rate"}:
            raise ValueError(f"segment {index}: expected exactly the keys duration_s and rate")
        try:
            segments.append(Segment(float(item["duration_s"]), float(item["rate"])))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"segment {index}: {exc}") from exc
    return RateSchedule(tuple(segments))


def load_schedule(path: Path) -> RateSchedule:
    try:
        data = yaml.safe_load(path.read_text("utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from exc
    try:
        return parse_schedule(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc
