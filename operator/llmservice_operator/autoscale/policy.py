"""How many replicas: from vLLM's queue depth, guarded by KV-cache usage. Pure: ``now`` is an
argument (float seconds), nothing is read from a clock, a cluster or Prometheus.

What it looks at
----------------
Each ready replica reports ``waiting`` (``vllm:num_requests_waiting``), ``running``
(``vllm:num_requests_running``), its KV-cache usage 0..1 (``vllm:kv_cache_usage_perc``) and,
when measured, the requests it completed per second over the last minute
(``rate(vllm:request_success_total[1m])``). The service's **arrival rate** ``lambda``
(requests/s) comes from the gateway or, failing that, from the replicas' completions.

A queue is the one unambiguous sign that a replica is **full**: vLLM holds a request back only
when a batch slot, KV blocks or the step's token budget runs out. So when a replica queues
beyond the target queue depth, what it completes per second is what a full replica does for
the current request mix: the policy *learns* that throughput ``mu`` (the median over the
queueing replicas, smoothed once known), keeps it in the history (so in the CR status)
across restarts, and refreshes it at every saturation. Compute-bound replicas (long prompts
on a big model) reach their throughput limit with batch slots to spare, and their queue stays
short until they are nearly full: the queue alone, read as a load measure, reacts late and
reads zero as soon as the replicas keep up (the HPA's problem with this metric).

The load model
--------------
With ``D`` every sequence in the system (``sum(running + waiting)`` over the ready replicas,
plus requests held upstream), ``W`` the requests waiting, ``F`` the sequences a replica holds
(``max_num_seqs``, or fewer when its KV cache fills first: ``running / kv_usage``):

* ``R = (lambda + W / 120 s) / mu``: the load in full replicas, to carry the arrivals and
  clear today's queue within two minutes, once ``mu`` is known. The rate is the one measured
  now, not projected along a trend: a one-minute rate's slope is mostly noise and flash-crowd
  ramps that stop at their top, and ordering on it cancelled replicas still loading (the
  benchmark measured 3% more GPU-hours for the same SLO attainment, docs/autoscaling.md);
* ``n_rate = ceil(max(R / target_utilization, R + H(R)))``: 80% of a full replica's
  throughput (queueing delay grows as ``u / (1 - u)``), or the load plus the **burst
  headroom** ``H(R) = min(2 R, c x sqrt(R)) + min(1, R)`` where that is more (``c`` follows
  the surges of arrivals, below): spare throughput for a burst while new replicas start, and
  one spare replica (N+1: one lost to a node failure or a restart leaves the others carrying
  the load).
  A load's fluctuations grow as the square root of its size (square-root staffing), so small
  fleets keep relatively more (3 spare replicas at a load of 1, 5 at 4, 9 at 16) and a load of
  a fraction of a replica at most three times itself. Where the headroom is the larger it
  keeps the replicas under the utilization target by itself, so it replaces the target's
  margin instead of adding to it; the target still bounds large fleets. An explicit
  ``targetUtilization`` in the spec plans at that utilization alone (``burst_headroom`` 0).
  ``c`` is the largest recent **surge** of arrivals (how far the rate rose over the last
  :data:`SURGE_LOOKBACK_SECONDS` from its lowest, in full replicas per square root of the
  load it rose from), at most ``burst_headroom`` (2), decaying towards ``min_burst_headroom``
  (1) with a half-life of an hour: a flash crowd keeps the full headroom, a smooth day gives
  half of it back. Nothing seen yet is a surge of the full size;
* ``n_conc = ceil(D / (ceiling x F))``: replicas to hold every sequence under the ceiling
  (``kvCacheUsageCeiling``, 0.9 by default) of their slots;
* ``n_kv = ceil(sum(kv_usage) / ceiling)``: replicas to keep KV usage under the ceiling;
* ``n_fit = max(n_rate, n_conc, n_kv)``, and at least one more than the ready replicas while
  the queue per ready replica exceeds the target queue depth (they are full, whatever the
  model says).

Rules
-----
* **Scale up** to ``n_fit`` when it exceeds ``current``, the desired count already set:
  replicas still loading (started, not yet ready) count as capacity that is coming and are
  never added twice. Scaling before a queue forms matters because a new replica needs
  minutes (GPU node, image, weights) before it serves. No delay by default, but at most
  ``scale_up.max_replicas_per_period`` added per ``period_seconds``.
* **Scale down** to ``n_down``: ``n_fit`` computed 15% under the targets (``DOWN_TOLERANCE``),
  i.e. the load simulated on the fewer replicas stays under the ceiling and the utilization
  target with room for noise, and keeps the burst headroom. A steady, noisy load between the
  two thresholds changes nothing: one replica plus 15% of hysteresis. A scale-down also waits
  for the stabilization window: the desired count never drops below the highest *base*
  recommendation of the last ``scale_down.stabilization_window_seconds`` (the Kubernetes HPA
  rule, over what the load needed at the utilization target, without the headroom: a
  peak holds the replicas it needed for a whole window, the headroom follows the load of now;
  an empty window starts now, so a restart never scales down on one sample), and at most
  ``scale_down.max_replicas_per_period`` go per period. Never while the queue is over the
  target, and never before ``mu`` is known when completions are measured (the capacity to
  simulate against is unknown: a new service learns it at its first saturation).
* **Missing data** never scales down: no samples at all holds the current count (decision
  flagged ``degraded``); samples from only some ready replicas, or an arrival rate whose
  source did not answer (``arrival_rate_missing``), may scale up (the missing replicas are
  assumed to look like the others, except those Ready for under :data:`JUST_READY_SECONDS`:
  nothing has queued on them yet) but not down.
* **Bounds** win over everything: the result is always within ``[min_replicas, max_replicas]``.
* **Scale to zero** (``min_replicas: 0``): recommended only when nothing runs, nothing waits and
  no request arrives (``arrival_rate == 0``; an unknown rate never counts as idle), so the
  stabilization window must be idle throughout before the last replica goes.
  **Activation**: at zero replicas, any request waiting upstream or arriving recommends 1 (or
  as many as the waiting requests need), at once.

The default target queue depth is ``max(1, max_num_seqs // 8)`` (:func:`default_target_queue_depth`,
the renderer's HPA/KEDA target too): a queue of an eighth of the batch is what a full replica
clears within an eighth of a request's duration; beyond it the replica counts as saturated.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, NamedTuple

from ..api.spec import ScalingBehavior, ScalingSpec
from ..api.status import AutoscalingStatus
from .capacity import (
    DEFAULT_MIX,
    CapacityPrior,
    RequestMix,
    TokenCapacity,
    TokenRates,
    measured_mix,
    rescaled_capacity,
)
from .counters import RATE_WINDOW_SECONDS
from .history import LearnedCapacity, ScaleHistory, history_to_status

__all__ = [
    "Direction",
    "LoadEstimate",
    "PolicyConfig",
    "ReplicaSample",
    "ScaleDecision",
    "ScalingInputs",
    "decide_replicas",
    "default_target_queue_depth",
    "burst_headroom",
    "estimate_load",
    "surge_headroom",
    "surge_size",
    "planned_replicas",
    "resolve_target_queue_depth",
]

Direction = Literal["up", "down", "hold"]

#: Tolerance for ``ceil`` of float arithmetic: 4.000000001 replicas is 4.
_EPS = 1e-9


def default_target_queue_depth(max_num_seqs: int) -> float:
    """Waiting requests per ready replica worth adding a replica for: an eighth of the batch.

    The renderer sets the HPA/KEDA target with it too (render.objects.scaler), so every mode
    scales on one number.
    """
    return float(max(1, max_num_seqs // 8))


def resolve_target_queue_depth(explicit: float | None, max_num_seqs: int) -> float:
    """``spec.scaling.targetQueueDepth`` when set, else :func:`default_target_queue_depth`."""
    return explicit if explicit is not None else default_target_queue_depth(max_num_seqs)


def _scale_down_default() -> ScalingBehavior:
    return ScalingBehavior(stabilization_window_seconds=300, max_replicas_per_period=1)


#: The utilization target when ``spec.scaling.targetUtilization`` is unset (with the burst
#: headroom on top).
DEFAULT_TARGET_UTILIZATION = 0.8
#: Burst headroom when ``targetUtilization`` is unset: this x ``sqrt(R)`` replicas of spare
#: throughput on top of the ``R / utilization`` a load of ``R`` full replicas needs.
DEFAULT_BURST_HEADROOM = 2.0
#: The burst headroom is never more than this many times the load itself (a load of a fifth of
#: a replica is not given two).
BURST_HEADROOM_MAX_SHARE = 2.0

#: One spare replica on top of the burst headroom (N+1: a replica lost to a node failure, an
#: eviction or a restart leaves the others carrying the load, bursts aside), never more than
#: the load itself.
SPARE_REPLICAS = 1.0


#: How far back a surge of arrivals is looked for: about a GPU replica's start (a node, the
#: image, the weights), what the burst headroom has to carry a rise through.
SURGE_LOOKBACK_SECONDS = 180.0
#: A surge seen is remembered with this half-life: the burst headroom it calls for decays
#: towards ``min_burst_headroom`` over a few hours without another (30 minutes gave back
#: headroom the next flash crowd needed: docs/autoscaling.md).
SURGE_HALF_LIFE_SECONDS = 3600.0
#: The least burst headroom (in ``sqrt(R)``) of the default rule on a smooth load: arrivals
#: still wander by about ``sqrt(R)`` (square-root staffing), and 0.5 fell under 99% of TTFTs
#: within 2 s on ``azure-code`` (docs/autoscaling.md).
DEFAULT_MIN_BURST_HEADROOM = 1.0


def burst_headroom(config: PolicyConfig, replicas_of_load: float) -> float:
    """Spare replicas of throughput kept for a load of ``replicas_of_load`` full replicas:
    ``min(2 x R, burst_headroom x sqrt(R))`` for bursts plus ``min(1, R)`` spare (N+1); 0 when
    ``burst_headroom`` is 0."""
    if config.burst_headroom == 0:
        return 0.0
    r = max(0.0, replicas_of_load)
    bursts = min(BURST_HEADROOM_MAX_SHARE * r, config.burst_headroom * math.sqrt(r))
    return bursts + min(config.spare_replicas, r)


def planned_replicas(config: PolicyConfig, replicas_of_load: float, slack: float = 1.0) -> float:
    """Replicas (before rounding up) planned for a load of ``replicas_of_load`` full replicas,
    ``slack`` (1, or less for a scale-down) under the targets: ``R / (slack x utilization)``;
    with the burst headroom, the larger of that and ``R / slack + burst_headroom(R)``.

    The headroom keeps the replicas under the utilization target by itself wherever it is the
    larger (a load of 4 on 4 + 4 + 1 = 9 replicas runs them at 44%), so it replaces the
    target's margin rather than adding to it; the target still bounds large fleets, whose
    headroom is relatively small (100 full replicas: 125, not 121)."""
    r = max(0.0, replicas_of_load)
    at_target = r / (slack * config.target_utilization)
    if config.burst_headroom == 0:
        return at_target
    return max(at_target, r / slack + burst_headroom(config, r))


@dataclass(frozen=True)
class PolicyConfig:
    """Bounds, targets and behaviour: ``spec.scaling`` plus the replica's ``max_num_seqs``."""

    min_replicas: int
    max_replicas: int
    max_num_seqs: int
    target_queue_depth: float
    kv_cache_usage_ceiling: float = 0.9
    target_utilization: float = DEFAULT_TARGET_UTILIZATION
    """Share of a full replica's learned throughput to plan for (latency grows steeply with
    utilization: queueing delay goes as u / (1 - u))."""
    scale_up: ScalingBehavior = field(default_factory=ScalingBehavior)
    scale_down: ScalingBehavior = field(default_factory=_scale_down_default)
    burst_headroom: float = DEFAULT_BURST_HEADROOM
    """Spare throughput for bursts while new replicas start, in replicas per square root of
    the replicas the load needs (:func:`burst_headroom`); 0 plans at ``target_utilization``
    alone (what an explicit ``spec.scaling.targetUtilization`` does)."""
    spare_replicas: float = SPARE_REPLICAS
    """The N+1 spare on top of the burst headroom (never more than the load itself)."""
    min_burst_headroom: float | None = None
    """The burst headroom follows the measured volatility of arrivals, between this and
    ``burst_headroom`` (:func:`surge_headroom`); None keeps ``burst_headroom`` fixed."""
    spare_follows_surge: bool = False
    """The N+1 spare shrinks with the burst headroom (in proportion); False keeps it whole."""
    surge_half_life_seconds: float = SURGE_HALF_LIFE_SECONDS
    """How fast a surge's headroom is forgotten (:func:`surge_headroom`)."""
    gpu_type: str = ""
    """The GPU the replicas run on: learned capacities are kept per GPU type."""
    capacity_prior: CapacityPrior | None = None
    """A full replica's capacity before one was seen (the sizing's roofline, discounted);
    None: nothing is assumed until the first saturation."""
    min_from: str | None = None
    """The ``spec.scaling.schedules`` window whose minReplicas ``min_replicas`` is (None: the
    spec's own), named in the reasons."""
    max_from: str | None = None
    """Likewise for ``max_replicas``."""

    def __post_init__(self) -> None:
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise ValueError(
                f"need 0 <= min_replicas <= max_replicas, got {self.min_replicas}, "
                f"{self.max_replicas}"
            )
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be at least 1, got {self.max_num_seqs}")
        if not (self.target_queue_depth > 0 and math.isfinite(self.target_queue_depth)):
            raise ValueError(f"target_queue_depth must be > 0, got {self.target_queue_depth}")
        if not 0 < self.target_utilization <= 1:
            raise ValueError(f"target_utilization must be in (0, 1], got {self.target_utilization}")
        if not 0 < self.kv_cache_usage_ceiling <= 1:
            raise ValueError(
                f"kv_cache_usage_ceiling must be in (0, 1], got {self.kv_cache_usage_ceiling}"
            )
        if not (self.burst_headroom >= 0 and math.isfinite(self.burst_headroom)):
            raise ValueError(f"burst_headroom must be >= 0, got {self.burst_headroom}")
        if not (self.spare_replicas >= 0 and math.isfinite(self.spare_replicas)):
            raise ValueError(f"spare_replicas must be >= 0, got {self.spare_replicas}")
        if not self.surge_half_life_seconds > 0:
            raise ValueError(
                f"surge_half_life_seconds must be > 0, got {self.surge_half_life_seconds}"
            )
        floor = self.min_burst_headroom
        if floor is not None and not 0 <= floor <= self.burst_headroom:
            raise ValueError(
                f"min_burst_headroom must be within 0..burst_headroom ({self.burst_headroom}), "
                f"got {floor}"
            )

    @classmethod
    def from_spec(
        cls,
        spec: ScalingSpec,
        max_num_seqs: int,
        *,
        gpu_type: str = "",
        capacity_prior: CapacityPrior | None = None,
        min_from: str | None = None,
        max_from: str | None = None,
    ) -> PolicyConfig:
        """The policy for ``spec.scaling`` of a service whose replicas run ``max_num_seqs`` on
        ``gpu_type``, with the sizing's ``capacity_prior`` (dropped when
        ``capacityPriorScale`` is 0).

        ``targetUtilization`` unset: the default, 0.8 plus the burst headroom. Set: exactly that
        utilization, no headroom on top (the user chose the headroom)."""
        explicit = spec.target_utilization
        return cls(
            gpu_type=gpu_type,
            capacity_prior=capacity_prior if spec.capacity_prior_scale > 0 else None,
            min_replicas=spec.min_replicas,
            max_replicas=spec.max_replicas,
            max_num_seqs=max_num_seqs,
            target_queue_depth=resolve_target_queue_depth(spec.target_queue_depth, max_num_seqs),
            kv_cache_usage_ceiling=spec.kv_cache_usage_ceiling,
            target_utilization=DEFAULT_TARGET_UTILIZATION if explicit is None else explicit,
            burst_headroom=DEFAULT_BURST_HEADROOM if explicit is None else 0.0,
            min_burst_headroom=DEFAULT_MIN_BURST_HEADROOM if explicit is None else None,
            scale_up=spec.scale_up,
            scale_down=spec.scale_down,
            min_from=min_from,
            max_from=max_from,
        )

    def bound(self, which: Literal["minReplicas", "maxReplicas"]) -> str:
        """``minReplicas 4``, or ``minReplicas 4 of schedule day`` when a window sets it."""
        value, window = (
            (self.min_replicas, self.min_from)
            if which == "minReplicas"
            else (self.max_replicas, self.max_from)
        )
        return f"{which} {value}" + (f" of schedule {window}" if window else "")


@dataclass(frozen=True)
class ReplicaSample:
    """One ready replica's engine gauges at one scrape."""

    waiting: float
    running: float
    kv_cache_usage: float | None = None
    """0..1; None when the replica does not export it."""
    completion_rate: float | None = None
    """Requests/s it completed over about the last minute; None when not measured."""
    ready_seconds: float | None = None
    """How long it has been Ready; None when unknown. A replica Ready for less than the rate's
    window has a completion rate of part of a window (Prometheus reads a young series low)."""
    prompt_token_rate: float | None = None
    """Prompt tokens/s it prefilled over the last minute
    (``rate(vllm:prompt_tokens_total[1m])``); None when not measured."""
    generation_token_rate: float | None = None
    """Output tokens/s it generated over the last minute
    (``rate(vllm:generation_tokens_total[1m])``); None when not measured."""

    def __post_init__(self) -> None:
        for name in ("waiting", "running"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")
        for name in ("completion_rate", "prompt_token_rate", "generation_token_rate"):
            rate = getattr(self, name)
            if rate is not None and not (rate >= 0 and math.isfinite(rate)):
                raise ValueError(f"{name} must be a finite number >= 0, got {rate}")
        kv = self.kv_cache_usage
        if kv is not None and not 0 <= kv <= 1:
            raise ValueError(f"kv_cache_usage must be within 0..1, got {kv}")

    @property
    def token_rates(self) -> TokenRates | None:
        """Its prompt, output and completion rates, when all three are measured."""
        prompt, generated = self.prompt_token_rate, self.generation_token_rate
        if prompt is None or generated is None or self.completion_rate is None:
            return None
        return TokenRates(prompt, generated, self.completion_rate)


@dataclass(frozen=True)
class ScalingInputs:
    """Everything one evaluation looks at."""

    now: float
    ready: int
    """Replicas serving (Ready)."""
    loading: int
    """Replicas started but not ready yet (pulling the image, loading weights)."""
    current: int
    """The desired count already set (the Deployment's replicas): ready + loading + pending."""
    samples: Sequence[ReplicaSample] | None
    """The latest sample of each ready replica; None when the metrics source is unavailable."""
    history: ScaleHistory = field(default_factory=ScaleHistory)
    gateway_waiting: int = 0
    """Requests held upstream with no replica to take them (an activator, while at zero)."""
    arrival_rate: float | None = None
    """Requests/s reaching the service over about the last minute; None when not measured."""
    just_ready: int = 0
    """Ready replicas without a sample that turned Ready under :data:`JUST_READY_SECONDS` ago
    (the next scrape finds them): nothing has queued on them yet, so the samples are not
    extrapolated over them (the old replicas' backlog stays where it is)."""
    arrival_rate_missing: bool = False
    """The arrival rate is measured for this service but its source did not answer: like
    samples missing from some replicas, the decision may scale up but never down (at zero
    replicas: nothing can be seen arriving, so it holds)."""

    def __post_init__(self) -> None:
        if not math.isfinite(self.now):
            raise ValueError(f"now must be finite, got {self.now}")
        for name in ("ready", "loading", "current", "gateway_waiting", "just_ready"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.just_ready > self.ready:
            raise ValueError(f"just_ready ({self.just_ready}) exceeds ready ({self.ready})")
        rate = self.arrival_rate
        if rate is not None and not (rate >= 0 and math.isfinite(rate)):
            raise ValueError(f"arrival_rate must be a finite number >= 0, got {rate}")


@dataclass(frozen=True)
class LoadEstimate:
    """The load model's numbers for one evaluation (see the module docstring)."""

    load: float
    """D: sequences running or waiting (extrapolated over replicas without a sample)."""
    waiting: float
    arrival_rate: float | None
    """lambda, requests/s (None when neither the gateway nor the replicas measure it)."""
    full: float
    """F: sequences one replica holds when full (mean over the ready replicas)."""
    throughput: float | None
    """mu: requests/s one full replica completes (None until the fleet was seen full)."""
    kv_total: float
    """Sum of KV usage over the ready replicas (1.0 = one replica's full cache)."""
    n_conc: int
    n_kv: int
    n_rate: int | None
    """Replicas the arrival rate needs, burst headroom included."""
    n_fit: int
    n_down: int
    """n_fit planned DOWN_TOLERANCE below the ceiling: how far a scale-down may go."""
    idle: bool
    """Nothing runs, nothing waits, and no request arrives."""
    saturated: bool
    """A full replica's throughput was learned now (see ``queueing``)."""
    queue_over: bool
    """The queue per ready replica exceeds the target queue depth."""
    queueing: bool
    """Some replica queues beyond the target with a measured completion rate (what starts or
    continues a saturation; one a rate window long teaches mu)."""
    capacity_known: bool
    """A full replica's throughput is known (or completions are not measured at all, so the
    slot and KV model is all there is): without it a scale-down has nothing to simulate."""
    n_base: int = 0
    """n_fit at the utilization target, without the burst headroom (what the scale-down
    stabilization window remembers)."""
    n_base_down: int = 0
    """n_down likewise."""
    learned_rps: float | None = None
    """mu as this evaluation learned it from full replicas' completions (smoothed), else None."""
    mix: RequestMix | None = None
    """The mean request the replicas completed over the last minute (their token rates over
    their completion rates); None when they do not report token rates."""
    capacity: TokenCapacity | None = None
    """A full replica's capacity in tokens in use: learned (now or before) or the prior."""
    learned_capacity: TokenCapacity | None = None
    """The capacity in tokens this evaluation learned from full replicas, else None."""
    throughput_source: Literal["learned", "prior"] | None = None
    """Where mu comes from: a saturation seen (in tokens or requests/s) or the sizing's prior."""


@dataclass(frozen=True)
class ScaleDecision:
    """The outcome of one evaluation."""

    desired_replicas: int
    recommendation: int | None
    """The unstabilized recommendation (None when there was no data to recommend from)."""
    direction: Direction
    reason: str
    """A sentence for ``status.autoscaling.reason`` and events."""
    degraded: bool
    """Metrics were missing: the decision held (or only grew) instead of trusting them."""
    history: ScaleHistory
    load: LoadEstimate | None = None
    prior: tuple[str, TokenCapacity] | None = None
    """(GPU type, the sizing's prior) when nothing is learned for that GPU: shown in the status
    next to what was learned."""

    def to_status(self) -> AutoscalingStatus:
        """``status.autoscaling`` to write for this decision."""
        return history_to_status(self.history, self.desired_replicas, self.reason, self.prior)


def _relearned(load: LoadEstimate | None, now: float) -> tuple[float, float] | None:
    """The (time, mu) to store when this evaluation learned the throughput, else None."""
    if load is None or load.learned_rps is None:
        return None
    return (now, load.learned_rps)


def _relearned_capacity(
    config: PolicyConfig, load: LoadEstimate | None, now: float
) -> LearnedCapacity | None:
    """The capacity in tokens to store for the replicas' GPU when this evaluation learned it."""
    if load is None or load.learned_capacity is None:
        return None
    return LearnedCapacity(config.gpu_type, now, load.learned_capacity)


#: More replicas than any bounds allow (what a vanishing learned throughput asks for).
_HUGE = 10**9


def _ceil(x: float) -> int:
    return _HUGE if not x < _HUGE else max(0, math.ceil(x - _EPS))


#: A queue is work too: the replicas planned also clear it within this long.
DRAIN_SECONDS = 120.0
#: Weight of each new observation of a full replica's throughput (once one is known).
LEARNING_RATE = 0.2
#: Scale-down plans this much below the targets (scale-up at them): the hysteresis that keeps a
#: noisy load at a threshold from flapping however many replicas (one replica is 3% of 34)
#: and a one-minute rate's noise from undoing a scale-down.
DOWN_TOLERANCE = 0.15
#: A Ready replica without a sample, Ready for less than this, is taken as empty rather than
#: like the sampled ones: two evaluation intervals of the default 15 s, so the scrape has had
#: its chance. (Extrapolating the old replicas' backlog over replicas that just turned Ready
#: added a replica at the very moment the capacity arrived.)
JUST_READY_SECONDS = 30.0


def estimate_load(
    config: PolicyConfig,
    samples: Sequence[ReplicaSample],
    ready: int,
    gateway_waiting: int = 0,
    arrival_rate: float | None = None,
    learned_throughput: float | None = None,
    now: float | None = None,
    saturated_since: float | None = None,
    learned_capacity: TokenCapacity | None = None,
    just_ready: int = 0,
) -> LoadEstimate:
    """The load model over ``samples`` (extrapolated to ``ready`` replicas when some lack one,
    except the ``just_ready`` ones: they hold nothing yet).

    ``saturated_since`` is when the replicas began queueing beyond the target (the history's):
    at ``now`` a minute later their completion rates teach ``mu``, and their token rates the
    capacity in tokens (:mod:`.capacity`). ``learned_throughput`` (requests/s) and
    ``learned_capacity`` (tokens/s, for ``config.gpu_type``) are what earlier saturations
    taught; ``config.capacity_prior`` stands in until then.

    ``mu`` for the current mix, the first that is known of: the learned capacity in tokens for
    the mix the replicas report; the learned requests/s; the learned capacity for the default
    mix; the prior for the reported mix; the prior for the default mix."""
    queueing = [s for s in samples if s.waiting > config.target_queue_depth and s.completion_rate]
    completions = [s.completion_rate for s in samples if s.completion_rate is not None]
    full_for_a_window = (
        saturated_since is not None
        and now is not None
        and now - saturated_since >= RATE_WINDOW_SECONDS
    )
    full = [s for s in queueing if full_for_a_window and _full_window(s)]
    learned_now = _learned_now(full, learned_throughput)
    mix = measured_mix(r for s in samples if (r := s.token_rates) is not None)
    prior = config.capacity_prior.at(mix or DEFAULT_MIX) if config.capacity_prior else None
    capacity_now = _capacity_learned_now(
        full, learned_capacity or prior, learned=learned_capacity is not None
    )
    throughput, capacity, source = _throughput(
        capacity_now or learned_capacity, learned_now or learned_throughput, prior, mix
    )
    fleet = _fleet(config, samples, (ready, just_ready), gateway_waiting, arrival_rate, completions)
    demand = _Demand(fleet, throughput)
    n_fit = _fewest_replicas(config, demand, 1.0, headroom=True)
    n_base = _fewest_replicas(config, demand, 1.0, headroom=False)
    down = 1 - DOWN_TOLERANCE
    queue_over = fleet.queue_over
    return LoadEstimate(
        load=fleet.load,
        waiting=fleet.waiting,
        arrival_rate=fleet.arrival_rate,
        full=fleet.full,
        throughput=throughput,
        kv_total=fleet.kv_total,
        n_conc=_ceil(fleet.load / (config.kv_cache_usage_ceiling * fleet.full)),
        n_kv=_ceil(fleet.kv_total / config.kv_cache_usage_ceiling),
        n_rate=_replicas_for_rate(config, demand, 1.0, headroom=True),
        n_fit=n_fit,
        n_down=n_fit if queue_over else max(n_fit, _fewest_replicas(config, demand, down, True)),
        idle=fleet.load == 0 and fleet.arrival_rate == 0,
        saturated=learned_now is not None or capacity_now is not None,
        queueing=bool(queueing),
        queue_over=queue_over,
        capacity_known=throughput is not None or not completions,
        n_base=n_base,
        n_base_down=(
            n_base if queue_over else max(n_base, _fewest_replicas(config, demand, down, False))
        ),
        learned_rps=learned_now,
        mix=mix,
        capacity=capacity,
        learned_capacity=capacity_now,
        throughput_source=source,
    )


def _throughput(
    capacity: TokenCapacity | None,
    rps: float | None,
    prior: TokenCapacity | None,
    mix: RequestMix | None,
) -> tuple[float | None, TokenCapacity | None, Literal["learned", "prior"] | None]:
    """``mu`` (requests/s of a full replica), the capacity in tokens it came from, and where
    it came from: the first known of the learned capacity for the reported mix, the learned
    requests/s, the learned capacity for the default mix, the prior."""
    if capacity is not None and mix is not None:
        return capacity.requests_per_second(mix), capacity, "learned"
    if rps is not None:
        return rps, capacity, "learned"
    if capacity is not None:
        return capacity.requests_per_second(DEFAULT_MIX), capacity, "learned"
    if prior is not None:
        return prior.requests_per_second(mix or DEFAULT_MIX), prior, "prior"
    return None, None, None


def _full_window(sample: ReplicaSample) -> bool:
    """The replica has been Ready for a whole rate window (or for an unknown time)."""
    return sample.ready_seconds is None or sample.ready_seconds >= RATE_WINDOW_SECONDS


def _capacity_learned_now(
    full: Sequence[ReplicaSample], reference: TokenCapacity | None, learned: bool
) -> TokenCapacity | None:
    """A full replica's capacity in tokens as the token rates of ``full`` replicas show it:
    ``reference`` (learned before, or the prior) rescaled; the first observation replaces the
    prior, later ones are smoothed as mu is. None without a reference or token rates."""
    if reference is None:
        return None
    seen = rescaled_capacity(reference, (r for s in full if (r := s.token_rates) is not None))
    if seen is None:
        return None
    if not learned:
        return seen
    return TokenCapacity(
        (1 - LEARNING_RATE) * reference.prefill_tokens_per_second
        + LEARNING_RATE * seen.prefill_tokens_per_second,
        (1 - LEARNING_RATE) * reference.decode_tokens_per_second
        + LEARNING_RATE * seen.decode_tokens_per_second,
    )


def _learned_now(full: Sequence[ReplicaSample], learned: float | None) -> float | None:
    """A full replica's throughput as this evaluation measures it (smoothed), else None.

    A replica queueing beyond the target is full: what it completes is what a full replica
    does, once its whole rate window was spent full: the replicas have queued for a window
    without a break, and this one has been Ready that long (else the rate reads part of a
    window, the load from before the queue, or a young series: a burst's first evaluations
    would learn a throughput many times too low and plan maxReplicas for any load after).
    ``full`` holds those replicas. The median, so one replica the balancer just filled does
    not drag it down.
    """
    seen = sorted(s.completion_rate for s in full if s.completion_rate)
    if not seen:
        return None
    median = seen[len(seen) // 2]
    if learned is None:
        return median
    # Smoothed: a rate window that began before the queue did reads low for a while.
    return (1 - LEARNING_RATE) * learned + LEARNING_RATE * median


@dataclass(frozen=True)
class _Fleet:
    """What the ready replicas hold, extrapolated over those that sent no sample."""

    load: float
    """D: sequences running or waiting, plus requests held upstream."""
    waiting: float
    kv_total: float
    full: float
    """F: the mean sequences a replica holds when full."""
    arrival_rate: float | None
    """lambda: measured, or the replicas' completions when every replica reports them."""
    ready: int
    queue_over: bool


def _fleet(
    config: PolicyConfig,
    samples: Sequence[ReplicaSample],
    counts: tuple[int, int],
    gateway_waiting: int,
    arrival_rate: float | None,
    completions: Sequence[float],
) -> _Fleet:
    """``counts``: the Ready replicas, and how many of them just turned Ready unsampled."""
    ready, just_ready = counts
    fulls: list[float] = []
    running = waiting = kv_total = 0.0
    kv_count = 0
    for s in samples:
        full = float(config.max_num_seqs)
        if s.kv_cache_usage is not None:
            kv_total += s.kv_cache_usage
            kv_count += 1
            if s.kv_cache_usage > 0 and s.running > 0:
                full = min(full, s.running / s.kv_cache_usage)
        fulls.append(max(1.0, full))
        running += s.running
        waiting += s.waiting
    like_sampled = ready - just_ready
    scale = like_sampled / len(samples) if samples and like_sampled > len(samples) else 1.0
    kv_scale = like_sampled / kv_count if kv_count and like_sampled > kv_count else 1.0
    if arrival_rate is None and samples and len(completions) == len(samples):
        arrival_rate = sum(completions) * scale
    return _Fleet(
        load=(running + waiting) * scale + gateway_waiting,
        waiting=waiting * scale + gateway_waiting,
        kv_total=kv_total * kv_scale,
        full=sum(fulls) / len(fulls) if fulls else float(config.max_num_seqs),
        arrival_rate=arrival_rate,
        ready=ready,
        queue_over=ready > 0 and waiting * scale / ready > config.target_queue_depth,
    )


@dataclass(frozen=True)
class _Demand:
    fleet: _Fleet
    throughput: float | None
    """mu, learned now or before; None (or 0) when unknown."""


def _replicas_for_rate(
    config: PolicyConfig, demand: _Demand, slack: float, headroom: bool
) -> int | None:
    """Replicas for the arrival rate (and the queue) at ``slack`` x the utilization target,
    plus the burst headroom for it; None when the rate or a full replica's throughput is
    unknown."""
    fleet, mu = demand.fleet, demand.throughput
    if fleet.arrival_rate is None or not mu:
        return None
    r = (fleet.arrival_rate + fleet.waiting / DRAIN_SECONDS) / mu
    if headroom:
        return _ceil(planned_replicas(config, r, slack))
    return _ceil(r / (slack * config.target_utilization))


def _fewest_replicas(config: PolicyConfig, demand: _Demand, slack: float, headroom: bool) -> int:
    """Replicas to stay ``slack`` (1 = none) under the ceiling and the utilization target,
    with the burst headroom or without."""
    fleet = demand.fleet
    level = config.kv_cache_usage_ceiling * slack
    n = max(_ceil(fleet.load / (level * fleet.full)), _ceil(fleet.kv_total / level))
    for_rate = _replicas_for_rate(config, demand, slack, headroom)
    if for_rate is not None:
        n = max(n, for_rate)
    if fleet.queue_over:  # the ready replicas are full: at least one more, whatever the model says
        n = max(n, fleet.ready + 1)
    return n


def surge_size(
    arrivals: Sequence[tuple[float, float]], now: float, rate: float | None, mu: float | None
) -> float | None:
    """How far arrivals rose to ``rate`` from their lowest of the last
    :data:`SURGE_LOOKBACK_SECONDS` (``arrivals``, before ``now``), in full replicas (``mu``
    requests/s each) per square root of the load they rose from (at least one replica's): the
    burst headroom coefficient that would have carried the rise. None when unknown."""
    earlier = [r for t, r in arrivals if now - SURGE_LOOKBACK_SECONDS <= t < now]
    if rate is None or not mu or not earlier:
        return None
    low = min(earlier)
    return max(0.0, rate - low) / mu / math.sqrt(max(low / mu, 1.0))


def surge_headroom(config: PolicyConfig, surge: tuple[float, float] | None, now: float) -> float:
    """The burst headroom coefficient at ``now`` after the surge ``(time, size)``: its size
    (at most ``burst_headroom``) decaying towards ``min_burst_headroom`` with a half-life of
    ``surge_half_life_seconds``; ``burst_headroom`` when it is fixed or nothing was seen."""
    floor = config.min_burst_headroom
    if floor is None or surge is None:
        return config.burst_headroom
    seen, size = surge
    decay = math.pow(0.5, max(0.0, now - seen) / config.surge_half_life_seconds)
    return floor + (min(max(size, floor), config.burst_headroom) - floor) * decay


class _Arrivals(NamedTuple):
    """What an evaluation adds to the history for the burst headroom."""

    rate: float | None
    """The arrival rate to keep (None: none, or the headroom is fixed)."""
    surge: tuple[float, float] | None
    """A surge that replaces the history's, else None."""


_NO_ARRIVALS = _Arrivals(None, None)


def _new_surge(
    config: PolicyConfig, history: ScaleHistory, now: float, load: LoadEstimate
) -> tuple[float, float] | None:
    """The surge to remember after this evaluation, when it replaces the history's: the first
    arrivals measured start at the full ``burst_headroom`` (nothing is known of their
    volatility yet); later, a rise larger than what the remembered one calls for now."""
    if config.min_burst_headroom is None or load.arrival_rate is None:
        return None
    if history.surge is None:
        return (now, config.burst_headroom)
    size = surge_size(history.arrivals, now, load.arrival_rate, load.throughput)
    if size is None or size <= surge_headroom(config, history.surge, now):
        return None
    return (now, round(min(size, config.burst_headroom), 3))


def _with_surge_headroom(
    config: PolicyConfig, surge: tuple[float, float] | None, now: float
) -> PolicyConfig:
    """``config`` with the burst headroom (and the spare, when it follows) of ``now``."""
    headroom = surge_headroom(config, surge, now)
    if headroom == config.burst_headroom:
        return config
    spare = config.spare_replicas
    if config.spare_follows_surge and config.burst_headroom > 0:
        spare *= headroom / config.burst_headroom
    return replace(config, burst_headroom=headroom, spare_replicas=spare, min_burst_headroom=None)


def _estimate(config: PolicyConfig, inputs: ScalingInputs) -> LoadEstimate:
    history = inputs.history
    learned = history.capacity_for(config.gpu_type)
    return estimate_load(
        config,
        inputs.samples or (),
        inputs.ready,
        inputs.gateway_waiting,
        inputs.arrival_rate,
        history.throughput[1] if history.throughput else None,
        inputs.now,
        history.saturated_since,
        learned.capacity if learned else None,
        inputs.just_ready,
    )


def decide_replicas(config: PolicyConfig, inputs: ScalingInputs) -> ScaleDecision:
    """One evaluation: the desired replica count, why, and the history to persist."""
    if inputs.ready > 0 and not inputs.samples:
        return _hold_without_data(config, inputs)
    load = _estimate(config, inputs)
    arrivals = _Arrivals(
        load.arrival_rate if config.min_burst_headroom is not None else None,
        _new_surge(config, inputs.history, inputs.now, load),
    )
    adapted = _with_surge_headroom(config, arrivals.surge or inputs.history.surge, inputs.now)
    if adapted is not config:
        config = adapted
        load = _estimate(config, inputs)
    partial = 0 < len(inputs.samples or ()) < inputs.ready or inputs.arrival_rate_missing
    rec = _recommend(config, inputs, load, load.n_fit, load.n_down, partial)
    # The same without the burst headroom: what the load measured now needs.
    base = min(rec, _recommend(config, inputs, load, load.n_base, load.n_base_down, partial))
    target, recorded = _stabilized(config, inputs, rec, base)
    desired, limited = _rate_limited(config, inputs, target)
    reason = _reason(_Explanation(config, inputs, load, rec, target, desired, limited, partial))
    return _finish(config, inputs, desired, rec, reason, partial, load, recorded, arrivals)


def _finish(
    config: PolicyConfig,
    inputs: ScalingInputs,
    desired: int,
    rec: int | None,
    reason: str,
    degraded: bool,
    load: LoadEstimate | None,
    recorded: int | None,
    arrivals: _Arrivals = _NO_ARRIVALS,
) -> ScaleDecision:
    """The decision for ``desired`` held within the bounds, with the history to persist."""
    lo, hi = config.min_replicas, config.max_replicas
    up, down = config.scale_up, config.scale_down
    clamped = min(max(desired, lo), hi)
    if clamped != desired:
        bound = config.bound("minReplicas" if clamped == lo else "maxReplicas")
        reason = f"{reason}; held within {bound}"
    change = clamped - inputs.current
    history = inputs.history.record(
        inputs.now,
        recorded,
        change,
        up_window=up.stabilization_window_seconds,
        down_window=down.stabilization_window_seconds,
        event_horizon=max(up.period_seconds, down.period_seconds),
        throughput=_relearned(load, inputs.now),
        saturated=None if load is None else load.queueing,
        capacity=_relearned_capacity(config, load, inputs.now),
        arrival_rate=None if arrivals.rate is None else round(arrivals.rate, 3),
        arrival_horizon=SURGE_LOOKBACK_SECONDS,
        surge=arrivals.surge,
    )
    direction: Direction = "up" if change > 0 else "down" if change < 0 else "hold"
    prior = None
    if config.capacity_prior is not None and history.capacity_for(config.gpu_type) is None:
        mix = load.mix if load is not None and load.mix is not None else DEFAULT_MIX
        prior = (config.gpu_type, config.capacity_prior.at(mix))
    return ScaleDecision(clamped, rec, direction, reason, degraded, history, load, prior)


def _hold_without_data(config: PolicyConfig, inputs: ScalingInputs) -> ScaleDecision:
    """Ready replicas but no samples: hold the current count, never scale down blind."""
    current = inputs.current
    if inputs.samples is None:
        why = "the metrics source is unavailable"
    else:
        why = "no ready replica reported metrics"
    reason = f"holding {current} replicas: {why}; never scaling down without data"
    return _finish(config, inputs, current, None, reason, True, None, None)


def _recommend(
    config: PolicyConfig,
    inputs: ScalingInputs,
    load: LoadEstimate,
    n_fit: int,
    n_down: int,
    partial: bool,
) -> int:
    """The unstabilized recommendation: over the targets, go to where they hold; fits on
    fewer with room to spare, go there; between the two, stay (hysteresis)."""
    current = inputs.current
    lo, hi = config.min_replicas, config.max_replicas
    if current == 0:  # activation needs evidence of demand; unknown arrivals are not demand
        floor = 1 if load.load > 0 or (inputs.arrival_rate or 0) > 0 else 0
    else:  # scale to zero needs proof of idleness; unknown arrivals are not proof
        floor = 0 if load.idle else 1
    if n_fit > current:
        rec = n_fit
    elif n_down < current and (load.capacity_known or load.idle):
        rec = n_down
    else:
        rec = current
    rec = min(max(rec, floor, lo), hi)
    waiting_for_loading = inputs.ready == 0 and current > 0
    if partial or waiting_for_loading:
        rec = max(rec, min(current, hi))
    return rec


def _stabilized(
    config: PolicyConfig, inputs: ScalingInputs, rec: int, base: int
) -> tuple[int, int]:
    """(the stabilized target, the recommendation to remember), with HPA semantics.

    Scale-down follows the highest recommendation of its window. With no recommendation in
    the window (first evaluation, a restart after a long outage, data just back) the window
    starts now: this evaluation counts as recommending at least the current count, so the
    first scale-down comes one full window later, never from a single sample.
    The window remembers the base recommendations (the load at the utilization target); the
    burst headroom follows the load measured now, with the 15% hysteresis: a peak holds the
    replicas it needed for a whole window, not its headroom as well.
    """
    now, current = inputs.now, inputs.current
    up, down = config.scale_up, config.scale_down
    recent_down = inputs.history.recommendations_since(now - down.stabilization_window_seconds)
    recorded = base
    if not recent_down and down.stabilization_window_seconds > 0 and current > base:
        recorded = min(current, config.max_replicas)
    # A scale-up window compares its base recommendations, plus the headroom wanted now.
    headroom = rec - base
    recent_up = inputs.history.recommendations_since(now - up.stabilization_window_seconds)
    up_bound = min([rec, *(r + headroom for r in recent_up)])
    down_bound = max([recorded, rec, *recent_down])
    target = current
    if target < up_bound:
        target = up_bound
    if target > down_bound:
        target = down_bound
    return target, recorded


def _rate_limited(config: PolicyConfig, inputs: ScalingInputs, target: int) -> tuple[int, bool]:
    """(the count the rate limits allow on the way to ``target``, whether they held it back)."""
    now, current = inputs.now, inputs.current
    up, down = config.scale_up, config.scale_down
    if target > current and current > 0:
        added, removed = inputs.history.changes_since(now - up.period_seconds)
        limit = max(current - added + removed + up.max_replicas_per_period, current)
        if target > limit:
            return limit, True
    elif target < current:
        added, removed = inputs.history.changes_since(now - down.period_seconds)
        limit = min(current - added + removed - down.max_replicas_per_period, current)
        if target < limit:
            return limit, True
    return target, False


# -- the reason ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Explanation:
    """One evaluation, as the reason sentence describes it."""

    config: PolicyConfig
    inputs: ScalingInputs
    load: LoadEstimate
    rec: int
    target: int
    desired: int
    limited: bool
    partial: bool

    @property
    def current(self) -> int:
        return self.inputs.current

    @property
    def kv_mean(self) -> float:
        ready = self.inputs.ready
        return self.load.kv_total / ready if ready else 0.0

    @property
    def situation(self) -> str:
        """What the replicas show: queue, KV usage, arrivals and throughput."""
        load, ready, config = self.load, self.inputs.ready, self.config
        per_ready = load.waiting / ready if ready else load.waiting
        replicas = "replica" if ready == 1 else "replicas"
        text = (
            f"{load.waiting:g} waiting over {ready} ready {replicas} ({per_ready:.1f} each, "
            f"target {config.target_queue_depth:g}), KV {self.kv_mean:.0%} "
            f"(ceiling {config.kv_cache_usage_ceiling:.0%})"
        )
        if load.arrival_rate is not None:
            text += f", {load.arrival_rate:.3g} req/s arriving"
            if load.throughput:
                text += f" for replicas that complete {load.throughput:.3g} req/s when full"
                if load.throughput_source == "prior":
                    text += " (the sizing's estimate: none seen full yet)"
        return text

    @property
    def fit(self) -> str:
        load = self.load
        text = f"{load.n_fit} replica{'' if load.n_fit == 1 else 's'} carry it within the targets"
        if load.n_fit > load.n_base:
            text += (
                f" ({load.n_base} at {self.config.target_utilization:.0%} utilization, "
                f"{load.n_fit - load.n_base} more for burst headroom)"
            )
        return text

    @property
    def fit_down(self) -> str:
        n_down = self.load.n_down
        return (
            f"{n_down} replica{'' if n_down == 1 else 's'} would carry it with "
            f"{DOWN_TOLERANCE:.0%} to spare"
        )

    @property
    def note(self) -> str:
        """Why a scale-down is off the table, when data is missing."""
        if self.inputs.arrival_rate_missing:
            return "; the arrival rate is unavailable, so not scaling down"
        if self.partial:
            return "; some ready replicas sent no metrics, so not scaling down"
        return ""


def _activating(e: _Explanation) -> str:
    inputs = e.inputs
    return (
        f"activating 0 -> {e.desired}: {inputs.gateway_waiting} request(s) waiting, "
        f"{inputs.arrival_rate or 0:.2g}/s arriving while scaled to zero"
    )


def _scaling_up(e: _Explanation) -> str:
    load, config, loading = e.load, e.config, e.inputs.loading
    ceiling = config.kv_cache_usage_ceiling
    kv_only = load.n_kv > e.current >= (load.n_rate or 0) and not load.queue_over
    why = f"KV usage {e.kv_mean:.0%} above the ceiling {ceiling:.0%}" if kv_only else e.situation
    if e.desired == config.min_replicas > load.n_fit:  # the floor, not the load, asks for it
        why = f"{config.bound('minReplicas')}; {e.situation}"
    text = f"scale up {e.current} -> {e.desired}: {why}; {e.fit}"
    if loading:
        text += f" (the {loading} loading already counted)"
    if e.limited:
        up = config.scale_up
        text += (
            f"; rate-limited from {e.target} (at most {up.max_replicas_per_period} "
            f"per {up.period_seconds}s)"
        )
    if load.n_fit > config.max_replicas:
        text += f"; capped by {config.bound('maxReplicas')}"
    return text + e.note


def _scaling_down(e: _Explanation) -> str:
    why = "idle (nothing running, waiting or arriving)" if e.rec == 0 else e.fit_down
    text = f"scale down {e.current} -> {e.desired}: {why}"
    if e.target < e.desired:
        down = e.config.scale_down
        text += f" (at most {down.max_replicas_per_period} per {down.period_seconds}s)"
    return text


def _holding(e: _Explanation, why: str) -> str:
    return f"holding {e.current}: {why}"


class _Rule(NamedTuple):
    applies: Callable[[_Explanation], bool]
    says: Callable[[_Explanation], str]


#: The reason of a decision: the first rule that applies says it. Order matters: a change
#: before a hold, and among the holds the most specific cause first.
_REASONS = (
    _Rule(
        lambda e: (
            e.current == 0
            and e.desired > 0
            and bool(e.inputs.gateway_waiting or e.inputs.arrival_rate)
        ),
        _activating,
    ),
    _Rule(
        lambda e: e.desired > e.current == 0,
        lambda e: f"scale up 0 -> {e.desired}: {e.config.bound('minReplicas')}",
    ),
    _Rule(lambda e: e.desired > e.current, _scaling_up),
    _Rule(lambda e: e.desired < e.current, _scaling_down),
    _Rule(
        lambda e: e.inputs.ready == 0 and e.current > 0,
        lambda e: _holding(e, "waiting for replicas to load"),
    ),
    _Rule(
        lambda e: e.rec > e.current and e.limited,
        lambda e: _holding(e, f"scale-up rate limit reached; {e.situation}{e.note}"),
    ),
    _Rule(
        lambda e: e.rec > e.current,
        lambda e: _holding(
            e,
            f"{e.rec} recommended, waiting for the scale-up stabilization window "
            f"({e.config.scale_up.stabilization_window_seconds}s) to agree; "
            f"{e.situation}{e.note}",
        ),
    ),
    _Rule(
        lambda e: e.rec < e.current and e.limited,
        lambda e: _holding(e, f"scale-down rate limit reached; {e.fit_down}"),
    ),
    _Rule(
        lambda e: e.rec < e.current,
        lambda e: _holding(
            e,
            f"{e.fit_down}, but the last {e.config.scale_down.stabilization_window_seconds}s "
            f"recommended up to {e.target}",
        ),
    ),
    _Rule(
        lambda e: bool(e.inputs.loading) and (e.load.queue_over or e.load.n_fit > e.inputs.ready),
        lambda e: _holding(e, f"{e.situation}; the {e.inputs.loading} loading cover it{e.note}"),
    ),
    _Rule(
        lambda e: e.load.n_down < e.current and not e.load.capacity_known and not e.load.idle,
        lambda e: _holding(
            e,
            f"{e.situation}; not scaling down before a full replica's throughput is known "
            "(learned when replicas queue beyond the target)",
        ),
    ),
    _Rule(lambda e: True, lambda e: _holding(e, f"{e.situation}{e.note}")),
)


def _reason(e: _Explanation) -> str:
    """A sentence for ``status.autoscaling.reason``: what changed (or not), and why."""
    return next(rule.says(e) for rule in _REASONS if rule.applies(e))
