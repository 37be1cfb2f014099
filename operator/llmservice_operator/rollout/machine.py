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

**A person's controls** (annotations :data:`CONTROL_ANNOTATIONS`, which ``kubectl llms``
sets; each is acted on once and removed, see :func:`step`):

* ``pause``: holds the rollout at its step (analyses keep judging; a failure still rolls
  back); ``resume`` lifts it. Without a person's pause, ``resume`` lifts the step's own pause
  (a pause step, an inconclusive analysis, a blue-green switch awaiting promotion). A resume
  that arrives during a running analysis is kept for it: an inconclusive end goes on.
* ``promote``: the current step ends now (a pause, an analysis, a setWeight's wait; the
  blue-green switch is approved); ``promote-full``: every remaining step, pause and analysis
  is skipped. Neither skips ``prepare`` (Ready and smoke-tested before any traffic) nor the
  wait for the candidate's replicas before it becomes stable.
* ``skip-analysis``: no more analysis for this rollout (steps, background, post-promotion).
* ``abort``: taken out like a failed candidate (stable to full size first, then traffic), but
  kept at its replicas for ``abortScaleDownDelaySeconds``, then at 0, until the spec changes
  or ``retry``, which runs an aborted or rolled-back revision again from the start.

**Fast rollback.** A revision that served as stable within ``rollout.rollbackWindow`` runs
``prepare`` (the smoke test) and then the promotion: no steps, no analysis.

**Background analysis** (``rollout.backgroundAnalysis``) is judged every interval from its
starting step to promotion, whatever the step; a failure rolls back at any step. The analysis
settings (``rollout.analysis``, ``rollout.backgroundAnalysis``, the SLO) are frozen in the
status when a rollout starts; edits apply to the next rollout.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from ..api.base import parse_duration_seconds
from ..api.spec import (
    AnalysisSettings,
    AnalysisStepSettings,
    BackgroundAnalysis,
    RolloutSpec,
    SLOSpec,
)
from ..api.status import (
    AnalysisRunStatus,
    ConditionStatus,
    FrozenAnalysis,
    RevisionEntry,
    RevisionRecord,
    RevisionsStatus,
    RolloutStatus,
    keep_specs,
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
    "ABORT_ANNOTATION",
    "BACKGROUND_PREFIX",
    "CONTROL_ANNOTATIONS",
    "PAUSE_ANNOTATION",
    "PROMOTE_ANNOTATION",
    "PROMOTE_FULL_ANNOTATION",
    "RESUME_ANNOTATION",
    "RETRY_ANNOTATION",
    "ROLLING_BACK",
    "SKIP_ANALYSIS_ANNOTATION",
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

#: Annotations a person sets (``kubectl llms``, or ``kubectl annotate``); the operator acts on
#: each once and removes it. The value may name the revision it is meant for (what
#: ``kubectl llms`` writes): a control for another revision is ignored, with an Event.
RESUME_ANNOTATION = "llmservice.dev/resume"
PAUSE_ANNOTATION = "llmservice.dev/pause"
PROMOTE_ANNOTATION = "llmservice.dev/promote"
PROMOTE_FULL_ANNOTATION = "llmservice.dev/promote-full"
SKIP_ANALYSIS_ANNOTATION = "llmservice.dev/skip-analysis"
ABORT_ANNOTATION = "llmservice.dev/abort"
RETRY_ANNOTATION = "llmservice.dev/retry"
CONTROL_ANNOTATIONS: tuple[str, ...] = (
    RESUME_ANNOTATION,
    PAUSE_ANNOTATION,
    PROMOTE_ANNOTATION,
    PROMOTE_FULL_ANNOTATION,
    SKIP_ANALYSIS_ANNOTATION,
    ABORT_ANNOTATION,
    RETRY_ANNOTATION,
)
#: Seconds between smoke-test attempts while the candidate answers 503 or cannot be reached.
SMOKE_RETRY_SECONDS = 10
#: A pre-promotion analysis that judges blueGreen's load test starts once the load test's pod
#: is Ready, waiting at most this long from its step's start (then it starts anyway: no data
#: is what its measurements then say), and looks again every LOAD_TEST_POLL_SECONDS.
LOAD_TEST_START_SECONDS = 120
LOAD_TEST_POLL_SECONDS = 5
_HISTORY_LIMIT = 10
#: The background analysis' checks are asked for (``RolloutDecision.measure``) under these keys.
BACKGROUND_PREFIX = "background/"
_REVISION = re.compile(r"^[0-9a-f]{10}$")
#: ``status.rollout.pauseReason`` values of a pause a person can resume.
_PAUSES = (
    "PauseStep",
    "AnalysisInconclusive",
    "AwaitingPromotion",
    "BackgroundAnalysisInconclusive",
    "UserPaused",
)
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


def build_plan(rollout: RolloutSpec, *, fast: bool = False) -> tuple[Stage, ...]:
    """The stages a rollout walks; ``status.rollout.step`` indexes this tuple.

    ``fast`` (a rollback within ``rollout.rollbackWindow``): ``prepare`` (the smoke test) and
    the promotion only; blue-green switches without waiting for a person."""
    if fast:
        final = Stage("promote", weight=100) if rollout.strategy == "canary" else Stage("switch")
        return (Stage("prepare"), final)
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
    controls: Mapping[str, str] = field(default_factory=dict)
    """The object's annotations (only :data:`CONTROL_ANNOTATIONS` are read), with values."""
    revision_spec: Mapping[str, Any] | None = None
    """The pod-making parts of the spec as written (model, engine, resources, serving), kept
    per revision in ``status.revisions.log`` for ``kubectl llms history`` / ``undo``."""
    measurement: Mapping[str, QueryResult] | None = None
    """Results of the checks a previous call asked for (:attr:`RolloutDecision.measure`)."""
    smoke: SmokeResult | None = None
    """Result of the smoke test a previous call asked for (:attr:`RolloutDecision.smoke`)."""
    load_tests_ready: frozenset[str] | None = None
    """Revisions whose blueGreen load test Job has a Ready pod; None when not observed (the
    operator runs no load test): then no analysis waits for one."""


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
    consumed: tuple[str, ...] = ()
    """Control annotations acted on (or refused, with an Event): remove them."""
    load_test: str | None = None
    """blueGreen with ``blueGreen.loadTest``: load the preview of this revision now."""


# -- the machine ----------------------------------------------------------------------------------

_Outcome = Literal["wait", "next"]

#: How ``kubectl llms`` calls each control (for Events about them).
_COMMANDS = {
    RESUME_ANNOTATION: "resume",
    PAUSE_ANNOTATION: "pause",
    PROMOTE_ANNOTATION: "promote",
    PROMOTE_FULL_ANNOTATION: "promote --full",
    SKIP_ANALYSIS_ANNOTATION: "skip-analysis",
    ABORT_ANNOTATION: "abort",
    RETRY_ANNOTATION: "retry",
}


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
    background_measure: tuple[ResolvedCheck, ...] | None = None
    smoke: SmokeTarget | None = None
    wake: list[datetime] = field(default_factory=list)
    handled: set[str] = field(default_factory=set)
    """Control annotations acted on or refused (with an Event) in this call."""
    resume_used: bool = False
    skip_step: bool = False
    """``promote``: end the current step now."""
    start_step: int | None = None
    load_test: str | None = None

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

    @property
    def frozen(self) -> FrozenAnalysis:
        """The analysis settings this rollout is judged by (frozen when it started)."""
        if self.rollout is not None and self.rollout.frozen is not None:
            return self.rollout.frozen
        return self.live_settings()

    def live_settings(self) -> FrozenAnalysis:
        spec = self.given.spec
        return FrozenAnalysis(
            analysis=spec.analysis,
            background_analysis=spec.background_analysis,
            slo=self.given.slo,
        )

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
        outcome: Literal["Promoted", "RolledBack", "Superseded", "Aborted"],
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

    def aborted(self, revision: str | None) -> bool:
        record = self.last_record(revision) if revision is not None else None
        return record is not None and record.outcome == "Aborted"

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

    def index(self) -> int:
        step_ = self.rollout.step if self.rollout is not None else 0
        return min(max(step_, 0), len(self.plan) - 1)

    def where(self, index: int) -> str:
        return f"step {index}/{len(self.plan) - 1} ({self.plan[index].describe()})"

    def command(self, verb: str) -> str:
        ref = self.given.service
        return f"kubectl llms -n {ref.namespace} {verb} {ref.name}"

    def resume_command(self) -> str:
        ref = self.given.service
        return (
            f"{self.command('resume')} (or kubectl -n {ref.namespace} annotate llmservice "
            f"{ref.name} {RESUME_ANNOTATION}=true)"
        )

    # -- a person's controls ----------------------------------------------------------------

    def asked(self, key: str) -> bool:
        """The control annotation is set and not yet acted on in this call."""
        return key in self.given.controls and key not in self.handled

    def refuse(self, key: str, why: str) -> None:
        """Consume a control that cannot act now, and say why."""
        if self.asked(key):
            self.handled.add(key)
            self.event("Normal", "ControlIgnored", f"{_COMMANDS[key]}: {why}")

    def aimed_elsewhere(self, key: str, target: str | None) -> bool:
        """The control names a revision (``kubectl llms`` writes the one it saw) that is not
        ``target``: it was meant for a rollout that is over. Refused."""
        value = (self.given.controls.get(key) or "").strip()
        if self.asked(key) and _REVISION.match(value) and value != target:
            now = f"the rollout is now of {target}" if target else "no rollout is in progress"
            self.refuse(key, f"it was meant for revision {value}, but {now}")
            return True
        return False

    def retry(self, desired: str) -> None:
        """``retry``: the aborted or rolled-back revision the spec asks for runs again."""
        failed = self.revisions.failed
        if not self.asked(RETRY_ANNOTATION) or self.aimed_elsewhere(RETRY_ANNOTATION, failed):
            return
        if failed is None or failed != desired:
            self.refuse(RETRY_ANNOTATION, "no aborted or rolled-back revision to run again")
            return
        self.handled.add(RETRY_ANNOTATION)
        record = self.last_record(failed)
        was = f"{record.outcome}: {record.reason}" if record is not None else "rolled back"
        self.event(
            "Normal",
            "Retried",
            f"revision {failed} is rolled out again from the start, by a person (it was {was})",
        )
        self.revisions = self.revisions.model_copy(update={"failed": None})

    def abort(self, candidate: str, desired: str) -> bool:
        """``abort``: the candidate is taken out like a failed one, and kept scaled down."""
        if not self.asked(ABORT_ANNOTATION) or self.aimed_elsewhere(ABORT_ANNOTATION, candidate):
            return False
        self.handled.add(ABORT_ANNOTATION)
        index = self.index()
        self.layout = self.stage_layout(self.plan[index], index, candidate)
        failure = _Fail("Aborted", f"aborted by a person ({_COMMANDS[ABORT_ANNOTATION]})")
        self.fail(candidate, index, failure, outcome="Aborted")
        self.wind_down(candidate, desired)
        return True

    def steer(self, candidate: str) -> None:
        """``pause``, ``promote --full``, ``promote``, ``skip-analysis`` and a resume of a
        person's pause, on the rollout in progress."""
        rollout = self.rollout
        assert rollout is not None
        index = self.index()
        if self.asked(PAUSE_ANNOTATION) and not self.aimed_elsewhere(PAUSE_ANNOTATION, candidate):
            if rollout.user_paused:
                self.refuse(PAUSE_ANNOTATION, "the rollout is already paused by a person")
            else:
                self.handled.add(PAUSE_ANNOTATION)
                message = (
                    f"{self.where(index)}: paused by a person; analyses keep judging (a failure "
                    f"still rolls back); to go on: {self.command('resume')}"
                )
                self.update_rollout(
                    user_paused=True, paused=True, pause_reason="UserPaused", message=message
                )
                self.event("Normal", "RolloutPaused", message)
        if self.asked(PROMOTE_FULL_ANNOTATION) and not self.aimed_elsewhere(
            PROMOTE_FULL_ANNOTATION, candidate
        ):
            self.handled.add(PROMOTE_FULL_ANNOTATION)
            if not self.rollout or not self.rollout.promote_full:
                self.update_rollout(promote_full=True)
                self.event(
                    "Normal",
                    "PromotedFull",
                    f"{self.where(index)}: full promotion of {candidate} asked by a person: the "
                    "remaining steps, pauses and analyses are skipped; it becomes stable once it "
                    f"is Ready at full size{' (after the smoke test)' if index == 0 else ''}",
                )
            self.lift_user_pause()
        if self.asked(PROMOTE_ANNOTATION) and not self.aimed_elsewhere(
            PROMOTE_ANNOTATION, candidate
        ):
            self.skip_step = True  # handled (or refused) where the step is: forced()/switch()
            self.lift_user_pause()
        if self.asked(SKIP_ANALYSIS_ANNOTATION) and not self.aimed_elsewhere(
            SKIP_ANALYSIS_ANNOTATION, candidate
        ):
            self.handled.add(SKIP_ANALYSIS_ANNOTATION)
            assert self.rollout is not None
            if self.rollout.analysis_skipped:
                self.refuse(SKIP_ANALYSIS_ANNOTATION, "the analysis is already skipped")
            else:
                self.update_rollout(analysis_skipped=True)
                self.event(
                    "Normal",
                    "AnalysisSkipped",
                    f"{self.where(index)}: a person skipped the analysis of revision {candidate}: "
                    "no more analysis steps, background or post-promotion analysis in this rollout",
                )
        assert self.rollout is not None
        if self.resumed and self.rollout.user_paused:
            self.lift_user_pause()  # a resume lifts a person's pause first, and only that
            self.resumed = False
            self.resume_used = True

    def lift_user_pause(self) -> None:
        rollout = self.rollout
        if rollout is None or not rollout.user_paused:
            return
        index = self.index()
        update: dict[str, object] = {"user_paused": None, "paused": False, "pause_reason": None}
        if self.plan[index].kind in ("prepare", "setWeight", "promote", "switch"):
            update["step_started_at"] = to_rfc3339(self.now)  # its deadline counts from now
        self.update_rollout(**update)
        self.event("Normal", "Resumed", f"{self.where(index)}: a person's pause is lifted")

    def forced(self, stage: Stage, index: int) -> _Outcome | None:
        """What a person's promote, promote --full or skip-analysis makes of this step."""
        rollout = self.rollout
        assert rollout is not None
        kind = stage.kind
        if kind in ("prepare", "promote"):
            if self.skip_step:
                self.skip_step = False
                why = (
                    "the candidate must be Ready and pass the smoke test before any traffic"
                    if kind == "prepare"
                    else f"the promotion waits for the candidate's {self.candidate_total} "
                    "replicas to be Ready"
                )
                self.refuse(PROMOTE_ANNOTATION, f"{self.where(index)} cannot be skipped: {why}")
            return None
        if rollout.promote_full and kind in ("setWeight", "pause", "analysis", "postPromotion"):
            return "next"
        if rollout.analysis_skipped and kind in ("analysis", "postPromotion"):
            return "next"
        if self.skip_step and kind != "switch":  # the switch is approved in switch()
            self.skip_step = False
            self.handled.add(PROMOTE_ANNOTATION)
            self.event("Normal", "StepPromoted", f"{self.where(index)} ended by a person")
            return "next"
        return None

    def hold(self, index: int) -> _Outcome:
        """A person's pause: the rollout stays at this step."""
        self.update_rollout(
            paused=True,
            pause_reason="UserPaused",
            message=f"{self.where(index)}: paused by a person; to go on: {self.command('resume')}",
        )
        return "wait"

    def notice_edits(self, candidate: str) -> None:
        """The analysis settings are frozen when a rollout starts; say once that later edits
        wait for the next rollout."""
        rollout = self.rollout
        assert rollout is not None
        live = self.live_settings()
        frozen = rollout.frozen
        if frozen is None:  # a rollout started before settings were frozen: from now on
            self.update_rollout(frozen=live)
            return
        if frozen.edited:
            return
        if frozen.model_dump(exclude={"edited"}) != live.model_dump(exclude={"edited"}):
            self.update_rollout(frozen=frozen.model_copy(update={"edited": True}))
            self.event(
                "Normal",
                "AnalysisSettingsFrozen",
                f"the analysis settings (rollout.analysis, rollout.backgroundAnalysis, slo) "
                f"changed during the rollout of {candidate}: it is judged to the end by those it "
                "started with (status.rollout.frozen); the change applies to the next rollout",
            )

    # -- revisions: numbers, specs, time as stable -------------------------------------------

    def remember(self, revision: str, *, stable: bool = False) -> None:
        """Number ``revision`` (the one the spec asks for) as the newest, with its spec."""
        log = list(self.revisions.log)
        old = next((e for e in log if e.revision == revision), None)
        now = to_rfc3339(self.now)
        entry = RevisionEntry(
            number=max((e.number for e in log), default=0) + 1,
            revision=revision,
            spec=dict(self.given.revision_spec or (old.spec if old is not None else {})),
            created=now,
            stable_since=now if stable else (old.stable_since if old is not None else None),
            stable_until=None if stable else (old.stable_until if old is not None else None),
        )
        log = [e for e in log if e.revision != revision] + [entry]
        keep = {self.revisions.stable, self.revisions.candidate, revision}
        while len(log) > _HISTORY_LIMIT:
            drop = next((e for e in log if e.revision not in keep), log[0])
            log.remove(drop)
        # the specs share a fixed budget: the status stays small whatever the spec (issue 38)
        self.revisions = self.revisions.model_copy(update={"log": keep_specs(log)})

    def mark(self, revision: str, **update: object) -> None:
        log = [
            e.model_copy(update=update) if e.revision == revision else e for e in self.revisions.log
        ]
        self.revisions = self.revisions.model_copy(update={"log": log})

    def within_window(self, revision: str) -> str | None:
        """Why ``revision`` comes back fast (``rollout.rollbackWindow``), or None."""
        window = self.given.spec.rollback_window
        if window is None:
            return None
        entry = next((e for e in self.revisions.log if e.revision == revision), None)
        if entry is None or entry.stable_until is None:
            return None
        until = from_rfc3339(entry.stable_until)
        if window.duration is not None:
            limit = parse_duration_seconds(window.duration)
            ago = (self.now - until).total_seconds()
            if ago > limit:
                return None
            return (
                f"it served as stable until {ago:.0f}s ago, within rollbackWindow {window.duration}"
            )
        served = sorted(
            (e for e in self.revisions.log if e.stable_until is not None),
            key=lambda e: from_rfc3339(e.stable_until or ""),
            reverse=True,
        )
        assert window.revisions is not None
        rank = [e.revision for e in served].index(revision) + 1
        if rank > window.revisions:
            return None
        return (
            f"it is the {_ordinal(rank)} most recent stable revision before "
            f"{self.revisions.stable}, within rollbackWindow {window.revisions} revision(s)"
        )

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
            self.mark(stable, stable_until=to_rfc3339(self.now))
            self.revisions = self.revisions.model_copy(update={"stable": None, "candidate": None})
            stable = None
        if stable is None:
            self.revisions = self.revisions.model_copy(
                update={"stable": desired, "candidate": None, "failed": None}
            )
            self.remember(desired, stable=True)
            self.settle(desired)
            return self.finish()

        candidate = self.revisions.candidate
        if self.aimed_elsewhere(RESUME_ANNOTATION, candidate):
            self.resumed = False
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
            self.retry(desired)
            if desired in (self.revisions.stable, self.revisions.failed):
                self.settle(desired)
                return self.finish()
            self.start(desired)
        if self.abort(desired, desired):
            return self.finish()
        self.steer(desired)
        self.advance(desired)
        return self.finish()

    # -- steady state -------------------------------------------------------------------------

    def settle(self, desired: str) -> None:
        """No rollout in progress: the stable serves everything."""
        stable = self.revisions.stable
        assert stable is not None
        if self.revisions.failed is not None and desired != self.revisions.failed:
            self.revisions = self.revisions.model_copy(update={"failed": None})
        if desired == stable and not any(e.revision == stable for e in self.revisions.log):
            self.remember(stable, stable=True)  # a status from before the log
        replicas = {stable: max(0, self.given.total_replicas)}
        kept = self.kept_old_revision()
        if kept is not None:
            replicas[kept] = self.obs(kept).replicas
        aborted = self.revisions.failed
        if aborted is not None and self.aborted(aborted) and aborted in self.given.deployments:
            replicas[aborted] = self.aborted_replicas(aborted)
        route = (100, 0) if self.gateway else None
        self.layout = _Layout(replicas, Traffic(stable, None, route, 0))
        if self.rollout is not None and (self.rollout.paused or self.rollout.pause_reason):
            self.update_rollout(paused=False, pause_reason=None)

    def aborted_replicas(self, revision: str) -> int:
        """An aborted candidate keeps its replicas (no traffic) until ``scaleDownAt``, then 0."""
        at = self.rollout.scale_down_at if self.rollout is not None else None
        if at is not None and self.now < from_rfc3339(at):
            self.wake.append(from_rfc3339(at))
            return self.obs(revision).replicas
        return 0

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
        fast = self.within_window(desired)
        self.remember(desired)
        self.revisions = self.revisions.model_copy(update={"candidate": desired, "failed": None})
        self.plan = build_plan(self.given.spec, fast=fast is not None)
        self.rollout = RolloutStatus(
            step=0,
            weight=0,
            step_started_at=to_rfc3339(self.now),
            message=f"{self.where(0)}: starting revision {desired}",
            fast_rollback=True if fast is not None else None,
            frozen=self.live_settings(),
        )
        self.resumed = False
        strategy = "blue-green" if not self.canary else "canary"
        self.event(
            "Normal",
            "RolloutStarted",
            f"{strategy} rollout of revision {desired} replacing {stable}: "
            + ", ".join(s.describe() for s in self.plan),
        )
        if fast is not None:
            self.event(
                "Normal",
                "FastRollback",
                f"revision {desired} comes back with the smoke test only, its steps and analysis "
                f"skipped: {fast}",
            )

    def judged(
        self,
        run: AnalysisRunStatus,
        checks: Sequence[ResolvedCheck],
        results: Mapping[str, QueryResult],
        policy: AnalysisPolicy,
        label: str,
    ) -> AnalysisRunStatus:
        """``run`` with one measurement judged and recorded, and its AnalysisMeasurement
        Event (``label`` and the measurement's number, then its summary)."""
        outcome = judge_measurement(checks, results, policy)
        run = record_measurement(run, outcome, policy, self.now)
        self.event(
            "Normal" if outcome.verdict == "Successful" else "Warning",
            "AnalysisMeasurement",
            f"{label} {run.measurements_taken + run.errors}: {outcome.summary}",
        )
        return run

    def advance(self, candidate: str) -> None:
        if self.rollout is None or self.rollout.step_started_at is None:
            self.update_rollout(step_started_at=to_rfc3339(self.now))
        self.notice_edits(candidate)
        self.start_step = self.index()
        held = self.background(self.start_step, candidate)
        if isinstance(held, _Fail):
            index = self.index()
            self.layout = self.stage_layout(self.plan[index], index, candidate)
            self.fail(candidate, index, held)
            self.wind_down(candidate, self.given.revision)
            return
        if held:  # an inconclusive background analysis holds the rollout at its step
            index = self.index()
            self.layout = self.stage_layout(self.plan[index], index, candidate)
            self.update_rollout(weight=self.layout.traffic.canary_weight)
            self.load_test = self.load_test_target(candidate, index)
            return
        for _ in range(len(self.plan) + 1):
            assert self.rollout is not None
            index = self.index()
            stage = self.plan[index]
            self.layout = self.stage_layout(stage, index, candidate)
            outcome: _Outcome | _Fail
            if self.rollout.user_paused and stage.kind not in ("analysis", "postPromotion"):
                outcome = self.hold(index)
            else:
                outcome = self.forced(stage, index) or self.handle(stage, index, candidate)
                if stage.kind == "switch":  # an approved switch sizes the candidate in full
                    self.layout = self.stage_layout(stage, index, candidate)
                if outcome == "next" and self.rollout.user_paused:
                    outcome = self.hold(index)
            if isinstance(outcome, _Fail):
                self.fail(candidate, index, outcome)
                self.wind_down(candidate, self.given.revision)
                return
            if outcome == "wait":
                self.update_rollout(weight=self.layout.traffic.canary_weight)
                break
            if index + 1 >= len(self.plan):
                self.promote(candidate)
                return
            self.update_rollout(
                step=index + 1,
                step_started_at=to_rfc3339(self.now),
                paused=False,
                pause_reason=None,
                resume_after_analysis=None,
                promotion_approved=None,
            )
            self.resumed = False
        index = self.index()
        self.background(index, candidate, start_only=True)
        self.load_test = self.load_test_target(candidate, index)

    def load_test_target(self, candidate: str, index: int) -> str | None:
        """blueGreen's built-in load test runs from the smoke test to the switch."""
        rollout = self.rollout
        if self.canary or self.given.spec.blue_green.load_test is None or rollout is None:
            return None
        if rollout.fast_rollback or index < 1 or self.plan[index].kind == "postPromotion":
            return None
        return candidate

    def stage_layout(self, stage: Stage, index: int, candidate: str) -> _Layout:
        """Replicas and traffic while the rollout is at ``stage``."""
        stable = self.revisions.stable
        assert stable is not None
        total = self.total
        if not self.canary:
            switched = stage.kind == "postPromotion"
            approved = stage.kind == "switch" and bool(
                self.rollout is not None and self.rollout.promotion_approved
            )
            preview = self.given.spec.blue_green.preview_replica_count
            size = self.candidate_total
            if preview is not None and not (switched or approved):
                size = min(preview, size)
            return _Layout(
                {stable: total, candidate: size},
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
        frozen = self.frozen
        policy = AnalysisPolicy.from_settings(
            frozen.analysis, stage.analysis, compare_to_stable=compare
        )
        if stage.kind == "postPromotion" and not has_judging_checks(policy, frozen.slo):
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
            self.resume_used = True
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

    def enter_pause(self, index: int, reason: str, message: str) -> None:
        was = (
            self.rollout is not None and self.rollout.paused and self.rollout.pause_reason == reason
        )
        self.update_rollout(paused=True, pause_reason=reason, message=message)
        if not was:
            self.event("Normal", "RolloutPaused", message)

    def switch(self, index: int, candidate: str) -> _Outcome | _Fail:
        """Approved (autoPromote, a person, a fast rollback or a full promotion), the candidate
        scales to full size (``previewReplicaCount``), then the active Service selects it."""
        rollout = self.rollout
        assert rollout is not None
        if not rollout.promotion_approved:
            approved = bool(
                self.given.spec.blue_green.auto_promote
                or rollout.fast_rollback
                or rollout.promote_full
            )
            if not approved and self.resumed:
                approved, self.resume_used = True, True
            if not approved and self.skip_step:
                approved, self.skip_step = True, False
                self.handled.add(PROMOTE_ANNOTATION)
            if not approved:
                self.enter_pause(
                    index,
                    "AwaitingPromotion",
                    f"{self.where(index)}: revision {candidate} is ready behind the preview "
                    f"Service; promote it: {self.command('promote')}",
                )
                return "wait"
            self.update_rollout(
                promotion_approved=True,
                step_started_at=to_rfc3339(self.now),
                paused=False,
                pause_reason=None,
            )
        wanted = self.candidate_total
        if self.obs(candidate).ready < wanted:
            return self.await_ready(index, candidate, wanted)
        assert self.revisions.stable is not None
        stays = (
            "is removed"
            if len(self.plan) <= index + 1
            else "stays at full size until the post-promotion analysis passes"
        )
        self.event(
            "Normal",
            "ActiveSwitched",
            f"the active Service now selects revision {candidate}; {self.revisions.stable} "
            + (
                f"is kept {self.given.spec.blue_green.scale_down_delay_seconds}s"
                if stays == "is removed"
                else stays
            ),
        )
        return "next"

    def analysis(self, index: int, candidate: str, policy: AnalysisPolicy) -> _Outcome | _Fail:
        assert self.rollout is not None
        run = self.rollout.analysis
        if run is not None and from_rfc3339(run.started_at) < self.step_started():
            run = None  # the last run belongs to an earlier step
        if run is None:
            if self.waits_for_load_test(index, candidate):
                return "wait"
            run = start_run(self.now, policy)
            self.event("Normal", "AnalysisStarted", f"{self.where(index)}: {policy.describe()}")
        before = run.phase
        if measurement_due(run, self.now):
            target = self.target(candidate, policy)
            checks = resolve_checks(policy, self.frozen.slo, target)
            results = self.results(checks)
            if results is None:
                self.measure = checks
            else:
                run = self.judged(run, checks, results, policy, f"{self.where(index)} measurement")
        self.update_rollout(analysis=run, message=f"{self.where(index)}: analysis {run.message}")
        if run.phase == "Running":
            if run.next_measurement_at is not None and self.measure is None:
                self.wake.append(from_rfc3339(run.next_measurement_at))
            return "wait"
        if run.phase == "Successful":
            if before == "Running":
                self.event("Normal", "AnalysisSuccessful", f"{self.where(index)}: {run.message}")
            return "next"
        if run.phase == "Inconclusive":
            if self.resumed or self.rollout.resume_after_analysis:
                self.resume_used = self.resume_used or self.resumed
                self.event(
                    "Normal", "Resumed", f"{self.where(index)}: inconclusive analysis accepted"
                )
                return "next"
            self.enter_pause(
                index,
                "AnalysisInconclusive",
                f"{self.where(index)}: analysis inconclusive, paused; to accept it and go on: "
                f"{self.resume_command()}; to stop: {self.command('abort')}. {run.message}",
            )
            return "wait"
        reason = "AnalysisError" if run.phase == "Error" else "AnalysisFailed"
        return _Fail(reason, run.message)

    def waits_for_load_test(self, index: int, candidate: str) -> bool:
        """True while this step's analysis waits for the load test it judges to start sending
        (its pod Ready), at most :data:`LOAD_TEST_START_SECONDS` from the step's start: a
        measurement before it would find no traffic and pause the rollout."""
        ready = self.given.load_tests_ready
        if ready is None or candidate in ready:
            return False
        if self.load_test_target(candidate, index) != candidate:
            return False
        until = self.step_started() + timedelta(seconds=LOAD_TEST_START_SECONDS)
        if self.now >= until:
            return False
        self.update_rollout(
            message=f"{self.where(index)}: waiting for the load test's pod to be Ready before "
            f"the analysis starts (at most until {to_rfc3339(until)})"
        )
        self.wake.append(min(until, self.now + timedelta(seconds=LOAD_TEST_POLL_SECONDS)))
        return True

    def target(self, candidate: str, policy: AnalysisPolicy) -> AnalysisTarget:
        return AnalysisTarget(
            namespace=self.given.service.namespace,
            service=self.given.service.name,
            candidate=candidate,
            stable=self.revisions.stable if policy.compare_to_stable is not None else None,
            vllm_version=self.given.service.vllm_version,
        )

    def results(
        self, checks: tuple[ResolvedCheck, ...], prefix: str = ""
    ) -> dict[str, QueryResult] | None:
        """This measurement's results, when the previous call asked for every query of it."""
        measured = self.given.measurement
        if measured is None:
            return None
        queried = [c for c in checks if c.error is None]
        if any(prefix + c.name not in measured for c in queried):
            return None
        return {c.name: measured[prefix + c.name] for c in queried}

    def background(self, index: int, candidate: str, *, start_only: bool = False) -> _Fail | bool:
        """``rollout.backgroundAnalysis`` at the rollout's current step: a failure, True while
        an inconclusive run holds the rollout (until resumed), else False."""
        rollout = self.rollout
        assert rollout is not None
        frozen = self.frozen
        settings: BackgroundAnalysis | None = frozen.background_analysis
        stage = self.plan[index]
        if (
            settings is None
            or rollout.fast_rollback
            or rollout.promote_full
            or rollout.analysis_skipped
            or stage.kind == "prepare"
            or index < settings.starting_step + 1
        ):
            return False
        policy = self.background_policy(frozen.analysis, stage)
        run = rollout.background_analysis
        if run is None:
            run = start_run(self.now, policy)
            self.event(
                "Normal",
                "AnalysisStarted",
                f"background analysis from {self.where(index)}: {policy.describe()}",
            )
        elif start_only:
            return False
        elif run.phase == "Inconclusive":
            if not (self.resumed or self.skip_step):  # resume, or promote: accept it, go on
                self.hold_background(index, run)
                return True
            self.resume_used = self.resume_used or self.resumed
            self.resumed = False
            self.event(
                "Normal",
                "Resumed",
                f"{self.where(index)}: inconclusive background analysis accepted; it starts afresh",
            )
            run = start_run(self.now, policy)
        if not start_only and measurement_due(run, self.now):
            checks = resolve_checks(policy, frozen.slo, self.target(candidate, policy))
            results = self.results(checks, BACKGROUND_PREFIX)
            if results is None:
                self.background_measure = tuple(
                    replace(c, name=BACKGROUND_PREFIX + c.name) for c in checks
                )
            else:
                run = self.judged(
                    run, checks, results, policy,
                    f"background analysis at {self.where(index)}, measurement",
                )  # fmt: skip
        self.update_rollout(background_analysis=run)
        if run.phase == "Running":
            if run.next_measurement_at is not None and self.background_measure is None:
                self.wake.append(from_rfc3339(run.next_measurement_at))
            return False
        if run.phase == "Inconclusive":
            self.hold_background(index, run)
            return True
        if run.phase in ("Failed", "Error"):
            reason = "AnalysisError" if run.phase == "Error" else "AnalysisFailed"
            return _Fail(reason, f"background analysis: {run.message}")
        return False

    def background_policy(self, settings: AnalysisSettings, stage: Stage) -> AnalysisPolicy:
        # Compared with the stable only while the stable serves clients next to the candidate.
        compare = self.canary or stage.kind not in ("switch", "postPromotion")
        return AnalysisPolicy.from_settings(
            settings, None, compare_to_stable=compare and self.canary, background=True
        )

    def hold_background(self, index: int, run: AnalysisRunStatus) -> None:
        self.enter_pause(
            index,
            "BackgroundAnalysisInconclusive",
            f"{self.where(index)}: background analysis inconclusive, paused; to accept it and "
            f"go on: {self.resume_command()}; to stop: {self.command('abort')}. {run.message}",
        )

    # -- ends -------------------------------------------------------------------------------

    def promote(self, candidate: str) -> None:
        old = self.revisions.stable
        assert old is not None
        self.record(old, "Superseded", f"replaced by {candidate}")
        self.record(candidate, "Promoted", "")
        self.mark(old, stable_until=to_rfc3339(self.now))
        self.mark(candidate, stable_since=to_rfc3339(self.now), stable_until=None)
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
            user_paused=None,
            resume_after_analysis=None,
            promotion_approved=None,
        )
        self.event("Normal", "Promoted", message)
        self.settle(candidate)

    def fail(
        self,
        candidate: str,
        index: int,
        failure: _Fail,
        outcome: Literal["RolledBack", "Aborted"] = "RolledBack",
    ) -> None:
        self.revisions = self.revisions.model_copy(update={"failed": candidate})
        self.record(
            candidate, outcome, f"{failure.reason}: {failure.message}", cause=failure.reason
        )
        self.event("Warning", failure.reason, f"{self.where(index)}: {failure.message}")
        verb = "aborting" if outcome == "Aborted" else "rolling back"
        self.update_rollout(
            paused=False,
            pause_reason=ROLLING_BACK,
            step_started_at=to_rfc3339(self.now),
            user_paused=None,
            message=f"{verb} revision {candidate} from {self.where(index)}: "
            f"{failure.reason}: {failure.message}",
        )

    def wind_down(self, candidate: str, desired: str) -> bool:
        """Take the candidate out: stable to full size first, then traffic, then removal.

        Returns True once the candidate is gone from the plan (its Deployment is then removed,
        or, aborted, kept scaled down).
        """
        stable = self.revisions.stable
        assert stable is not None
        rolled_back = self.revisions.failed == candidate
        aborted = rolled_back and self.aborted(candidate)
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
            index = self.index()
            layout = self.stage_layout(self.plan[index], index, candidate)
            replicas = {stable: total, candidate: self.obs(candidate).replicas}
            self.layout = _Layout(replicas, layout.traffic)
            self.wake.append(deadline)
            verb = "aborting" if aborted else "rolling back" if rolled_back else "abandoning"
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
        scale_down_at = None
        if aborted:
            delay = self.given.spec.abort_scale_down_delay_seconds
            scale_down_at = to_rfc3339(self.now + timedelta(seconds=delay))
            message = (
                f"revision {candidate} aborted by a person; {stable} serves all traffic; "
                f"{candidate} keeps its replicas for {delay}s, then is scaled to 0 until the spec "
                f"changes or {self.command('retry')}"
            )
            self.event("Warning", "RolledBack", message)
        elif rolled_back:
            why = record.reason if record is not None else "rolled back"
            message = f"revision {candidate} rolled back ({why}); {stable} serves all traffic"
            self.event("Warning", "RolledBack", message)
        else:
            message = f"revision {candidate} removed before promotion; {stable} serves all traffic"
            self.event("Normal", "CandidateRemoved", message)
        self.update_rollout(
            weight=0, paused=False, pause_reason=None, message=message, scale_down_at=scale_down_at
        )
        self.settle(desired)
        return True

    # -- output -----------------------------------------------------------------------------

    def leftover_controls(self) -> None:
        """Say what became of controls nothing acted on (they are removed all the same)."""
        rollout = self.rollout
        candidate = self.revisions.candidate
        index = self.index() if rollout is not None else 0
        if (
            self.asked(RESUME_ANNOTATION)
            and not self.resume_used
            and candidate is not None
            and rollout is not None
            and rollout.step == self.start_step
            and self.plan[index].kind in ("analysis", "postPromotion")
            and rollout.analysis is not None
            and rollout.analysis.phase == "Running"
        ):
            self.handled.add(RESUME_ANNOTATION)
            self.update_rollout(resume_after_analysis=True)
            self.event(
                "Normal",
                "ResumeDeferred",
                f"{self.where(index)}: resume noted during a running analysis; the analysis is "
                f"not cut short ({self.command('skip-analysis')} does that): if it ends "
                "inconclusive the rollout goes on instead of pausing",
            )
        if self.resume_used:
            self.handled.add(RESUME_ANNOTATION)
        for key in CONTROL_ANNOTATIONS:
            if candidate is None:
                why = "no rollout is in progress"
                if self.revisions.failed is not None:
                    why += (
                        f" (revision {self.revisions.failed} is aborted or rolled back: retry it)"
                    )
            elif rollout is not None and rollout.pause_reason in (ROLLING_BACK, ABANDONING):
                why = f"revision {candidate} is being taken out"
            elif key == RETRY_ANNOTATION:
                why = f"a rollout of {candidate} is in progress"
            else:
                why = "nothing is paused"
            self.refuse(key, why)

    def finish(self) -> RolloutDecision:
        self.leftover_controls()
        requeue = min(self.wake) if self.wake else None
        measure = None
        if self.measure is not None or self.background_measure is not None:
            measure = (*(self.measure or ()), *(self.background_measure or ()))
        if measure is not None or self.smoke is not None:
            requeue = self.now
        return RolloutDecision(
            rollout=self.rollout,
            revisions=self.revisions,
            replicas=self.layout.replicas,
            traffic=self.layout.traffic,
            events=tuple(self.events),
            conditions=self.conditions(),
            measure=measure,
            smoke=self.smoke,
            requeue_at=requeue,
            consumed=tuple(k for k in CONTROL_ANNOTATIONS if k in self.given.controls),
            load_test=self.load_test if self.revisions.candidate is not None else None,
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
            if self.aborted(failed):
                text = (
                    f"revision {failed} was aborted by a person; {self.revisions.stable} serves "
                    f"all traffic. Run it again: {self.command('retry')}; or change the spec."
                )
            else:
                text = (
                    f"revision {failed} was rolled back ({record.reason if record else cause}); "
                    f"{self.revisions.stable} serves all traffic. Change the spec to try again, "
                    f"or {self.command('retry')}."
                )
            degraded = "Aborted" if self.aborted(failed) else "RolledBack"
            return (
                ConditionChange("Progressing", "False", "RolloutAborted", text),
                ConditionChange("RolledBack", "True", cause, text),
                ConditionChange("Degraded", "True", degraded, text),
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


def _ordinal(n: int) -> str:
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")


def step(given: RolloutInput) -> RolloutDecision:
    """One reconcile's rollout decision; see the module docstring.

    Protocol: when the decision carries ``measure`` (or ``smoke``), run those queries (or the
    smoke test) and call :func:`step` again with the same input plus ``measurement`` (or
    ``smoke``); use only the last decision. The second call recomputes everything from the same
    status, so the first decision's status and events are simply discarded. Remove the
    annotations in ``consumed`` once the decision is applied.
    """
    status = given.status
    revisions = given.revisions or RevisionsStatus()
    resumed = RESUME_ANNOTATION in given.controls or (
        status is not None and not status.paused and status.pause_reason in _PAUSES
    )
    fast = bool(status is not None and status.fast_rollback and revisions.candidate)
    machine = _Machine(
        given=given,
        revisions=revisions,
        rollout=status,
        now=utc(given.now),
        plan=build_plan(given.spec, fast=fast),
        resumed=resumed,
    )
    return machine.run()
