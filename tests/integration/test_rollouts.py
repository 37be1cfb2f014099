"""Rollouts end to end: the real operator, live simulator pods, real Prometheus, and the load
generator running in the background against each service's Ready pods.

Each test runs several LLMServices side by side (one replica each, so the machine is not
swamped) and changes their engine env to a new revision: a good one, or one with a fault the
simulator injects (``LLMSERVICE_SIM_*``). Analysis is one measurement every 5 s over a 10 s
window; the simulators run at the cluster's time scale, so the SLOs are in simulated ms.

Traffic never drops: the load generator must see no error but those of the bad canary's pods.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from functools import partial
from typing import Any

import pytest
from benchmarks.rollback import BackgroundLoad, llmservice, rollback_complete

from llmservice_dev.localcluster import ClusterInfo
from llmservice_operator.render.labels import REVISION

from .conftest import Kubectl
from .operator_fixtures import OperatorFactory, wait_for

pytestmark = pytest.mark.cluster

#: Simulated ms. A healthy simulator's TTFT p99 is well under this even on a loaded machine
#: (scheduling delays count ten-fold at time scale 10); the slow canary adds 8 s.
SLO = {"ttftP99Ms": 5000, "maxErrorRate": 0.05}
SLOW = {"LLMSERVICE_SIM_EXTRA_TTFT_MS": "8000"}
FAILING = {"LLMSERVICE_SIM_ERROR_RATE": "0.5"}
NEVER_READY = {"LLMSERVICE_SIM_NEVER_READY": "1"}
GOOD = {"LLMSERVICE_ROLLOUT_TEST": "v2"}  # any env change is a new revision
#: minSamples well under the ~20 requests a 10 s window of half the load holds (on a busy
#: machine the load generator falls behind: CI saw 11, and too few is NoData -> paused), and
#: above the smoke test's 3 requests, which can fall in the first window of an idle canary.
ANALYSIS = {"interval": "5s", "window": "10s", "count": 2, "minSamples": 5}


# ------------------------------------------------------------------------------- helpers


def _retried(call: Callable[..., Any]) -> Callable[..., Any]:
    """``call``, tried three times: on a busy machine the API server may time out once."""

    def run(*args: Any, **kwargs: Any) -> Any:
        for attempt in range(3):
            try:
                return call(*args, **kwargs)
            except (AssertionError, subprocess.TimeoutExpired):
                if attempt == 2:
                    raise
                time.sleep(1)
        raise AssertionError("unreachable")

    return run


class Cluster:
    """What the tests read from the API server (kubectl, retried)."""

    def __init__(self, kubectl: Kubectl, kubectl_json: Any, namespace: str) -> None:
        self.kubectl = _retried(kubectl)
        self.get = _retried(kubectl_json)
        self.namespace = namespace

    def apply(self, obj: Mapping[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def obj(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.get("-n", self.namespace, "llmservice", name)
        return result

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.obj(name).get("status") or {})

    def revisions(self, name: str) -> dict[str, Any]:
        return dict(self.status(name).get("revisions") or {})

    def condition(self, name: str, type_: str) -> dict[str, Any]:
        for cond in self.status(name).get("conditions") or []:
            if cond["type"] == type_:
                return dict(cond)
        return {}

    def phase(self, name: str) -> str:
        return str(self.status(name).get("phase", ""))

    def has_phase(self, name: str, phase: str) -> bool:
        return self.phase(name) == phase

    def set_env(self, name: str, env: Mapping[str, str]) -> None:
        patch = {"spec": {"engine": {"env": [{"name": k, "value": v} for k, v in env.items()]}}}
        self.kubectl(
            "-n", self.namespace, "patch", "llmservice", name, "--type=merge",
            "-p", json.dumps(patch),
        )  # fmt: skip

    def events(self, name: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get(
            "-n", self.namespace, "events",
            f"--field-selector=involvedObject.kind=LLMService,involvedObject.name={name}",
        )["items"]  # fmt: skip
        # In the order posted (timestamps have whole seconds; etcd's revisions only grow).
        return sorted(items, key=lambda e: int(e["metadata"]["resourceVersion"]))

    def reasons(self, name: str) -> list[str]:
        return [e["reason"] for e in self.events(name)]

    def reasons_with(self, name: str, *needed: str, timeout: float = 30) -> list[str]:
        """The reasons, once every one of ``needed`` is among them: the operator posts its
        Events on a thread of its own, after the status that a test waited for."""
        return list(
            wait_for(
                f"{name}'s events {', '.join(needed)}",
                lambda: set(needed) <= set(r := self.reasons(name)) and r,
                timeout,
            )
        )

    def explain(self, name: str) -> dict[str, Any]:
        """Where a service stands, for a timeout's message: phase, conditions, rollout, and
        the Events' reasons and messages."""
        status = self.status(name)
        return {
            "phase": status.get("phase"),
            "conditions": [
                (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                for c in status.get("conditions") or []
            ],
            "rollout": status.get("rollout"),
            "events": [(e["reason"], e.get("message")) for e in self.events(name)],
        }

    def selector(self, service: str) -> dict[str, str]:
        return dict(self.get("-n", self.namespace, "service", service)["spec"]["selector"])

    def deployments(self, name: str) -> dict[str, dict[str, Any]]:
        """Revision -> Deployment."""
        items = self.get(
            "-n", self.namespace, "deployments", "-l", f"llmservice.dev/service={name}"
        )["items"]
        return {d["metadata"]["labels"][REVISION]: d for d in items}

    def wait_available(self, *names: str, timeout: float = 180) -> None:
        for name in names:
            wait_for(f"{name} Available", partial(self.has_phase, name, "Available"), timeout)

    def wait_candidate(self, name: str, timeout: float = 60) -> str:
        found: str = wait_for(
            f"{name}'s candidate", lambda: self.revisions(name).get("candidate"), timeout
        )
        return found


class Steps:
    """Prints how long each phase took (pytest shows it when a test fails, -s always)."""

    def __init__(self) -> None:
        self.t0 = self.last = time.monotonic()

    def __call__(self, what: str) -> None:
        now = time.monotonic()
        print(f"[{now - self.t0:6.1f}s] +{now - self.last:5.1f}s {what}", flush=True)
        self.last = now


@pytest.fixture
def kube(kubectl: Kubectl, kubectl_json: Any, namespace: str) -> Iterator[Cluster]:
    cluster = Cluster(kubectl, kubectl_json, namespace)
    yield cluster
    # pytest shows this when the test failed: where each rollout stood, and its Events.
    for obj in kubectl_json("-n", namespace, "llmservices")["items"]:
        name, status = obj["metadata"]["name"], obj.get("status") or {}
        rollout = status.get("rollout") or {}
        print(f"--- {name}: {status.get('phase')} {status.get('revisions')}")
        print(f"    rollout: {rollout.get('message')}")
        print(f"    analysis: {(rollout.get('analysis') or {}).get('message')}")
        for event in cluster.events(name):
            print(f"    {event['type']} {event['reason']}: {event['message'][:300]}")


@pytest.fixture
def loads() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def start_load(stack: ExitStack, cluster: ClusterInfo, namespace: str, name: str) -> BackgroundLoad:
    load = BackgroundLoad(cluster, name, namespace, rate=0.4, refresh_s=0.5)
    stack.enter_context(load)
    return load


def start_rollouts(kube: Cluster, envs: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """Change each service's engine env (a new revision); its candidate revision, by service."""
    for name, env in envs.items():
        kube.set_env(name, env)
    return {name: kube.wait_candidate(name) for name in envs}


def canary(*, smoke: bool = True, **analysis: Any) -> dict[str, Any]:
    return {
        "strategy": "canary",
        "steps": [
            {"setWeight": 50},
            {"pause": {"duration": "5s"}},  # so the first window is all canary traffic
            {"analysis": {}},
            {"pause": {"duration": "2s"}},
            {"setWeight": 100},
        ],
        "analysis": {**ANALYSIS, **analysis},
        "smokeTest": {"enabled": smoke, "timeoutSeconds": 30},
        "progressDeadlineSeconds": 60,
    }


def assert_no_dropped_traffic(
    load: BackgroundLoad,
    bad: str | None = None,
    removed: str | None = None,
    answers_500: bool = False,
) -> None:
    """The service always had a Ready pod behind its Service, and no request failed but those
    of the ``bad`` canary's pods (500s only if it ``answers_500``), and a few cut by the
    ``removed`` revision's pods going away.

    The few: the local cluster has no preStop drain (kwok deletes a pod at once and the runner
    stops its simulator with it), so requests in flight to a removed pod, or sent to it before
    the load generator re-reads the pods (every 0.5 s), fail to connect. In a real cluster the
    pod's preStop hook waits until vLLM runs no request, after it left the endpoints.
    """
    by_revision = load.per_revision()
    kinds = load.errors_by_kind()
    print(f"{load.service}: {by_revision}; errors {kinds}")
    assert not load.gaps(), f"{load.service} had no Ready pod behind its Service"
    assert sum(c.requests for c in by_revision.values()) > 0
    for revision, counts in by_revision.items():
        if revision == bad:
            continue
        if revision == removed:
            assert counts.errors <= 5, (load.service, revision, counts)
        else:
            assert counts.errors == 0, (load.service, revision, counts)
    allowed = {"connection"} | ({"http_500"} if answers_500 else set())
    assert kinds.keys() <= allowed, kinds


# ------------------------------------------------------------------------------- tests


def test_canary_promotes_a_good_revision_and_rolls_back_bad_ones(
    cluster: ClusterInfo,
    namespace: str,
    kube: Cluster,
    operators: OperatorFactory,
    loads: ExitStack,
) -> None:
    """Four canaries at once, under load. The good one walks every step and is promoted, its
    predecessor removed; the slow one, the failing one and the never-ready one roll back on
    their own, each with its reason in the status and Events, and no client request fails
    but the failing canary's own."""
    step = Steps()
    operators.start(namespace, LLMSERVICE_PROMETHEUS_URL=cluster.prometheus_url)
    services = {
        "good": (GOOD, canary()),
        "slow": (SLOW, canary()),
        # Half its answers are 500s: the smoke test would catch that before any traffic;
        # without it, the error-rate analysis must.
        "failing": (FAILING, canary(smoke=False)),
        "stuck": (NEVER_READY, canary()),
    }
    for name, (_env, rollout) in services.items():
        kube.apply(llmservice(name, namespace, rollout=rollout, slo=SLO))
    kube.wait_available(*services)
    step("stable revisions Available")
    stable = {name: kube.revisions(name)["stable"] for name in services}
    load = {name: start_load(loads, cluster, namespace, name) for name in services}
    candidate = start_rollouts(kube, {name: env for name, (env, _rollout) in services.items()})
    step("rollouts started")

    # The good canary: every step, then promoted; the old revision's Deployment is removed.
    wait_for(
        "good promoted",
        lambda: (
            kube.revisions("good").get("stable") == candidate["good"]
            and kube.revisions("good").get("candidate") is None
        ),
        timeout=120,
    )
    step("good promoted")
    wait_for("good's old Deployment removed", lambda: kube.deployments("good").keys() == {
        candidate["good"]
    }, 30)  # fmt: skip
    status = kube.status("good")
    assert status["phase"] == "Available"
    assert kube.condition("good", "Progressing")["reason"] == "RolloutComplete"
    assert kube.condition("good", "RolledBack")["status"] == "False"
    assert kube.selector("good")[REVISION] == candidate["good"]
    history = [(h["revision"], h["outcome"]) for h in status["revisions"]["history"]]
    assert history[-2:] == [(stable["good"], "Superseded"), (candidate["good"], "Promoted")]
    reasons = kube.reasons_with("good", "Promoted")
    expected = ["RolloutStarted", "SmokeTestPassed", "WeightSet", "AnalysisStarted",
                "AnalysisSuccessful", "WeightSet", "Promoted"]  # fmt: skip
    assert [r for r in reasons if r in expected] == expected, reasons
    assert reasons.count("AnalysisMeasurement") >= 2
    assert status["rollout"]["analysis"]["phase"] == "Successful"
    assert status["rollout"]["analysis"]["successful"] == 2

    # The bad ones: rolled back automatically, each for its own reason.
    why = {
        "slow": ("AnalysisFailed", "ttftP99Ms"),
        "failing": ("AnalysisFailed", "errorRate"),
        "stuck": ("ProgressDeadlineExceeded", "Ready replicas"),
    }
    for name, (reason, detail) in why.items():
        wait_for(
            f"{name} rolled back",
            partial(rollback_complete, kube.get, namespace, name, candidate[name]),
            timeout=150,
        )
        step(f"{name} rolled back")
        status = kube.status(name)
        revisions = status["revisions"]
        assert revisions == {**revisions, "stable": stable[name], "failed": candidate[name]}
        assert "candidate" not in revisions or revisions["candidate"] is None
        record = revisions["history"][-1]
        assert record["revision"] == candidate[name] and record["outcome"] == "RolledBack"
        assert record["reason"].startswith(reason) and detail in record["reason"], record
        rolled_back = kube.condition(name, "RolledBack")
        assert (rolled_back["status"], rolled_back["reason"]) == ("True", reason)
        degraded = kube.condition(name, "Degraded")
        assert (degraded["status"], degraded["reason"]) == ("True", "RolledBack")
        assert status["phase"] == "Degraded"
        assert kube.selector(name)[REVISION] == stable[name]
        kube.reasons_with(name, reason, "RolledBack")
        events = kube.events(name)
        warnings = {e["reason"]: e["message"] for e in events if e["type"] == "Warning"}
        assert {reason, "RolledBack"} <= warnings.keys(), warnings
        assert detail in warnings[reason]
        # The spec stays as written; the failed revision is not tried again.
        env = kube.obj(name)["spec"]["engine"]["env"]
        assert {e["name"]: e["value"] for e in env} == services[name][0]
    assert "Promoted" not in kube.reasons("slow")
    # The analysis that failed says why, per check: query, value, threshold, verdict.
    last = {m["check"]: m for m in kube.status("slow")["rollout"]["analysis"]["last"]}
    assert (
        last["ttftP99Ms"]["verdict"] == "Failed" and last["ttftP99Ms"]["value"] > SLO["ttftP99Ms"]
    )
    assert "vllm:time_to_first_token_seconds_bucket" in last["ttftP99Ms"]["query"]
    last = {m["check"]: m for m in kube.status("failing")["rollout"]["analysis"]["last"]}
    assert last["errorRate"]["verdict"] == "Failed" and last["errorRate"]["value"] > 0.05

    time.sleep(2 * load["slow"].chunk_s)  # the load's last chunks report
    for name in services:
        load[name].stop()
    assert_no_dropped_traffic(load["good"], removed=stable["good"])
    assert_no_dropped_traffic(load["slow"], bad=candidate["slow"])
    assert_no_dropped_traffic(load["failing"], bad=candidate["failing"], answers_500=True)
    assert load["failing"].per_revision()[candidate["failing"]].errors > 0
    assert_no_dropped_traffic(load["stuck"])
    assert candidate["stuck"] not in load["stuck"].per_revision()  # never got traffic
    # Long after: the failed revisions were not tried again.
    for name in ("slow", "failing"):
        assert kube.revisions(name).get("candidate") is None
        assert kube.deployments(name).keys() == {stable[name]}
    step("traffic checked")


class SelectorWatch:
    """Polls Services' selectors (every 0.2 s) and remembers each change, in order; and the
    fewest Ready replicas each ``keep`` revision's Deployment had meanwhile."""

    def __init__(self, cluster: ClusterInfo, namespace: str, keep: Mapping[str, str]) -> None:
        from kubernetes import client, config

        api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig))  # type: ignore[no-untyped-call]
        self._core = client.CoreV1Api(api_client)
        self._apps = client.AppsV1Api(api_client)
        self.namespace = namespace
        self.keep = dict(keep)
        self.seen: dict[str, list[str]] = {s: [] for s in keep}
        self.fewest_ready: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SelectorWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for name, seen in self.seen.items():
                try:
                    service = self._core.read_namespaced_service(name, self.namespace)
                    deployments = self._apps.list_namespaced_deployment(
                        self.namespace, label_selector=f"{REVISION}={self.keep[name]}"
                    ).items
                except Exception:  # noqa: BLE001 - a slow API server: try again
                    continue
                # "*": every revision (the replica-ratio canary), "": no selector at all
                selector = (service.spec.selector if service.spec else None) or {}
                revision = selector.get(REVISION, "*" if selector else "")
                if not seen or seen[-1] != revision:
                    seen.append(revision)
                ready = sum((d.status.ready_replicas or 0) for d in deployments if d.status)
                self.fewest_ready[name] = min(ready, self.fewest_ready.get(name, ready))


def blue_green() -> dict[str, Any]:
    # A first measurement one interval (5 s) after the switch holds about 4 s of the
    # candidate's traffic (the load generator re-reads the active Service every 0.5 s,
    # Prometheus scrapes every 1 s): on a busy machine fewer than minSamples, NoData ->
    # inconclusive -> paused. Measured first after 10 s, its 10 s window is all candidate.
    return {
        "strategy": "blueGreen",
        "analysis": {**ANALYSIS, "minSamples": 3, "initialDelay": "10s"},
        "blueGreen": {"autoPromote": True, "scaleDownDelaySeconds": 15},
        "smokeTest": {"enabled": True, "timeoutSeconds": 30},
        "progressDeadlineSeconds": 60,
    }


def test_blue_green_switches_in_one_step_and_back_at_once(
    cluster: ClusterInfo,
    namespace: str,
    kube: Cluster,
    operators: OperatorFactory,
    loads: ExitStack,
) -> None:
    """Two blue-green rollouts under load. Each candidate comes up at full size behind the
    preview Service; the active Service switches to it in one step (never selecting both, or
    nothing). The good one passes the post-promotion analysis and its predecessor is removed
    after the scale-down delay; the slow one fails it and the active Service switches back at
    once to the old revision, which stayed at full size and Ready all along."""
    step = Steps()
    operators.start(namespace, LLMSERVICE_PROMETHEUS_URL=cluster.prometheus_url)
    services = {"blue": GOOD, "green": SLOW}
    for name in services:
        kube.apply(llmservice(name, namespace, rollout=blue_green(), slo=SLO))
    kube.wait_available(*services)
    step("stable revisions Available")
    stable = {name: kube.revisions(name)["stable"] for name in services}
    load = {name: start_load(loads, cluster, namespace, name) for name in services}
    with SelectorWatch(cluster, namespace, keep=stable) as watch:
        candidate = start_rollouts(kube, services)
        step("rollouts started")

        # Before the switch: the candidate at full size behind the preview Service only.
        wait_for(
            "green's candidate Ready behind the preview Service",
            lambda: (
                kube.deployments("green")[candidate["green"]]["status"].get("readyReplicas") == 1
            ),
            timeout=90,
        )
        assert kube.selector("green-preview")[REVISION] == candidate["green"]

        wait_for(
            "green rolled back",
            partial(rollback_complete, kube.get, namespace, "green", candidate["green"]),
            timeout=120,
            explain=partial(kube.explain, "green"),
        )
        step("green switched back")
        # The old revision stayed at full size and Ready, so switching back needed no wait.
        assert watch.fewest_ready["green"] == 1, watch.fewest_ready
        wait_for(
            "blue promoted",
            lambda: kube.revisions("blue").get("stable") == candidate["blue"],
            timeout=120,
            explain=partial(kube.explain, "blue"),
        )
        step("blue promoted")
        # The old revision is kept (and Ready) for the scale-down delay, then removed.
        old = kube.deployments("blue").get(stable["blue"])
        assert old is not None and old["status"].get("readyReplicas") == 1
        wait_for(
            "blue's old revision removed after the delay",
            lambda: kube.deployments("blue").keys() == {candidate["blue"]},
            timeout=90,
        )
        step("blue's old revision removed")

    # One step each way: old -> new (-> old), never every revision or none.
    assert watch.seen["blue"] == [stable["blue"], candidate["blue"]], watch.seen
    assert watch.seen["green"] == [stable["green"], candidate["green"], stable["green"]], watch.seen

    reasons = kube.reasons_with("blue", "Promoted")
    expected = ["RolloutStarted", "SmokeTestPassed", "ActiveSwitched", "AnalysisStarted",
                "AnalysisSuccessful", "Promoted"]  # fmt: skip
    assert [r for r in reasons if r in expected] == expected, reasons
    history = kube.revisions("blue")["history"]
    assert [(h["revision"], h["outcome"]) for h in history[-2:]] == [
        (stable["blue"], "Superseded"),
        (candidate["blue"], "Promoted"),
    ]

    # Green: the post-promotion analysis failed on TTFT; switched back in the same reconcile
    # as the verdict (the old revision needed no scaling up first).
    kube.reasons_with("green", "RolledBack")
    events = kube.events("green")
    reasons = [e["reason"] for e in events]
    assert "ActiveSwitched" in reasons and "Promoted" not in reasons
    failed = next(e for e in events if e["reason"] == "AnalysisFailed")
    assert "ttftP99Ms" in failed["message"] and "step 2/2 (postPromotion)" in failed["message"]
    assert reasons.index("RolledBack") == reasons.index("AnalysisFailed") + 1, reasons
    assert "RollbackWithoutFullCapacity" not in reasons
    rolled_back = kube.condition("green", "RolledBack")
    assert (rolled_back["status"], rolled_back["reason"]) == ("True", "AnalysisFailed")
    assert kube.deployments("green").keys() == {stable["green"]}

    time.sleep(2 * load["blue"].chunk_s)
    for name in services:
        load[name].stop()
    assert_no_dropped_traffic(load["blue"], removed=stable["blue"])
    assert_no_dropped_traffic(load["green"], bad=candidate["green"])
    assert load["green"].per_revision()[candidate["green"]].requests > 0
    step("traffic checked")


def test_no_data_pauses_restart_resumes_and_prometheus_errors_roll_back(
    cluster: ClusterInfo,
    namespace: str,
    kube: Cluster,
    kubectl: Kubectl,
    kubectl_json: Any,
    operators: OperatorFactory,
    loads: ExitStack,
) -> None:
    """Three rollouts of good revisions, side by side.

    * ``idle`` gets no traffic: its analysis has no data, ends Inconclusive and the rollout
      pauses instead of promoting; resuming through the annotation promotes it.
    * ``steady`` is under load when the operator is stopped mid-analysis and started again:
      the analysis goes on with the counts it had (same run, no new AnalysisStarted), the
      replicas are not shifted twice, and it is promoted.
    * ``blind`` is managed by an operator whose Prometheus does not answer: every measurement
      is an Error (not Failed), and past consecutiveErrorLimit the rollout rolls back with
      reason AnalysisError, without dropping traffic.
    """
    step = Steps()
    first = operators.start(namespace, LLMSERVICE_PROMETHEUS_URL=cluster.prometheus_url)
    dark = f"{namespace[:50]}-dark"
    kubectl("create", "namespace", dark)
    kubectl("wait", "--for=create", f"--namespace={dark}", "serviceaccount/default",
            "--timeout=30s")  # fmt: skip
    try:
        operators.start(dark, LLMSERVICE_PROMETHEUS_URL="http://127.0.0.1:9")
        blind = Cluster(kubectl, kubectl_json, dark)
        kube.apply(llmservice("idle", namespace, rollout=canary(), slo=SLO))
        kube.apply(llmservice("steady", namespace, rollout=canary(count=5), slo=SLO))
        blind.apply(llmservice("blind", dark, rollout=canary(consecutiveErrorLimit=1), slo=SLO))
        kube.wait_available("idle", "steady")
        blind.wait_available("blind")
        step("stable revisions Available")
        stable = {n: kube.revisions(n)["stable"] for n in ("idle", "steady")}
        stable["blind"] = blind.revisions("blind")["stable"]
        load = {
            "steady": start_load(loads, cluster, namespace, "steady"),
            "blind": start_load(loads, cluster, dark, "blind"),
        }
        candidate = start_rollouts(kube, {"idle": GOOD, "steady": GOOD})
        candidate |= start_rollouts(blind, {"blind": GOOD})
        step("rollouts started")

        # steady: stop the operator once the analysis has taken a measurement.
        def analysis(name: str) -> dict[str, Any]:
            return dict((kube.status(name).get("rollout") or {}).get("analysis") or {})

        wait_for(
            "steady's first measurement",
            lambda: analysis("steady").get("measurementsTaken", 0) >= 1,
            timeout=90,
        )
        first.stop()
        step("operator stopped mid-analysis")
        before = analysis("steady")
        replicas_before = {
            rev: d["spec"]["replicas"] for rev, d in kube.deployments("steady").items()
        }
        assert before["phase"] == "Running" and replicas_before == {
            stable["steady"]: 1,
            candidate["steady"]: 1,
        }
        time.sleep(8)  # a measurement falls due while no operator runs
        operators.start(namespace, LLMSERVICE_PROMETHEUS_URL=cluster.prometheus_url)
        wait_for(
            "steady's analysis to go on",
            lambda: analysis("steady").get("measurementsTaken", 0) > before["measurementsTaken"],
            timeout=90,
        )
        step("restarted operator measured again")
        after = analysis("steady")
        assert after["startedAt"] == before["startedAt"]
        assert after["successful"] >= before["successful"]
        replicas_after = {
            rev: d["spec"]["replicas"] for rev, d in kube.deployments("steady").items()
        }
        assert replicas_after == replicas_before  # no double shift
        wait_for(
            "steady promoted",
            lambda: kube.revisions("steady").get("stable") == candidate["steady"],
            timeout=90,
        )
        step("steady promoted")
        reasons = kube.reasons_with("steady", "Promoted")
        assert reasons.count("AnalysisStarted") == 1, reasons
        assert kube.status("steady")["rollout"]["analysis"]["successful"] == 5
        assert reasons.count("RolloutStarted") == 1, reasons

        # idle: no data -> Inconclusive -> paused, still not promoted.
        wait_for(
            "idle paused on an inconclusive analysis",
            lambda: (
                (kube.status("idle").get("rollout") or {}).get("pauseReason")
                == "AnalysisInconclusive"
            ),
            timeout=60,
        )
        status = kube.status("idle")
        assert status["rollout"]["paused"] is True
        assert status["rollout"]["analysis"]["phase"] == "Inconclusive"
        assert status["rollout"]["analysis"]["failed"] == 0
        last = {m["check"]: m for m in status["rollout"]["analysis"]["last"]}
        assert last["sampleCount"]["verdict"] == "NoData"
        assert last["ttftP99Ms"]["verdict"] == "NoData"
        assert status["revisions"]["candidate"] == candidate["idle"]
        assert status["revisions"]["stable"] == stable["idle"]
        assert kube.condition("idle", "Progressing")["reason"] == "RolloutPaused"
        kube.reasons_with("idle", "RolloutPaused")
        time.sleep(6)  # paused means paused: nothing moves
        assert kube.revisions("idle").get("candidate") == candidate["idle"]
        kube.kubectl(
            "-n", namespace, "annotate", "llmservice", "idle", "llmservice.dev/resume=true"
        )
        wait_for(
            "idle promoted after the resume",
            lambda: kube.revisions("idle").get("stable") == candidate["idle"],
            timeout=90,
        )
        step("idle resumed and promoted")
        assert "llmservice.dev/resume" not in (
            kube.obj("idle")["metadata"].get("annotations") or {}
        )
        kube.reasons_with("idle", "Resumed")

        # blind: Prometheus unreachable -> Error, not Failed -> past the limit, rolled back.
        wait_for(
            "blind rolled back",
            partial(rollback_complete, blind.get, dark, "blind", candidate["blind"]),
            timeout=90,
        )
        step("blind rolled back")
        status = blind.status("blind")
        run = status["rollout"]["analysis"]
        assert (run["phase"], run["errors"], run["failed"]) == ("Error", 2, 0), run
        assert run["measurementsTaken"] == 0
        assert all(m["verdict"] == "Error" for m in run["last"]), run["last"]
        assert any("127.0.0.1:9" in m["message"] for m in run["last"]), run["last"]
        rolled_back = blind.condition("blind", "RolledBack")
        assert (rolled_back["status"], rolled_back["reason"]) == ("True", "AnalysisError")
        warnings = {e["reason"] for e in blind.events("blind") if e["type"] == "Warning"}
        assert {"AnalysisMeasurement", "AnalysisError", "RolledBack"} <= warnings
        assert "AnalysisFailed" not in warnings

        time.sleep(2 * load["steady"].chunk_s)
        for item in load.values():
            item.stop()
        assert_no_dropped_traffic(load["steady"], removed=stable["steady"])
        assert_no_dropped_traffic(load["blind"], bad=candidate["blind"])
        step("traffic checked")
    finally:
        # The release's rights in `dark` are a Role there, deleted with the namespace: its
        # operator stops first, or its next request there is refused (403).
        for op in operators.started:
            if op.watched == dark:
                op.stop()
        kubectl("delete", "namespace", dark, "--wait=false", "--ignore-not-found", check=False)
