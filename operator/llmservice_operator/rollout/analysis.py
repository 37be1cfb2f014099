"""Rollout analysis: LLM checks as PromQL, verdicts per measurement, and the analysis run (pure).

Three layers, each a plain function of its inputs:

1. :func:`resolve_checks` turns the spec (``slo``, ``rollout.analysis``) into PromQL filtered by
   the Prometheus labels ``namespace``, ``llmservice`` (the LLMService's name) and ``revision``
   (the pod-template hash), with vLLM's metric names for the pinned ``engine.vllmVersion``
   (:func:`llmservice_operator.vllm.metrics.metric_names`).
2. :func:`judge_measurement` judges one measurement: the query results (per check, a list of
   series or an error string) become one :class:`AnalysisMeasurement` per check, each ``Successful``,
   ``Failed``, ``Error`` or ``NoData``, and one verdict for the measurement as a whole.
3. :func:`start_run` / :func:`record_measurement` accumulate measurements into an
   :class:`AnalysisRunStatus` with the meanings Argo Rollouts gives its metric fields
   (``analysis/analysis.go``, ``assessMetricStatus``):

   * a measurement is taken every ``interval``; ``count`` measurements in all. Successful,
     Failed and Inconclusive measurements count towards ``count``; Error measurements do not
     (they are retried after ``interval``), and they reset nothing but ``consecutiveErrors``.
   * the run ends, checked in this order after each measurement:
     ``failed > failureLimit`` -> Failed; ``inconclusive > inconclusiveLimit`` -> Inconclusive;
     ``consecutiveErrors > consecutiveErrorLimit`` -> Error; ``count`` reached -> Successful.
     So ``failureLimit: 0`` (the default) fails on the first failed measurement, and with
     ``consecutiveErrorLimit: 4`` the fifth error in a row ends the run as Error. Errors are
     never failures: Prometheus being unreachable is not evidence against the candidate.

   One deliberate difference: without ``initialDelay`` the first measurement is taken one
   ``interval`` after the run starts, not at once (as if Argo's ``initialDelay`` were the
   interval). Every check is a rate over a window; measured the moment traffic shifts, the
   window holds almost no candidate traffic and would read as NoData. With ``initialDelay``
   it is taken that long after the start, as in Argo.

   After an Error measurement the next one comes ``errorRetryInterval`` (10 s) later, not a
   whole interval (or one interval, if that is shorter) (Argo's ``DefaultErrorRetryInterval``), so a Prometheus blip costs seconds.
   Checks named in ``dryRun`` are measured and reported but never count towards a verdict
   (Argo's ``dryRun``). Each check keeps its last :data:`MEASUREMENT_HISTORY` measurements
   (value, verdict, time) in the run's ``checks``.

   Argo keeps these counters per metric; here one measurement covers every check (they share
   ``interval`` and ``count``), and its verdict is the worst of its checks in Argo's order
   ``Successful < Inconclusive < Error < Failed``.

The run's whole state is the :class:`AnalysisRunStatus` in the LLMService's status, so an
operator that restarts mid-analysis carries on with the counts it had.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from ..api.base import parse_duration_seconds
from ..api.spec import (
    AnalysisSettings,
    AnalysisStepSettings,
    CompareToStable,
    CustomCheck,
    SLOSpec,
)
from ..api.status import (
    MEASUREMENT_HISTORY,
    AnalysisMeasurement,
    AnalysisRunStatus,
    CheckHistory,
    MeasurementPoint,
)
from ..api.timestamps import from_rfc3339, to_rfc3339
from ..vllm.metrics import metric_names

__all__ = [
    "ERROR_RATE",
    "INFERENCE_HANDLERS",
    "SAMPLE_COUNT",
    "STABLE_SAMPLE_COUNT",
    "TPOT",
    "TPOT_VS_STABLE",
    "TTFT",
    "TTFT_VS_STABLE",
    "AnalysisPolicy",
    "AnalysisTarget",
    "Comparison",
    "MeasurementOutcome",
    "QueryResult",
    "ResolvedCheck",
    "Series",
    "judge_measurement",
    "has_judging_checks",
    "measurement_due",
    "parse_prometheus_response",
    "promql_duration",
    "record_measurement",
    "resolve_checks",
    "start_run",
]

# Built-in check names. Each has an upper-case letter, which a custom check's name (a
# Kubernetes name) cannot, so the two never collide.
SAMPLE_COUNT = "sampleCount"
STABLE_SAMPLE_COUNT = "stableSampleCount"
TTFT = "ttftP99Ms"
TPOT = "tpotP99Ms"
ERROR_RATE = "errorRate"
TTFT_VS_STABLE = "ttftP99VsStablePercent"
TPOT_VS_STABLE = "tpotP99VsStablePercent"

#: The OpenAI endpoints whose requests the error rate and the sample count are made of (as
#: vLLM's HTTP instrumentation labels them in ``http_requests_total{handler=...}``).
INFERENCE_HANDLERS: tuple[str, ...] = ("/v1/chat/completions", "/v1/completions")

Comparison = Literal["<", "<=", ">", ">="]
CheckRole = Literal["samples", "stableSamples", "candidate", "compare", "custom"]
MeasurementVerdict = Literal["Successful", "Failed", "Inconclusive", "Error"]
CheckVerdict = Literal["Successful", "Failed", "Error", "NoData"]

_WORST_ORDER: tuple[MeasurementVerdict, ...] = ("Successful", "Inconclusive", "Error", "Failed")
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z]+)\s*\}\}")


# -- inputs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AnalysisTarget:
    """What the queries are about: one LLMService, its candidate and (if any) stable revision."""

    namespace: str
    service: str
    candidate: str
    stable: str | None
    vllm_version: str


@dataclass(frozen=True)
class AnalysisPolicy:
    """The effective settings of one analysis run: ``rollout.analysis`` with a step's overrides."""

    interval_seconds: float
    count: int | None
    """Measurements in all; None: until the run is stopped (a background analysis)."""
    window: str
    """PromQL range, e.g. ``1m`` (``analysis.window``, else the interval)."""
    min_samples: int
    failure_limit: int
    inconclusive_limit: int
    consecutive_error_limit: int
    on_no_data: Literal["inconclusive", "fail", "pass"]
    compare_to_stable: CompareToStable | None
    custom_checks: tuple[CustomCheck, ...] = ()
    initial_delay_seconds: float | None = None
    """First measurement this long after the start; None: one interval."""
    error_retry_seconds: float = 10.0
    """After an Error measurement, the next one this much later."""
    dry_run: frozenset[str] = frozenset()
    """Checks reported whose verdicts never act."""

    @classmethod
    def from_settings(
        cls,
        settings: AnalysisSettings,
        step: AnalysisStepSettings | None = None,
        *,
        compare_to_stable: bool = True,
        background: bool = False,
    ) -> AnalysisPolicy:
        """``compare_to_stable=False`` drops the comparison (the stable serves no traffic);
        ``background``: no count, the run goes on until it is stopped."""
        interval = step.interval if step is not None and step.interval else settings.interval
        count = step.count if step is not None and step.count else settings.count
        window = settings.window or interval
        delay = settings.initial_delay
        return cls(
            interval_seconds=parse_duration_seconds(interval),
            count=None if background else count,
            window=promql_duration(window),
            min_samples=settings.min_samples,
            failure_limit=settings.failure_limit,
            inconclusive_limit=settings.inconclusive_limit,
            consecutive_error_limit=settings.consecutive_error_limit,
            on_no_data=settings.on_no_data,
            compare_to_stable=settings.compare_to_stable if compare_to_stable else None,
            custom_checks=tuple(settings.custom_checks),
            initial_delay_seconds=None if delay is None else parse_duration_seconds(delay),
            error_retry_seconds=parse_duration_seconds(settings.error_retry_interval),
            dry_run=frozenset(settings.dry_run),
        )

    def describe(self) -> str:
        """E.g. '3 measurement(s), one every 60s over a 1m window'."""
        many = (
            "measurements until promotion" if self.count is None else f"{self.count} measurement(s)"
        )
        first = ""
        if self.initial_delay_seconds is not None:
            first = f", the first after {self.initial_delay_seconds:g}s"
        return f"{many}, one every {self.interval_seconds:g}s over a {self.window} window{first}"


@dataclass(frozen=True)
class ResolvedCheck:
    """One check, ready to query: PromQL, and how its single value is judged."""

    name: str
    query: str
    role: CheckRole
    threshold: float | None
    operator: Comparison
    """The value passes when ``value <operator> threshold``."""
    unit: str = ""
    error: str | None = None
    """Set when the check cannot be queried as written (it is then an Error, not run)."""


@dataclass(frozen=True)
class Series:
    """One series of an instant query's result: its labels and its value."""

    labels: Mapping[str, str]
    value: float


#: A query's result: its series, or the error message when the query failed.
QueryResult = Sequence[Series] | str


@dataclass(frozen=True)
class MeasurementOutcome:
    """One measurement: a verdict per check, and the measurement's own (worst) verdict."""

    verdict: MeasurementVerdict
    measurements: tuple[AnalysisMeasurement, ...]
    summary: str


# -- PromQL -----------------------------------------------------------------------------------


def promql_duration(text: str) -> str:
    """A spec duration (``1m30s``, ``1.5m``, ``500ms``) as a PromQL range (``90s``, ``500ms``).

    PromQL accepts no fractions, so the value is written in the largest unit that is exact.
    """
    millis = round(parse_duration_seconds(text) * 1000)
    if millis <= 0:
        raise ValueError(f"{text!r} is not a positive duration")
    if millis % 3_600_000 == 0:
        return f"{millis // 3_600_000}h"
    if millis % 60_000 == 0:
        return f"{millis // 60_000}m"
    if millis % 1000 == 0:
        return f"{millis // 1000}s"
    return f"{millis}ms"


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _selector(target: AnalysisTarget, revision: str) -> str:
    return (
        f'namespace="{_label_value(target.namespace)}",'
        f'llmservice="{_label_value(target.service)}",'
        f'revision="{_label_value(revision)}"'
    )


def _handlers() -> str:
    return f'handler=~"{"|".join(INFERENCE_HANDLERS)}"'


def _counted(series: str, window: str) -> str:
    """How many times ``series`` (a counter selector) counted in the window: its values at the
    window's two ends subtracted, and a series that appeared within the window counted from
    zero. ``increase()`` would drop what a new series counted before its first sample and
    extrapolate the rest, so a new revision's first window reads low (9.8 of 12 requests)."""
    return (
        f"(sum(clamp_min({series} - {series} offset {window}, 0)) or vector(0))"
        f" + (sum({series} unless {series} offset {window}) or vector(0))"
    )


def _sample_count_query(selector: str, window: str) -> str:
    # `or vector(0)` in _counted: a revision that has served nothing has no series yet.
    return _counted(f"http_requests_total{{{selector},{_handlers()}}}", window)


def _error_rate_query(selector: str, window: str) -> str:
    # 5xx answers over all answers of the inference endpoints. vLLM exports no other request
    # error signal that covers requests failing before the engine finishes them. No answers at
    # all is 0/0 (NaN): the sample count judges that window.
    errors = f'http_requests_total{{{selector},{_handlers()},status="5xx"}}'
    total = f"http_requests_total{{{selector},{_handlers()}}}"
    return f"({_counted(errors, window)}) / ({_counted(total, window)})"


def has_judging_checks(policy: AnalysisPolicy, slo: SLOSpec) -> bool:
    """Whether the analysis judges anything beyond "enough requests arrived"."""
    compare = policy.compare_to_stable
    return bool(
        slo.ttft_p99_ms is not None
        or slo.tpot_p99_ms is not None
        or slo.max_error_rate is not None
        or policy.custom_checks
        or (
            compare is not None
            and (
                compare.ttft_p99_max_increase_percent is not None
                or compare.tpot_p99_max_increase_percent is not None
            )
        )
    )


def resolve_checks(
    policy: AnalysisPolicy, slo: SLOSpec, target: AnalysisTarget
) -> tuple[ResolvedCheck, ...]:
    """The checks of one measurement, in a fixed order, as PromQL for ``target``.

    Always ``sampleCount`` (requests the candidate answered in the window, for ``minSamples``);
    then ``ttftP99Ms``, ``tpotP99Ms``, ``errorRate`` for each SLO that is set; then the
    candidate-versus-stable comparisons (with ``stableSampleCount``) when ``compareToStable``
    asks for them and there is a stable revision; then the custom checks.

    The worked example (vLLM 0.33.0, namespace ml, service chat, revision b41e07, window 1m)::

        ttftP99Ms: histogram_quantile(0.99, sum by (le) (rate(
            vllm:time_to_first_token_seconds_bucket{namespace="ml",llmservice="chat",
            revision="b41e07"}[1m]))) * 1000                                  <= slo.ttftP99Ms
    """
    names = metric_names(target.vllm_version)
    window = policy.window
    candidate = _selector(target, target.candidate)

    def p99_ms(selector: str, histogram: str) -> str:
        return names.histogram_quantile(0.99, histogram, selector, window)

    checks: list[ResolvedCheck] = [
        ResolvedCheck(
            SAMPLE_COUNT,
            _sample_count_query(candidate, window),
            "samples",
            float(policy.min_samples),
            ">=",
            "requests",
        )
    ]
    if slo.ttft_p99_ms is not None:
        query = f"{p99_ms(candidate, names.ttft)} * 1000"
        checks.append(ResolvedCheck(TTFT, query, "candidate", slo.ttft_p99_ms, "<=", "ms"))
    if slo.tpot_p99_ms is not None:
        query = f"{p99_ms(candidate, names.tpot)} * 1000"
        checks.append(ResolvedCheck(TPOT, query, "candidate", slo.tpot_p99_ms, "<=", "ms"))
    if slo.max_error_rate is not None:
        query = _error_rate_query(candidate, window)
        checks.append(ResolvedCheck(ERROR_RATE, query, "candidate", slo.max_error_rate, "<="))

    compare = policy.compare_to_stable
    if compare is not None and target.stable is not None:
        stable = _selector(target, target.stable)
        pairs = [
            (TTFT_VS_STABLE, names.ttft, compare.ttft_p99_max_increase_percent),
            (TPOT_VS_STABLE, names.tpot, compare.tpot_p99_max_increase_percent),
        ]
        wanted = [(n, h, limit) for n, h, limit in pairs if limit is not None]
        if wanted:
            checks.append(
                ResolvedCheck(
                    STABLE_SAMPLE_COUNT,
                    _sample_count_query(stable, window),
                    "stableSamples",
                    float(policy.min_samples),
                    ">=",
                    "requests",
                )
            )
        for name, histogram, limit in wanted:
            assert limit is not None
            query = f"100 * ({p99_ms(candidate, histogram)} / {p99_ms(stable, histogram)} - 1)"
            checks.append(ResolvedCheck(name, query, "compare", limit, "<=", "%"))

    for custom in policy.custom_checks:
        checks.append(_custom_check(custom, target, window))
    return tuple(checks)


def _custom_check(check: CustomCheck, target: AnalysisTarget, window: str) -> ResolvedCheck:
    values: dict[str, str | None] = {
        "revision": target.candidate,
        "namespace": target.namespace,
        "service": target.service,
        "stableRevision": target.stable,
        "window": window,
    }
    problems: list[str] = []

    def substitute(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            problems.append(
                f"unknown placeholder {{{{{key}}}}} (known: "
                + ", ".join(f"{{{{{k}}}}}" for k in values)
                + ")"
            )
            return match.group(0)
        value = values[key]
        if value is None:
            problems.append(f"{{{{{key}}}}} has no value: there is no stable revision")
            return match.group(0)
        return value

    query = _PLACEHOLDER.sub(substitute, check.query)
    return ResolvedCheck(
        check.name,
        query,
        "custom",
        check.threshold,
        check.operator,
        error="; ".join(problems) or None,
    )


# -- one measurement -------------------------------------------------------------------------


def _passes(value: float, operator: Comparison, threshold: float) -> bool:
    if operator == "<":
        return value < threshold
    if operator == "<=":
        return value <= threshold
    if operator == ">":
        return value > threshold
    return value >= threshold


def _round(value: float) -> float:
    """Six significant digits: enough to judge by, and a status that does not churn."""
    return float(f"{value:.6g}")


def _fmt(value: float, unit: str) -> str:
    text = f"{value:.4g}"
    return f"{text} {unit}" if unit else text


@dataclass(frozen=True)
class _Read:
    """What one query gave: a value, or why there is none (``empty``: it returned no series)."""

    value: float | None = None
    problem: str | None = None
    empty: bool = False


def _read(result: QueryResult | None) -> _Read:
    if result is None:
        return _Read(problem="no result: the check was not queried")
    if isinstance(result, str):
        return _Read(problem=f"query failed: {result}")
    if len(result) != 1:
        shown = ", ".join(
            "{" + ",".join(f"{k}={v!r}" for k, v in sorted(s.labels.items())) + "}"
            for s in list(result)[:3]
        )
        more = f" (first: {shown})" if shown else ""
        return _Read(
            problem=(
                f"query returned {len(result)} series; it must return exactly one{more}: "
                "aggregate it, e.g. sum(...) or sum by (le) (...)"
            ),
            empty=not result,
        )
    return _Read(value=result[0].value)


def _gate(read: _Read | None, minimum: int, window: str, who: str) -> str | None:
    """Why there are too few samples for ``who``; None when there are enough (or unknown)."""
    if read is None or read.value is None or math.isnan(read.value):
        return None
    if read.value < minimum:
        return (
            f"{who} answered {read.value:.4g} requests in {window}, below minSamples {minimum} "
            "(no traffic, or Prometheus does not scrape it with labels namespace, llmservice "
            "and revision)"
        )
    return None


def _judge(check: ResolvedCheck, read: _Read, gate: str | None) -> tuple[CheckVerdict, str]:
    if check.error is not None:
        return "Error", check.error
    if read.problem is not None:
        if read.empty and gate is not None:
            return "NoData", gate
        return "Error", read.problem
    assert read.value is not None and check.threshold is not None
    if math.isnan(read.value):
        return "NoData", "no observations in the window (the query is NaN)"
    if gate is not None:
        return "NoData", gate
    ok = _passes(read.value, check.operator, check.threshold)
    want = f"want {check.operator} {_fmt(check.threshold, check.unit)}"
    return ("Successful" if ok else "Failed"), f"{_fmt(read.value, check.unit)}, {want}"


def judge_measurement(
    checks: Sequence[ResolvedCheck],
    results: Mapping[str, QueryResult],
    policy: AnalysisPolicy,
) -> MeasurementOutcome:
    """Judge one measurement.

    Per check: a query that failed, or that did not return exactly one series, is **Error**,
    and says so; too few samples (``sampleCount`` below ``minSamples`` — for comparisons,
    the stable's too) or a NaN value (no observations in the window) is **NoData**; otherwise
    the value against the threshold is **Successful** or **Failed**. A query that returned no
    series while the revision had too few samples is NoData too, not Error.

    The measurement's verdict is the worst check verdict, NoData first mapped by ``onNoData``
    (inconclusive -> Inconclusive, fail -> Failed, pass -> Successful).
    """
    reads = {c.name: _read(results.get(c.name)) for c in checks}
    window, minimum = policy.window, policy.min_samples
    candidate_gate = _gate(reads.get(SAMPLE_COUNT), minimum, window, "the candidate")
    stable_gate = _gate(reads.get(STABLE_SAMPLE_COUNT), minimum, window, "the stable revision")
    gates: dict[CheckRole, str | None] = {
        "samples": candidate_gate,
        "stableSamples": stable_gate,
        "candidate": candidate_gate,
        "custom": candidate_gate,
        "compare": candidate_gate or stable_gate,
    }

    measured: list[AnalysisMeasurement] = []
    verdicts: list[MeasurementVerdict] = []
    for check in checks:
        read = reads[check.name]
        check_verdict, message = _judge(check, read, gates[check.role])
        dry_run = check.name in policy.dry_run
        if not dry_run:
            verdicts.append(_map_no_data(check_verdict, policy.on_no_data))
        # NaN and infinities are not JSON: the status leaves the value out (the message says)
        finite = read.value is not None and math.isfinite(read.value) and check.error is None
        value = _round(read.value) if finite and read.value is not None else None
        measured.append(
            AnalysisMeasurement(
                check=check.name,
                query=check.query,
                value=value,
                threshold=check.threshold,
                verdict=check_verdict,
                message=message,
                dry_run=True if dry_run else None,
            )
        )

    verdict = max(verdicts, key=_WORST_ORDER.index) if verdicts else "Successful"
    return MeasurementOutcome(verdict, tuple(measured), _summary(verdict, measured))


_NO_DATA_AS: dict[str, MeasurementVerdict] = {
    "inconclusive": "Inconclusive",
    "fail": "Failed",
    "pass": "Successful",
}


def _map_no_data(verdict: CheckVerdict, on_no_data: str) -> MeasurementVerdict:
    return _NO_DATA_AS[on_no_data] if verdict == "NoData" else verdict


def _summary(verdict: MeasurementVerdict, measured: Sequence[AnalysisMeasurement]) -> str:
    notable = [m for m in measured if m.verdict != "Successful"] or list(measured)
    parts = [
        f"{m.check} {m.verdict}{' (dry run)' if m.dry_run else ''}: {m.message}" for m in notable
    ]
    return f"{verdict}: " + "; ".join(parts)


# -- the run ------------------------------------------------------------------------------------


def start_run(now: datetime, policy: AnalysisPolicy) -> AnalysisRunStatus:
    """A new run; its first measurement is due ``initialDelay`` (else one interval) from now."""
    delay = policy.initial_delay_seconds
    first = now + timedelta(seconds=policy.interval_seconds if delay is None else delay)
    return AnalysisRunStatus(
        phase="Running",
        started_at=to_rfc3339(now),
        next_measurement_at=to_rfc3339(first),
        message=f"0/{_of(policy)} measurements; first at {to_rfc3339(first)}",
    )


def _of(policy: AnalysisPolicy) -> str:
    return "until promotion" if policy.count is None else str(policy.count)


def _history(
    before: Sequence[CheckHistory], measured: Sequence[AnalysisMeasurement], now: datetime
) -> list[CheckHistory]:
    """Each check's last MEASUREMENT_HISTORY points with this measurement added."""
    by_name = {h.check: h for h in before}
    out: list[CheckHistory] = []
    for m in measured:
        point = MeasurementPoint(value=m.value, verdict=m.verdict, time=to_rfc3339(now))
        old = by_name.get(m.check)
        points = [*(old.measurements if old is not None else []), point][-MEASUREMENT_HISTORY:]
        out.append(
            CheckHistory(
                check=m.check, threshold=m.threshold, dry_run=m.dry_run, measurements=points
            )
        )
    return out


def measurement_due(run: AnalysisRunStatus, now: datetime) -> bool:
    """Whether the run is still going and its next measurement time has come."""
    if run.phase != "Running":
        return False
    if run.next_measurement_at is None:
        return True
    return from_rfc3339(run.next_measurement_at) <= now


def record_measurement(
    run: AnalysisRunStatus, outcome: MeasurementOutcome, policy: AnalysisPolicy, now: datetime
) -> AnalysisRunStatus:
    """Add one measurement to the run and assess it, as Argo's ``assessMetricStatus`` does.

    Worked example (count 3, failureLimit 0, inconclusiveLimit 0, consecutiveErrorLimit 4):
    Successful, Error, Error, Successful, Successful -> Successful after 5 measurements (errors
    are retried after ``errorRetryInterval`` and do not count); Successful, Failed -> Failed at
    once (1 > 0); five Errors in a row -> Error (5 > 4). Without a count (a background run) it
    never ends Successful: only a limit ends it.
    """
    if run.phase != "Running":
        return run
    taken, successful, failed = run.measurements_taken, run.successful, run.failed
    inconclusive, errors, consecutive = run.inconclusive, run.errors, run.consecutive_errors
    if outcome.verdict == "Error":
        errors += 1
        consecutive += 1
    else:
        taken += 1
        consecutive = 0
        if outcome.verdict == "Successful":
            successful += 1
        elif outcome.verdict == "Failed":
            failed += 1
        else:
            inconclusive += 1

    phase: Literal["Running", "Successful", "Failed", "Inconclusive", "Error"]
    if failed > policy.failure_limit:
        phase = "Failed"
        why = f"{failed} failed measurement(s) > failureLimit {policy.failure_limit}"
    elif inconclusive > policy.inconclusive_limit:
        phase = "Inconclusive"
        why = f"{inconclusive} inconclusive measurement(s) > inconclusiveLimit {policy.inconclusive_limit}"
    elif consecutive > policy.consecutive_error_limit:
        phase = "Error"
        why = f"{consecutive} consecutive errors > consecutiveErrorLimit {policy.consecutive_error_limit}"
    elif policy.count is not None and taken >= policy.count:
        phase = "Successful"
        why = f"{taken}/{policy.count} measurements taken"
    else:
        phase = "Running"
        why = f"{taken}/{_of(policy)} measurements"

    wait = policy.interval_seconds
    if outcome.verdict == "Error":  # retried soon; never later than the next regular one
        wait = min(wait, policy.error_retry_seconds)
    next_at = now + timedelta(seconds=wait)
    return run.model_copy(
        update={
            "phase": phase,
            "measurements_taken": taken,
            "successful": successful,
            "failed": failed,
            "inconclusive": inconclusive,
            "errors": errors,
            "consecutive_errors": consecutive,
            "next_measurement_at": to_rfc3339(next_at) if phase == "Running" else None,
            "last": list(outcome.measurements),
            "checks": _history(run.checks, outcome.measurements, now),
            "message": f"{why}; last measurement {outcome.summary}",
        }
    )


# -- Prometheus' answer ---------------------------------------------------------------------------


def parse_prometheus_response(payload: Mapping[str, Any]) -> list[Series] | str:
    """``/api/v1/query``'s JSON as series, or an error message (pure: no HTTP here).

    A vector gives one :class:`Series` per element; a scalar gives one series without labels;
    a range vector (matrix) or a string is an error, since every check needs one number.
    """
    if payload.get("status") != "success":
        kind = payload.get("errorType", "error")
        return f"Prometheus answered {kind}: {payload.get('error', 'no message')}"
    data = payload.get("data")
    if not isinstance(data, Mapping):
        return "Prometheus answered without data"
    result_type = data.get("resultType")
    result = data.get("result")
    try:
        if result_type == "vector" and isinstance(result, list):
            return [
                Series(dict(item.get("metric") or {}), float(item["value"][1])) for item in result
            ]
        if result_type == "scalar" and isinstance(result, list):
            return [Series({}, float(result[1]))]
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        return f"Prometheus answered a malformed {result_type}: {exc}"
    if result_type == "matrix":
        return (
            "the query returns a range vector; it must return an instant value (drop the [range])"
        )
    return f"the query returns a {result_type}; it must return one number"
