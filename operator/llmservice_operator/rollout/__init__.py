"""Rollouts (pure): analysis verdicts from Prometheus results, the smoke test, the step machine.

Nothing here talks to Kubernetes or Prometheus or reads the clock; the reconcile observes,
calls :func:`step`, and applies what it returns. See ``docs/rollouts.md``.
"""

from .analysis import (
    AnalysisPolicy,
    AnalysisTarget,
    MeasurementOutcome,
    QueryResult,
    ResolvedCheck,
    Series,
    judge_measurement,
    measurement_due,
    parse_prometheus_response,
    record_measurement,
    resolve_checks,
    start_run,
)
from .machine import (
    RESUME_ANNOTATION,
    ConditionChange,
    DeploymentObservation,
    RolloutDecision,
    RolloutInput,
    ServiceRef,
    SmokeTarget,
    Traffic,
    build_plan,
    canary_replicas,
    stable_replicas,
    step,
)
from .smoke_verdict import SmokeObservation, SmokeRequest, SmokeResult, judge_smoke, smoke_requests

__all__ = [
    "RESUME_ANNOTATION",
    "AnalysisPolicy",
    "AnalysisTarget",
    "ConditionChange",
    "DeploymentObservation",
    "MeasurementOutcome",
    "QueryResult",
    "ResolvedCheck",
    "RolloutDecision",
    "RolloutInput",
    "Series",
    "ServiceRef",
    "SmokeObservation",
    "SmokeRequest",
    "SmokeResult",
    "SmokeTarget",
    "Traffic",
    "build_plan",
    "canary_replicas",
    "judge_measurement",
    "judge_smoke",
    "measurement_due",
    "parse_prometheus_response",
    "record_measurement",
    "resolve_checks",
    "smoke_requests",
    "stable_replicas",
    "start_run",
    "step",
]
