"""Kill points: the chart-installed operator (two replicas on the real node, leader election)
is killed hard (SIGKILL from the host) once in each stage of a canary, and every rollout still
ends as an uninterrupted one does.

Stages: prepare, smoke, setWeight, pause, analysis (mid-measurement) and promote on a good
revision; rollback on a slow one; abort on a third. Each kill is of the replica holding the
Lease, seen from outside (the service's status, its Deployments and Events); the next kill
waits for another replica to lead. The simulator's start-up delay keeps each stage observable
for a few seconds (a new pod is Ready only after it), and its added TTFT keeps the smoke test
running for about a second.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pytest
from benchmarks.rollback import llmservice, rollback_complete

from llmservice_dev.localcluster import ClusterInfo
from llmservice_dev.localcluster.cluster import OPERATOR_NAMESPACE

from .operator_fixtures import OperatorFactory, OperatorRelease, wait_for
from .test_rollout_controls import Plugin, controlled_canary
from .test_rollouts import Cluster, Steps, kube, start_load

__all__ = ["kube"]  # the fixture, shared with test_rollouts

pytestmark = pytest.mark.cluster

SLO = {"ttftP99Ms": 20000, "maxErrorRate": 0.05}
#: Simulated seconds (time scale 10): a new pod is Ready 3 s after it starts, and each smoke
#: request takes 0.4 s.
SLOW_START = {"LLMSERVICE_SIM_STARTUP_DELAY_S": "30"}
CANDIDATE = {**SLOW_START, "LLMSERVICE_SIM_EXTRA_TTFT_MS": "4000"}
BAD = {**SLOW_START, "LLMSERVICE_SIM_EXTRA_TTFT_MS": "40000"}


def rollout(*, pause: str | None = "6s") -> dict[str, Any]:
    """The controls test's canary, with three measurements (a kill can land between them)."""
    analysis = {"interval": "5s", "window": "10s", "count": 3, "minSamples": 3}
    return {**controlled_canary(pause=pause), "analysis": analysis}


@dataclass
class Killer:
    """Kills the Lease holder when a stage is first seen, once per stage."""

    cluster: ClusterInfo
    op: OperatorRelease
    lease_name: str
    kube: Cluster
    killed: dict[str, str] = field(default_factory=dict)

    def lease(self) -> dict[str, Any]:
        out = self.cluster.run_kubectl(
            "-n", OPERATOR_NAMESPACE, "get", "lease", self.lease_name, "-o", "json"
        )  # fmt: skip
        spec: dict[str, Any] = json.loads(out).get("spec") or {}
        return spec

    def holder(self) -> str:
        """The pod of the replica holding the Lease (an identity is ``<pod>_<process id>``)."""
        return str(self.lease().get("holderIdentity") or "").rsplit("_", 1)[0]

    def leading_again(self, since: datetime) -> bool:
        """A live replica renewed the Lease after the kill (the other replica, or the killed
        one restarted by the kubelet: its identity is its pod's name)."""
        lease = self.lease()
        renewed = lease.get("renewTime")
        return (
            bool(renewed)
            and datetime.fromisoformat(str(renewed).replace("Z", "+00:00")) > since
            and str(lease.get("holderIdentity")).rsplit("_", 1)[0] in self.op.pod_names()
        )

    def kill_in(self, stage: str, seen: Callable[[], bool], timeout: float = 120) -> None:
        wait_for(f"stage {stage}", seen, timeout, interval=0.2)
        pod = self.holder()
        self.op.kill(pod)
        killed_at = datetime.now(UTC)
        self.killed[stage] = pod
        print(f"killed {pod} in {stage}", flush=True)
        wait_for(
            f"a leader again after the kill in {stage}",
            partial(self.leading_again, killed_at),
            90,
            interval=0.3,
        )


def stage_is(
    kube: Cluster, name: str, step: int, extra: Callable[[dict[str, Any]], bool] | None = None
) -> bool:
    st = kube.status(name)
    rollout = st.get("rollout") or {}
    if not (st.get("revisions") or {}).get("candidate") or rollout.get("step") != step:
        return False
    return extra is None or extra(st)


def candidate_ready(kube: Cluster, name: str) -> int:
    st = kube.status(name)
    cand = (st.get("revisions") or {}).get("candidate")
    if not cand:
        return -1
    dep = kube.deployments(name).get(cand)
    return int(((dep or {}).get("status") or {}).get("readyReplicas") or 0)


def test_the_operator_killed_in_every_stage_converges_as_an_uninterrupted_run(
    cluster: ClusterInfo,
    namespace: str,
    kube: Cluster,
    operators: OperatorFactory,
) -> None:
    step = Steps()
    op = operators.start(namespace, replicas=2, LLMSERVICE_PROMETHEUS_URL=cluster.prometheus_url)
    killer = Killer(cluster, op, f"lease-{namespace}"[:63], kube)
    wait_for("a leader", killer.holder, 60)
    kube.apply(llmservice("good", namespace, rollout=rollout(), slo=SLO, replicas=4))
    kube.apply(llmservice("bad", namespace, env=SLOW_START, rollout=rollout(), slo=SLO, replicas=2))
    kube.apply(
        llmservice(
            "held", namespace, env=SLOW_START, rollout=rollout(pause=None), slo=SLO, replicas=2
        )
    )
    kube.wait_available("good", "bad", "held", timeout=240)
    stable = {name: kube.revisions(name)["stable"] for name in ("good", "bad", "held")}
    step("stable revisions Available")

    # The plan: prepare (0), setWeight 50 (1), pause (2), analysis (3), setWeight 100 (4),
    # promote (5). Load comes from the smoke test and the analysis needs requests: the
    # background load generator of the rollout tests is started for each service.
    with ExitStack() as loads:
        load = {n: start_load(loads, cluster, namespace, n) for n in ("good", "bad", "held")}
        kube.set_env("good", CANDIDATE)
        killer.kill_in(
            "prepare", lambda: stage_is(kube, "good", 0) and candidate_ready(kube, "good") == 0
        )
        killer.kill_in(
            "smoke",
            lambda: stage_is(kube, "good", 0) and candidate_ready(kube, "good") >= 1,
        )
        killer.kill_in("setWeight", partial(stage_is, kube, "good", 1))
        killer.kill_in("pause", partial(stage_is, kube, "good", 2))
        killer.kill_in(
            "analysis",
            partial(
                stage_is, kube, "good", 3,
                lambda st: 1 <= ((st["rollout"].get("analysis") or {}).get("measurementsTaken") or 0) < 3,
            ),
        )  # fmt: skip
        killer.kill_in("promote", lambda: stage_is(kube, "good", 5) or stage_is(kube, "good", 4))
        good = wait_for("good promoted", lambda: (
            (r := kube.revisions("good")).get("candidate") is None and r["stable"] != stable["good"] and r
        ), 180)  # fmt: skip
        step("good promoted through six kills")

        kube.set_env("bad", BAD)
        bad_candidate = kube.wait_candidate("bad")
        killer.kill_in(
            "rollback",
            lambda: (kube.status("bad").get("rollout") or {}).get("pauseReason") == "RollingBack",
            180,
        )
        wait_for(
            "bad rolled back",
            partial(rollback_complete, kube.get, namespace, "bad", bad_candidate),
            180,
        )
        step("bad rolled back through a kill")

        kube.set_env("held", CANDIDATE)
        held_candidate = kube.wait_candidate("held")
        wait_for("held at its endless pause", partial(stage_is, kube, "held", 2), 120)
        Plugin(cluster, namespace)("abort", "held")
        killer.kill_in(
            "abort",
            lambda: (
                (kube.revisions("held").get("failed") == held_candidate)
                or (kube.status("held").get("rollout") or {}).get("pauseReason")
                in ("Abandoning", "RollingBack")
            ),
            60,
        )
        wait_for(
            "held aborted: traffic on the stable, the candidate at 0",
            lambda: (
                kube.revisions("held").get("failed") == held_candidate
                and not kube.revisions("held").get("candidate")
                and kube.deployments("held")[held_candidate]["spec"]["replicas"] == 0
            ),
            120,
        )
        step("held aborted through a kill")
        for name in load:
            load[name].stop()

    assert set(killer.killed) == {
        "prepare", "smoke", "setWeight", "pause", "analysis", "promote", "rollback", "abort"
    }  # fmt: skip
    print(f"killed: {killer.killed}")

    # As an uninterrupted run ends: good's candidate is stable, the only Deployment, every
    # step once in order, and no more than one measurement beyond the analysis's count.
    assert kube.deployments("good").keys() == {good["stable"]}
    history = [(h["revision"], h["outcome"]) for h in good["history"][-2:]]
    assert history == [(stable["good"], "Superseded"), (good["stable"], "Promoted")], history
    kube.reasons_with("good", "Promoted")
    events = kube.events("good")
    weights = [e["message"] for e in events if e["reason"] == "WeightSet"]
    seen: list[str] = []
    for message in weights:
        weight = "100" if "100" in message else "50"
        if not seen or seen[-1] != weight:
            seen.append(weight)
    assert seen == ["50", "100"], weights
    measurements = [e for e in events if e["reason"] == "AnalysisMeasurement"]
    assert 3 <= len(measurements) <= 4, [e["message"] for e in measurements]
    assert [e["reason"] for e in events].count("Promoted") == 1

    bad = kube.revisions("bad")
    assert bad["stable"] == stable["bad"] and bad["failed"] == bad_candidate
    assert kube.deployments("bad").keys() == {stable["bad"]}
    assert bad["history"][-1]["outcome"] == "RolledBack"

    held = kube.revisions("held")
    assert held["stable"] == stable["held"] and held["history"][-1]["outcome"] == "Aborted"
    assert kube.deployments("held").keys() == {stable["held"], held_candidate}
    assert kube.selector("held")["llmservice.dev/revision"] == stable["held"]
    for name in ("good", "bad", "held"):
        print(name, load[name].per_revision(), load[name].errors_by_kind())
        assert not load[name].gaps(), f"{name} had no Ready pod behind its Service"
