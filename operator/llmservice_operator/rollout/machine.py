"""The rollout step machine (pure): status + observations + now -> new status + actions.

One function, :func:`step`, called by every reconcile with what exists (the Deployments of
each revision, the replicas the service needs now, the status as last written) and, when the
previous call asked for them, the results of the analysis queries or of the smoke test. It
returns the status to write and what to do: replicas per revision, the Services' selectors
(and HTTPRoute weights in Gateway mode), Events, conditions, and whether to query Prometheus
or smoke-test the candidate now. Nothing here reads the clock or talks to anything.

**The plan.** A rollout walks the stages of :func:`build_plan`; ``status.rollout.step`` is the
index of the current stage, so ``spec.rollout.steps[i]`` is stage ``i + 1``:

* canary: ``prepare`` (the candidate at one replica behind the preview Service only, Ready,
  then smoke-tested), then ``spec.rollout.steps`` (``setWeight``, ``pause``, ``analysis``), then
  ``promote`` (the candidate at full size, then it becomes stable and the old one is removed);
* blueGreen: ``prepare`` (the candidate at full size behind the preview Service, Ready,
  smoke-tested), the pre-promotion ``steps`` (``pause``, ``analysis``), ``switch`` (the active
  Service selects the candidate, in one step; waits for a person unless ``autoPromote``),
  ``postPromotion`` (an analysis while the old revision stays at full size, so switching back
  is instant); once promoted the old revision is kept ``scaleDownDelaySeconds``, then removed.

**Traffic and capacity.** By replica ratio, unless the spec names a Gateway API parent, in
which case by HTTPRoute backend weights. The stable revision never drops below what the load
needs (``total`` replicas): with replica-ratio traffic it gives up one replica for each
candidate replica that is Ready (never more than its own share rounds up to), with weights it
stays at full size until promotion. See :func:`canary_replicas` and :func:`stable_replicas`.

**Failure.** A failed or errored analysis, a failed smoke test, or a candidate not Ready within
``progressDeadlineSeconds`` rolls back, in this order across reconciles: the stable is scaled
back to full size; once it is Ready (or the progress deadline passed again, with a Warning),
traffic moves back to it and the candidate is removed. The revision is recorded in
``status.revisions.failed`` and not tried again until the spec changes. An inconclusive
analysis (e.g. no data: no traffic) pauses instead; resuming accepts it and moves on.

**Resume.** Everything the machine knows between calls is in the status it returns, so an
operator that restarts mid-step goes on where it was: a setWeight step recomputes the same
replicas (no double shift), an analysis keeps its counts and its next measurement time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from ..api.base import parse_duration_seconds
from ..api.spec import AnalysisStepSettings, RolloutSpec, SLOSpec
from ..api.status import (
    ConditionStatus,
    RevisionRecord,
    RevisionsStatus,
    RolloutStatus,
)
from ..api.timestamps import from_rfc3339, to_rfc3339, utc
from ..events import Event, EventType
from .analysis import (
    AnalysisPolicy,
    AnalysisTarget,
    QueryResult,
    ResolvedCheck,
    has_judging_checks,
    judge_measurement,
    measurement_due,
    record_measurement,
    resolve_checks,
    start_run,
)
from .smoke_verdict import SmokeResult

__all__ = [
    "ABANDONING",
    "RESUME_ANNOTATION",
    "ROLLING_BACK",
    "SMOKE_RETRY_SECONDS",
    "ConditionChange",
    "DeploymentObservation",
    "RolloutDecision",
    "RolloutInput",
    "ServiceRef",
    "SmokeTarget",
    "Stage",
    "Traffic",
    "build_plan",
    "canary_replicas",
    "stable_replicas",
    "step",
]

#: Annotation a person sets (any value) to resume a paused rollout; the operator removes it.
RESUME_ANNOTATION = "llmservice.dev/resume"
#: Seconds between smoke-test attempts while the candidate answers 503 or cannot be reached.
SMOKE_RETRY_SECONDS = 10
_HISTORY_LIMIT = 10
#: ``status.rollout.pauseReason`` values of a pause a person can resume.
_PAUSES = ("PauseStep", "AnalysisInconclusive", "AwaitingPromotion")
#: ``status.rollout.pauseReason`` while the candidate is being taken out (since stepStartedAt).
ROLLING_BACK = "RollingBack"
ABANDONING = "Abandoning"

StageKind = Literal[
    "prepare", "setWeight", "pause", "analysis", "promote", "switch", "postPromotion"
]


# -- the plan ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    kind: StageKind
    weight: int = 0
    """setWeight: the candidate's share of traffic, percent."""
    pause_seconds: float | None = None
    """pause: how long; None pauses until a person resumes."""
    analysis: AnalysisStepSettings | None = None
    spec_index: int | None = None
    """The index in ``spec.rollout.steps`` this stage comes from, if it does."""

    def describe(self) -> str:
        if self.kind == "setWeight":
            return f"setWeight {self.weight}"
        if self.kind == "pause":
            return "pause" if self.pause_seconds is None else f"pause {self.pause_seconds:g}s"
        return self.kind


def build_plan(rollout: RolloutSpec) -> tuple[Stage, ...]:
    """The stages a rollout walks; ``status.rollout.step`` indexes this tuple."""
    stages = [Stage("prepare")]
    for index, spec_step in enumerate(rollout.steps):
        if spec_step.set_weight is not None:
            if rollout.strategy == "canary":
                stages.append(Stage("setWeight", weight=spec_step.set_weight, spec_index=index))
        elif spec_step.pause is not None:
            duration = spec_step.pause.duration
            seconds = None if duration is None else parse_duration_seconds(duration)
            stages.append(Stage("pause", pause_seconds=seconds, spec_index=index))
        elif spec_step.analysis is not None:
            stages.append(Stage("analysis", analysis=spec_step.analysis, spec_index=index))
    if rollout.strategy == "canary":
        stages.append(Stage("promote", weight=100))
    else:
        stages += [Stage("switch"), Stage("postPromotion")]
    return tuple(stages)


def canary_replicas(total: int, weight: int) -> int:
    """Candidate replicas for ``weight`` percent of ``total``: rounded up, 1 at least.

    At least one, even at weight 0: the candidate keeps a replica to smoke-test and to judge.

    ===== ====== =========
    total weight candidate
    ===== ====== =========
    10    10     1
    10    25     3 (2.5 up)
    3     10     1
    1     50     1
    4     100    4
    ===== ====== =========
    """
    return min(total, max(1, math.ceil(total * weight / 100)))


def stable_replicas(total: int, weight: int, candidate_ready: int) -> int:
    """Stable replicas while the candidate takes ``weight`` percent by replica ratio.

    The stable gives up one replica per candidate replica that is Ready (so the two together
    never hold less than ``total`` Ready replicas), but never goes below its own share rounded
    up, ``ceil(total * (100 - weight) / 100)`` (so small services do not overshoot the
    weight: with 1 replica at 10%, the stable keeps its one and the split is 1:1, not 0:1).
    At weight 0 the candidate takes no traffic and the stable stays at ``total``.

    ===== ====== =============== ====== ===========================
    total weight candidate ready stable traffic on the candidate
    ===== ====== =============== ====== ===========================
    10    10     0               10     0%
    10    10     1               9      10%
    3     10     1               3      25% (1 of 4)
    1     10     1               1      50% (1 of 2)
    4     50     1               3      25% (1 of 4, still scaling)
    4     50     2               2      50%
    4     100    3               1      75% (promotion under way)
    ===== ====== =============== ====== ===========================
    """
    if weight <= 0:
        return total
    own_share = math.ceil(total * (100 - weight) / 100)
    counted = min(candidate_ready, canary_replicas(total, weight))
    return max(total - counted, own_share)


# -- inputs and outputs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class DeploymentObservation:
    """One revision's Deployment as observed: ``spec.replicas`` and ``status.readyReplicas``."""

    replicas: int
    ready: int


@dataclass(frozen=True)
class ServiceRef:
    namespace: str
    name: str
    vllm_version: str


@dataclass(frozen=True)
class RolloutInput:
    spec: RolloutSpec
    slo: SLOSpec
    service: ServiceRef
    revision: str
    """The revision the spec asks for now (the pod-template hash)."""
    total_replicas: int
    """Replicas the load needs now (the autoscaler's answer, or the manual count)."""
    deployments: Mapping[str, DeploymentObservation]
    """Every revision that has a Deployment, with what it shows."""
    status: RolloutStatus | None
    revisions: RevisionsStatus | None
    now: datetime
    resume_requested: bool = False
    """The ``llmservice.dev/resume`` annotation is present."""
    measurement: Mapping[str, QueryResult] | None = None
    """Results of the checks a previous call asked for (:attr:`RolloutDecision.measure`)."""
    smoke: SmokeResult | None = None
    """Result of the smoke test a previous call asked for (:attr:`RolloutDecision.smoke`)."""


@dataclass(frozen=True)
class Traffic:
    """Where requests go."""

    active_revision: str | None
    """The client-facing Service selects this revision; None: every revision of the service
    (replica-ratio canary: the split follows the Ready replicas)."""
    preview_revision: str | None
    """The preview Service (``<name>-preview``) selects this revision; None: no preview Service."""
    route_weights: tuple[int, int] | None
    """Gateway mode: HTTPRoute backend weights (active Service, preview Service); None
    otherwise. A 0 weight backend may be left out (and must be when there is no preview)."""
    canary_weight: int
    """Percent of traffic on the candidate (by Ready replicas, or the route weight)."""


@dataclass(frozen=True)
class ConditionChange:
    type: str
    status: ConditionStatus
    reason: str
    message: str


@dataclass(frozen=True)
class SmokeTarget:
    """Smoke-test this revision now (through the preview Service), then call :func:`step` again."""

    revision: str


@dataclass(frozen=True)
class RolloutDecision:
    rollout: RolloutStatus | None
    revisions: RevisionsStatus
    replicas: dict[str, int]
    """Replicas per revision. A revision with a Deployment that is not here is removed."""
    traffic: Traffic
    events: tuple[Event, ...]
    conditions: tuple[ConditionChange, ...]
    """Progressing and RolledBack always; Degraded only while rolled back (True)."""
    measure: tuple[ResolvedCheck, ...] | None = None
    """Query these now and call :func:`step` again with the results as ``measurement``."""
    smoke: SmokeTarget | None = None
    requeue_at: datetime | None = None
    """Call again by then even if nothing changes (measurement, pause end, deadline)."""
    resume_consumed: bool = False
    """Remove the ``llmservice.dev/resume`` annotation."""


# -- the machine ----------------------------------------------------------------------------------

_Outcome = Literal["wait", "next"]


@dataclass(frozen=True)
class _Fail:
    reason: str
    message: str


@dataclass
class _Layout:
    replicas: dict[str, int]
    traffic: Traffic


@dataclass
class _Machine:
    given: RolloutInput
    """What this call was given: the spec, the observed Deployments, the last status."""
    revisions: RevisionsStatus
    rollout: RolloutStatus | None
    """``status.rollout`` as it stands during this call (written back by :meth:`finish`)."""
    now: datetime
    plan: tuple[Stage, ...]
    resumed: bool
    events: list[Event] = field(default_factory=list)
    layout: _Layout = field(default_factory=lambda: _Layout({}, Traffic(None, None, None, 0)))
    measure: tuple[ResolvedCheck, ...] | None = None
    smoke: SmokeTarget | None = None
    wake: list[datetime] = field(default_factory=list)

    # -- helpers ----------------------------------------------------------------------------

    @property
    def gateway(self) -> bool:
        return self.given.spec.gateway_parent_ref is not None

    @property
    def canary(self) -> bool:
        return self.given.spec.strategy == "canary"

    @property
    def total(self) -> int:
        """Replicas the load needs now (0 when scaled to zero)."""
        return max(0, self.given.total_replicas)

    @property
    def candidate_total(self) -> int:
        """The candidate's full size: what the load needs, but at least 1 (something to judge)."""
        return max(1, self.total)

    @property
    def deadline_seconds(self) -> int:
        return self.given.spec.progress_deadline_seconds

    def obs(self, revision: str | None) -> DeploymentObservation:
        if revision is None:
            return DeploymentObservation(0, 0)
        return self.given.deployments.get(revision, DeploymentObservation(0, 0))

    def event(self, type_: EventType, reason: str, message: str) -> None:
        self.events.append(Event(type_, reason, message))

    def update_rollout(self, **update: object) -> RolloutStatus:
        base = self.rollout or RolloutStatus(step_started_at=to_rfc3339(self.now))
        self.rollout = base.model_copy(update=update)
        return self.rollout

    def record(
        self,
        revision: str,
        outcome: Literal["Promoted", "RolledBack", "Superseded"],
        reason: str,
        cause: str | None = None,
    ) -> None:
        entry = RevisionRecord(
            revision=revision,
            outcome=outcome,
            reason=reason,
            cause=cause,
            time=to_rfc3339(self.now),
        )
        history = [*self.revisions.history, entry][-_HISTORY_LIMIT:]
        self.revisions = self.revisions.model_copy(update={"history": history})

    def last_record(self, revision: str) -> RevisionRecord | None:
        for entry in reversed(self.revisions.history):
            if entry.revision == revision:
                return entry
        return None

    def rollback_cause(self, revision: str) -> str:
        """What failed when ``revision`` was rolled back (a condition reason)."""
        record = self.last_record(revision)
        return record.cause if record is not None and record.cause else "RolledBack"

    def step_started(self) -> datetime:
        rollout = self.rollout
        if rollout is None or rollout.step_started_at is None:
            return self.now
        return from_rfc3339(rollout.step_started_at)

    def step_deadline(self) -> datetime:
        return self.step_started() + timedelta(seconds=self.deadline_seconds)

    def where(self, index: int) -> str:
        return f"step {index}/{len(self.plan) - 1} ({self.plan[index].describe()})"

    # -- entry ------------------------------------------------------------------------------

    def run(self) -> RolloutDecision:
        desired = self.given.revision
        stable = self.revisions.stable
        if stable is not None and stable != desired and stable not in self.given.deployments:
            self.event(
                "Warning",
                "StableRevisionMissing",
                f"the Deployment of stable revision {stable} is gone; revision {desired} "
                "becomes stable without a rollout",
            )
            self.record(stable, "Superseded", f"its Deployment disappeared; {desired} took over")
            self.revisions = self.revisions.model_copy(update={"stable": None, "candidate": None})
            stable = None
        if stable is None:
            self.revisions = self.revisions.model_copy(
                update={"stable": desired, "candidate": None, "failed": None}
            )
            self.settle(desired)
            return self.finish()

        candidate = self.revisions.candidate
        if candidate is not None and (candidate != desired or candidate == self.revisions.failed):
            if not self.wind_down(candidate, desired):
                return self.finish()
            candidate = None
        if (
            candidate is not None
            and self.rollout is not None
            and self.rollout.pause_reason == ABANDONING
        ):
            candidate = None  # the spec came back to the abandoned candidate: start it afresh
        if candidate is None:
            if desired in (self.revisions.stable, self.revisions.failed):
                self.settle(desired)
                return self.finish()
            self.start(desired)
        self.advance(desired)
        return self.finish()

    # -- steady state -------------------------------------------------------------------------

    def settle(self, desired: str) -> None:
        """No rollout in progress: the stable serves everything."""
        stable = self.revisions.stable
        assert stable is not None
        if self.revisions.failed is not None and desired != self.revisions.failed:
            self.revisions = self.revisions.model_copy(update={"failed": None})
        replicas = {stable: max(0, self.given.total_replicas)}
        kept = self.kept_old_revision()
        if kept is not None:
            replicas[kept] = self.obs(kept).replicas
        route = (100, 0) if self.gateway else None
        self.layout = _Layout(replicas, Traffic(stable, None, route, 0))
        if self.rollout is not None and (self.rollout.paused or self.rollout.pause_reason):
            self.update_rollout(paused=False, pause_reason=None)

    def kept_old_revision(self) -> str | None:
        """The previous stable of a blue-green promotion, within ``scaleDownDelaySeconds``.

        A promotion appends two history records at the same time: (old, Superseded) and
        (new, Promoted). The old revision is kept (at its size) until the delay has passed.
        """
        if self.canary:
            return None
        history = self.revisions.history
        if len(history) < 2:
            return None
        promoted, old = history[-1], history[-2]
        if promoted.outcome != "Promoted" or promoted.revision != self.revisions.stable:
            return None
        if old.outcome != "Superseded" or old.time != promoted.time:
            return None
        if old.revision not in self.given.deployments or old.revision == self.revisions.stable:
            return None
        until = from_rfc3339(promoted.time) + timedelta(
            seconds=self.given.spec.blue_green.scale_down_delay_seconds
        )
        if self.now >= until:
            return None
        self.wake.append(until)
        return old.revision

    # -- starting, advancing ----------------------------------------------------------------------

    def start(self, desired: str) -> None:
        stable = self.revisions.stable
        self.revisions = self.revisions.model_copy(update={"candidate": desired, "failed": None})
        self.rollout = RolloutStatus(
            step=0,
            weight=0,
            step_started_at=to_rfc3339(self.now),
            message=f"{self.where(0)}: starting revision {desired}",
        )
        self.resumed = False
        strategy = "blue-green" if not self.canary else "canary"
        self.event(
            "Normal",
            "RolloutStarted",
            f"{strategy} rollout of revision {desired} replacing {stable}: "
            + ", ".join(s.describe() for s in self.plan),
        )

    def advance(self, candidate: str) -> None:
        if self.rollout is None or self.rollout.step_started_at is None:
            self.update_rollout(step_started_at=to_rfc3339(self.now))
        for _ in range(len(self.plan) + 1):
            assert self.rollout is not None
            index = min(max(self.rollout.step, 0), len(self.plan) - 1)
            stage = self.plan[index]
            self.layout = self.stage_layout(stage, index, candidate)
            outcome = self.handle(stage, index, candidate)
            if isinstance(outcome, _Fail):
                self.fail(candidate, index, outcome)
                self.wind_down(candidate, self.given.revision)
                return
            if outcome == "wait":
                self.update_rollout(weight=self.layout.traffic.canary_weight)
                return
            if index + 1 >= len(self.plan):
                self.promote(candidate)
                return
            self.update_rollout(
                step=index + 1,
                step_started_at=to_rfc3339(self.now),
                paused=False,
                pause_reason=None,
            )
            self.resumed = False

    def stage_layout(self, stage: Stage, index: int, candidate: str) -> _Layout:
        """Replicas and traffic while the rollout is at ``stage``."""
        stable = self.revisions.stable
        assert stable is not None
        total = self.total
        if not self.canary:
            switched = stage.kind == "postPromotion"
            return _Layout(
                {stable: total, candidate: self.candidate_total},
                Traffic(
                    candidate if switched else stable,
                    candidate,
                    (100, 0) if self.gateway else None,
                    100 if switched else 0,
                ),
            )
        if stage.kind == "prepare":
            weight = 0
        elif stage.kind in ("setWeight", "promote"):
            weight = stage.weight
        else:
            weight = self.weight_before(index)
        wanted = canary_replicas(self.candidate_total, weight)
        ready = self.obs(candidate).ready
        if self.gateway:
            applied = weight * min(ready, wanted) // wanted
            return _Layout(
                {stable: total, candidate: wanted},
                Traffic(stable, candidate, (100 - applied, applied), applied),
            )
        replicas = {stable: stable_replicas(total, weight, ready), candidate: wanted}
        if weight <= 0:
            return _Layout(replicas, Traffic(stable, candidate, None, 0))
        stable_ready = self.obs(stable).ready
        share = round(100 * ready / (ready + stable_ready)) if ready + stable_ready else 0
        return _Layout(replicas, Traffic(None, candidate, None, share))

    def weight_before(self, index: int) -> int:
        for stage in reversed(self.plan[:index]):
            if stage.kind == "setWeight":
                return stage.weight
        return 0

    # -- stages -------------------------------------------------------------------------------

    def handle(self, stage: Stage, index: int, candidate: str) -> _Outcome | _Fail:
        if stage.kind == "prepare":
            return self.prepare(index, candidate)
        if stage.kind in ("setWeight", "promote"):
            wanted = self.layout.replicas[candidate]
            return self.await_ready(index, candidate, wanted)
        if stage.kind == "pause":
            return self.pause(stage, index)
        if stage.kind == "switch":
            return self.switch(index, candidate)
        compare = stage.kind == "analysis"
        policy = AnalysisPolicy.from_settings(
            self.given.spec.analysis, stage.analysis, compare_to_stable=compare
        )
        if stage.kind == "postPromotion" and not has_judging_checks(policy, self.given.slo):
            self.event(
                "Normal",
                "PostPromotionAnalysisSkipped",
                "no SLO, comparison or custom check to judge the promoted revision by",
            )
            return "next"
        return self.analysis(index, candidate, policy)

    def await_ready(self, index: int, candidate: str, wanted: int) -> _Outcome | _Fail:
        ready = self.obs(candidate).ready
        if ready >= wanted:
            if self.plan[index].kind == "setWeight":
                share = self.layout.traffic.canary_weight
                weight = self.plan[index].weight
                # By replica ratio the stable scales down after this: say both.
                now = "" if share == weight else f" ({share}% now, by Ready replicas)"
                self.event(
                    "Normal",
                    "WeightSet",
                    f"{self.where(index)}: {wanted} candidate replica(s) Ready; "
                    f"{weight}% of traffic on revision {candidate}{now}",
                )
            return "next"
        deadline = self.step_deadline()
        if self.now >= deadline:
            return _Fail(
                "ProgressDeadlineExceeded",
                f"candidate {candidate} has {ready}/{wanted} Ready replicas "
                f"{self.deadline_seconds}s after {self.where(index)} began",
            )
        self.wake.append(deadline)
        self.update_rollout(
            message=f"{self.where(index)}: waiting for candidate {candidate}: {ready}/{wanted} "
            f"Ready (deadline {to_rfc3339(deadline)})"
        )
        return "wait"

    def prepare(self, index: int, candidate: str) -> _Outcome | _Fail:
        wanted = self.layout.replicas[candidate]
        ready = self.obs(candidate).ready
        if ready < wanted:
            return self.await_ready(index, candidate, wanted)
        settings = self.given.spec.smoke_test
        if not settings.enabled:
            return "next"
        result = self.given.smoke
        if result is None:
            self.smoke = SmokeTarget(candidate)
            self.update_rollout(message=f"{self.where(index)}: smoke-testing candidate {candidate}")
            return "wait"
        if result.passed:
            self.event("Normal", "SmokeTestPassed", f"revision {candidate}: {result.message}")
            return "next"
        if not result.retryable:
            return _Fail("SmokeTestFailed", f"revision {candidate}: {result.message}")
        deadline = self.step_deadline()
        if self.now >= deadline:
            return _Fail(
                "SmokeTestFailed",
                f"revision {candidate} still fails at the progress deadline: {result.message}",
            )
        retry = self.now + timedelta(seconds=SMOKE_RETRY_SECONDS)
        self.wake.append(min(retry, deadline))
        self.update_rollout(
            message=f"{self.where(index)}: smoke test not passed yet ({result.message}); "
            f"retrying until {to_rfc3339(deadline)}"
        )
        return "wait"

    def pause(self, stage: Stage, index: int) -> _Outcome:
        if self.resumed:
            self.event("Normal", "Resumed", f"{self.where(index)} resumed by a person")
            return "next"
        if stage.pause_seconds is not None:
            until = self.step_started() + timedelta(seconds=stage.pause_seconds)
            if self.now >= until:
                return "next"
            self.wake.append(until)
            why = f"until {to_rfc3339(until)}"
        else:
            why = f"until resumed ({self.resume_command()})"
        self.enter_pause(index, "PauseStep", f"{self.where(index)}: paused {why}")
        return "wait"

    def resume_command(self) -> str:
        ref = self.given.service
        return f"kubectl -n {ref.namespace} annotate llmservice {ref.name} {RESUME_ANNOTATION}=true"

    def enter_pause(self, index: int, reason: str, message: str) -> None:
        was = (
            self.rollout is not None and self.rollout.paused and self.rollout.pause_reason == reason
        )
        self.update_rollout(paused=True, pause_reason=reason, message=message)
        if not was:
            self.event("Normal", "RolloutPaused", message)

    def switch(self, index: int, candidate: str) -> _Outcome:
        if self.given.spec.blue_green.auto_promote or self.resumed:
            self.event(
                "Normal",
                "ActiveSwitched",
                f"the active Service now selects revision {candidate}; {self.revisions.stable} stays "
                "at full size until the post-promotion analysis passes",
            )
            return "next"
        self.enter_pause(
            index,
            "AwaitingPromotion",
            f"{self.where(index)}: revision {candidate} is ready behind the preview Service; "
            f"promote it: {self.resume_command()}",
        )
        return "wait"

    def analysis(self, index: int, candidate: str, policy: AnalysisPolicy) -> _Outcome | _Fail:
        assert self.rollout is not None
        run = self.rollout.analysis
        if run is not None and from_rfc3339(run.started_at) < self.step_started():
            run = None  # the last run belongs to an earlier step
        if run is None:
            run = start_run(self.now, policy)
            self.event(
                "Normal",
                "AnalysisStarted",
                f"{self.where(index)}: {policy.count} measurement(s), one every "
                f"{policy.interval_seconds:g}s over a {policy.window} window",
            )
        if measurement_due(run, self.now):
            target = AnalysisTarget(
                namespace=self.given.service.namespace,
                service=self.given.service.name,
                candidate=candidate,
                stable=self.revisions.stable if policy.compare_to_stable is not None else None,
                vllm_version=self.given.service.vllm_version,
            )
            checks = resolve_checks(policy, self.given.slo, target)
            if self.given.measurement is None:
                self.measure = checks
            else:
                outcome = judge_measurement(checks, self.given.measurement, policy)
                run = record_measurement(run, outcome, policy, self.now)
                self.event(
                    "Normal" if outcome.verdict == "Successful" else "Warning",
                    "AnalysisMeasurement",
                    f"{self.where(index)} measurement {run.measurements_taken + run.errors}: "
                    f"{outcome.summary}",
                )
        self.update_rollout(analysis=run, message=f"{self.where(index)}: analysis {run.message}")
        if run.phase == "Running":
            if run.next_measurement_at is not None and self.measure is None:
                self.wake.append(from_rfc3339(run.next_measurement_at))
            return "wait"
        if run.phase == "Successful":
            self.event("Normal", "AnalysisSuccessful", f"{self.where(index)}: {run.message}")
            return "next"
        if run.phase == "Inconclusive":
            if self.resumed:
                self.event(
                    "Normal", "Resumed", f"{self.where(index)}: inconclusive analysis accepted"
                )
                return "next"
            self.enter_pause(
                index,
                "AnalysisInconclusive",
                f"{self.where(index)}: analysis inconclusive, paused; to accept it and go on: "
                f"{self.resume_command()}; to stop: change the spec back. {run.message}",
            )
            return "wait"
        reason = "AnalysisError" if run.phase == "Error" else "AnalysisFailed"
        return _Fail(reason, run.message)

    # -- ends -------------------------------------------------------------------------------

    def promote(self, candidate: str) -> None:
        old = self.revisions.stable
        assert old is not None
        self.record(old, "Superseded", f"replaced by {candidate}")
        self.record(candidate, "Promoted", "")
        self.revisions = self.revisions.model_copy(
            update={"stable": candidate, "candidate": None, "failed": None}
        )
        kept = ""
        if not self.canary:
            delay = self.given.spec.blue_green.scale_down_delay_seconds
            kept = f"; {old} kept for {delay}s"
        message = f"revision {candidate} promoted; it serves all traffic{kept}"
        self.update_rollout(
            weight=100,
            paused=False,
            pause_reason=None,
            promoted_at=to_rfc3339(self.now),
            message=message,
        )
        self.event("Normal", "Promoted", message)
        self.settle(candidate)

    def fail(self, candidate: str, index: int, failure: _Fail) -> None:
        self.revisions = self.revisions.model_copy(update={"failed": candidate})
        self.record(
            candidate, "RolledBack", f"{failure.reason}: {failure.message}", cause=failure.reason
        )
        self.event("Warning", failure.reason, f"{self.where(index)}: {failure.message}")
        self.update_rollout(
            paused=False,
            pause_reason=ROLLING_BACK,
            step_started_at=to_rfc3339(self.now),
            message=f"rolling back revision {candidate} from {self.where(index)}: "
            f"{failure.reason}: {failure.message}",
        )

    def wind_down(self, candidate: str, desired: str) -> bool:
        """Take the candidate out: stable to full size first, then traffic, then removal.

        Returns True once the candidate is gone from the plan (its Deployment is then removed).
        """
        stable = self.revisions.stable
        assert stable is not None
        rolled_back = self.revisions.failed == candidate
        if not rolled_back and (self.rollout is None or self.rollout.pause_reason != ABANDONING):
            why = "spec reverted to it" if desired == stable else f"spec now asks for {desired}"
            self.record(candidate, "Superseded", f"replaced before promotion: {why}")
            self.event(
                "Normal",
                "RolloutSuperseded",
                f"revision {candidate} is abandoned before promotion ({why}); "
                f"returning traffic to {stable}",
            )
            self.update_rollout(
                paused=False, pause_reason=ABANDONING, step_started_at=to_rfc3339(self.now)
            )
        record = self.last_record(candidate)
        total = self.total
        ready = self.obs(stable).ready
        deadline = self.step_deadline()
        if ready < total and self.now < deadline:
            index = min(max(self.rollout.step if self.rollout else 0, 0), len(self.plan) - 1)
            layout = self.stage_layout(self.plan[index], index, candidate)
            replicas = {stable: total, candidate: self.obs(candidate).replicas}
            self.layout = _Layout(replicas, layout.traffic)
            self.wake.append(deadline)
            verb = "rolling back" if rolled_back else "abandoning"
            self.update_rollout(
                weight=layout.traffic.canary_weight,
                message=f"{verb} revision {candidate}: scaling stable {stable} back to {total} "
                f"replicas ({ready} Ready) before moving traffic to it",
            )
            return False
        if ready < total:
            self.event(
                "Warning",
                "RollbackWithoutFullCapacity",
                f"stable {stable} has {ready}/{total} Ready replicas {self.deadline_seconds}s "
                f"after the rollback began; moving traffic to it anyway",
            )
        self.revisions = self.revisions.model_copy(update={"candidate": None})
        if rolled_back:
            why = record.reason if record is not None else "rolled back"
            message = f"revision {candidate} rolled back ({why}); {stable} serves all traffic"
            self.event("Warning", "RolledBack", message)
        else:
            message = f"revision {candidate} removed before promotion; {stable} serves all traffic"
            self.event("Normal", "CandidateRemoved", message)
        self.update_rollout(weight=0, paused=False, pause_reason=None, message=message)
        self.settle(desired)
        return True

    # -- output -----------------------------------------------------------------------------

    def finish(self) -> RolloutDecision:
        requeue = min(self.wake) if self.wake else None
        if self.measure is not None or self.smoke is not None:
            requeue = self.now
        return RolloutDecision(
            rollout=self.rollout,
            revisions=self.revisions,
            replicas=self.layout.replicas,
            traffic=self.layout.traffic,
            events=tuple(self.events),
            conditions=self.conditions(),
            measure=self.measure,
            smoke=self.smoke,
            requeue_at=requeue,
            resume_consumed=self.given.resume_requested,
        )

    def conditions(self) -> tuple[ConditionChange, ...]:
        candidate, failed = self.revisions.candidate, self.revisions.failed
        message = self.rollout.message if self.rollout is not None else ""
        if candidate is not None:
            if failed == candidate:
                return (
                    ConditionChange("Progressing", "True", "RollingBack", message),
                    ConditionChange("RolledBack", "True", self.rollback_cause(candidate), message),
                    ConditionChange("Degraded", "True", "RollingBack", message),
                )
            paused = self.rollout is not None and self.rollout.paused
            reason = "RolloutPaused" if paused else "RolloutInProgress"
            if self.rollout is not None and self.rollout.pause_reason == ABANDONING:
                reason = ABANDONING
            return (
                ConditionChange("Progressing", "True", reason, message),
                ConditionChange("RolledBack", "False", "RolloutInProgress", ""),
            )
        if failed is not None:
            record = self.last_record(failed)
            cause = self.rollback_cause(failed)
            text = (
                f"revision {failed} was rolled back ({record.reason if record else cause}); "
                f"{self.revisions.stable} serves all traffic. Change the spec to try again."
            )
            return (
                ConditionChange("Progressing", "False", "RolloutAborted", text),
                ConditionChange("RolledBack", "True", cause, text),
                ConditionChange("Degraded", "True", "RolledBack", text),
            )
        return (
            ConditionChange(
                "Progressing",
                "False",
                "RolloutComplete",
                f"revision {self.revisions.stable} serves all traffic",
            ),
            ConditionChange("RolledBack", "False", "NoRollback", ""),
        )


def step(given: RolloutInput) -> RolloutDecision:
    """One reconcile's rollout decision; see the module docstring.

    Protocol: when the decision carries ``measure`` (or ``smoke``), run those queries (or the
    smoke test) and call :func:`step` again with the same input plus ``measurement`` (or
    ``smoke``); use only the last decision. The second call recomputes everything from the same
    status, so the first decision's status and events are simply discarded.
    """
    status = given.status
    resumed = given.resume_requested or (
        status is not None and not status.paused and status.pause_reason in _PAUSES
    )
    machine = _Machine(
        given=given,
        revisions=given.revisions or RevisionsStatus(),
        rollout=status,
        now=utc(given.now),
        plan=build_plan(given.spec),
        resumed=resumed,
    )
    return machine.run()
