"""A full replica's capacity in tokens, and the prior the sizing gives before anything is learned.

Pure: numbers in, numbers out.

The capacity model
------------------
A replica spends its time on two kinds of work: prefill (prompt tokens, bound by tensor-core
throughput) and decode (one output token per running sequence per step, bound by HBM
bandwidth). A **full** replica is busy all the time, so with ``P`` the prompt tokens per second
it prefills and ``D`` the output tokens per second it decodes at the batch that fits::

    busy = prompt_rate / P + generation_rate / D        (1 when full)
    seconds of replica per request = prompt / P + output / D

so the requests per second a full replica completes for a mix of mean ``prompt`` and ``output``
tokens is ``1 / (prompt / P + output / D)``. Learned in tokens, the capacity holds for any
mix: a service whose requests turn from conversation (1k prompt, 200 output tokens) to code
completion (2k prompt, 20 output) keeps planning right from the next evaluation, where a
throughput learned in requests/s is wrong until the next saturation.

**Learning.** A replica queueing beyond the target for a whole rate window is full
(``policy``): ``busy`` is 1 there, so the ``busy`` the current estimate reads its token
rates at is the factor the estimate is off by (both ``P`` and ``D`` scaled together: one observation cannot separate them, and the
roofline's split between them is the part it gets right). The first observation replaces the
prior; later ones are smoothed (``policy.LEARNING_RATE``). Learned capacities are kept per GPU
type (``status.autoscaling.capacity``): a service moved to another GPU starts from the prior of
that GPU, and finds its old capacity again if it moves back.

The prior
---------
Before any saturation the capacity comes from the sizing's roofline (``sizing.performance``):

* the **batch that fits**: ``min(max_num_seqs, kv_pool_tokens / context)`` sequences, a
  sequence holding on average ``context = prompt + output / 2`` tokens of KV;
* ``D = batch / decode_step(batch, batch x context)``;
* ``P = prompt / prefill(prompt)``;

for the mix the replicas report, or :data:`DEFAULT_MIX` until they report one; times
:data:`PRIOR_DISCOUNT` (why 0.8: below) and the engine's time scale (an engine that runs ``S``
times faster than the wall clock, like the local cluster's simulator at 10, completes ``S``
times more per wall second: ``spec.scaling.capacityPriorScale``).

Why :data:`PRIOR_DISCOUNT` is 0.8: the two ways to be wrong do not cost the same. A prior too
high plans too few replicas, and the first burst queues until new replicas load (minutes of
missed TTFT); a prior too low plans more replicas than needed until the first saturation
corrects it (GPU-hours). The roofline leaves out what it cannot see: the gaps between steps
(scheduling, sampling, detokenization on the CPU), tensor-parallel communication
(``sizing.performance``: "TP over PCIe is optimistic"), a batch that rarely reaches the batch
that fits (prompts arrive in bursts, sequences finish unevenly), and chunked prefill sharing
a step with decode. The benchmark's engine, which models only the last two, completes 0.88-0.92
of the roofline's requests/s at saturation (docs/autoscaling.md, "The prior"); 0.8 leaves
about 10% more for the rest, and the first saturation replaces it anyway.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "DEFAULT_MAX_NUM_BATCHED_TOKENS",
    "DEFAULT_MIX",
    "PRIOR_DISCOUNT",
    "RequestMix",
    "StepTimes",
    "TokenCapacity",
    "TokenRates",
    "CapacityPrior",
    "batch_that_fits",
    "measured_mix",
    "rescaled_capacity",
    "roofline_capacity",
]

#: The prior plans on this share of the roofline's estimate (see the module docstring).
PRIOR_DISCOUNT = 0.8
#: vLLM's default token budget of a step (``--max-num-batched-tokens``).
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192


@dataclass(frozen=True)
class RequestMix:
    """The mean request: prompt tokens in, output tokens out."""

    prompt_tokens: float
    output_tokens: float

    def __post_init__(self) -> None:
        for name in ("prompt_tokens", "output_tokens"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")
        if self.prompt_tokens + self.output_tokens <= 0:
            raise ValueError("a request has at least one token")

    @property
    def context_tokens(self) -> float:
        """KV tokens a sequence holds on average while it decodes."""
        return self.prompt_tokens + self.output_tokens / 2


#: The mix assumed until the replicas report their token rates: the median request of the
#: Azure LLM inference trace 2023, conversation service (Patel et al., "Splitwise", ISCA 2024:
#: 1020 prompt and 129 output tokens).
DEFAULT_MIX = RequestMix(prompt_tokens=1020.0, output_tokens=129.0)


@dataclass(frozen=True)
class TokenCapacity:
    """What one full replica processes per second."""

    prefill_tokens_per_second: float
    decode_tokens_per_second: float

    def __post_init__(self) -> None:
        for name in ("prefill_tokens_per_second", "decode_tokens_per_second"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number > 0, got {value}")

    def busy(self, prompt_rate: float, generation_rate: float) -> float:
        """The share of a replica's time that ``prompt_rate`` and ``generation_rate`` tokens/s
        take (1.0: a full replica)."""
        return (
            prompt_rate / self.prefill_tokens_per_second
            + generation_rate / self.decode_tokens_per_second
        )

    def seconds_per_request(self, mix: RequestMix) -> float:
        """Replica-seconds one request of ``mix`` takes."""
        return self.busy(mix.prompt_tokens, mix.output_tokens)

    def requests_per_second(self, mix: RequestMix) -> float:
        """Requests/s of ``mix`` one full replica completes."""
        return 1.0 / self.seconds_per_request(mix)

    def scaled(self, factor: float) -> TokenCapacity:
        return TokenCapacity(
            self.prefill_tokens_per_second * factor, self.decode_tokens_per_second * factor
        )


@dataclass(frozen=True)
class TokenRates:
    """One replica's measured rates over the last rate window."""

    prompt_tokens_per_second: float
    generation_tokens_per_second: float
    completions_per_second: float


def measured_mix(rates: Iterable[TokenRates]) -> RequestMix | None:
    """The mean request the replicas completed (token rates over completion rate), or None when
    nothing completed."""
    prompt = generation = completed = 0.0
    for r in rates:
        prompt += r.prompt_tokens_per_second
        generation += r.generation_tokens_per_second
        completed += r.completions_per_second
    if completed <= 0 or prompt + generation <= 0:
        return None
    return RequestMix(prompt / completed, generation / completed)


def rescaled_capacity(reference: TokenCapacity, full: Iterable[TokenRates]) -> TokenCapacity | None:
    """The capacity that full replicas' token rates show: ``reference`` scaled by the ``busy``
    it reads them at (a full replica is busy 1.0 of the time: 1.2 means it does 20% more than
    ``reference`` says), the median over the replicas (one the balancer just filled does not
    drag it down); None when none processed anything."""
    factors = sorted(
        busy
        for r in full
        if (busy := reference.busy(r.prompt_tokens_per_second, r.generation_tokens_per_second)) > 0
    )
    if not factors:
        return None
    return reference.scaled(factors[len(factors) // 2])


class StepTimes(Protocol):
    """A replica's step times: the roofline (``sizing.PerformanceModel``) or a profile."""

    def decode_step_ms(self, batch: int, context_tokens: int) -> float: ...

    def prefill_ms(self, prompt_tokens: int) -> float: ...


def batch_that_fits(max_num_seqs: int, kv_pool_tokens: int, mix: RequestMix) -> int:
    """Sequences of ``mix`` a replica decodes at once: its slots, or fewer when the KV pool fills
    first (a sequence holds ``mix.context_tokens`` on average); at least one."""
    by_kv = int(kv_pool_tokens // max(1.0, mix.context_tokens))
    return max(1, min(max_num_seqs, by_kv))


def roofline_capacity(
    perf: StepTimes,
    *,
    max_num_seqs: int,
    kv_pool_tokens: int,
    mix: RequestMix = DEFAULT_MIX,
) -> TokenCapacity:
    """The roofline's full replica for ``mix``, undiscounted: decode at the batch that fits,
    prefill of one mean prompt."""
    batch = batch_that_fits(max_num_seqs, kv_pool_tokens, mix)
    context = max(1, round(mix.context_tokens))
    step_s = perf.decode_step_ms(batch, batch * context) / 1e3
    prompt = max(1, round(mix.prompt_tokens))
    prefill_s = perf.prefill_ms(prompt) / 1e3
    if not (step_s > 0 and prefill_s > 0):
        raise ValueError(f"the step times must be > 0 (decode {step_s} s, prefill {prefill_s} s)")
    return TokenCapacity(prompt / prefill_s, batch / step_s)


@dataclass(frozen=True)
class CapacityPrior:
    """What the policy plans on before it has seen a replica full: the roofline of ``perf`` for
    the mix of the moment, times ``discount``, times the engine's ``time_scale`` (how many
    times faster than the wall clock it runs)."""

    perf: StepTimes
    max_num_seqs: int
    kv_pool_tokens: int
    time_scale: float = 1.0
    discount: float = PRIOR_DISCOUNT
    #: The last mix asked for and its prior (a service asks for the same one every evaluation).
    _last: list[tuple[RequestMix, TokenCapacity]] = field(
        default_factory=list, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        if not (self.time_scale > 0 and math.isfinite(self.time_scale)):
            raise ValueError(f"time_scale must be a finite number > 0, got {self.time_scale}")
        if not 0 < self.discount <= 1:
            raise ValueError(f"discount must be in (0, 1], got {self.discount}")
        if self.max_num_seqs < 1 or self.kv_pool_tokens < 1:
            raise ValueError("a replica holds at least one sequence and one KV token")

    def roofline(self, mix: RequestMix = DEFAULT_MIX) -> TokenCapacity:
        """The roofline's full replica for ``mix``, undiscounted, at the wall clock's speed."""
        roofline = roofline_capacity(
            self.perf,
            max_num_seqs=self.max_num_seqs,
            kv_pool_tokens=self.kv_pool_tokens,
            mix=mix,
        )
        return roofline.scaled(self.time_scale)

    def at(self, mix: RequestMix = DEFAULT_MIX) -> TokenCapacity:
        """The prior for ``mix``: the roofline times the discount."""
        last = self._last[:1]  # one read: another thread may replace it meanwhile
        if last and last[0][0] == mix:
            return last[0][1]
        prior = self.roofline(mix).scaled(self.discount)
        self._last[:] = [(mix, prior)]
        return prior
