"""The reconcile's clock: what follows a smoke test (or an analysis measurement) is decided as
of when it ended, not when the reconcile began."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from llmservice_operator import reconcile as reconcile_module
from llmservice_operator.observed import ObservedState
from llmservice_operator.reconcile import Reconciler, merge_patch
from llmservice_operator.render.labels import REVISION
from llmservice_operator.rollout import Series, SmokeResult
from llmservice_operator.sizing import load_catalog

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
SMOKE_SECONDS = 40


class FakeKube:
    """Holds one LLMService and its Deployments; every Deployment is Ready at its size, with a
    Ready pod per replica."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.deployments: dict[str, dict[str, Any]] = {}

    def observe(self, namespace: str, name: str, secrets: list[str]) -> ObservedState:
        state = ObservedState()
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
        if obj["kind"] == "Deployment":
            self.deployments[obj["metadata"]["name"]] = copy.deepcopy(obj)
        return obj

    def scale_deployment(self, namespace: str, name: str, replicas: int) -> None:
        self.deployments[name]["spec"]["replicas"] = replicas

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        if kind == "Deployment":
            self.deployments.pop(name, None)

    def patch_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        status = self.body.setdefault("status", {})
        _merge(status, patch)
        return copy.deepcopy(self.body)

    def remove_annotation(self, namespace: str, name: str, key: str) -> None:
        self.body["metadata"].get("annotations", {}).pop(key, None)


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


def test_the_post_promotion_analysis_starts_when_the_smoke_test_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [T0]
    kube = FakeKube(_body())
    reconciler = Reconciler(kube, load_catalog(), "http://prometheus:9090", clock=lambda: clock[0])  # type: ignore[arg-type]

    def slow_smoke(*_: Any) -> list[Any]:
        clock[0] += timedelta(seconds=SMOKE_SECONDS)  # a big model's long prompt
        return []

    monkeypatch.setattr(reconcile_module, "run_smoke", slow_smoke)
    monkeypatch.setattr(reconcile_module, "judge_smoke", lambda *_: SmokeResult(True, False, "ok"))

    reconciler.reconcile(copy.deepcopy(kube.body))  # the first revision: stable at once
    stable = kube.body["status"]["revisions"]["stable"]
    kube.body["spec"]["engine"]["env"] = [{"name": "NEW", "value": "1"}]
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


class FailingPrometheus:
    """Every check of the candidate answers: plenty of requests, TTFT p99 9 s."""

    def __init__(self, url: str) -> None:
        self.queries: list[str] = []

    def measure(self, checks: Any) -> dict[str, Any]:
        self.queries += [c.query for c in checks]
        values = {"sampleCount": 500.0, "ttftP99Ms": 9000.0}
        return {c.name: [Series({}, values.get(c.name, 0.0))] for c in checks}


def test_a_failed_analysis_rolls_back_with_one_rolled_back_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [T0]
    body = _body()
    body["spec"]["rollout"] = {
        "steps": [{"setWeight": 50}, {"analysis": {}}],
        "analysis": {"interval": "30s"},
    }
    kube = FakeKube(body)
    monkeypatch.setattr(reconcile_module, "PrometheusAdapter", FailingPrometheus)
    monkeypatch.setattr(reconcile_module, "run_smoke", lambda *_: [])
    monkeypatch.setattr(reconcile_module, "judge_smoke", lambda *_: SmokeResult(True, False, "ok"))
    reconciler = Reconciler(kube, load_catalog(), "http://prometheus:9090", clock=lambda: clock[0])  # type: ignore[arg-type]

    reconciler.reconcile(copy.deepcopy(kube.body))
    stable = kube.body["status"]["revisions"]["stable"]
    kube.body["spec"]["engine"]["env"] = [{"name": "NEW", "value": "1"}]
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
