"""Analysis: PromQL per check, verdicts per measurement, and the run with Argo's meanings."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

import pytest

from llmservice_operator.api.spec import AnalysisSettings, AnalysisStepSettings, SLOSpec
from llmservice_operator.api.status import AnalysisRunStatus
from llmservice_operator.rollout.analysis import (
    ERROR_RATE,
    SAMPLE_COUNT,
    STABLE_SAMPLE_COUNT,
    TPOT,
    TTFT,
    TTFT_VS_STABLE,
    AnalysisPolicy,
    AnalysisTarget,
    MeasurementOutcome,
    QueryResult,
    Series,
    has_judging_checks,
    judge_measurement,
    measurement_due,
    parse_prometheus_response,
    promql_duration,
    record_measurement,
    resolve_checks,
    start_run,
)

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
TARGET = AnalysisTarget("ml", "chat", "b41e07", "7c9f2d", "0.33.0")
SLO = SLOSpec(ttft_p99_ms=800, tpot_p99_ms=60, max_error_rate=0.01)
SEL = 'namespace="ml",llmservice="chat",revision="b41e07"'
STABLE_SEL = 'namespace="ml",llmservice="chat",revision="7c9f2d"'
HANDLERS = 'handler=~"/v1/chat/completions|/v1/completions"'


def policy(**settings: object) -> AnalysisPolicy:
    return AnalysisPolicy.from_settings(AnalysisSettings.model_validate(settings))


def one(value: float) -> list[Series]:
    return [Series({}, value)]


# -- PromQL ------------------------------------------------------------------------------------


def test_builtin_checks_resolve_to_promql_filtered_by_revision() -> None:
    checks = {c.name: c for c in resolve_checks(policy(), SLO, TARGET)}
    assert list(checks) == [SAMPLE_COUNT, TTFT, TPOT, ERROR_RATE]
    assert checks[TTFT].query == (
        "histogram_quantile(0.99, sum by (le) "
        f"(rate(vllm:time_to_first_token_seconds_bucket{{{SEL}}}[1m]))) * 1000"
    )
    assert (checks[TTFT].threshold, checks[TTFT].operator) == (800, "<=")
    # 0.33 has the per-request TPOT histogram
    assert "vllm:request_time_per_output_token_seconds_bucket" in checks[TPOT].query
    # Counts, not increase(): a series new in the window counts from zero (real Prometheus
    # checks it in tests/integration/test_analysis_queries.py).
    total = f"http_requests_total{{{SEL},{HANDLERS}}}"
    counted = (
        f"(sum(clamp_min({total} - {total} offset 1m, 0)) or vector(0))"
        f" + (sum({total} unless {total} offset 1m) or vector(0))"
    )
    assert checks[SAMPLE_COUNT].query == counted
    assert checks[SAMPLE_COUNT].threshold == 50
    errors = f'http_requests_total{{{SEL},{HANDLERS},status="5xx"}}'
    assert checks[ERROR_RATE].query == (
        f"((sum(clamp_min({errors} - {errors} offset 1m, 0)) or vector(0))"
        f" + (sum({errors} unless {errors} offset 1m) or vector(0))) / ({counted})"
    )


def test_metric_names_follow_the_vllm_version() -> None:
    old = AnalysisTarget("ml", "chat", "b41e07", None, "0.10.0")
    checks = {c.name: c for c in resolve_checks(policy(), SLO, old)}
    # before 0.10.2 TPOT falls back to the (then only) per-step histogram
    assert "vllm:time_per_output_token_seconds_bucket" in checks[TPOT].query


def test_only_the_slos_that_are_set_become_checks() -> None:
    checks = resolve_checks(policy(), SLOSpec(ttft_p99_ms=500), TARGET)
    assert [c.name for c in checks] == [SAMPLE_COUNT, TTFT]
    assert not has_judging_checks(policy(), SLOSpec())
    assert has_judging_checks(policy(), SLOSpec(max_error_rate=0.1))


def test_window_and_step_overrides() -> None:
    settings = AnalysisSettings(interval="30s", count=5, window="2m")
    p = AnalysisPolicy.from_settings(settings, AnalysisStepSettings(count=2, interval="90s"))
    assert (p.count, p.interval_seconds, p.window) == (2, 90.0, "2m")
    p = AnalysisPolicy.from_settings(AnalysisSettings(interval="1.5m"))
    assert p.window == "90s"  # PromQL takes no fractions


@pytest.mark.parametrize(
    ("spec", "promql"),
    [("1m", "1m"), ("90s", "90s"), ("1m30s", "90s"), ("1.5m", "90s"), ("2h", "2h"),
     ("500ms", "500ms"), ("1.5s", "1500ms"), ("120m", "2h")],
)  # fmt: skip
def test_promql_duration(spec: str, promql: str) -> None:
    assert promql_duration(spec) == promql


def test_compare_to_stable_checks() -> None:
    p = policy(compareToStable={"ttftP99MaxIncreasePercent": 20})
    checks = {c.name: c for c in resolve_checks(p, SLO, TARGET)}
    assert STABLE_SAMPLE_COUNT in checks
    assert STABLE_SEL in checks[STABLE_SAMPLE_COUNT].query
    query = checks[TTFT_VS_STABLE].query
    assert query.startswith("100 * (histogram_quantile(0.99")
    assert SEL in query and STABLE_SEL in query
    assert (checks[TTFT_VS_STABLE].threshold, checks[TTFT_VS_STABLE].unit) == (20, "%")
    # no stable revision (or comparison switched off): no comparison
    no_stable = AnalysisTarget("ml", "chat", "b41e07", None, "0.33.0")
    assert TTFT_VS_STABLE not in {c.name for c in resolve_checks(p, SLO, no_stable)}
    off = AnalysisPolicy.from_settings(
        AnalysisSettings.model_validate({"compareToStable": {"ttftP99MaxIncreasePercent": 20}}),
        compare_to_stable=False,
    )
    assert TTFT_VS_STABLE not in {c.name for c in resolve_checks(off, SLO, TARGET)}


def test_custom_checks_substitute_placeholders() -> None:
    p = policy(
        customChecks=[
            {
                "name": "kv-cache",
                "query": 'max(vllm:kv_cache_usage_perc{namespace="{{namespace}}",'
                'revision="{{ revision }}"}) / max(x{revision="{{stableRevision}}"}[{{window}}])',
                "operator": "<",
                "threshold": 0.95,
            },
            {"name": "typo", "query": "sum(x{rev='{{revison}}'})", "threshold": 1},
        ]
    )
    checks = {c.name: c for c in resolve_checks(p, SLO, TARGET)}
    assert checks["kv-cache"].query == (
        'max(vllm:kv_cache_usage_perc{namespace="ml",revision="b41e07"})'
        ' / max(x{revision="7c9f2d"}[1m])'
    )
    assert checks["kv-cache"].error is None
    assert checks["kv-cache"].operator == "<"
    assert checks["typo"].error is not None
    assert "unknown placeholder {{revison}}" in checks["typo"].error


# -- verdicts of one measurement ---------------------------------------------------------------

GOOD: dict[str, QueryResult] = {
    SAMPLE_COUNT: one(600),
    TTFT: one(512.4),
    TPOT: one(31),
    ERROR_RATE: one(0.0),
}


def judge(results: dict[str, QueryResult], **settings: object) -> MeasurementOutcome:
    p = policy(**settings)
    return judge_measurement(resolve_checks(p, SLO, TARGET), results, p)


def verdicts(outcome: MeasurementOutcome) -> dict[str, str]:
    return {m.check: m.verdict for m in outcome.measurements}


# Worked examples: (what Prometheus answered, per-check verdicts, measurement verdict)
CASES: list[tuple[str, dict[str, QueryResult], dict[str, str], str]] = [
    ("all within the SLO", {}, {}, "Successful"),
    ("TTFT p99 912 ms > 800 ms", {TTFT: one(912)}, {TTFT: "Failed"}, "Failed"),
    ("error rate 5% > 1%", {ERROR_RATE: one(0.05)}, {ERROR_RATE: "Failed"}, "Failed"),
    ("TTFT exactly at the SLO passes", {TTFT: one(800)}, {}, "Successful"),
    (
        "too few requests: every check NoData, inconclusive",
        {SAMPLE_COUNT: one(12), TTFT: one(2000)},
        {SAMPLE_COUNT: "NoData", TTFT: "NoData", TPOT: "NoData", ERROR_RATE: "NoData"},
        "Inconclusive",
    ),
    (
        "no traffic at all: empty results are NoData, not Error",
        {SAMPLE_COUNT: one(0), TTFT: [], TPOT: [], ERROR_RATE: []},
        {SAMPLE_COUNT: "NoData", TTFT: "NoData", TPOT: "NoData", ERROR_RATE: "NoData"},
        "Inconclusive",
    ),
    (
        "enough requests but no series: the query is broken, Error",
        {TTFT: []},
        {TTFT: "Error"},
        "Error",
    ),
    (
        "two series: Error that says so",
        {TTFT: [Series({"pod": "a"}, 1.0), Series({"pod": "b"}, 2.0)]},
        {TTFT: "Error"},
        "Error",
    ),
    ("NaN (no observations): NoData", {TPOT: one(math.nan)}, {TPOT: "NoData"}, "Inconclusive"),
    (
        "Prometheus down: every check Error",
        dict.fromkeys(GOOD, "connection refused"),
        dict.fromkeys(GOOD, "Error"),
        "Error",
    ),
    (
        "a failure outranks an error",
        {TTFT: one(900), TPOT: "timeout"},
        {TTFT: "Failed", TPOT: "Error"},
        "Failed",
    ),
    (
        "an error outranks inconclusive",
        {TPOT: one(math.nan), ERROR_RATE: "timeout"},
        {TPOT: "NoData", ERROR_RATE: "Error"},
        "Error",
    ),
    ("a check that was not queried is an Error", {TTFT: None}, {TTFT: "Error"}, "Error"),  # type: ignore[dict-item]
]


@pytest.mark.parametrize(
    ("name", "answers", "expected", "verdict"), CASES, ids=[c[0] for c in CASES]
)
def test_measurement_verdicts(
    name: str, answers: dict[str, QueryResult], expected: dict[str, str], verdict: str
) -> None:
    results = {**GOOD, **answers}
    results = {k: v for k, v in results.items() if v is not None}
    outcome = judge(results)
    assert verdicts(outcome) == {**dict.fromkeys(GOOD, "Successful"), **expected}
    assert outcome.verdict == verdict


def test_messages_say_why() -> None:
    outcome = judge({**GOOD, TTFT: one(912.3)})
    ttft = next(m for m in outcome.measurements if m.check == TTFT)
    assert ttft.value == 912.3 and ttft.threshold == 800
    assert ttft.message == "912.3 ms, want <= 800 ms"
    assert "histogram_quantile" in ttft.query
    assert outcome.summary == "Failed: ttftP99Ms Failed: 912.3 ms, want <= 800 ms"

    two = judge({**GOOD, TTFT: [Series({"pod": "a"}, 1.0), Series({"pod": "b"}, 2.0)]})
    message = next(m.message for m in two.measurements if m.check == TTFT)
    assert "returned 2 series; it must return exactly one" in message
    assert "pod='a'" in message

    few = judge({**GOOD, SAMPLE_COUNT: one(12)})
    assert "below minSamples 50" in next(m.message for m in few.measurements)


@pytest.mark.parametrize(
    ("on_no_data", "verdict"),
    [("inconclusive", "Inconclusive"), ("fail", "Failed"), ("pass", "Successful")],
)
def test_no_data_is_mapped_by_on_no_data(on_no_data: str, verdict: str) -> None:
    outcome = judge({**GOOD, SAMPLE_COUNT: one(3)}, onNoData=on_no_data)
    assert verdicts(outcome)[SAMPLE_COUNT] == "NoData"
    assert outcome.verdict == verdict


def test_min_samples_zero_judges_whatever_came() -> None:
    outcome = judge({**GOOD, SAMPLE_COUNT: one(0)}, minSamples=0)
    assert outcome.verdict == "Successful"


def test_comparison_needs_stable_samples_too() -> None:
    settings = {"compareToStable": {"ttftP99MaxIncreasePercent": 20}}
    base = {**GOOD, STABLE_SAMPLE_COUNT: one(5000), TTFT_VS_STABLE: one(35.0)}
    outcome = judge(base, **settings)
    assert verdicts(outcome)[TTFT_VS_STABLE] == "Failed"
    assert outcome.verdict == "Failed"
    quiet_stable = judge({**base, STABLE_SAMPLE_COUNT: one(3)}, **settings)
    assert verdicts(quiet_stable)[TTFT_VS_STABLE] == "NoData"
    assert verdicts(quiet_stable)[TTFT] == "Successful"  # the candidate's own checks still judge
    assert quiet_stable.verdict == "Inconclusive"


def test_custom_check_with_a_bad_placeholder_is_an_error_without_querying() -> None:
    settings = {"customChecks": [{"name": "typo", "query": "x{{nope}}", "threshold": 1}]}
    outcome = judge(dict(GOOD), **settings)
    assert verdicts(outcome)["typo"] == "Error"
    assert outcome.verdict == "Error"


def test_custom_operators() -> None:
    settings = {
        "customChecks": [{"name": "hit-rate", "query": "q", "operator": ">=", "threshold": 0.5}]
    }
    assert judge({**GOOD, "hit-rate": one(0.6)}, **settings).verdict == "Successful"
    assert judge({**GOOD, "hit-rate": one(0.4)}, **settings).verdict == "Failed"


@pytest.mark.parametrize(
    ("operator", "passes_at_the_threshold"),
    [("<", False), ("<=", True), (">", False), (">=", True)],
)
def test_custom_operators_at_their_threshold(operator: str, passes_at_the_threshold: bool) -> None:
    check = {"name": "hit-rate", "query": "q", "operator": operator, "threshold": 0.5}
    verdict = judge({**GOOD, "hit-rate": one(0.5)}, customChecks=[check]).verdict
    assert verdict == ("Successful" if passes_at_the_threshold else "Failed")


# -- the run: Argo's count / failureLimit / inconclusiveLimit / consecutiveErrorLimit -------------


def outcome_of(verdict: str) -> MeasurementOutcome:
    return MeasurementOutcome(verdict, (), verdict)  # type: ignore[arg-type]


def run_through(sequence: str, **settings: object) -> tuple[AnalysisRunStatus, int]:
    """Feed S/F/I/E measurements one interval apart; return the run and how many were fed."""
    p = policy(**settings)
    now = T0
    run = start_run(now, p)
    letters = {"S": "Successful", "F": "Failed", "I": "Inconclusive", "E": "Error"}
    fed = 0
    for letter in sequence:
        now += timedelta(seconds=p.interval_seconds)
        assert measurement_due(run, now)
        run = record_measurement(run, outcome_of(letters[letter]), p, now)
        fed += 1
        if run.phase != "Running":
            break
    return run, fed


# (measurements, settings, final phase, measurements consumed before the run ended)
RUNS: list[tuple[str, dict[str, object], str, int]] = [
    ("SSS", {}, "Successful", 3),
    ("SS", {}, "Running", 2),
    ("SF", {}, "Failed", 2),  # failureLimit 0: the first failure ends it
    ("SFSS", {"failureLimit": 1, "count": 4}, "Successful", 4),  # 1 failure allowed
    ("SFF", {"failureLimit": 1, "count": 5}, "Failed", 3),  # 2 > 1
    ("FFF", {"failureLimit": 3, "count": 3}, "Successful", 3),  # Argo: 3 > 3 is false
    ("SI", {}, "Inconclusive", 2),  # inconclusiveLimit 0
    ("ISS", {"inconclusiveLimit": 1}, "Successful", 3),
    ("SEESS", {}, "Successful", 5),  # errors are retried and do not count
    ("EEEES", {"count": 1}, "Successful", 5),  # 4 in a row is within the default limit
    ("EEEEE", {}, "Error", 5),  # 5 > consecutiveErrorLimit 4
    ("EESEEEES", {"count": 2}, "Successful", 8),  # a non-error resets the streak
    ("EE", {"consecutiveErrorLimit": 1}, "Error", 2),
    ("E", {"consecutiveErrorLimit": 0}, "Error", 1),
    ("EF", {}, "Failed", 2),  # errors are not failures, failures are
]


@pytest.mark.parametrize(
    ("sequence", "settings", "phase", "fed"), RUNS, ids=[r[0] + str(r[1]) for r in RUNS]
)
def test_run_semantics(sequence: str, settings: dict[str, object], phase: str, fed: int) -> None:
    run, consumed = run_through(sequence, **settings)
    assert run.phase == phase
    assert consumed == fed


def test_run_counters_and_schedule() -> None:
    p = policy(interval="1m", count=3)
    run = start_run(T0, p)
    assert run.next_measurement_at == "2026-03-01T12:01:00Z"  # one interval in, not at once
    assert not measurement_due(run, T0 + timedelta(seconds=59))
    assert measurement_due(run, T0 + timedelta(seconds=60))
    later = T0 + timedelta(seconds=75)  # a late reconcile: the next is counted from now
    run = record_measurement(run, outcome_of("Error"), p, later)
    assert (run.errors, run.consecutive_errors, run.measurements_taken) == (1, 1, 0)
    assert run.next_measurement_at == "2026-03-01T12:01:25Z"  # an error: retried after 10 s
    run = record_measurement(run, outcome_of("Successful"), p, later + timedelta(seconds=10))
    assert (run.errors, run.consecutive_errors, run.measurements_taken) == (1, 0, 1)
    assert run.phase == "Running"
    assert run.next_measurement_at == "2026-03-01T12:02:25Z"  # then a whole interval again


def test_a_finished_run_records_nothing_more() -> None:
    p = policy()
    run, _ = run_through("SF")
    assert run.phase == "Failed" and run.next_measurement_at is None
    assert not measurement_due(run, T0 + timedelta(days=1))
    assert record_measurement(run, outcome_of("Successful"), p, T0) == run


def test_run_state_survives_the_wire() -> None:
    p = policy()
    run = record_measurement(start_run(T0, p), judge({**GOOD, TTFT: one(600)}), p, T0)
    again = AnalysisRunStatus.model_validate(run.to_wire())
    assert again == run
    assert again.last[1].check == TTFT and again.last[1].value == 600


# -- Prometheus responses ------------------------------------------------------------------------


def test_parse_prometheus_vector_and_scalar() -> None:
    vector = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": {"pod": "a"}, "value": [1712345678.1, "0.25"]}],
        },
    }
    assert parse_prometheus_response(vector) == [Series({"pod": "a"}, 0.25)]
    empty = {"status": "success", "data": {"resultType": "vector", "result": []}}
    assert parse_prometheus_response(empty) == []
    scalar = {"status": "success", "data": {"resultType": "scalar", "result": [1.0, "NaN"]}}
    parsed = parse_prometheus_response(scalar)
    assert isinstance(parsed, list) and math.isnan(parsed[0].value)
    inf = {"status": "success", "data": {"resultType": "scalar", "result": [1.0, "+Inf"]}}
    assert parse_prometheus_response(inf) == [Series({}, math.inf)]


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        ({"status": "error", "errorType": "bad_data", "error": "parse error"}, "bad_data"),
        ({"status": "success", "data": {"resultType": "matrix", "result": []}}, "range vector"),
        ({"status": "success", "data": {"resultType": "string", "result": [1, "x"]}}, "string"),
        (
            {"status": "success", "data": {"resultType": "vector", "result": [{"value": [1]}]}},
            "malformed",
        ),
    ],
)
def test_parse_prometheus_errors(payload: dict[str, object], says: str) -> None:
    parsed = parse_prometheus_response(payload)
    assert isinstance(parsed, str) and says in parsed


def test_values_that_are_not_json_are_left_out_of_the_status() -> None:
    outcome = judge({**GOOD, TPOT: one(math.nan), TTFT: one(math.inf)})
    by_check = {m.check: m for m in outcome.measurements}
    assert by_check[TPOT].value is None and by_check[TPOT].verdict == "NoData"
    assert by_check[TTFT].value is None and by_check[TTFT].verdict == "Failed"
    assert by_check[TTFT].message == "inf ms, want <= 800 ms"
    assert outcome.verdict == "Failed"
    json.dumps([m.to_wire() for m in outcome.measurements], allow_nan=False)
