"""Seeded synthetic request traces for the autoscaling benchmark.

Four shapes (the default run uses ``diurnal`` and ``azure-code``; the frontier adds ``day``):

``azure-code``
    The *Azure LLM inference trace 2023*, coding service (same source as below:
    ``AzureLLMInferenceTrace_code.csv``; 8,819 requests from 18:17:04 to 19:14:20, about 57
    minutes, 2.6 requests/s). The paper's medians: 1500 prompt tokens ("large chunks of the
    code written so far") and 13 generated tokens ("the next few words"). Our choices:
    prompts log-normal (median 1500, sigma 0.8, clamped to 16..8192), outputs log-normal
    (median 13, sigma 1.0, clamped to 1..1024), arrivals and drift as for ``azure-conv``.

``azure-conv``
    The *Azure LLM inference trace 2023*, conversation service (Patel et al., "Splitwise:
    Efficient generative LLM inference using phase splitting", ISCA 2024; data in
    github.com/Azure/AzurePublicDataset, ``AzureLLMInferenceTrace_conv.csv``). Taken from it:
    the length of the released sample (19,366 requests from 18:15:46 to 19:14:08 on
    2023-11-16, about 58 minutes, a mean of 5.5 requests/s), the paper's medians of 1020
    prompt tokens (a wide, user-dependent range) and 129 generated tokens from an almost
    bimodal distribution. Our choices where the paper gives no number: prompts log-normal
    (median 1020, sigma 0.8, clamped to 16..8192); outputs a two-mode mixture (49% around 30
    tokens, 51% around 330: the mixture's median is 129); arrivals a Gamma renewal process
    with a coefficient of variation of 1.5 (burstier than Poisson, as BurstGPT and Splitwise
    describe production LLM traffic) whose rate drifts minute to minute (a log-normal random
    walk, +-25% over ~5 minutes). The mean rate is scaled to the fleet, as BurstGPT's authors
    recommend doing with a production trace.

``diurnal``
    A day compressed into the trace's duration: the rate follows ``trough + (peak - trough) x
    (1 - cos(2 pi t / T)) / 2`` from a quarter of the peak up to the peak and back, with four
    flash-crowd bursts (1.5-2x the underlying rate for 3-6 minutes, 30 s ramps) at seeded
    times; Poisson arrivals; the same request-length mix as ``azure-conv``.

``day``
    A whole day (24 h) compressed into the trace's duration (4 h by default; the 24 h
    uncompressed), with the swing of the public Azure LLM inference traces (the week-long 2024
    samples, AzureLLMInferenceTrace_conv_1week.csv and _code_1week.csv, in
    github.com/Azure/AzurePublicDataset; not downloaded here): a night trough at 04:00 a fifth
    of the afternoon peak at 14:00-16:00 (trough to peak 5x, the middle of the 4-6x those
    weeks show), following ``trough + (peak - trough) x ((1 - cos(2 pi (h - 4) / 24)) / 2)^1.5``
    (the exponent makes the working day narrower than the night). On top, in real minutes
    (not compressed): a drift of +-15% with ~5-minute memory and Gamma inter-arrivals with a
    coefficient of variation of 1.5, as for ``azure-conv``. No flash crowds: the Azure days show
    minute-scale noise on a slow swing. The conversation mix. Compressing the day shortens its
    ramps, not the replicas' start-up: a compressed day is harder for an autoscaler than the
    real one (a 4 h day rises from trough to peak in 1.7 h instead of 10 h).

Every trace is a pure function of its parameters and seed; :meth:`Trace.peak_to_mean` is its
busiest minute over its mean rate.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from .fleet import Request

__all__ = [
    "AZURE_CODE_DURATION_S",
    "AZURE_CODE_MEAN_RPS",
    "AZURE_CONV_DURATION_S",
    "AZURE_CONV_MEAN_RPS",
    "Lengths",
    "Trace",
    "azure_code",
    "azure_conv",
    "DAY_TROUGH_SHARE",
    "coding_lengths",
    "conversation_lengths",
    "day",
    "diurnal",
]

Lengths = Callable[[random.Random], tuple[int, int]]

#: The released conversation sample: 19,366 requests over 18:15:46-19:14:08.
AZURE_CONV_REQUESTS = 19_366
AZURE_CONV_DURATION_S = 58 * 60 + 22.0
AZURE_CONV_MEAN_RPS = AZURE_CONV_REQUESTS / AZURE_CONV_DURATION_S

#: The released coding sample: 8,819 requests over 18:17:04-19:14:20.
AZURE_CODE_REQUESTS = 8_819
AZURE_CODE_DURATION_S = 57 * 60 + 16.0
AZURE_CODE_MEAN_RPS = AZURE_CODE_REQUESTS / AZURE_CODE_DURATION_S

PROMPT_MEDIAN, PROMPT_SIGMA, PROMPT_MAX = 1020, 0.8, 8192
CODE_PROMPT_MEDIAN, CODE_OUTPUT_MEDIAN, CODE_OUTPUT_SIGMA, CODE_OUTPUT_MAX = 1500, 13, 1.0, 1024
OUTPUT_SHORT_SHARE, OUTPUT_SHORT_MEDIAN, OUTPUT_LONG_MEDIAN = 0.49, 30, 330
OUTPUT_SHORT_SIGMA, OUTPUT_LONG_SIGMA, OUTPUT_MAX = 0.6, 0.5, 2048


@dataclass(frozen=True)
class Trace:
    name: str
    description: str
    duration_s: float
    requests: tuple[Request, ...]
    rate_at: Callable[[float], float]
    """The underlying arrival rate (requests/s) at time t, before randomness."""

    def peak_rate(self, window_s: float = 60.0) -> float:
        """The highest arrival rate over any ``window_s`` window (what the static fleet needs)."""
        times = [r.time for r in self.requests]
        best, lo = 0, 0
        for hi, t in enumerate(times):
            while times[lo] < t - window_s:
                lo += 1
            best = max(best, hi - lo + 1)
        return best / window_s

    def mean_rate(self) -> float:
        """Requests/s over the whole trace."""
        return len(self.requests) / self.duration_s if self.duration_s > 0 else 0.0

    def peak_to_mean(self, window_s: float = 60.0) -> float:
        """The busiest ``window_s`` over the mean rate (a static fleet sized for the peak runs
        at the inverse of this on average)."""
        mean = self.mean_rate()
        return self.peak_rate(window_s) / mean if mean > 0 else 0.0

    def median_lengths(self) -> tuple[int, int]:
        prompts = sorted(r.prompt_tokens for r in self.requests)
        outputs = sorted(r.output_tokens for r in self.requests)
        return prompts[len(prompts) // 2], outputs[len(outputs) // 2]


def conversation_lengths(rng: random.Random) -> tuple[int, int]:
    """One (prompt, output) pair of the conversation mix."""
    prompt = round(rng.lognormvariate(math.log(PROMPT_MEDIAN), PROMPT_SIGMA))
    if rng.random() < OUTPUT_SHORT_SHARE:
        output = round(rng.lognormvariate(math.log(OUTPUT_SHORT_MEDIAN), OUTPUT_SHORT_SIGMA))
    else:
        output = round(rng.lognormvariate(math.log(OUTPUT_LONG_MEDIAN), OUTPUT_LONG_SIGMA))
    return min(max(prompt, 16), PROMPT_MAX), min(max(output, 1), OUTPUT_MAX)


def coding_lengths(rng: random.Random) -> tuple[int, int]:
    """One (prompt, output) pair of the coding mix."""
    prompt = round(rng.lognormvariate(math.log(CODE_PROMPT_MEDIAN), PROMPT_SIGMA))
    output = round(rng.lognormvariate(math.log(CODE_OUTPUT_MEDIAN), CODE_OUTPUT_SIGMA))
    return min(max(prompt, 16), PROMPT_MAX), min(max(output, 1), CODE_OUTPUT_MAX)


def _arrivals(
    rate_at: Callable[[float], float], duration_s: float, cv: float, rng: random.Random
) -> list[float]:
    """A Gamma renewal process (coefficient of variation ``cv``; 1 is Poisson) in operational
    time, mapped through the integrated rate (1 s steps) onto wall time."""
    shape = 1.0 / (cv * cv)
    times: list[float] = []
    t = 0.0
    budget = rng.gammavariate(shape, 1.0 / shape)  # operational time to the next arrival
    while t < duration_s:
        rate = max(rate_at(t), 1e-9)
        step = min(1.0, duration_s - t)
        while budget <= rate * step:
            t += budget / rate
            step -= budget / rate
            times.append(t)
            budget = rng.gammavariate(shape, 1.0 / shape)
        budget -= rate * step
        t += step
    return [x for x in times if x < duration_s]


def _requests(times: list[float], rng: random.Random, lengths: Lengths) -> tuple[Request, ...]:
    out = []
    for t in times:
        prompt, output = lengths(rng)
        out.append(Request(t, prompt, output))
    return tuple(out)


def _drift(
    rng: random.Random, duration_s: float, mean_rps: float, spread: float = 0.25
) -> Callable[[float], float]:
    """A rate drifting around ``mean_rps``: a log-normal random walk, mean-reverting over ~5
    minutes, +-``spread`` (one standard deviation; 25% by default)."""
    step_s, reversion, sigma = 10.0, 10.0 / 300.0, spread * math.sqrt(2 * 10.0 / 300.0)
    levels = [0.0]
    for _ in range(int(duration_s / step_s) + 1):
        levels.append(levels[-1] * (1 - reversion) + rng.gauss(0.0, sigma))
    norm = sum(math.exp(x) for x in levels) / len(levels)

    def rate_at(t: float) -> float:
        return mean_rps * math.exp(levels[min(int(t / step_s), len(levels) - 1)]) / norm

    return rate_at


def azure_code(mean_rps: float, seed: int, duration_s: float = AZURE_CODE_DURATION_S) -> Trace:
    """The Azure 2023 coding shape at ``mean_rps`` (the sample's own is ~2.6)."""
    return _azure("azure-code", "coding", coding_lengths, mean_rps, seed, duration_s)


def azure_conv(mean_rps: float, seed: int, duration_s: float = AZURE_CONV_DURATION_S) -> Trace:
    """The Azure 2023 conversation shape at ``mean_rps`` (the sample's own is ~5.5)."""
    return _azure("azure-conv", "conversation", conversation_lengths, mean_rps, seed, duration_s)


def _azure(
    name: str, kind: str, lengths: Lengths, mean_rps: float, seed: int, duration_s: float
) -> Trace:
    """A drifting, burstier-than-Poisson (cv 1.5) trace with the ``lengths`` of one of the
    Azure 2023 samples."""
    rng = random.Random(seed)
    rate_at = _drift(rng, duration_s, mean_rps)
    times = _arrivals(rate_at, duration_s, 1.5, rng)
    return Trace(
        name,
        f"Azure LLM inference 2023 ({kind}) shape, {duration_s / 60:.0f} min, "
        f"{mean_rps:.1f} req/s mean",
        duration_s,
        _requests(times, rng, lengths),
        rate_at,
    )


def diurnal(peak_rps: float, duration_s: float, seed: int, trough_share: float = 0.25) -> Trace:
    """A compressed day with flash-crowd bursts (see the module docstring)."""
    rng = random.Random(seed)
    bursts: list[tuple[float, float, float]] = []  # (start, length, factor)
    for slot in range(4):
        start = (slot + 0.25 + 0.5 * rng.random()) * duration_s / 4
        bursts.append((start, rng.uniform(180.0, 360.0), rng.uniform(1.5, 2.0)))

    def rate_at(t: float) -> float:
        phase = (1 - math.cos(2 * math.pi * t / duration_s)) / 2
        rate = peak_rps * (trough_share + (1 - trough_share) * phase)
        for start, length, factor in bursts:
            if start <= t < start + length:
                ramp = min(1.0, (t - start) / 30.0, (start + length - t) / 30.0)
                rate *= 1 + (factor - 1) * ramp
        return rate

    times = _arrivals(rate_at, duration_s, 1.0, rng)
    return Trace(
        "diurnal",
        f"diurnal day in {duration_s / 3600:.1f} h, {trough_share * peak_rps:.1f}-{peak_rps:.1f} "
        "req/s, 4 bursts",
        duration_s,
        _requests(times, rng, conversation_lengths),
        rate_at,
    )


#: The day's night trough as a share of its afternoon peak (trough to peak 5x).
DAY_TROUGH_SHARE = 0.2
#: Hour of the night trough, and how much narrower than a cosine the working day is.
DAY_TROUGH_HOUR, DAY_SHAPE_EXPONENT = 4.0, 1.5
#: The day's minute-scale drift (one standard deviation) and the arrivals' coefficient of
#: variation.
DAY_DRIFT, DAY_CV = 0.15, 1.5


def day(peak_rps: float, duration_s: float, seed: int) -> Trace:
    """A 24 h day compressed into ``duration_s`` (see the module docstring)."""
    rng = random.Random(seed)
    drift = _drift(rng, duration_s, 1.0, DAY_DRIFT)
    trough = DAY_TROUGH_SHARE * peak_rps

    def shape(t: float) -> float:
        hour = 24.0 * t / duration_s
        phase = (1 - math.cos(2 * math.pi * (hour - DAY_TROUGH_HOUR) / 24.0)) / 2
        return trough + (peak_rps - trough) * float(phase**DAY_SHAPE_EXPONENT)

    def rate_at(t: float) -> float:
        return shape(t) * drift(t)

    times = _arrivals(rate_at, duration_s, DAY_CV, rng)
    return Trace(
        "day",
        f"a day (24 h) in {duration_s / 3600:g} h, {trough:.1f}-{peak_rps:.1f} req/s "
        f"(trough to peak {1 / DAY_TROUGH_SHARE:g}x), drift +-{DAY_DRIFT:.0%}, cv {DAY_CV:g}",
        duration_s,
        _requests(times, rng, conversation_lengths),
        rate_at,
    )
