"""The reconcile: what follows a smoke test (or an analysis measurement) is decided as of when
it ended; collaborators (Kubernetes, Prometheus, the smoke runner, the clock) are injected."""

from __future__ import annotations

import copy
import json
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from llmservice_operator.adapters.background import BackgroundIO
from llmservice_operator.api.status import AutoscalingStatus
from llmservice_operator.observed import ObservedState
from llmservice_operator.reconcile import (
    Reconciler,
    _as_applied,
    _autoscaling_decision,
    _fingerprint,
    _fresher,
    merge_patch,
    namespace_gone,
    namespace_terminating,
)
from llmservice_operator.render.labels import REVISION
from llmservice_operator.rollout import Series, SmokeObservation
from llmservice_operator.sizing import load_catalog

from .rollout.test_rollout_smoke_verdict import STREAM

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
SMOKE_SECONDS = 40


class FakeKube:
    """Holds one LLMService and what it applied; every Deployment is Ready at its size, with a
    Ready pod per replica. Every write moves the written object's resourceVersion. Objects
    in ``unlabelled`` exist but are not in the watch cache (``existing`` finds them)."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.deployments: dict[str, dict[str, Any]] = {}
        self.others: dict[tuple[str, str], dict[str, Any]] = {}
        self.unlabelled: dict[tuple[str, str], dict[str, Any]] = {}
        self.lookups: list[tuple[str, str]] = []
        self.applied_names: list[tuple[str, str]] = []
        self.deleted: list[tuple[str, str, str | None]] = []
        self.versions = 100
        self.events: list[tuple[str, str, str]] = []
        self.applied: list[str] = []
        self.scaled: list[tuple[str, int]] = []
        self.status_patches: list[dict[str, Any]] = []
        self.refuse_apply: ApiException | None = None
        self.refuse_status: ApiException | None = None

    def observe(self, namespace: str, name: str, secrets: list[str]) -> ObservedState:
        state = ObservedState()
        state.owned.update(copy.deepcopy(self.others))
        for dep_name, dep in self.deployments.items():
            replicas = dep["spec"].get("replicas", 1)
            dep["status"] = {"replicas": replicas, "readyReplicas": replicas}
            state.owned[("Deployment", dep_name)] = copy.deepcopy(dep)
            revision = dep["metadata"]["labels"][REVISION]
            state.pods += [
                {
                    "metadata": {"name": f"{dep_name}-{i}", "labels": {REVISION: revision}},
                    "status": {
                        "podIP": f"10.0.0.{i + 1}",
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                }
                for i in range(replicas)
            ]
        return state

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        if self.refuse_apply is not None:
            raise self.refuse_apply
        self.applied.append(obj["kind"])
        stored = copy.deepcopy(obj)
        name = obj["metadata"]["name"]
        self.applied_names.append((obj["kind"], name))
        self.unlabelled.pop((obj["kind"], name), None)
        if obj["kind"] == "Deployment":
            # As the API server: replicas another manager wrote stay; a new one defaults to 1.
            before = self.deployments.get(name)
            default = before["spec"].get("replicas", 1) if before is not None else 1
            stored["spec"].setdefault("replicas", default)
        else:
            before = self.others.get((obj["kind"], name))
        # An apply that changes nothing writes nothing (its resourceVersion stays).
        version = (before or {}).get("metadata", {}).get("resourceVersion")
        stored["metadata"]["resourceVersion"] = version
        if before is None or {**before, "status": None} != {**stored, "status": None}:
            self.versions += 1
            stored["metadata"]["resourceVersion"] = str(self.versions)
        if obj["kind"] == "Deployment":
            self.deployments[name] = stored
        else:
            self.others[(obj["kind"], name)] = stored
        return copy.deepcopy(stored)

    def scale_deployment(
        self, namespace: str, name: str, replicas: int, kind: str = "Deployment"
    ) -> None:
        self.scaled.append((name, replicas))
        self.deployments[name]["spec"]["replicas"] = replicas
        self.versions += 1
        self.deployments[name]["metadata"]["resourceVersion"] = str(self.versions)

    def existing(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        self.lookups.append((kind, name))
        found = self.unlabelled.get((kind, name)) or self.others.get((kind, name))
        if kind == "Deployment":
            found = found or self.deployments.get(name)
        return copy.deepcopy(found)

    def delete(
        self, api_version: str, kind: str, namespace: str, name: str, uid: str | None = None
    ) -> None:
        self.deleted.append((kind, name, uid))
        if kind == "Deployment":
            self.deployments.pop(name, None)
        self.others.pop((kind, name), None)

    def patch_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        if self.refuse_status is not None:
            raise self.refuse_status
        self.status_patches.append(copy.deepcopy(patch))
        status = self.body.setdefault("status", {})
        _merge(status, patch)
        meta = self.body["metadata"]
        meta["resourceVersion"] = str(int(meta.get("resourceVersion", "1")) + 1)
        return copy.deepcopy(self.body)

    def remove_annotation(self, namespace: str, name: str, key: str) -> None:
        self.body["metadata"].get("annotations", {}).pop(key, None)

    def read_secret_value(self, namespace: str, name: str, key: str) -> str | None:
        return None

    def post_event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


def _body() -> dict[str, Any]:
    return {
        "apiVersion": "serving.llmservice.dev/v1alpha1",
        "kind": "LLMService",
        "metadata": {"name": "chat", "namespace": "ml", "uid": "u-1", "generation": 1},
        "spec": {
            "model": {"id": "meta-llama/Llama-3.1-8B-Instruct"},
            "engine": {"maxModelLen": 4096},
            "resources": {"gpu": "H100-80GB"},
            "scaling": {"mode": "manual", "minReplicas": 1, "maxReplicas": 1},
            "replicas": 1,
            "slo": {"ttftP99Ms": 1000},
            "rollout": {
                "strategy": "blueGreen",
                "analysis": {"interval": "30s"},
                "blueGreen": {"autoPromote": True},
            },
        },
    }


def test_the_post_promotion_analysis_starts_when_the_smoke_test_ended() -> None:
    clock = [T0]
    kube = FakeKube(_body())

    def slow_smoke(url: str, requests: Any, api_key: str | None) -> list[SmokeObservation]:
        clock[0] += timedelta(seconds=SMOKE_SECONDS)  # a big model's long prompt
        return passing_smoke(url, requests, api_key)

    reconciler = Reconciler(
        kube, load_catalog(), "http://prometheus:9090", smoke=slow_smoke, clock=lambda: clock[0]
    )

    reconciler.reconcile(copy.deepcopy(kube.body))  # the first revision: stable at once
    stable = kube.body["status"]["revisions"]["stable"]
    kube.body["spec"]["engine"]["env"] = [{"name": "NEW", "value": "1"}]
    kube.body["metadata"]["generation"] += 1  # as the API server does on a spec change
    reconciler.reconcile(copy.deepcopy(kube.body))  # the rollout starts: candidate created
    candidate = kube.body["status"]["revisions"]["candidate"]
    assert candidate not in (None, stable)

    # The candidate is Ready: smoke test (40 s), switch, and the post-promotion analysis.
    result = reconciler.reconcile(copy.deepcopy(kube.body))
    after_smoke = clock[0].strftime("%Y-%m-%dT%H:%M:%SZ")
    rollout = kube.body["status"]["rollout"]
    assert [e.reason for e in result.events][:3] == [
        "SmokeTestPassed",
        "ActiveSwitched",
        "AnalysisStarted",
    ]
    assert rollout["stepStartedAt"] == after_smoke
    assert rollout["analysis"]["startedAt"] == after_smoke
    # The first measurement comes a whole interval after the switch, not 10 s after it.
    expected = (clock[0] + timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert rollout["analysis"]["nextMeasurementAt"] == expected
    assert result.requeue_at == clock[0] + timedelta(seconds=30)
    assert merge_patch(kube.body["status"], kube.body["status"]) == {}


def passing_smoke(_url: str, requests: Any, _api_key: str | None) -> list[SmokeObservation]:
    """Every smoke request answered well: streamed text, a stop reason, a quick first token."""
    return [
        SmokeObservation(name=r.name, status=200, chunks=STREAM, first_token_seconds=0.05)
        for r in requests
    ]


class FailingPrometheus:
    """Every check of the candidate answers: plenty of requests, TTFT p99 9 s."""

    def __init__(self, url: str) -> None:
        self.queries: list[str] = []

    def query(self, promql: str) -> Any:
        return []

    def measure(self, checks: Any) -> dict[str, Any]:
        self.queries += [c.query for c in checks]
        values = {"sampleCount": 500.0, "ttftP99Ms": 9000.0}
        return {c.name: [Series({}, values.get(c.name, 0.0))] for c in checks}


def test_a_failed_analysis_rolls_back_with_one_rolled_back_event() -> None:
    clock = [T0]
    body = _body()
    body["spec"]["rollout"] = {
        "steps": [{"setWeight": 50}, {"analysis": {}}],
        "analysis": {"interval": "30s"},
    }
    kube = FakeKube(body)
    reconciler = Reconciler(
        kube,
        load_catalog(),
        "http://prometheus:9090",
        prometheus=FailingPrometheus("http://prometheus:9090"),
        smoke=passing_smoke,
        clock=lambda: clock[0],
    )

    reconciler.reconcile(copy.deepcopy(kube.body))
    stable = kube.body["status"]["revisions"]["stable"]
    kube.body["spec"]["engine"]["env"] = [{"name": "NEW", "value": "1"}]
    kube.body["metadata"]["generation"] += 1  # as the API server does on a spec change
    reconciler.reconcile(copy.deepcopy(kube.body))  # candidate created
    started = reconciler.reconcile(copy.deepcopy(kube.body))  # smoke, weight, analysis
    assert [e.reason for e in started.events][-2:] == ["WeightSet", "AnalysisStarted"]
    clock[0] += timedelta(seconds=30)
    result = reconciler.reconcile(copy.deepcopy(kube.body))

    reasons = [e.reason for e in result.events]
    assert reasons == ["AnalysisMeasurement", "AnalysisFailed", "RolledBack"], reasons
    status = kube.body["status"]
    assert status["revisions"]["stable"] == stable
    assert status["revisions"]["failed"] is not None
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["RolledBack"]["reason"] == "AnalysisFailed"
    assert conditions["Degraded"]["reason"] == "RolledBack"
    assert list(kube.deployments) == [f"chat-{stable}"]


def _conditions(kube: FakeKube) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in kube.body["status"]["conditions"]}


def test_nothing_changed_nothing_decided_applied_or_written() -> None:
    kube = FakeKube(_body())
    reconciler = Reconciler(kube, load_catalog(), "http://prometheus:9090", clock=lambda: T0)
    for _ in range(3):  # create, then settle (Deployment Ready, Available)
        reconciler.reconcile(copy.deepcopy(kube.body))
    applied, patches = len(kube.applied), len(kube.status_patches)
    assert _conditions(kube)["Ready"]["status"] == "True"
    for _ in range(5):
        result = reconciler.reconcile(copy.deepcopy(kube.body))
        assert not result.wrote_status and result.applied == 0
    assert (len(kube.applied), len(kube.status_patches)) == (applied, patches)


def test_a_new_deployment_is_scaled_only_when_the_api_server_default_is_not_what_it_wants() -> None:
    for min_replicas in (1, 2):
        body = _body()
        body["spec"]["scaling"] = {"mode": "operator", "minReplicas": min_replicas,
                                   "maxReplicas": 3}  # fmt: skip
        del body["spec"]["replicas"]
        kube = FakeKube(body)
        reconciler = Reconciler(kube, load_catalog(), "http://prometheus:9090", clock=lambda: T0)
        reconciler.reconcile(copy.deepcopy(kube.body))
        [(name, deployment)] = kube.deployments.items()
        assert deployment["spec"]["replicas"] == min_replicas
        # At the API server's default of 1 the write would change nothing.
        assert kube.scaled == ([] if min_replicas == 1 else [(name, min_replicas)]), kube.scaled
        reconciler.reconcile(copy.deepcopy(kube.body))  # its Deployment and pods now observed
        assert len(kube.scaled) == (0 if min_replicas == 1 else 1), kube.scaled


def test_the_watch_events_of_objects_it_just_created_are_not_news_but_a_workloads_are() -> None:
    body = _body()
    made = {
        "Service": {"kind": "Service", "metadata": {"name": "chat", "resourceVersion": "7"}},
        "PodDisruptionBudget": {
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "chat", "resourceVersion": "8", "generation": 1},
        },
        "Deployment": {
            "kind": "Deployment",
            "metadata": {"name": "chat-abc", "resourceVersion": "9", "generation": 1},
        },
    }
    before = ObservedState()  # nothing existed when the reconcile decided
    for kinds, news in ((("Service", "PodDisruptionBudget"), False), (("Deployment",), True)):
        remembered = _fingerprint(body, _as_applied(before, [made[k] for k in kinds]), None)
        echo = ObservedState()  # their watch events: the objects as the API server returned them
        for kind in kinds:
            echo.owned[(kind, made[kind]["metadata"]["name"])] = copy.deepcopy(made[kind])
        assert (_fingerprint(body, echo, None) != remembered) is news, kinds


def test_a_pdb_status_write_is_not_news_but_a_change_to_its_spec_is() -> None:
    def observed(pdb_version: str, generation: int, deployment_version: str) -> ObservedState:
        state = ObservedState()
        pdb = {"metadata": {"name": "chat", "resourceVersion": pdb_version,
                            "generation": generation}}  # fmt: skip
        state.owned[("PodDisruptionBudget", "chat")] = pdb
        dep = {"metadata": {"name": "chat-abc", "resourceVersion": deployment_version}}
        state.owned[("Deployment", "chat-abc")] = dep
        return state

    body = _body()
    before = _fingerprint(body, observed("10", 1, "20"), None)
    # The disruption controller's status write: a new resourceVersion, the same generation.
    assert _fingerprint(body, observed("11", 1, "20"), None) == before
    assert _fingerprint(body, observed("12", 2, "20"), None) != before  # someone edited it
    assert _fingerprint(body, observed("10", 1, "21"), None) != before  # a workload's status


def _refusal(message: str) -> ApiException:
    err = ApiException(status=403, reason="Forbidden")
    err.body = json.dumps({"kind": "Status", "message": message, "code": 403})
    return err


def test_a_refused_apply_is_a_reconcile_error_condition_and_one_event_until_it_clears() -> None:
    kube = FakeKube(_body())
    reconciler = Reconciler(kube, load_catalog(), "http://prometheus:9090", clock=lambda: T0)
    quota = 'deployments.apps "chat" is forbidden: exceeded quota: gpus, requested: 1, limited: 0'
    kube.refuse_apply = _refusal(quota)
    for _ in range(3):
        with pytest.raises(ApiException):
            reconciler.reconcile(copy.deepcopy(kube.body))
    error = _conditions(kube)["ReconcileError"]
    assert (error["status"], error["reason"], error["message"]) == ("True", "ApplyFailed", quota)
    assert _conditions(kube)["Ready"]["status"] == "False"
    assert _conditions(kube)["Ready"]["reason"] == "ReconcileError"
    assert kube.events == [("Warning", "ReconcileError", quota)]  # once, not per retry
    kube.refuse_apply = None
    reconciler.reconcile(copy.deepcopy(kube.body))
    cleared = _conditions(kube)["ReconcileError"]
    assert (cleared["status"], cleared["reason"]) == ("False", "ReconcileSucceeded")


def test_a_create_refused_because_the_namespace_is_being_deleted_shows_nothing() -> None:
    """Kubernetes' own controllers ignore the NamespaceTerminating refusal: the service goes
    with its namespace, so neither a ReconcileError nor an Event is written for it."""
    kube = FakeKube(_body())
    reconciler = Reconciler(kube, load_catalog(), "http://prometheus:9090", clock=lambda: T0)
    terminating = _refusal('deployments.apps "chat-x" is forbidden: unable to create new '
                           "content in namespace ml because it is being terminated")  # fmt: skip
    terminating.body = json.dumps({**json.loads(terminating.body), "details": {
        "causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}]}})  # fmt: skip
    kube.refuse_apply = terminating
    with pytest.raises(ApiException) as raised:
        reconciler.reconcile(copy.deepcopy(kube.body))
    assert namespace_terminating(raised.value)
    assert not kube.status_patches and not kube.events
    assert not namespace_terminating(_refusal("exceeded quota: gpus"))  # others are shown
    assert not namespace_terminating(ApiException(status=403, reason="Forbidden"))


def test_a_create_refused_because_the_namespace_is_gone_shows_nothing() -> None:
    kube = FakeKube(_body())
    reconciler = Reconciler(kube, load_catalog(), "http://prometheus:9090", clock=lambda: T0)
    gone = ApiException(status=404, reason="Not Found")
    gone.body = json.dumps({"kind": "Status", "code": 404, "reason": "NotFound",
                            "message": 'namespaces "ml" not found',
                            "details": {"name": "ml", "kind": "namespaces"}})  # fmt: skip
    kube.refuse_apply = gone
    with pytest.raises(ApiException) as raised:
        reconciler.reconcile(copy.deepcopy(kube.body))
    assert namespace_gone(raised.value) and not namespace_terminating(raised.value)
    assert not kube.status_patches and not kube.events
    other = ApiException(status=404, reason="Not Found")
    other.body = json.dumps({"kind": "Status", "code": 404, "details": {"kind": "deployments"}})
    assert not namespace_gone(other)


class QueueingPrometheus:
    """Every Ready pod of the service has 2 requests waiting and 4 running (a steady load)."""

    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube
        self.queries: list[str] = []

    def query(self, promql: str) -> Any:
        self.queries.append(promql)
        value = 2.0 if "waiting" in promql else 4.0 if "running" in promql else 0.5
        return [
            Series({"namespace": "ml", "llmservice": "chat", "pod": f"{name}-0"}, value)
            for name in self.kube.deployments
        ]

    def measure(self, checks: Any) -> dict[str, Any]:
        return {}


def test_the_autoscalers_history_is_written_when_it_changes_or_every_few_minutes() -> None:
    clock = [T0]
    body = _body()
    body["spec"]["scaling"] = {"mode": "operator", "minReplicas": 1, "maxReplicas": 1,
                               "evaluationIntervalSeconds": 15}  # fmt: skip
    kube = FakeKube(body)
    prometheus = QueueingPrometheus(kube)
    reconciler = Reconciler(
        kube, load_catalog(), "http://p:9090", prometheus=prometheus, clock=lambda: clock[0]
    )
    for _ in range(3):
        reconciler.reconcile(copy.deepcopy(kube.body))
    evaluations = []
    written = []
    for _ in range(24):  # six minutes of evaluations every 15 s, nothing else changing
        clock[0] += timedelta(seconds=15)
        before = len(kube.status_patches)
        result = reconciler.reconcile(copy.deepcopy(kube.body))
        assert result.requeue_at is not None and result.requeue_at <= clock[0] + timedelta(
            seconds=15
        )
        evaluations.append(reconciler._memory[("ml", "chat")].autoscaling.last_evaluation_time)  # type: ignore[union-attr]
        written.append(len(kube.status_patches) > before)
    assert len(set(evaluations)) == 24  # it evaluated every time
    # It wrote while its decision settled, then only the sample times moved: kept in memory,
    # and written again once they were AUTOSCALING_PERSIST_S old.
    assert written[2:20] == [False] * 18, written
    assert sum(written[20:]) == 1, written
    # One batch of four queries per evaluation, not one set per pod.
    assert len(prometheus.queries) <= 4 * 25


class SilentPrometheus:
    """Answers every query with no series: the pods report no metrics."""

    def query(self, promql: str) -> Any:
        return []

    def measure(self, checks: Any) -> dict[str, Any]:
        return {}


def _without_metrics(clock: list[datetime]) -> tuple[FakeKube, Reconciler]:
    """An autoscaled service (every 15 s) whose pods report no metrics, on ``clock``."""
    body = _body()
    body["spec"]["scaling"] = {"mode": "operator", "minReplicas": 1, "maxReplicas": 2,
                               "evaluationIntervalSeconds": 15}  # fmt: skip
    kube = FakeKube(body)
    reconciler = Reconciler(
        kube, load_catalog(), "http://p:9090", prometheus=SilentPrometheus(), clock=lambda: clock[0]
    )
    return kube, reconciler


def test_a_service_holding_without_metrics_is_not_written_for_its_evaluation_times() -> None:
    """Only lastEvaluationTime moves while the pods report nothing: the written history is
    already what a restarted operator needs, so after the first evaluations no status write
    follows, however long, and the next evaluation is still an interval away (no busy loop)."""
    clock = [T0]
    kube, reconciler = _without_metrics(clock)
    for _ in range(2):  # its first evaluation waits for the replicas to load
        reconciler.reconcile(copy.deepcopy(kube.body))
        clock[0] += timedelta(seconds=15)
    held = kube.body["status"]["autoscaling"]
    assert held["degradedReason"], held  # holding, and saying why
    written = []
    for _ in range(48):  # twelve minutes: more than two AUTOSCALING_PERSIST_S
        clock[0] += timedelta(seconds=15)
        before = len(kube.status_patches)
        result = reconciler.reconcile(copy.deepcopy(kube.body))
        assert result.requeue_at == clock[0] + timedelta(seconds=15)
        written.append(len(kube.status_patches) > before)
    assert written == [False] * 48, written
    evaluated = reconciler._memory[("ml", "chat")].autoscaling.last_evaluation_time  # type: ignore[union-attr]
    assert evaluated is not None and evaluated > held["lastEvaluationTime"]


def test_a_reconcile_says_where_its_time_went() -> None:
    """Each step's wall time, in order: the whole sequence for a new service; an evaluation
    at rest goes from the autoscaler to the status (nothing else changed)."""
    clock = [T0]
    kube, reconciler = _without_metrics(clock)
    results = []
    for _ in range(4):
        results.append(reconciler.reconcile(copy.deepcopy(kube.body)))
        clock[0] += timedelta(seconds=15)
    first, rest = results[0].laps, results[-1].laps
    assert first is not None and rest is not None
    steps = ["observe", "plan", "autoscale", "decide", "apply", "status"]
    assert [step for step, _ in first.steps] == steps
    assert [step for step, _ in rest.steps] == [*steps[:3], "status"]
    assert all(seconds >= 0 for _, seconds in first.steps)
    assert first.cpu_seconds > 0


def test_arrival_rates_alone_are_samples_and_a_new_surge_is_a_decision() -> None:
    """The status is not written for new arrival rates (they move at every evaluation) but is
    for a new surge (it changes the burst headroom the next operator resumes with)."""
    written = {"desiredReplicas": 3, "recommendations": ["100=3", "100=~4.5", "0=^2"]}
    rates_moved = {"desiredReplicas": 3, "recommendations": ["115=3", "115=~6.25", "0=^2"]}
    surged = {"desiredReplicas": 3, "recommendations": ["115=3", "115=~9", "115=^2"]}
    assert _autoscaling_decision(written) == _autoscaling_decision(rates_moved)
    assert _autoscaling_decision(written) != _autoscaling_decision(surged)


def test_the_autoscalers_own_write_does_not_wake_a_full_decision() -> None:
    """The watch event of an autoscaling-only status write comes back with a new
    resourceVersion: it must not look like news (no render, no apply, no second write)."""
    clock = [T0]
    body = _body()
    body["spec"]["scaling"] = {"mode": "operator", "minReplicas": 1, "maxReplicas": 1}
    kube = FakeKube(body)
    reconciler = Reconciler(
        kube, load_catalog(), "http://p:9090", prometheus=QueueingPrometheus(kube),
        clock=lambda: clock[0],
    )  # fmt: skip
    for _ in range(3):
        reconciler.reconcile(copy.deepcopy(kube.body))
    writes = 0
    for _ in range(24):  # six minutes: at least one autoscaling-only write
        clock[0] += timedelta(seconds=15)
        before = len(kube.status_patches)
        reconciler.reconcile(copy.deepcopy(kube.body))
        if len(kube.status_patches) > before:
            writes += 1
            applied, patches = len(kube.applied), len(kube.status_patches)
            echo = reconciler.reconcile(copy.deepcopy(kube.body))  # its watch event
            assert (len(kube.applied), len(kube.status_patches)) == (applied, patches)
            assert echo.applied == 0 and not echo.wrote_status
    assert writes >= 1


def test_a_smoke_test_runs_off_the_reconcile_and_feeds_the_next_one() -> None:
    release = threading.Event()
    notified: list[tuple[str, str]] = []
    ran = threading.Event()

    def hanging_smoke(url: str, requests: Any, api_key: str | None) -> list[SmokeObservation]:
        ran.set()
        release.wait(10)
        return passing_smoke(url, requests, api_key)

    kube = FakeKube(_body())
    background = BackgroundIO(notify=notified.append)
    reconciler = Reconciler(
        kube, load_catalog(), "http://p:9090", smoke=hanging_smoke, background=background
    )
    reconciler.reconcile(copy.deepcopy(kube.body))
    kube.body["spec"]["engine"]["env"] = [{"name": "NEW", "value": "1"}]
    kube.body["metadata"]["generation"] += 1
    reconciler.reconcile(copy.deepcopy(kube.body))  # the candidate is created
    started = time.monotonic()
    result = reconciler.reconcile(copy.deepcopy(kube.body))  # it is Ready: smoke test
    assert time.monotonic() - started < 2 and ran.wait(5)
    assert result.events == [] and not result.wrote_status  # waiting for the smoke test
    release.set()
    deadline = time.monotonic() + 10
    while not notified and time.monotonic() < deadline:
        time.sleep(0.01)
    assert notified == [("ml", "chat")]
    result = reconciler.reconcile(copy.deepcopy(kube.body))
    assert "SmokeTestPassed" in [e.reason for e in result.events]
    background.shutdown()


def _with_autoscaling(raw: Any) -> dict[str, Any]:
    return {"status": {"autoscaling": raw}}


def test_the_written_autoscaling_record_is_read_only_when_it_may_be_newer() -> None:
    """At rest the record in memory is the newer one: the written one is not parsed (a record
    that would not even parse proves it); a newer written one wins; a tie keeps memory."""
    mine = AutoscalingStatus(desiredReplicas=2, lastEvaluationTime="2026-12-04T09:00:15Z")
    unparsable = {"desiredReplicas": "many", "lastEvaluationTime": "2026-12-04T09:00:00Z"}
    assert _fresher(mine, _with_autoscaling(unparsable)) is mine
    tie = {"desiredReplicas": 3, "lastEvaluationTime": "2026-12-04T09:00:15Z"}
    assert _fresher(mine, _with_autoscaling(tie)) is mine
    newer = {"desiredReplicas": 3, "lastEvaluationTime": "2026-12-04T09:00:30Z"}
    found = _fresher(mine, _with_autoscaling(newer))
    assert found is not None and found.desired_replicas == 3
    assert _fresher(mine, _with_autoscaling({**newer, "lastEvaluationTime": "soon"})) is mine
    assert _fresher(mine, {}) is mine
    remembered = _fresher(None, _with_autoscaling(newer))  # a restarted operator
    assert remembered is not None and remembered.desired_replicas == 3
    never = AutoscalingStatus(desiredReplicas=1)
    assert _fresher(never, _with_autoscaling(newer)) is never


def test_a_new_services_first_status_and_events_wait_once_while_a_wave_passes() -> None:
    alone = FakeKube(_body())
    Reconciler(alone, load_catalog(), "http://prometheus:9090", clock=lambda: T0).reconcile(
        copy.deepcopy(alone.body)
    )
    clock = [T0]
    kube = FakeKube(_body())
    reconciler = Reconciler(kube, load_catalog(), "http://prometheus:9090",
                            clock=lambda: clock[0], in_wave=lambda: True)  # fmt: skip
    held = reconciler.reconcile(copy.deepcopy(kube.body))
    assert held.status_held and not held.wrote_status and held.events == []
    assert kube.status_patches == []
    assert sorted(kube.applied) == sorted(alone.applied)  # its objects did not wait
    assert held.requeue_at is not None and held.requeue_at <= T0 + timedelta(seconds=60)
    clock[0] = T0 + timedelta(seconds=20)
    written = reconciler.reconcile(copy.deepcopy(kube.body))  # the wave goes on: once only
    assert not written.status_held and written.wrote_status
    assert {e.reason for e in written.events} >= {"Sized"}
    assert kube.body["status"]["observedGeneration"] == 1
    assert _conditions(kube)["Sized"]["status"] == "True"


def test_a_first_status_that_shows_an_invalid_spec_is_never_held() -> None:
    body = _body()
    body["spec"]["engine"]["extraArgs"] = ["--api-key=secret"]
    kube = FakeKube(body)
    reconciler = Reconciler(kube, load_catalog(), "http://prometheus:9090", clock=lambda: T0,
                            in_wave=lambda: True)  # fmt: skip
    result = reconciler.reconcile(copy.deepcopy(kube.body))
    assert not result.status_held and result.wrote_status
    assert _conditions(kube)["InvalidSpec"]["status"] == "True"
    assert [e.reason for e in result.events] == ["InvalidSpec"]


def test_a_service_that_has_a_status_is_never_held() -> None:
    kube = FakeKube(_body())
    wave = [False]
    reconciler = Reconciler(kube, load_catalog(), "http://prometheus:9090", clock=lambda: T0,
                            in_wave=lambda: wave[0])  # fmt: skip
    reconciler.reconcile(copy.deepcopy(kube.body))
    wave[0] = True
    kube.body["metadata"]["generation"] = 2
    kube.body["spec"]["engine"]["maxModelLen"] = 8192
    result = reconciler.reconcile(copy.deepcopy(kube.body))
    assert not result.status_held and result.wrote_status
    assert kube.body["status"]["observedGeneration"] == 2


def test_a_spec_change_that_came_back_with_the_status_write_is_decided_on() -> None:
    """A person changes the spec while a reconcile decides on the old one; its status write
    answers with the new spec. That answer is not a version already decided on: the next
    reconcile of it decides in full and rolls the new spec out."""
    kube = FakeKube(_body())
    reconciler = Reconciler(kube, load_catalog(), "http://prometheus:9090", clock=lambda: T0)
    for _ in range(3):  # create, then settle (Deployment Ready, Available)
        reconciler.reconcile(copy.deepcopy(kube.body))
    read = copy.deepcopy(kube.body)
    version = int(kube.body["metadata"]["resourceVersion"])
    read["status"]["conditions"] = []  # someone's edit: a status this reconcile rewrites
    read["metadata"]["resourceVersion"] = str(version + 1)
    kube.body["spec"]["engine"]["maxNumSeqs"] = 8  # the spec change lands meanwhile
    kube.body["metadata"]["generation"] = 2
    kube.body["metadata"]["resourceVersion"] = str(version + 2)
    before = {n for k, n in kube.applied_names if k == "Deployment"}
    result = reconciler.reconcile(read)
    assert result.updated_body is not None and result.updated_body["metadata"]["generation"] == 2
    reconciler.reconcile(copy.deepcopy(kube.body))
    assert {n for k, n in kube.applied_names if k == "Deployment"} - before
