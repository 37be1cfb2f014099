"""The scalers the benchmark compares, all on the same metric (``vllm:num_requests_waiting``).

* :class:`OperatorScaler`: this operator's policy (``llmservice_operator.autoscale.decide_replicas``)
  with its defaults, history carried between evaluations as the CR status would carry it,
  planning on the gateway's arrival rate (``spec.scaling.arrivalRateQuery``) or, with
  ``gateway_rate=False``, on the replicas' completion rates.
* :class:`HpaScaler`: the Kubernetes HPA's algorithm (``pkg/controller/podautoscaler``) on a
  Pods metric with an AverageValue target: ``ceil(currentReplicas x avg / target)`` with the
  10% tolerance; pods without a sample (still loading) count as 0 on a scale-up and as the
  target on a scale-down; the default behaviour: scale-up at most max(+4 pods, +100%) per 15 s
  with no stabilization, scale-down after a 300 s stabilization window (the highest
  recommendation of the window), up to 100% per 15 s; 15 s sync period.
* :class:`KedaScaler`: a KEDA ScaledObject with a Prometheus trigger (AverageValue, the same
  threshold) and KEDA's defaults: ``pollingInterval`` 30 s, ``cooldownPeriod`` 300 s,
  ``minReplicaCount`` 0. KEDA itself only moves 0 <-> 1 (activation when the query is above
  ``activationThreshold`` 0, scale to zero after ``cooldownPeriod`` without activity); from
  1 to N the HPA it creates scales on the External metric: ``ceil(sum / target)`` against
  ``status.replicas``, HPA default behaviour. The query adds the gateway's pending requests to
  the engines' waiting ones, or KEDA could never wake a deployment at zero (no pod, no metric).
* :class:`StaticScaler`: a fixed count (provisioned for the peak).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from llmservice_operator.autoscale import (
    PolicyConfig,
    ScaleHistory,
    ScalingInputs,
    decide_replicas,
)

from .fleet import FleetView

__all__ = ["HpaScaler", "KedaScaler", "OperatorScaler", "StaticScaler"]


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
        values = [s.waiting for s in view.samples]
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
    core: _HpaCore = field(init=False)
    last_active: float | None = 0.0  # active just before the trace starts (a running system)
    next_poll: float = 0.0
    active: bool = False

    def __post_init__(self) -> None:
        self.core = _HpaCore(max(1, self.min_replica_count), self.max_replicas)

    def _query(self, view: FleetView) -> float:
        # sum(vllm:num_requests_waiting) + the gateway's pending requests
        return sum(s.waiting for s in view.samples) + view.gateway_waiting

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
