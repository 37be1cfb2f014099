"""Prompt and output length distributions, seeded by the caller's ``random.Random``.

Spelled on the command line as ``fixed:N`` (or just ``N``), ``uniform:LOW:HIGH`` (inclusive) or
``lognormal:MEDIAN:SIGMA[:MAX]`` (``SIGMA`` of the underlying normal; draws are clamped to
``[1, MAX]``, MAX defaulting to 32768).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

__all__ = ["LengthDist", "parse_length_dist"]

DistKind = Literal["fixed", "uniform", "lognormal"]
_DEFAULT_MAX = 32768


@dataclass(frozen=True)
class LengthDist:
    """A distribution of token counts (always at least 1)."""

    kind: DistKind
    low: int
    """fixed: the value; uniform: the lower bound; lognormal: the median."""
    high: int = 0
    """uniform: the upper bound; lognormal: the clamp."""
    sigma: float = 0.0

    def __post_init__(self) -> None:
        if self.low < 1:
            raise ValueError(f"{self}: lengths must be at least 1")
        if self.kind == "uniform" and self.high < self.low:
            raise ValueError(f"uniform:{self.low}:{self.high}: HIGH must be >= LOW")
        if self.kind == "lognormal":
            if self.sigma < 0 or not math.isfinite(self.sigma):
                raise ValueError(f"lognormal sigma must be >= 0, got {self.sigma}")
            if self.high < self.low:
                raise ValueError(f"lognormal MAX {self.high} is below the median {self.low}")

    def sample(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return self.low
        if self.kind == "uniform":
            return rng.randint(self.low, self.high)
        value = round(rng.lognormvariate(math.log(self.low), self.sigma))
        return min(max(value, 1), self.high)

    def __str__(self) -> str:
        if self.kind == "fixed":
            return f"fixed:{self.low}"
        if self.kind == "uniform":
            return f"uniform:{self.low}:{self.high}"
        return f"lognormal:{self.low}:{self.sigma:g}:{self.high}"


def parse_length_dist(text: str) -> LengthDist:
    """``"256"``, ``"fixed:256"``, ``"uniform:64:512"``, ``"lognormal:200:0.6[:4096]"``."""
    parts = text.strip().split(":")
    try:
        if len(parts) == 1:
            return LengthDist("fixed", int(parts[0]))
        kind, args = parts[0].lower(), parts[1:]
        if kind == "fixed" and len(args) == 1:
            return LengthDist("fixed", int(args[0]))
        if kind == "uniform" and len(args) == 2:
            return LengthDist("uniform", int(args[0]), int(args[1]))
        if kind == "lognormal" and len(args) in (2, 3):
            high = int(args[2]) if len(args) == 3 else _DEFAULT_MAX
            return LengthDist("lognormal", int(args[0]), high, float(args[1]))
    except ValueError as exc:
        raise ValueError(f"bad length distribution {text!r}: {exc}") from exc
    raise ValueError(
        f"bad length distribution {text!r}: use N, fixed:N, uniform:LOW:HIGH "
        "or lognormal:MEDIAN:SIGMA[:MAX]"
    )
