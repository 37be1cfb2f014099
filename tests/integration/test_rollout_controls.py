"""Steering rollouts end to end: ``kubectl llms`` (run by the real kubectl as a plugin) against
the chart-installed operator, live simulator pods, real Prometheus and background load.

One test runs five services side by side, each showing one control or safety net: a live
``get --watch``, ``abort`` then ``retry``, ``promote --full`` from the first step, a fast
rollback timed against the full rollout of the same service, and a background analysis that
rolls a canary back during a pause step. Another runs a blue-green preview at one replica with
the built-in load test Job, whose traffic is what the pre-promotion analysis judges.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import ExitStack
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from benchmarks.rollback import llmservice, rollback_complete

from llmservice_dev.localcluster import ClusterInfo
from llmservice_operator.render.labels import REVISION
from llmservice_operator.render.load_test import LOAD_TEST_LABEL

from .operator_fixtures import OperatorFactory, wait_for
from .test_rollouts import (
    ANALYSIS,
    FAILING,
    GOOD,
    SLO,
    Cluster,
    Steps,
    assert_no_dropped_traffic,
    kube,
    loads,
    start_load,
)

__all__ = ["kube", "loads"]  # fixtures, shared with test_rollouts

pytestmark = pytest.mark.cluster

VENV_BIN = Path(sys.executable).parent


class Plugin:
    """``kubectl llms ...`` as a user runs it: kubectl finds ``kubectl-llms`` on PATH."""

    def __init__(self, cluster: ClusterInfo, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.env = {
            **os.environ,
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "KUBECONFIG": str(cluster.kubeconfig),
        }

    def argv(self, *args: str) -> list[str]:
        return [str(self.cluster.kubectl), "llms", "-n", self.namespace, *args]

    def __call__(self, *args: str) -> str:
        result = subprocess.run(
            self.argv(*args), env=self.env, capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result.stdout


def controlled_canary(*, pause: str | None = None, smoke: bool = True) -> dict[str, Any]:
    """setWeight 50, a pause (until a person resumes, unless ``pause``), an analysis, 100."""
    return {
        "strategy": "canary",
        "steps": [
            {"setWeight": 50},
            {"pause": {"duration": pause} if pause else {}},
            {"analysis": {}},
            {"setWeight": 100},
        ],
        "analysis": ANALYSIS,
        "smokeTest": {"enabled": smoke, "timeoutSeconds": 30},
        "progressDeadlineSeconds": 240,  # a busy CI machine starts pods slowly
        "abortScaleDownDelaySeconds": 5,
    }


def event_time(event: dict[str, Any]) -> float:
    """When the operator posted it (eventTime has microseconds; lastTimestamp seconds)."""
    stamp = event.get("eventTime") or event.get("lastTimestamp") or event["firstTimestamp"]
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()


def at_step(kube: Cluster, name: str, step: int, paused: bool | None = None) -> bool:
    rollout = kube.status(name).get("rollout") or {}
    if not kube.revisions(name).get("candidate") or rollout.get("step") != step:
        return False
    return paused is None or bool(rollout.get("paused")) == paused


def promoted(kube: Cluster, name: str, revision: str) -> bool:
    revisions = kube.revisions(name)
    return revisions.get("stable") == revision and not revisions.get("candidate")


def test_kubectl_llms_steers_canaries(
    tmp_path: Path,
    cluster: ClusterInfo,
    namespace: str,
    kube: Cluster,
    operators: OperatorFactory,
    loads: ExitStack,
) -> None:
    step = Steps()
    llms = Plugin(cluster, namespace)
    operators.start(namespace, LLMSERVICE_PROMETHEUS_URL=cluster.prometheus_url)
    rollouts = {
        "watched": controlled_canary(pause="3s"),
        "aborted": controlled_canary(),
        "full": controlled_canary(),
        "fast": {**controlled_canary(pause="3s"), "rollbackWindow": {"revisions": 2}},
        # Half its answers are 500s (smoke test off, or it would catch them before traffic);
        # no analysis step comes before the endless pause: only the background analysis can
        # judge it there.
        "degrading": {
            **controlled_canary(smoke=False),
            "steps": [{"setWeight": 50}, {"pause": {}}, {"setWeight": 100}],
            # The first window then holds canary traffic only.
            "analysis": {**ANALYSIS, "initialDelay": "10s"},
            "backgroundAnalysis": {"startingStep": 1},
        },
    }
    for name, rollout in rollouts.items():
        # "full" at 3 replicas: its setWeight 50 waits for a second candidate pod (slow to
        # start), so step 1 lasts long enough to be seen.
        replicas = 3 if name == "full" else 1
        kube.apply(llmservice(name, namespace, rollout=rollout, slo=SLO, replicas=replicas))
    kube.wait_available(*rollouts)
    step("stable revisions Available")
    stable = {name: kube.revisions(name)["stable"] for name in rollouts}
    load = {name: start_load(loads, cluster, namespace, name) for name in rollouts}

    watch_out = tmp_path / "watch.txt"
    watch = subprocess.Popen(
        llms.argv("get", "watched", "--watch", "--interval", "0.5", "--timeout", "600"),
        env=llms.env,
        stdout=watch_out.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
    )
    envs = {
        "watched": GOOD,
        "aborted": GOOD,
        "full": {**GOOD, "LLMSERVICE_SIM_STARTUP_DELAY_S": "50"},  # simulated: 5 s
        "fast": GOOD,
        "degrading": FAILING,
    }
    for name, env in envs.items():
        kube.set_env(name, env)
    candidate = {name: kube.wait_candidate(name) for name in envs}
    step("rollouts started")

    # promote --full at step 1 (setWeight 50): no pause, no analysis, straight to promotion.
    wait_for("full at step 1", partial(at_step, kube, "full", 1), 240, 0.2)
    llms("promote", "full", "--full")
    wait_for("full promoted", partial(promoted, kube, "full", candidate["full"]), 90)
    step("full promoted by promote --full")
    reasons = kube.reasons_with("full", "PromotedFull", "Promoted")
    assert "AnalysisStarted" not in reasons, reasons

    # abort at the endless pause: 0 traffic, kept at its replicas for 5 s, then at 0.
    wait_for("aborted at its pause", partial(at_step, kube, "aborted", 2, True), 240)
    llms("abort", "aborted")
    wait_for(
        "aborted taken out",
        lambda: (
            kube.revisions("aborted").get("failed") == candidate["aborted"]
            and kube.selector("aborted")[REVISION] == stable["aborted"]
        ),
        60,
    )
    step("aborted: traffic back on the stable")
    status = kube.status("aborted")
    assert status["revisions"]["history"][-1]["outcome"] == "Aborted"
    degraded = kube.condition("aborted", "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "Aborted"), degraded
    assert "Aborted" in llms("get", "aborted")
    wait_for(
        "the aborted candidate scaled to 0 after abortScaleDownDelaySeconds",
        lambda: kube.deployments("aborted")[candidate["aborted"]]["spec"]["replicas"] == 0,
        60,
    )
    step("aborted candidate at 0 replicas")
    # Not tried again by itself: the spec is unchanged.
    time.sleep(3)
    assert not kube.revisions("aborted").get("candidate")
    llms("retry", "aborted")
    wait_for("aborted retried", lambda: kube.revisions("aborted").get("candidate"), 60)
    assert kube.revisions("aborted")["candidate"] == candidate["aborted"]
    wait_for("retried at its pause", partial(at_step, kube, "aborted", 2, True), 240)
    llms("promote", "aborted")  # ends the pause; the analysis judges it
    wait_for("retried promoted", partial(promoted, kube, "aborted", candidate["aborted"]), 120)
    step("aborted: retried and promoted")
    kube.reasons_with("aborted", "Retried", "AnalysisSuccessful")

    # The background analysis fails the error-rate check during the endless pause.
    wait_for(
        "degrading rolled back",
        partial(rollback_complete, kube.get, namespace, "degrading", candidate["degrading"]),
        150,
    )
    step("degrading rolled back by the background analysis")
    record = kube.revisions("degrading")["history"][-1]
    assert record["outcome"] == "RolledBack" and "errorRate" in record["reason"], record
    kube.reasons_with("degrading", "AnalysisFailed", "WeightSet")
    failed = next(e for e in kube.events("degrading") if e["reason"] == "AnalysisFailed")
    assert "step 2/" in failed["message"] and "pause" in failed["message"], failed["message"]
    # It never went past the pause: one setWeight (50), never 100.
    weights = [e for e in kube.events("degrading") if e["reason"] == "WeightSet"]
    assert len(weights) == 1 and "100" not in weights[0]["message"], weights

    # Fast rollback: the full rollout of "fast", then its previous revision comes back.
    wait_for("fast promoted", partial(promoted, kube, "fast", candidate["fast"]), 120)
    kube.set_env("fast", {})
    wait_for("fast back on its old revision", partial(promoted, kube, "fast", stable["fast"]), 90)
    wait_for(
        "fast's second Promoted event", lambda: kube.reasons("fast").count("Promoted") == 2, 30
    )
    events = kube.events("fast")
    reasons = [e["reason"] for e in events]
    # From RolloutStarted to Promoted, by the operator's own Event times: the full rollout,
    # then the fast rollback to the revision before it.
    started_at = [event_time(e) for e in events if e["reason"] == "RolloutStarted"]
    promoted_at = [event_time(e) for e in events if e["reason"] == "Promoted"]
    assert len(started_at) == len(promoted_at) == 2, reasons
    full_s, fast_s = (p - s for s, p in zip(started_at, promoted_at, strict=True))
    step(f"fast: fast rollback took {fast_s:.1f} s (full rollout {full_s:.1f} s)")
    print(f"FAST ROLLBACK {fast_s:.1f} s vs FULL ROLLOUT {full_s:.1f} s")
    at = reasons.index("FastRollback")
    assert "rollbackWindow" in events[at]["message"], events[at]["message"]
    after = reasons[at:]
    assert "SmokeTestPassed" in after and "Promoted" in after, after
    assert "AnalysisStarted" not in after and "WeightSet" not in after, after
    # What the fast rollback saves comes after its smoke test (no weights, pause or analysis);
    # before it, both wait for a pod to start, which a busy CI machine stretched to 40 s once
    # (the whole fast rollback 44 s, the full rollout 34 s).
    smoked_at = [event_time(e) for e in events if e["reason"] == "SmokeTestPassed"]
    assert len(smoked_at) == 2, reasons
    full_tail, fast_tail = (p - s for s, p in zip(smoked_at, promoted_at, strict=True))
    assert fast_tail < full_tail, (fast_tail, full_tail)

    # The watched canary: every frame of `get --watch`, from progressing to healthy.
    wait_for("watched promoted", partial(promoted, kube, "watched", candidate["watched"]), 120)
    time.sleep(2)
    watch.terminate()
    watch.wait(timeout=30)
    out = watch_out.read_text()
    assert "◌ Progressing" in out and "ActualWeight:  50" in out, out[-3000:]
    assert "✔ Healthy" in out.rsplit("Name:", 1)[-1], out[-3000:]
    assert "errorRate" in out and "ttftP99Ms" in out, out[-3000:]  # the checks' measurements
    assert candidate["watched"] in out and stable["watched"] in out
    step("watched: get --watch followed it")

    time.sleep(2 * load["watched"].chunk_s)
    for name in rollouts:
        load[name].stop()
    for name in ("watched", "full", "aborted"):
        assert_no_dropped_traffic(load[name], removed=stable[name])
    # Both of fast's revisions were removed once (the first at its promotion, the second at
    # the fast rollback): a few requests in flight to each may be cut, nothing else fails.
    assert not load["fast"].gaps()
    assert load["fast"].errors_by_kind().keys() <= {"connection"}
    assert all(c.errors <= 5 for c in load["fast"].per_revision().values())
    assert_no_dropped_traffic(load["degrading"], bad=candidate["degrading"], answers_500=True)


def test_blue_green_preview_at_one_replica_with_the_load_test(
    cluster: ClusterInfo,
    namespace: str,
    kube: Cluster,
    operators: OperatorFactory,
) -> None:
    """No client traffic at all: the preview runs at one of its two replicas, and the built-in
    load test Job (the operator image on the real node) is what the pre-promotion analysis
    judges; at the switch the candidate is scaled to full size."""
    step = Steps()
    operators.start(namespace, LLMSERVICE_PROMETHEUS_URL=cluster.prometheus_url)
    rollout = {
        "strategy": "blueGreen",
        "steps": [{"analysis": {}}],
        # The load test's pod starts on the real node after the smoke test; a first measurement
        # one 5 s interval later came before its first requests once in CI (0 requests 7 s after
        # the Job was made): a later first measurement over a longer window, which after the
        # switch still holds the load test's last requests (there is no client traffic).
        "analysis": {**ANALYSIS, "initialDelay": "10s", "window": "20s"},
        "blueGreen": {
            "autoPromote": True,
            "scaleDownDelaySeconds": 5,
            "previewReplicaCount": 1,
            "loadTest": {"rate": 4, "promptTokens": 64, "outputTokens": 16},
        },
        "smokeTest": {"enabled": True, "timeoutSeconds": 30},
        "progressDeadlineSeconds": 240,
    }
    kube.apply(llmservice("preview", namespace, rollout=rollout, slo=SLO, replicas=2))
    kube.wait_available("preview")
    stable = kube.revisions("preview")["stable"]
    step("stable Available at 2 replicas")
    kube.set_env("preview", GOOD)
    candidate = kube.wait_candidate("preview")
    wait_for(
        "the preview Ready at one replica",
        lambda: kube.deployments("preview")[candidate]["status"].get("readyReplicas") == 1,
        90,
    )
    assert kube.deployments("preview")[candidate]["spec"]["replicas"] == 1
    assert kube.selector("preview")[REVISION] == stable
    wait_for(
        "the load test Job",
        lambda: kube.get("-n", namespace, "jobs", "-l", f"{LOAD_TEST_LABEL}=preview")["items"],
        60,
    )
    step("preview at 1 replica; load test Job created")
    wait_for("preview promoted", partial(promoted, kube, "preview", candidate), 180)
    step("promoted")
    reasons = kube.reasons_with("preview", "Promoted")
    # The pre-promotion analysis (judging the load test's traffic), the switch, then the
    # post-promotion analysis (client traffic: none here, so it is the load test's last).
    expected = ["RolloutStarted", "SmokeTestPassed", "AnalysisStarted", "AnalysisSuccessful",
                "ActiveSwitched"]  # fmt: skip
    assert [r for r in reasons if r in expected][: len(expected)] == expected, reasons
    assert reasons.index("AnalysisSuccessful") < reasons.index("ActiveSwitched"), reasons
    assert "Promoted" in reasons, reasons
    history = kube.revisions("preview")["history"]
    assert history[-1]["revision"] == candidate and history[-1]["outcome"] == "Promoted"
    assert kube.deployments("preview")[candidate]["spec"]["replicas"] == 2
    wait_for(
        "the load test Job removed after the switch",
        lambda: not kube.get("-n", namespace, "jobs", "-l", f"{LOAD_TEST_LABEL}=preview")["items"],
        60,
    )
