"""A small simulated world for the step machine: Deployments, a fake Prometheus, a clock.

Each :meth:`World.tick` does what the reconcile will do: build a :class:`RolloutInput` from
what exists, call :func:`step` (again with smoke or query results when asked), write the
status (through its wire form, as the API server would store it), apply the replicas and drop
the Deployments the decision leaves out. Pods become Ready one tick after they are asked for,
unless the revision is marked never-ready. Invariants are checked on every tick.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from llmservice_operator.api.spec import RolloutSpec, SLOSpec
from llmservice_operator.api.status import RevisionsStatus, RolloutStatus
from llmservice_operator.rollout.analysis import (
    ERROR_RATE,
    SAMPLE_COUNT,
    STABLE_SAMPLE_COUNT,
    TPOT,
    TPOT_VS_STABLE,
    TTFT,
    TTFT_VS_STABLE,
    QueryResult,
    ResolvedCheck,
    Series,
)
from llmservice_operator.rollout.machine import (
    DeploymentObservation,
    RolloutDecision,
    RolloutInput,
    ServiceRef,
    step,
)
from llmservice_operator.rollout.smoke_verdict import SmokeResult

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
SERVICE = ServiceRef(namespace="ml", name="chat", vllm_version="0.33.0")
OLD, NEW, NEWER = "7c9f2d0000", "b41e070000", "c0ffee0000"


@dataclass
class Behaviour:
    """How one revision behaves, as Prometheus would see it over one window."""

    requests: float = 600.0
    ttft_ms: float = 400.0
    tpot_ms: float = 30.0
    error_rate: float = 0.0
    ready: bool = True
    smoke: SmokeResult = field(default_factory=lambda: SmokeResult(True, False, "ok"))


@dataclass
class World:
    spec: RolloutSpec
    slo: SLOSpec = field(default_factory=lambda: SLOSpec(ttft_p99_ms=800, max_error_rate=0.01))
    total: int = 4
    now: datetime = T0
    revision: str = OLD
    behaviours: dict[str, Behaviour] = field(default_factory=dict)
    deployments: dict[str, DeploymentObservation] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    revision_spec: dict[str, Any] | None = None
    prometheus_down: bool = False
    decisions: list[RolloutDecision] = field(default_factory=list)
    queries: list[tuple[ResolvedCheck, ...]] = field(default_factory=list)
    smoke_tests: int = 0
    tick_seconds: float = 10.0
    check_capacity: bool = True

    # -- the world ------------------------------------------------------------------------

    def behaviour(self, revision: str) -> Behaviour:
        return self.behaviours.setdefault(revision, Behaviour())

    def rollout_status(self) -> RolloutStatus | None:
        raw = self.status.get("rollout")
        return None if raw is None else RolloutStatus.model_validate(raw)

    def revisions_status(self) -> RevisionsStatus | None:
        raw = self.status.get("revisions")
        return None if raw is None else RevisionsStatus.model_validate(raw)

    def query(self, checks: tuple[ResolvedCheck, ...]) -> dict[str, QueryResult]:
        self.queries.append(checks)
        revisions = self.revisions_status()
        assert revisions is not None and revisions.candidate is not None
        cand = self.behaviour(revisions.candidate)
        stable = self.behaviour(revisions.stable or "")
        values: dict[str, float] = {
            SAMPLE_COUNT: cand.requests,
            STABLE_SAMPLE_COUNT: stable.requests,
            TTFT: cand.ttft_ms if cand.requests else float("nan"),
            TPOT: cand.tpot_ms if cand.requests else float("nan"),
            ERROR_RATE: cand.error_rate if cand.requests else float("nan"),
            TTFT_VS_STABLE: 100 * (cand.ttft_ms / stable.ttft_ms - 1),
            TPOT_VS_STABLE: 100 * (cand.tpot_ms / stable.tpot_ms - 1),
        }
        out: dict[str, QueryResult] = {}
        for check in checks:
            if self.prometheus_down:
                out[check.name] = "Post http://prometheus:9090/api/v1/query: connection refused"
            else:  # the background analysis' checks come as "background/<check>"
                name = check.name.rsplit("/", 1)[-1]
                out[check.name] = [Series({}, values.get(name, 0.0))]
        return out

    def input(self) -> RolloutInput:
        return RolloutInput(
            spec=self.spec,
            slo=self.slo,
            service=SERVICE,
            revision=self.revision,
            total_replicas=self.total,
            deployments=dict(self.deployments),
            status=self.rollout_status(),
            revisions=self.revisions_status(),
            now=self.now,
            controls=dict(self.annotations),
            revision_spec=self.revision_spec,
        )

    def decide(self) -> RolloutDecision:
        rollout_input = self.input()
        decision = step(rollout_input)
        if decision.smoke is not None:
            self.smoke_tests += 1
            result = self.behaviour(decision.smoke.revision).smoke
            decision = step(replace(rollout_input, smoke=result))
        if decision.measure is not None:
            decision = step(replace(rollout_input, measurement=self.query(decision.measure)))
        assert decision.measure is None and decision.smoke is None, "asked twice in one tick"
        return decision

    def tick(self) -> RolloutDecision:
        decision = self.decide()
        self.check_invariants(decision)
        self.decisions.append(decision)
        # write status through its wire form (what the API server stores)
        status: dict[str, Any] = {"revisions": decision.revisions.to_wire()}
        if decision.rollout is not None:
            status["rollout"] = decision.rollout.to_wire()
        self.status = json.loads(json.dumps(status, allow_nan=False))
        for key in decision.consumed:
            self.annotations.pop(key, None)
        # pods that were asked for last tick are Ready now; this tick's asks become Ready next
        observed: dict[str, DeploymentObservation] = {}
        for revision, replicas in decision.replicas.items():
            before = self.deployments.get(revision, DeploymentObservation(0, 0))
            ready = before.replicas if self.behaviour(revision).ready else 0
            observed[revision] = DeploymentObservation(replicas, min(ready, replicas))
        self.deployments = observed
        self.now += timedelta(seconds=self.tick_seconds)
        return decision

    def run(self, seconds: float) -> list[RolloutDecision]:
        out = []
        end = self.now + timedelta(seconds=seconds)
        while self.now < end:
            out.append(self.tick())
        return out

    def run_until(
        self, done: Callable[[RolloutDecision], bool], limit_seconds: float = 3 * 3600
    ) -> RolloutDecision:
        end = self.now + timedelta(seconds=limit_seconds)
        while self.now < end:
            decision = self.tick()
            if done(decision):
                return decision
        raise AssertionError(f"not done after {limit_seconds}s: {self.status}")

    def settle_initial(self) -> None:
        """The first revision, serving and Ready."""
        self.tick()
        self.tick()

    # -- invariants --------------------------------------------------------------------------

    def check_invariants(self, decision: RolloutDecision) -> None:
        """Capacity is never given up before something Ready takes over (see the docs)."""
        revisions = self.revisions_status()
        if revisions is None or revisions.stable is None or not self.check_capacity:
            return
        stable, cand = revisions.stable, revisions.candidate
        traffic = decision.traffic
        ready = {r: o.ready for r, o in self.deployments.items()}
        if traffic.active_revision is not None:
            assert traffic.active_revision in decision.replicas, "traffic to a removed revision"
        if cand is None or stable not in self.deployments:
            return
        if decision.revisions.stable == cand:  # promoted this tick
            assert ready.get(cand, 0) >= self.total, "promoted before the candidate was Ready"
            return
        if cand not in decision.replicas:  # rolled back or abandoned this tick
            assert ready.get(stable, 0) >= self.total, "candidate removed before the stable"
            return
        serves = traffic.active_revision in (None, cand) or (
            traffic.route_weights is not None and traffic.route_weights[1] > 0
        )
        floor = self.total - (ready.get(cand, 0) if serves else 0)
        asked = decision.replicas[stable]
        assert asked >= floor, f"stable asked for {asked} replicas, load needs {floor}"
