"""The scalers the benchmark compares: this operator's policy and the baselines a platform team
would try, each written from its public code or documentation, its defaults cited next to the
constants.

* :class:`OperatorScaler`: this operator's policy (``llmservice_operator.autoscale.decide_replicas``)
  with its defaults, history carried between evaluations as the CR status would carry it,
  planning on the gateway's arrival rate (``spec.scaling.arrivalRateQuery``) or, with
  ``gateway_rate=False``, on the replicas' completion rates.
* :class:`HpaScaler`: the Kubernetes HPA's algorithm (``pkg/controller/podautoscaler``) on a
  Pods metric with an AverageValue target (``vllm:num_requests_waiting``,
  ``vllm:num_requests_running`` or ``vllm:kv_cache_usage_perc``):
  ``ceil(currentReplicas x avg / target)`` with the 10% tolerance; pods without a sample (still
  loading) count as 0 on a scale-up and as the target on a scale-down; the default behaviour:
  scale-up at most max(+4 pods, +100%) per 15 s with no stabilization, scale-down after a 300 s
  stabilization window (the highest recommendation of the window), up to 100% per 15 s; 15 s
  sync period.
* :class:`KedaScaler`: a KEDA ScaledObject with a Prometheus trigger (AverageValue, the same
  threshold) and KEDA's defaults: ``pollingInterval`` 30 s, ``cooldownPeriod`` 300 s,
  ``minReplicaCount`` 0. KEDA itself only moves 0 <-> 1 (activation when the query is above
  ``activationThreshold`` 0, scale to zero after ``cooldownPeriod`` without activity); from
  1 to N the HPA it creates scales on the External metric: ``ceil(sum / target)`` against
  ``status.replicas``, HPA default behaviour. The query adds the gateway's pending requests to
  the engines' ones, or KEDA could never wake a deployment at zero (no pod, no metric).
* :class:`WvaScaler`: llm-d's workload-variant-autoscaler, saturation analyzer V2
  (``internal/engines/analyzers/saturation_v2/analyzer.go``): demand and supply in KV tokens,
  a 60 s cycle, the replicas it wants published to an HPA with the WVA chart's behaviour.
* :class:`ApaScaler`: AIBrix's APA (``pkg/controller/podautoscaler/algorithm/apa.go``): the
  per-pod mean of a metric over a 180 s window against a target, +-10% tolerance, at most 2x
  up or down per decision, a 300 s scale-down cooldown.
* :class:`DynamoScaler`: NVIDIA Dynamo's planner, throughput-based scaling in aggregated mode
  (``components/src/dynamo/planner/core/throughput_scaling.py``): every 180 s, the last
  interval's request rate over the per-engine rate its performance model says meets the TTFT
  and ITL targets.
* :class:`StaticScaler`: a fixed count (provisioned for the peak).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from llmservice_operator.autoscale import (
    PolicyConfig,
    ReplicaSample,
    ScaleHistory,
    ScalingInputs,
    decide_replicas,
)

from .fleet import FleetView

__all__ = [
    "ApaScaler",
    "DynamoScaler",
    "HpaScaler",
    "KedaScaler",
    "Metric",
    "OperatorScaler",
    "StaticScaler",
    "WvaScaler",
    "metric_value",
]

#: The per-pod gauge a metric-driven scaler reads: ``vllm:num_requests_waiting``,
#: ``vllm:num_requests_running`` or ``vllm:kv_cache_usage_perc``.
Metric = Literal["waiting", "running", "kv"]


def metric_value(sample: ReplicaSample, metric: Metric) -> float:
    """One replica's ``metric`` at the last scrape."""
    if metric == "waiting":
        return sample.waiting
    if metric == "running":
        return sample.running
    return sample.kv_cache_usage or 0.0


@dataclass
class StaticScaler:
    replicas: int
    name: str = "static (peak)"
    interval: float = 60.0

    def evaluate(self, view: FleetView) -> int:
        return self.replicas


@dataclass
class OperatorScaler:
    config: PolicyConfig
    name: str = "operator (this policy)"
    interval: float = 15.0
    history: ScaleHistory = field(default_factory=ScaleHistory)
    decisions: int = 0
    degraded: int = 0
    gateway_rate: bool = True
    """Plan on the gateway's arrival rate (a service with ``spec.scaling.arrivalRateQuery``);
    False: on the replicas' completions alone, as without one."""

    def evaluate(self, view: FleetView) -> int:
        decision = decide_replicas(
            self.config,
            ScalingInputs(
                now=view.now,
                ready=view.ready,
                loading=view.loading,
                current=view.desired,
                samples=view.samples if view.scraped else None,
                history=self.history,
                gateway_waiting=view.gateway_waiting if self.gateway_rate else 0,
                arrival_rate=view.arrival_rate if self.gateway_rate else None,
            ),
        )
        self.history = decision.history
        self.decisions += 1
        self.degraded += decision.degraded
        return decision.desired_replicas


@dataclass(frozen=True)
class _Policy:
    kind: str  # "Pods" | "Percent"
    value: int
    period_s: float


@dataclass(frozen=True)
class HpaRules:
    stabilization_s: float
    policies: tuple[_Policy, ...]


#: autoscaling/v2 defaults (pkg/apis/autoscaling/v2/defaults.go).
HPA_SCALE_UP = HpaRules(0.0, (_Policy("Pods", 4, 15.0), _Policy("Percent", 100, 15.0)))
HPA_SCALE_DOWN = HpaRules(300.0, (_Policy("Percent", 100, 15.0),))
HPA_TOLERANCE = 0.1


@dataclass
class _HpaCore:
    """The HPA controller's normalization: stabilization, then rate limits, then min/max."""

    min_replicas: int
    max_replicas: int
    up: HpaRules = HPA_SCALE_UP
    down: HpaRules = HPA_SCALE_DOWN
    recommendations: list[tuple[float, int]] = field(default_factory=list)
    up_events: list[tuple[float, int]] = field(default_factory=list)
    down_events: list[tuple[float, int]] = field(default_factory=list)

    def normalize(self, now: float, current: int, recommendation: int) -> int:
        # stabilizeRecommendationWithBehaviors
        up_cut, down_cut = now - self.up.stabilization_s, now - self.down.stabilization_s
        up_rec = down_rec = recommendation
        for t, rec in self.recommendations:
            if t > up_cut:
                up_rec = min(up_rec, rec)
            if t > down_cut:
                down_rec = max(down_rec, rec)
        horizon = max(self.up.stabilization_s, self.down.stabilization_s)
        self.recommendations = [(t, r) for t, r in self.recommendations if t > now - horizon]
        self.recommendations.append((now, recommendation))
        desired = current
        if desired < up_rec:
            desired = up_rec
        if desired > down_rec:
            desired = down_rec
        # convertDesiredReplicasWithBehaviorRate
        if desired > current:
            limit = max(self._up_limit(now, current), current)
            desired = min(desired, min(self.max_replicas, limit))
        elif desired < current:
            limit = min(self._down_limit(now, current), current)
            desired = max(desired, max(self.min_replicas, limit))
        desired = min(max(desired, self.min_replicas), self.max_replicas)
        if desired > current:
            self.up_events.append((now, desired - current))
        elif desired < current:
            self.down_events.append((now, current - desired))
        return desired

    def _changes(self, now: float, period: float) -> tuple[int, int]:
        added = sum(n for t, n in self.up_events if t > now - period)
        removed = sum(n for t, n in self.down_events if t > now - period)
        return added, removed

    def _up_limit(self, now: float, current: int) -> int:
        result = -(2**31)
        for policy in self.up.policies:
            added, removed = self._changes(now, policy.period_s)
            start = current - added + removed
            if policy.kind == "Pods":
                proposed = start + policy.value
            else:
                proposed = math.ceil(start * (1 + policy.value / 100))
            result = max(result, proposed)
        return result

    def _down_limit(self, now: float, current: int) -> int:
        result = 2**31
        for policy in self.down.policies:
            added, removed = self._changes(now, policy.period_s)
            start = current - added + removed
            if policy.kind == "Pods":
                proposed = start - policy.value
            else:
                proposed = int(start * (1 - policy.value / 100))
            result = min(result, proposed)
        return result


@dataclass
class HpaScaler:
    """An ``autoscaling/v2`` HPA, Pods metric ``vllm:num_requests_waiting``, AverageValue."""

    target: float
    min_replicas: int
    max_replicas: int
    name: str = "HPA (defaults)"
    interval: float = 15.0
    metric: Metric = "waiting"
    core: _HpaCore = field(init=False)

    def __post_init__(self) -> None:
        self.core = _HpaCore(self.min_replicas, self.max_replicas)

    def evaluate(self, view: FleetView) -> int:
        current = view.desired
        if current == 0:
            return 0  # ScalingDisabled: the HPA does not act on a target scaled to zero
        if not view.samples:
            return current  # FailedGetPodsMetric: no scaling without metrics
        rec = self.recommend(view)
        return self.core.normalize(view.now, current, rec)

    def recommend(self, view: FleetView) -> int:
        """calcPlainMetricReplicas for a Pods metric."""
        current = view.desired
        values = [metric_value(s, self.metric) for s in view.samples]
        missing = view.ready + view.loading - len(values)
        ratio = (sum(values) / len(values)) / self.target
        if missing == 0:
            if abs(1.0 - ratio) <= HPA_TOLERANCE:
                return current
            return math.ceil(ratio * len(values))
        if ratio < 1.0:
            values += [self.target] * missing
        elif ratio > 1.0:
            values += [0.0] * missing
        new_ratio = (sum(values) / len(values)) / self.target
        if (
            abs(1.0 - new_ratio) <= HPA_TOLERANCE
            or (ratio < 1.0 < new_ratio)
            or (ratio > 1.0 > new_ratio)
        ):
            return current
        new = math.ceil(new_ratio * len(values))
        if (new_ratio < 1.0 and new > current) or (new_ratio > 1.0 and new < current):
            return current
        return new


@dataclass
class KedaScaler:
    """A KEDA ScaledObject (Prometheus trigger) and the HPA it owns."""

    target: float
    min_replica_count: int
    max_replicas: int
    polling_interval: float = 30.0
    cooldown_period: float = 300.0
    name: str = "KEDA (defaults)"
    interval: float = 15.0
    metric: Metric = "waiting"
    core: _HpaCore = field(init=False)
    last_active: float | None = 0.0  # active just before the trace starts (a running system)
    next_poll: float = 0.0
    active: bool = False

    def __post_init__(self) -> None:
        self.core = _HpaCore(max(1, self.min_replica_count), self.max_replicas)

    def _query(self, view: FleetView) -> float:
        # sum(<metric>) + the gateway's pending requests
        return sum(metric_value(s, self.metric) for s in view.samples) + view.gateway_waiting

    def evaluate(self, view: FleetView) -> int:
        current = view.desired
        value = self._query(view)
        # The KEDA operator's loop: activity and scale to/from zero, every pollingInterval.
        if view.now >= self.next_poll:
            self.next_poll = view.now + self.polling_interval
            self.active = value > 0  # activationThreshold 0
            if self.active:
                self.last_active = view.now
            if current == 0 and self.active:
                return max(1, self.min_replica_count)
            if (
                current > 0
                and not self.active
                and self.min_replica_count == 0
                and (
                    self.last_active is None or view.now - self.last_active >= self.cooldown_period
                )
            ):
                self.core.recommendations.clear()
                return 0
        if current == 0:
            return 0
        if not view.scraped:
            return current
        # The HPA on the External metric (AverageValue): GetExternalPerPodMetricReplicas.
        status_replicas = current
        ratio = value / (self.target * status_replicas)
        rec = current if abs(1.0 - ratio) <= HPA_TOLERANCE else math.ceil(value / self.target)
        return self.core.normalize(view.now, current, rec)


# -- llm-d workload-variant-autoscaler ---------------------------------------------------------

#: llm-d workload-variant-autoscaler, saturation analyzer V2 ("saturation-token-based"):
#: thresholds from config/manager/configmap-saturation-scaling.yaml (``kvCacheThreshold``
#: 0.80, ``queueLengthThreshold`` 5) and internal/interfaces/saturation_scaling.go
#: (``DefaultScaleUpThreshold`` 0.85, ``DefaultScaleDownBoundary`` 0.70).
WVA_KV_CACHE_THRESHOLD = 0.80
WVA_QUEUE_LENGTH_THRESHOLD = 5.0
WVA_SCALE_UP_THRESHOLD = 0.85
WVA_SCALE_DOWN_BOUNDARY = 0.70
#: ``GLOBAL_OPT_INTERVAL`` (config/manager/configmap.yaml, internal/config/loader.go): 60 s.
WVA_CYCLE_S = 60.0
#: k2 history: ``RollingAverageWindowSize`` observations per output-length bucket, buckets
#: split at ``ShortOutputThreshold`` 100 and ``MediumOutputThreshold`` 500 output tokens
#: (saturation_v2/constants.go).
WVA_ROLLING_WINDOW = 10
WVA_OUTPUT_BUCKETS = (100.0, 500.0)
#: The HPA the WVA chart puts on its desired-replicas metric
#: (charts/workload-variant-autoscaler/values.yaml ``hpa.behavior``): 240 s stabilization up
#: and down, at most 10 pods per 150 s either way.
WVA_HPA_UP = HpaRules(240.0, (_Policy("Pods", 10, 150.0),))
WVA_HPA_DOWN = HpaRules(240.0, (_Policy("Pods", 10, 150.0),))


@dataclass
class WvaScaler:
    """The WVA's saturation analyzer V2 and the HPA that applies what it publishes.

    Every ``cycle_s`` (60 s), per ready replica from the last minute's peaks
    (``max_over_time(vllm:kv_cache_usage_perc[1m])``, ``...num_requests_waiting[1m]``):

    * demand = tokens in use (``kv x total KV tokens``) + queue x mean prompt tokens;
    * ``k1 = kvCacheThreshold x total KV tokens`` (memory-bound), ``k2`` (compute-bound):
      the tokens in use when the queue reaches ``queueLengthThreshold`` (observed, kept as a
      rolling average of 10 per output-length bucket), else that history, else derived from
      the engine's arguments ``min(B x O / (I + O), S) x (I + O / 2)`` (``B`` the step's token
      budget, ``S`` ``max_num_seqs``, ``I``/``O`` the mean prompt/output tokens);
      capacity ``min(k1, k2)``; the variant's per-replica capacity is the median;
    * requests queued at the gateway add ``queue x (I + O)`` tokens of demand;
    * ``required = demand / 0.85 - (ready + pending) x capacity``: add
      ``ceil(required / capacity)``; else ``spare = ready x capacity - demand / 0.70``: remove
      ``floor(spare / capacity)`` (never the last replica).

    The HPA reads the published count as an External metric with AverageValue 1 (its 10%
    tolerance applies) every 15 s, with the chart's behaviour (``hpa_up``/``hpa_down``).
    """

    min_replicas: int
    max_replicas: int
    kv_capacity_tokens: int
    max_num_seqs: int
    max_num_batched_tokens: int = 8192
    kv_cache_threshold: float = WVA_KV_CACHE_THRESHOLD
    queue_length_threshold: float = WVA_QUEUE_LENGTH_THRESHOLD
    scale_up_threshold: float = WVA_SCALE_UP_THRESHOLD
    scale_down_boundary: float = WVA_SCALE_DOWN_BOUNDARY
    cycle_s: float = WVA_CYCLE_S
    hpa_up: HpaRules = WVA_HPA_UP
    hpa_down: HpaRules = WVA_HPA_DOWN
    name: str = "WVA (defaults)"
    interval: float = 15.0
    core: _HpaCore = field(init=False)
    published: int | None = None
    next_cycle: float = 0.0
    history: dict[str, deque[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.core = _HpaCore(self.min_replicas, self.max_replicas, self.hpa_up, self.hpa_down)

    def evaluate(self, view: FleetView) -> int:
        current = view.desired
        if view.now >= self.next_cycle:
            self.next_cycle = view.now + self.cycle_s
            if view.samples:
                self.published = self.analyze(view)
        if self.published is None or current == 0:
            return current
        # The HPA on the External metric, AverageValue 1: ceil(value / 1) outside the tolerance.
        ratio = self.published / current
        rec = current if abs(1.0 - ratio) <= HPA_TOLERANCE else self.published
        return self.core.normalize(view.now, current, rec)

    def analyze(self, view: FleetView) -> int:
        """One saturation analysis: the replicas the variant should have."""
        total = self.kv_capacity_tokens
        capacities: list[float] = []
        demand = 0.0
        inputs: list[float] = []
        outputs: list[float] = []
        for sample, peak in zip(view.samples, view.peaks, strict=True):
            avg_in, avg_out = _mean_tokens(sample)
            if avg_in or avg_out:
                inputs.append(avg_in)
                outputs.append(avg_out)
            in_use = round(peak.kv_cache_usage * total)
            demand += in_use + (peak.waiting * avg_in if avg_in > 0 else 0.0)
            k1 = total * self.kv_cache_threshold
            k2 = self._k2(peak.waiting, in_use, avg_in, avg_out, k1)
            capacities.append(min(k1, k2))
        capacities.sort()
        per_replica = capacities[len(capacities) // 2]
        if inputs:  # requests queued upstream (the gateway), at the model's mean request
            demand += view.gateway_waiting * (
                sum(inputs) / len(inputs) + sum(outputs) / len(outputs)
            )
        current, pending = view.desired, view.loading
        ready = max(0, current - pending)
        required = max(0.0, demand / self.scale_up_threshold - (ready + pending) * per_replica)
        spare = max(0.0, ready * per_replica - demand / self.scale_down_boundary)
        if per_replica <= 0:
            return current
        if required > 0:
            return current + math.ceil(required / per_replica)
        if spare > 0:
            return current - min(math.floor(spare / per_replica), max(0, current - 1))
        return current

    def _k2(self, queue: float, in_use: int, avg_in: float, avg_out: float, k1: float) -> float:
        """computeK2: observed at saturation, else history, else derived from the engine's
        arguments, else k1."""
        bucket = "short" if avg_out < WVA_OUTPUT_BUCKETS[0] else "medium"
        if avg_out >= WVA_OUTPUT_BUCKETS[1]:
            bucket = "long"
        if queue >= int(self.queue_length_threshold) and in_use > 0:
            self.history.setdefault(bucket, deque(maxlen=WVA_ROLLING_WINDOW)).append(in_use)
            return float(in_use)
        seen = self.history.get(bucket)
        if seen:
            return int(sum(seen) / len(seen))
        if avg_out > 0:
            steady = min(
                self.max_num_batched_tokens * avg_out / (avg_in + avg_out), self.max_num_seqs
            )
            derived = int(steady * (avg_in + avg_out / 2))
            if derived > 0:
                return float(derived)
        return k1


def _mean_tokens(sample: ReplicaSample) -> tuple[float, float]:
    """(mean prompt, mean output tokens) of the requests a replica completed over the last
    minute (the histograms' sum rate over count rate); zeros when it completed none."""
    rates = sample.token_rates
    if rates is None or rates.completions_per_second <= 0:
        return 0.0, 0.0
    done = rates.completions_per_second
    return rates.prompt_tokens_per_second / done, rates.generation_tokens_per_second / done


# -- AIBrix APA --------------------------------------------------------------------------------

#: AIBrix PodAutoscaler defaults (pkg/controller/podautoscaler/context/context.go,
#: NewBaseScalingContext): ``UpFluctuationTolerance`` and ``DownFluctuationTolerance`` 0.1,
#: ``MaxScaleUpRate`` and ``MaxScaleDownRate`` 2, ``ScaleUpCooldownWindow`` 0 s,
#: ``ScaleDownCooldownWindow`` 300 s.
APA_UP_TOLERANCE = 0.1
APA_DOWN_TOLERANCE = 0.1
APA_MAX_SCALE_UP_RATE = 2.0
APA_MAX_SCALE_DOWN_RATE = 2.0
APA_SCALE_UP_COOLDOWN_S = 0.0
APA_SCALE_DOWN_COOLDOWN_S = 300.0
#: The stable window the APA reads the mean of (metrics/client.go
#: ``DefaultStableWindowDuration``, ``observeWindowSeconds`` 180).
APA_STABLE_WINDOW_S = 180.0


@dataclass
class ApaScaler:
    """AIBrix's APA on a per-pod metric (the sample's ``gpu_cache_usage_perc`` target 0.5).

    Each evaluation records the mean over the ready pods; the use per pod is the mean over the
    stable window (180 s). ``ratio = use / target``: above ``1 + up_tolerance`` the count goes
    to ``ceil(current x ratio)``, at most ``ceil(2 x current)``; below ``1 - down_tolerance``
    to ``ceil(current x ratio)``, at least ``floor(current / 2)``. Then the cooldown windows as
    the controller's ``stabilizeRecommendation`` applies them: a scale-up takes the highest
    recommendation of the scale-up window (0 s: the one of now), a scale-down the *lowest* of the
    300 s scale-down window (podautoscaler_controller.go), then min/max.
    """

    target: float
    min_replicas: int
    max_replicas: int
    metric: Metric = "kv"
    up_tolerance: float = APA_UP_TOLERANCE
    down_tolerance: float = APA_DOWN_TOLERANCE
    max_scale_up_rate: float = APA_MAX_SCALE_UP_RATE
    max_scale_down_rate: float = APA_MAX_SCALE_DOWN_RATE
    scale_up_cooldown_s: float = APA_SCALE_UP_COOLDOWN_S
    scale_down_cooldown_s: float = APA_SCALE_DOWN_COOLDOWN_S
    stable_window_s: float = APA_STABLE_WINDOW_S
    name: str = "APA (defaults)"
    interval: float = 15.0
    window: list[tuple[float, float]] = field(default_factory=list)
    recommendations: list[tuple[float, int]] = field(default_factory=list)

    def evaluate(self, view: FleetView) -> int:
        current = view.desired
        if not view.samples:
            return current
        values = [metric_value(s, self.metric) for s in view.samples]
        self.window = [(t, v) for t, v in self.window if t > view.now - self.stable_window_s]
        self.window.append((view.now, sum(values) / len(values)))
        use = sum(v for _, v in self.window) / len(self.window)
        rec = self.recommend(current, use)
        rec = self.stabilize(view.now, current, rec)
        return min(max(rec, self.min_replicas), self.max_replicas)

    def recommend(self, current: int, use: float) -> int:
        """computeTargetReplicas."""
        ratio = use / self.target
        if ratio > 1 + self.up_tolerance:
            return min(math.ceil(current * ratio), math.ceil(self.max_scale_up_rate * current))
        if ratio < 1 - self.down_tolerance:
            floor = math.floor(current / self.max_scale_down_rate)
            return max(math.ceil(current * ratio), floor)
        return current

    def stabilize(self, now: float, current: int, rec: int) -> int:
        """stabilizeRecommendation: the window's max on the way up, its min on the way down."""
        horizon = max(self.scale_up_cooldown_s, self.scale_down_cooldown_s)
        self.recommendations = [(t, r) for t, r in self.recommendations if t > now - horizon]
        self.recommendations.append((now, rec))
        if rec == current:
            return current
        up = rec > current
        window = self.scale_up_cooldown_s if up else self.scale_down_cooldown_s
        inside = [r for t, r in self.recommendations if t > now - window]
        if not inside:
            return rec
        return max(inside) if up else min(inside)


# -- NVIDIA Dynamo planner ---------------------------------------------------------------------

#: NVIDIA Dynamo planner defaults (components/src/dynamo/planner/config/defaults.py):
#: ``throughput_adjustment_interval`` 180 s, ``ttft`` 500 ms, ``itl`` 50 ms, ``min_endpoint`` 1.
DYNAMO_ADJUSTMENT_INTERVAL_S = 180.0
DYNAMO_TTFT_MS = 500.0
DYNAMO_ITL_MS = 50.0
DYNAMO_MIN_ENDPOINT = 1

#: Wall time of one engine iteration: (prefill tokens, decode batch, decode KV tokens) -> s.
WallTime = Callable[[float, int, float], float]


@dataclass
class DynamoScaler:
    """Dynamo's planner, throughput-based scaling of an aggregated engine (``mode: agg``).

    Every ``interval_s`` (180 s): the request rate, mean prompt (ISL) and output (OSL) of the
    last interval, as the frontend counted them; the next interval's are predicted equal (the
    ``constant`` load predictor; the default ``arima`` is not reproduced). The engine's rate
    under both targets comes from ``find_best_engine_agg_rps``
    (``core/perf_model/agg.py``): the largest decode batch ``bs`` (capped by the KV pool,
    ``max_num_seqs`` and the prefill/decode balance ``isl / (B - bs) <= osl``) whose iteration
    time ``wt(bs x isl / osl prefill tokens, bs x (isl + osl / 2) KV tokens)`` stays within the
    ITL target and whose TTFT estimate (the mean prompt's chunks ahead of a new one) within
    the TTFT target; ``engine_rps = bs / (osl x wt)``. Replicas:
    ``max(ceil(demand_rps / engine_rps), min_endpoint)``.

    Its performance model is a regression on profiled forward passes; here it is the engine's
    own step time (``wall_time``), which the regression would fit. The planner's GPU budget
    (``max_gpu_budget`` 8) is raised to the benchmark's bounds: 8 GPUs are 4 of these replicas,
    fewer than the traces' peaks need.
    """

    min_replicas: int
    max_replicas: int
    wall_time: WallTime
    kv_capacity_tokens: int
    max_num_seqs: int
    max_num_batched_tokens: int = 8192
    ttft_ms: float = DYNAMO_TTFT_MS
    itl_ms: float = DYNAMO_ITL_MS
    interval_s: float = DYNAMO_ADJUSTMENT_INTERVAL_S
    name: str = "Dynamo planner (defaults)"
    interval: float = 15.0
    next_adjustment: float | None = None
    last: tuple[float, tuple[int, int, int]] | None = None
    desired: int | None = None

    def evaluate(self, view: FleetView) -> int:
        if self.last is None:
            self.last = (view.now, view.arrived)
            self.next_adjustment = view.now + self.interval_s
        if self.next_adjustment is not None and view.now >= self.next_adjustment:
            self.next_adjustment = view.now + self.interval_s
            (since, before), after = self.last, view.arrived
            self.last = (view.now, after)
            requests = after[0] - before[0]
            if requests > 0:
                isl = (after[1] - before[1]) / requests
                osl = max(1.0, (after[2] - before[2]) / requests)
                engine_rps = self.engine_rps(isl, osl)
                if engine_rps > 0:
                    demand = requests / (view.now - since)
                    self.desired = max(math.ceil(demand / engine_rps), DYNAMO_MIN_ENDPOINT)
        if self.desired is None:
            return view.desired
        return min(max(self.desired, self.min_replicas), self.max_replicas)

    def engine_rps(self, isl: float, osl: float) -> float:
        """find_best_engine_agg_rps: requests/s of one engine under the ITL and TTFT targets."""
        budget = self.max_num_batched_tokens
        context = isl + osl / 2
        kv_cap = max(1, int(self.kv_capacity_tokens / max(1.0, context)))
        hard_cap = min(kv_cap, self.max_num_seqs, budget - 1)
        lo, hi = 1, max(1, hard_cap)
        while lo < hi:  # the prefill/decode balance: isl / (budget - bs) <= osl
            mid = (lo + hi + 1) // 2
            if budget - mid > 0 and isl / (budget - mid) <= osl:
                lo = mid
            else:
                hi = mid - 1
        best = 0.0
        for bs in range(1, lo + 1):
            prefill = min(bs * isl / osl, budget)
            wt = self.wall_time(prefill, bs, bs * context)
            ttft = self._ttft(prefill + isl, bs, bs * context)
            if wt * 1e3 > self.itl_ms or ttft * 1e3 > self.ttft_ms:
                if bs == 1:
                    best = 1.0 / (osl * wt)
                break
            best = bs / (osl * wt)
        return best

    def _ttft(self, tokens: float, batch: int, decode_kv: float) -> float:
        """estimate_next_ttft: the chunks of ``tokens`` prefill tokens, each an iteration."""
        total, budget = 0.0, self.max_num_batched_tokens
        while tokens > 0:
            chunk = min(tokens, budget)
            total += self.wall_time(chunk, batch, decode_kv)
            tokens -= chunk
        return total
