"""The built-in load test of a blue-green preview: the Job decide() renders from the rollout's
decision (its targets, its arguments, the API key from the Secret), and the load generator
sending the key as clients do."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from llmservice_operator.decide import decide
from llmservice_operator.loadgen.client import LoadConfig, run_load, static_targets
from llmservice_operator.loadgen.distributions import LengthDist
from llmservice_operator.loadgen.schedule import RateSchedule
from llmservice_operator.observed import ObservedState
from llmservice_operator.render.labels import REVISION, SERVICE
from llmservice_operator.render.load_test import LOAD_TEST_LABEL, LoadTestRuntime
from llmservice_operator.rollout.machine import LOAD_TEST_START_SECONDS
from llmservice_operator.sizing import load_catalog

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
CATALOG = load_catalog()
RUNTIME = LoadTestRuntime(
    "llmservice-operator:dev",
    "Never",
    {"hostNetwork": True, "tolerations": [{"key": "real", "operator": "Exists"}]},
)


def body(**blue_green: Any) -> dict[str, Any]:
    return {
        "apiVersion": "serving.llmservice.dev/v1alpha1",
        "kind": "LLMService",
        "metadata": {"name": "chat", "namespace": "ml", "uid": "u-1", "generation": 1},
        "spec": {
            "model": {"id": "meta-llama/Llama-3.1-8B-Instruct"},
            "engine": {"maxModelLen": 4096, "maxNumSeqs": 16},
            "resources": {"gpu": "H100-80GB"},
            "scaling": {"mode": "manual", "maxReplicas": 2},
            "replicas": 2,
            "slo": {"ttftP99Ms": 800},
            "serving": {"apiKeySecretRef": {"name": "keys", "key": "api"}},
            "rollout": {
                "strategy": "blueGreen",
                "steps": [{"analysis": {}}],
                "blueGreen": {
                    "previewReplicaCount": 1,
                    "loadTest": {"rate": 3, "promptTokens": 128, "outputTokens": 16},
                    **blue_green,
                },
            },
        },
    }


def pod(name: str, revision: str, ip: str, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {SERVICE: "chat", REVISION: revision}},
        "status": {
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def deployment(revision: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "metadata": {"name": f"chat-{revision}", "labels": {REVISION: revision}},
        "spec": {"replicas": replicas},
        "status": {"readyReplicas": replicas},
    }


def at_pre_promotion() -> tuple[dict[str, Any], ObservedState, str]:
    """A rollout whose smoke test passed: at the pre-promotion analysis, one preview pod."""
    first = body()
    observed = ObservedState(secrets={"keys": {"api"}})
    stable_decision = decide(first, observed, CATALOG, NOW, "")
    stable = stable_decision.status["revisions"]["stable"]
    observed.owned[("Deployment", f"chat-{stable}")] = deployment(stable, 2)
    changed = copy.deepcopy(first)
    changed["spec"]["engine"]["env"] = [{"name": "V", "value": "2"}]
    changed["metadata"]["generation"] = 2
    changed["status"] = stable_decision.status
    start = decide(changed, observed, CATALOG, NOW, "")
    candidate = start.status["revisions"]["candidate"]
    changed["status"] = {
        **start.status,
        "rollout": {**start.status["rollout"], "step": 1, "stepStartedAt": "2026-03-01T12:00:00Z"},
    }
    observed.owned[("Deployment", f"chat-{candidate}")] = deployment(candidate, 1)
    observed.pods = [
        pod("s-0", stable, "127.0.1.1"),
        pod("s-1", stable, "127.0.1.2"),
        pod("c-0", candidate, "127.0.2.1"),
        pod("c-1", candidate, "127.0.2.2", ready=False),
    ]
    return changed, observed, candidate


def jobs(decision: Any) -> list[dict[str, Any]]:
    return [o for o in decision.apply if o["kind"] == "Job"]


def test_the_load_test_job_sends_to_the_previews_ready_pods_with_the_clients_key() -> None:
    changed, observed, candidate = at_pre_promotion()
    decision = decide(changed, observed, CATALOG, NOW, "", load_test=RUNTIME)
    [job] = jobs(decision)
    assert job["metadata"]["labels"][SERVICE] == "chat"  # cached and pruned like the rest
    assert job["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    pod_spec = job["spec"]["template"]["spec"]
    assert SERVICE not in job["spec"]["template"]["metadata"]["labels"]  # no Service selects it
    assert job["spec"]["template"]["metadata"]["labels"][LOAD_TEST_LABEL] == "chat"
    assert pod_spec["hostNetwork"] is True and pod_spec["tolerations"][0]["key"] == "real"
    [container] = pod_spec["containers"]
    assert container["image"] == "llmservice-operator:dev"
    assert container["imagePullPolicy"] == "Never"
    args = container["args"]
    assert args[:3] == ["load", "--target", "http://127.0.2.1:8000"]  # Ready candidate pods only
    assert args.count("--target") == 1
    assert args[args.index("--rate") + 1] == "3"
    assert args[args.index("--prompt-tokens") + 1] == "128"
    assert args[args.index("--output-tokens") + 1] == "16"
    assert args[args.index("--model") + 1] == "chat"
    assert args[args.index("--api-key-env") + 1] == "LLMSERVICE_LOAD_API_KEY"
    assert container["env"] == [
        {
            "name": "LLMSERVICE_LOAD_API_KEY",
            "valueFrom": {"secretKeyRef": {"name": "keys", "key": "api"}},
        }
    ]
    assert "api" not in " ".join(args).split("--api-key-env")[0]  # never the key itself
    # a new candidate pod: a new Job (a Job's pod template cannot change); the old is pruned
    observed.pods[-1] = pod("c-1", candidate, "127.0.2.2", ready=True)
    observed.owned[("Job", job["metadata"]["name"])] = {"apiVersion": "batch/v1", **job}
    again = decide(changed, observed, CATALOG, NOW, "", load_test=RUNTIME)
    [other] = jobs(again)
    assert other["metadata"]["name"] != job["metadata"]["name"]
    assert ("batch/v1", "Job", job["metadata"]["name"]) in again.delete


def test_no_job_without_the_operators_image_or_without_load_test() -> None:
    changed, observed, _ = at_pre_promotion()
    assert not jobs(decide(changed, observed, CATALOG, NOW, ""))
    changed["spec"]["rollout"]["blueGreen"].pop("loadTest")
    assert not jobs(decide(changed, observed, CATALOG, NOW, "", load_test=RUNTIME))


def test_the_load_generator_sends_the_api_key_as_clients_do() -> None:
    seen: list[str | None] = []

    async def completions(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.get("Authorization"))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chunk = '{"choices":[{"text":"x","finish_reason":"length"}]}'
        await response.write(f"data: {chunk}\n\ndata: [DONE]\n\n".encode())
        return response

    async def models(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.json_response({"data": [{"id": "chat"}]})

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/completions", completions)
        app.router.add_get("/v1/models", models)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        config = LoadConfig(
            schedule=RateSchedule.constant(50, 0.1),
            prompt_tokens=LengthDist("fixed", 4),
            output_tokens=LengthDist("fixed", 1),
            api_key="s3cret",
            request_timeout_s=5,
            drain_timeout_s=5,
        )
        try:
            report = await run_load(config, static_targets([f"http://127.0.0.1:{port}"]))
        finally:
            await runner.cleanup()
        assert report.requests > 0

    asyncio.run(main())
    assert seen and set(seen) == {"Bearer s3cret"}  # /v1/models too
    assert "s3cret" not in repr(LoadConfig(schedule=RateSchedule.constant(1, 1), api_key="s3cret"))


def reasons(decision: Any) -> list[str]:
    return [e.reason for e in decision.events]


def test_the_pre_promotion_analysis_starts_once_the_load_tests_pod_is_ready() -> None:
    """CI, 7 December: on a loaded machine the load test's pod sent nothing before the first
    measurement, which found no data and paused the rollout. The analysis now starts when the
    Job shows a Ready pod, and at most LOAD_TEST_START_SECONDS after its step began."""
    changed, observed, _ = at_pre_promotion()
    waiting = decide(changed, observed, CATALOG, NOW, "", load_test=RUNTIME)
    assert "AnalysisStarted" not in reasons(waiting), reasons(waiting)
    assert "waiting for the load test" in waiting.status["rollout"]["message"]
    assert waiting.requeue_at is not None and waiting.requeue_at <= NOW + timedelta(seconds=5)
    [job] = jobs(waiting)  # the Job it waits for is made meanwhile
    observed.owned[("Job", job["metadata"]["name"])] = {**job, "status": {"active": 1}}
    still = decide(changed, observed, CATALOG, NOW, "", load_test=RUNTIME)
    assert "AnalysisStarted" not in reasons(still)
    observed.owned[("Job", job["metadata"]["name"])] = {**job, "status": {"active": 1, "ready": 1}}
    started = decide(changed, observed, CATALOG, NOW, "", load_test=RUNTIME)
    assert "AnalysisStarted" in reasons(started), reasons(started)
    # bounded: a load test that never starts holds the analysis two minutes, not for ever
    del observed.owned[("Job", job["metadata"]["name"])]
    late = NOW + timedelta(seconds=LOAD_TEST_START_SECONDS)
    assert "AnalysisStarted" in reasons(
        decide(changed, observed, CATALOG, late, "", load_test=RUNTIME)
    )
    # no load test run by the operator (no image to run it): nothing to wait for
    assert "AnalysisStarted" in reasons(decide(changed, observed, CATALOG, NOW, ""))
