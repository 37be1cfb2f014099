"""A LeaderWorkerSet revision is a replica group to the rest of the operator (decide.py).

The rollout machine and the autoscaler count replicas; for a multi-node service each replica
is one LWS group: scaling writes the LWS's spec.replicas (groups), canary weights move whole
groups, and a group is Ready only when the LWS says so (its status.readyReplicas counts the
groups whose every pod is Ready), never from the leader pod alone.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from llmservice_operator.api.status import AutoscalingStatus
from llmservice_operator.decide import Decision, decide
from llmservice_operator.observed import ObservedState
from llmservice_operator.reconcile import merge_patch
from llmservice_operator.render.labels import REVISION, ROLE, selector_labels
from llmservice_operator.rollout import SmokeResult
from llmservice_operator.scaling import ScalingOutcome
from llmservice_operator.sizing import load_catalog

ROOT = Path(__file__).parents[2]
NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
CATALOG = load_catalog()
PROM = "http://prom:9090"
LWS = "LeaderWorkerSet"


def _body() -> dict[str, Any]:
    text = (ROOT / "examples" / "llama-3.1-405b-multinode.yaml").read_text()
    body: dict[str, Any] = yaml.safe_load(text)
    body["metadata"].update({"uid": "u-1", "generation": 1})
    return body


def _scaled(total: int) -> ScalingOutcome:
    return ScalingOutcome(total, AutoscalingStatus(desired_replicas=total, reason="test"), None)


class _Cluster:
    """Owned objects as the API server holds them; each LWS's Ready groups set by the test."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.owned: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: list[dict[str, Any]] = []
        self.ready_groups: dict[str, int] | None = None  # name -> ready; None: all Ready

    def observed(self, missing: set[str] | None = None) -> ObservedState:
        return ObservedState(
            owned=copy.deepcopy(self.owned),
            pods=copy.deepcopy(self.pods),
            secrets={"hf-token": {"token"}},
            missing_apis=set(missing or ()),
        )

    def reconcile(self, now: datetime, total: int = 2, smoke: bool = True) -> Decision:
        args = (self.body, self.observed(), CATALOG, now, PROM)
        decision = decide(*args, scaling=_scaled(total))
        if decision.smoke is not None and smoke:
            passed = SmokeResult(passed=True, retryable=False, message="2 of 2 answered")
            decision = decide(*args, smoke=passed, scaling=_scaled(total))
        for obj in decision.apply:
            key = (obj["kind"], obj["metadata"]["name"])
            stored = copy.deepcopy(obj)
            if key in self.owned and "replicas" not in stored.get("spec", {}):
                # Server-side apply: the autoscaler's field manager still owns spec.replicas.
                stored["spec"]["replicas"] = self.owned[key]["spec"].get("replicas", 0)
            self.owned[key] = stored
        for _api_version, kind, name in decision.delete:
            del self.owned[(kind, name)]
        for (kind, name), obj in self.owned.items():
            if kind == LWS:
                groups = decision.scale.get(name, obj["spec"].get("replicas", 0))
                obj["spec"]["replicas"] = groups
                ready = groups if self.ready_groups is None else self.ready_groups.get(name, 0)
                obj["status"] = {"replicas": groups, "readyReplicas": min(ready, groups)}
        self.body["status"] = merge_patch({}, decision.status)
        return decision


def _lws(cluster: _Cluster) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["labels"][REVISION]: o for (k, _), o in cluster.owned.items() if k == LWS}


def _conditions(decision: Decision) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in decision.status["conditions"]}


def test_the_autoscalers_count_is_written_to_the_leaderworkerset_as_groups() -> None:
    cluster = _Cluster(_body())
    first = cluster.reconcile(NOW, total=2)
    [lws] = [o for o in first.apply if o["kind"] == LWS]
    name = lws["metadata"]["name"]
    assert "replicas" not in lws["spec"]  # the autoscaler's field manager owns it
    assert first.scale == {name: 2}
    assert first.scale_kinds == {name: LWS}  # the reconcile applies LWS spec.replicas
    assert not [o for o in first.apply if o["kind"] == "Deployment"]
    up = cluster.reconcile(NOW + timedelta(seconds=30), total=3)
    assert up.scale == {name: 3} and up.scale_kinds == {name: LWS}
    down = cluster.reconcile(NOW + timedelta(seconds=60), total=1)
    assert down.scale == {name: 1}
    at_rest = cluster.reconcile(NOW + timedelta(seconds=90), total=1)
    assert at_rest.scale == {}  # written only on change


def test_a_group_is_ready_only_when_the_leaderworkerset_counts_it_ready() -> None:
    """The leader pod turns Ready once its engine answers; the LWS's readyReplicas waits for
    every pod of the group. Available follows the LWS, not the leader."""
    cluster = _Cluster(_body())
    cluster.ready_groups = {}  # no group Ready yet
    cluster.reconcile(NOW, total=1)
    [(revision, lws)] = _lws(cluster).items()
    ready_leader = {
        "metadata": {
            "name": f"{lws['metadata']['name']}-0",
            "labels": {**selector_labels("llama-405b"), REVISION: revision, ROLE: "leader"},
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    cluster.pods = [ready_leader]
    waiting = cluster.reconcile(NOW + timedelta(seconds=10), total=1)
    assert _conditions(waiting)["Available"]["status"] == "False"
    assert waiting.status["readyReplicas"] == 0
    cluster.ready_groups = {lws["metadata"]["name"]: 1}
    cluster.reconcile(NOW + timedelta(seconds=20), total=1)
    ready = cluster.reconcile(NOW + timedelta(seconds=30), total=1)
    assert _conditions(ready)["Available"]["status"] == "True"
    assert ready.status["readyReplicas"] == 1 and ready.status["phase"] == "Available"


def test_a_canary_moves_whole_groups_and_ends_on_the_candidates_leaderworkerset() -> None:
    """setWeight 50 of 2 groups: the candidate gets one whole group (its weight by replica
    ratio is 1 of the groups serving), then both; the stable's LWS is pruned at the end."""
    body = _body()
    body["spec"]["rollout"]["steps"] = [{"setWeight": 50}]
    cluster = _Cluster(body)
    for tick in range(3):
        cluster.reconcile(NOW + timedelta(seconds=tick), total=2)
    [stable] = _lws(cluster)
    body["spec"]["engine"]["maxNumSeqs"] = 128  # a new pod template: a new revision
    body["metadata"]["generation"] = 2
    seen: list[tuple[int, int]] = []  # (candidate groups, stable groups)
    for tick in range(1, 40):
        decision = cluster.reconcile(NOW + timedelta(seconds=10 * tick), total=2)
        assert set(decision.scale_kinds.values()) <= {LWS}
        groups = {rev: o["spec"]["replicas"] for rev, o in _lws(cluster).items()}
        candidate = next((rev for rev in groups if rev != stable), None)
        step = (groups.get(candidate, 0) if candidate else 0, groups.get(stable, 0))
        if not seen or seen[-1] != step:
            seen.append(step)
        if body["status"]["revisions"].get("candidate") is None and stable not in groups:
            break
    else:
        raise AssertionError(f"the canary never finished: {seen} {body['status']['rollout']}")
    assert seen[0][1] == 2 and seen[-1] == (2, 0), seen
    assert any(c == 1 for c, _ in seen), seen  # one whole group at the 50% step
    assert all(c + st <= 3 for c, st in seen), seen  # never more than one group extra
    [candidate] = _lws(cluster)
    assert candidate != stable and body["status"]["revisions"]["stable"] == candidate
    assert not [k for k, _ in cluster.owned if k == "Deployment"]


def test_a_cluster_without_leaderworkerset_is_degraded_saying_what_to_install() -> None:
    cluster = _Cluster(_body())
    decision = decide(
        cluster.body, cluster.observed(missing={LWS}), CATALOG, NOW, PROM, scaling=_scaled(1)
    )
    degraded = _conditions(decision)["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "LeaderWorkerSetAPIMissing")
    assert "sigs.k8s.io/lws" in degraded["message"]
    served = decide(cluster.body, cluster.observed(), CATALOG, NOW, PROM, scaling=_scaled(1))
    assert _conditions(served)["Degraded"]["status"] == "False"


def test_an_unschedulable_worker_is_reported() -> None:
    cluster = _Cluster(_body())
    cluster.reconcile(NOW, total=1)
    observed = cluster.observed()
    observed.worker_pods = [
        {
            "metadata": {"name": "llama-405b-x-0-1", "labels": {ROLE: "worker"}},
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
                    }
                ],
            },
        }
    ]
    decision = decide(cluster.body, observed, CATALOG, NOW, PROM, scaling=_scaled(1))
    degraded = _conditions(decision)["Degraded"]
    assert degraded["reason"] == "Unschedulable" and "llama-405b-x-0-1" in degraded["message"]
