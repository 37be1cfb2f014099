"""The rollout tests' background load (benchmarks.rollback): which revision a request to a pod
IP counted for, when kwok gives a removed pod's IP to the next pod at once."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from benchmarks.rollback import BackgroundLoad, Chunk, RevisionTargets
from kubernetes import client

from llmservice_operator.loadgen.report import LoadReport, Percentiles, TargetCounts
from llmservice_operator.render.labels import REVISION, SERVICE

STABLE, CANDIDATE = "aaaa111111", "bbbb222222"
REUSED = "http://127.1.1.7:8000"


@dataclass
class _Response:
    data: bytes


class FakeCoreApi:
    """The Service ``svc`` (all revisions) and the pods set in ``pods``."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []

    def read_namespaced_service(self, name: str, namespace: str, **_: Any) -> _Response:
        spec = {"selector": {SERVICE: name}, "ports": [{"name": "http", "targetPort": 8000}]}
        return _Response(json.dumps({"spec": spec}).encode())

    def list_namespaced_pod(self, namespace: str, **_: Any) -> _Response:
        return _Response(json.dumps({"items": self.pods}).encode())


def pod(ip: str, revision: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{revision}-{ip}", "labels": {SERVICE: "svc", REVISION: revision}},
        "spec": {"containers": [{"ports": [{"name": "http", "containerPort": 8000}]}]},
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def targets_with(api: FakeCoreApi) -> RevisionTargets:
    targets = RevisionTargets(client.ApiClient(), "svc", "ns", refresh_s=1.0)
    targets._api = api  # type: ignore[assignment]
    return targets


def report(per_target: dict[str, TargetCounts]) -> LoadReport:
    none = Percentiles(0, None, None, None, None, None)
    requests = sum(c.requests for c in per_target.values())
    errors = sum(c.errors for c in per_target.values())
    return LoadReport(
        requests, requests - errors, errors, 0.0, 2.0, 0.0, 0.0, 0.0, none, none, none,
        per_target=per_target,
    )  # fmt: skip


def test_a_reused_ip_keeps_the_requests_it_served_before_with_the_removed_revision(
    monkeypatch: Any,
) -> None:
    api = FakeCoreApi()
    targets = targets_with(api)
    clock = iter([100.0, 100.0, 200.0, 200.0])
    monkeypatch.setattr("benchmarks.rollback.time.time", lambda: next(clock))
    api.pods = [pod("127.1.1.7", STABLE)]
    assert targets.refresh() == (REUSED,)
    assert targets() == (REUSED,)
    # The stable pod is deleted, and the candidate's next pod gets its IP.
    api.pods = [pod("127.1.1.7", CANDIDATE)]
    targets.refresh()
    assert targets() == (REUSED,)

    assert targets.revision_at(REUSED, 150.0) == STABLE
    assert targets.revision_at(REUSED, 250.0) == CANDIDATE
    assert targets.revisions == {REUSED: CANDIDATE}
    assert targets.first_seen == {(REUSED, STABLE): 100.0, (REUSED, CANDIDATE): 200.0}

    load = BackgroundLoad.__new__(BackgroundLoad)
    load.targets = targets
    # Requests in flight to the stable pod when it went away failed; the candidate's none.
    load.chunks = [
        Chunk(150.0, 152.0, report({REUSED: TargetCounts(10, 8, 2)})),
        Chunk(250.0, 252.0, report({REUSED: TargetCounts(5, 5, 0)})),
    ]
    by_revision = load.per_revision()
    assert (by_revision[STABLE].requests, by_revision[STABLE].errors) == (10, 2)
    assert (by_revision[CANDIDATE].requests, by_revision[CANDIDATE].errors) == (5, 0)
    assert load.first_traffic(CANDIDATE) == 200.0
    assert load.first_traffic(STABLE) == 100.0


def test_an_unready_pod_is_not_taken_for_the_ip_s_revision() -> None:
    api = FakeCoreApi()
    targets = targets_with(api)
    api.pods = [pod("127.1.1.7", STABLE)]
    targets.refresh()
    starting = pod("127.1.1.8", CANDIDATE)
    starting["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    api.pods = [pod("127.1.1.7", STABLE), starting]
    assert targets.refresh() == (REUSED,)
    assert targets.revisions == {REUSED: STABLE}
