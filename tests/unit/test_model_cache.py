"""spec.model.cache: the PVC, the download Job, the serving pods' mount, and the decision that
waits for the Job (ModelCached) before the Deployment exists (pure)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from llmservice_operator.api import parse_llmservice
from llmservice_operator.api.spec import ModelSpec
from llmservice_operator.decide import Decision, decide
from llmservice_operator.model_cache import cache_state
from llmservice_operator.observed import ObservedState
from llmservice_operator.reconcile import merge_patch
from llmservice_operator.render.cache_layout import CACHE_LABEL, PRUNE_LABEL, revision_dir
from llmservice_operator.render.load_test import LoadTestRuntime
from llmservice_operator.render.model_cache import (
    cache_job,
    cache_job_name,
    cache_pvc,
    default_cache_size,
)
from llmservice_operator.service_plan import plan_service
from llmservice_operator.sizing import load_catalog

ROOT = Path(__file__).parents[2]
NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
CATALOG = load_catalog()
RUNTIME = LoadTestRuntime("registry.local/llmservice-operator:1.2.3", "IfNotPresent")
REV = "0e9e39f249a16976918f6564b8830bc894c89659"
NEW_REV = "1" * 40
GIB = 1024**3


def _body(cache: dict[str, Any] | None = None, revision: str = REV) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "llama-3.1-8b.yaml").read_text())
    body["metadata"].update({"uid": "u-1", "generation": 1})
    body["spec"]["model"]["revision"] = revision
    body["spec"]["model"]["cache"] = {} if cache is None else cache
    return body


def _plan(body: dict[str, Any]) -> Any:
    return plan_service(parse_llmservice(body), CATALOG)


# ---------------------------------------------------------------------------- the spec
@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"id": "a/b", "cache": {}}, "model.cache needs model.revision"),
        (
            {"id": "a/b", "revision": "r", "cache": {"claimName": "mine", "size": "10Gi"}},
            "model.cache.claimName names a claim you made",
        ),
        (
            {"id": "a/b", "revision": "r", "cache": {}, "source": {"type": "uri", "uri": "s3://x"}},
            "model.cache downloads from the hub",
        ),
        ({"id": "a/b", "revision": "r", "cache": {"size": "lots"}}, "size"),
        ({"id": "a/b", "revision": "r", "cache": {"endpoint": "ftp://x"}}, "endpoint"),
    ],
)
def test_invalid_cache_specs_are_refused(model: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ModelSpec.model_validate(model)
    assert message in str(caught.value)


def test_the_crd_carries_the_same_rules() -> None:
    crd = yaml.safe_load((ROOT / "crds" / "llmservice.yaml").read_text())
    model = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["model"]
    rules = {r["message"] for r in model["x-kubernetes-validations"]}
    assert any("model.cache needs model.revision" in m for m in rules)
    cache = model["properties"]["cache"]
    assert "claimName names a claim you made" in cache["x-kubernetes-validations"][0]["message"]


# ---------------------------------------------------------------------------- rendering
def test_the_pvc_defaults_to_twice_the_weights_plus_a_margin() -> None:
    plan = _plan(_body({"storageClassName": "fast-nfs"}))
    weights = plan.sizing.weight_bytes
    pvc = cache_pvc(plan.render_input, weights)
    assert pvc is not None
    assert pvc["metadata"]["name"] == "llama-8b-model-cache"
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["storageClassName"] == "fast-nfs"
    size = pvc["spec"]["resources"]["requests"]["storage"]
    gib = int(size.removesuffix("Gi"))
    assert 2 * weights * 1.1 <= (gib - 1) * GIB < 2 * weights * 1.1 + GIB
    assert default_cache_size(10 * GIB) == "23Gi"
    # Given, or as the PVC exists (it cannot shrink): kept.
    assert cache_pvc(plan.render_input, weights, "500Gi")["spec"]["resources"]["requests"] == {  # type: ignore[index]
        "storage": "500Gi"
    }
    given = _plan(_body({"size": "64Gi", "accessModes": ["ReadWriteOnce"]}))
    pvc = cache_pvc(given.render_input, weights, "500Gi")
    assert pvc is not None and pvc["spec"]["resources"]["requests"]["storage"] == "64Gi"
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert "storageClassName" not in pvc["spec"]


def test_a_named_claim_is_used_not_made() -> None:
    plan = _plan(_body({"claimName": "shared-weights"}))
    assert cache_pvc(plan.render_input, plan.sizing.weight_bytes) is None
    job = cache_job(plan.render_input, RUNTIME)
    [volume] = [v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "cache"]
    assert volume["persistentVolumeClaim"] == {"claimName": "shared-weights"}
    pod = plan.pod_template["spec"]
    [weights] = [v for v in pod["volumes"] if v["name"] == "weights"]
    assert weights["persistentVolumeClaim"] == {"claimName": "shared-weights", "readOnly": True}


def test_the_job_downloads_the_pinned_revision_with_the_operators_image() -> None:
    body = _body({"endpoint": "https://hub.mirror.internal"})
    plan = _plan(body)
    job = cache_job(plan.render_input, RUNTIME)
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == RUNTIME.image
    assert container["args"] == [
        "cache-model",
        "--repo", "meta-llama/Llama-3.1-8B-Instruct",
        "--revision", REV,
        "--dir", f"/models/meta-llama--Llama-3.1-8B-Instruct/{REV}",
        "--endpoint", "https://hub.mirror.internal",
    ]  # fmt: skip
    env = {e["name"]: e for e in container["env"]}
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}
    assert "value" not in env["HF_TOKEN"]  # the token never appears in the Job
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert container["volumeMounts"][0] == {"name": "cache", "mountPath": "/models"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["restartPolicy"] == "Never"
    assert pod["securityContext"]["fsGroup"] == 10001
    [rule] = job["spec"]["podFailurePolicy"]["rules"]
    assert rule["action"] == "FailJob" and rule["onExitCodes"]["values"] == [3]
    assert job["metadata"]["labels"][CACHE_LABEL] == "llama-8b"
    assert job["spec"]["template"]["metadata"]["labels"][CACHE_LABEL] == "llama-8b"
    assert "ttlSecondsAfterFinished" not in job["spec"]  # kept: the record of the copy
    # A new revision is a new Job (and a new directory next to the old one).
    other = _plan(_body({"endpoint": "https://hub.mirror.internal"}, revision=NEW_REV))
    assert cache_job_name(other.render_input) != job["metadata"]["name"]
    assert cache_job_name(_plan(body).render_input) == job["metadata"]["name"]


def test_the_job_runs_where_the_operator_says() -> None:
    runtime = LoadTestRuntime("img:1", "Never", {"hostNetwork": True, "nodeSelector": {"a": "b"}})
    job = cache_job(_plan(_body()).render_input, runtime)
    pod = job["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["nodeSelector"] == {"a": "b"}
    assert pod["containers"][0]["imagePullPolicy"] == "Never"


def test_serving_pods_mount_the_cache_read_only_and_stay_offline() -> None:
    plan = _plan(_body())
    [container] = plan.pod_template["spec"]["containers"]
    assert container["args"][0] == f"/models/meta-llama--Llama-3.1-8B-Instruct/{REV}"
    assert "--revision" not in container["args"]  # the directory is the revision
    assert "--served-model-name" in container["args"]
    env = {e["name"]: e for e in container["env"]}
    assert env["HF_HUB_OFFLINE"] == {"name": "HF_HUB_OFFLINE", "value": "1"}
    assert "HF_TOKEN" not in env  # the pods never talk to the hub
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "weights"]
    assert mount == {"name": "weights", "mountPath": "/models", "readOnly": True}
    [volume] = [v for v in plan.pod_template["spec"]["volumes"] if v["name"] == "weights"]
    assert volume["persistentVolumeClaim"] == {
        "claimName": "llama-8b-model-cache",
        "readOnly": True,
    }


def test_without_a_cache_nothing_changes() -> None:
    body = _body()
    del body["spec"]["model"]["cache"]
    [container] = _plan(body).pod_template["spec"]["containers"]
    assert container["args"][0] == "meta-llama/Llama-3.1-8B-Instruct"
    assert container["args"][container["args"].index("--revision") + 1] == REV
    assert "HF_HUB_OFFLINE" not in {e["name"] for e in container["env"]}


def test_revision_directories_are_one_level_and_safe() -> None:
    assert revision_dir("org/name", "refs/pr/1") == "org--name/refs--pr--1"
    for model, revision in [("org/name", "../../etc"), ("../x", ".."), ("a/b", "x y/z")]:
        parts = revision_dir(model, revision).split("/")
        assert len(parts) == 2
        assert all(p and not p.startswith(".") and " " not in p for p in parts), parts


# ---------------------------------------------------------------------------- the decision
def _job_done(
    job: dict[str, Any], kind: str, message: dict[str, Any] | str
) -> list[dict[str, Any]]:
    """Mark ``job`` as the Job controller would, and return its pod as the kubelet left it."""
    job["status"] = (
        {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
        if kind == "Complete"
        else {
            "failed": 1,
            "conditions": [
                {"type": "FailureTarget", "status": "True", "reason": "PodFailurePolicy"},
                {"type": "Failed", "status": "True", "reason": "PodFailurePolicy"},
            ],
        }
    )
    text = message if isinstance(message, str) else json.dumps(message)
    name = job["metadata"]["name"]
    return [
        {
            "metadata": {
                "name": f"{name}-abcde",
                "labels": {**job["spec"]["template"]["metadata"]["labels"], "job-name": name},
            },
            "status": {
                "phase": "Succeeded" if kind == "Complete" else "Failed",
                "containerStatuses": [
                    {
                        "name": "cache",
                        "state": {
                            "terminated": {
                                "exitCode": 0 if kind == "Complete" else 3,
                                "message": text + "\n",
                                "finishedAt": "2026-11-30T12:01:00Z",
                            }
                        },
                    }
                ],
            },
        }
    ]


class _Cluster:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.owned: dict[tuple[str, str], dict[str, Any]] = {}
        self.cache_pods: list[dict[str, Any]] = []

    def decide(self, runtime: LoadTestRuntime | None = RUNTIME) -> Decision:
        observed = ObservedState(
            owned=copy.deepcopy(self.owned),
            secrets={"hf-token": {"token"}},
            cache_pods=copy.deepcopy(self.cache_pods),
        )
        decision = decide(self.body, observed, CATALOG, NOW, "http://prom:9090", load_test=runtime)
        for obj in decision.apply:
            key = (obj["kind"], obj["metadata"]["name"])
            kept = self.owned.get(key, {}).get("status")
            self.owned[key] = copy.deepcopy(obj)
            if kept is not None:
                self.owned[key]["status"] = kept
        for _v, kind, name in decision.delete:
            del self.owned[(kind, name)]
        for (kind, _n), obj in self.owned.items():
            if kind == "Deployment":
                replicas = decision.scale.get(_n, obj["spec"].get("replicas", 1))
                obj["spec"]["replicas"] = replicas
                obj["status"] = {"replicas": replicas, "readyReplicas": replicas}
        self.body["status"] = merge_patch({}, decision.status)
        return decision

    def job(self) -> dict[str, Any]:
        """The Job of the spec's revision."""
        revision = self.body["spec"]["model"]["revision"]
        jobs: list[dict[str, Any]] = [
            o
            for (k, _n), o in self.owned.items()
            if k == "Job"
            and o["metadata"]["annotations"]["llmservice.dev/model-revision"] == revision
        ]
        [job] = jobs
        return job

    def finish(self, kind: str, message: dict[str, Any] | str) -> None:
        self.cache_pods = _job_done(self.job(), kind, message)


def _condition(decision: Decision, type_: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [c for c in decision.status["conditions"] if c["type"] == type_]
    [condition] = found
    return condition


def _kinds(decision: Decision) -> list[str]:
    return sorted(o["kind"] for o in decision.apply)


OK = {"ok": True, "commit": REV, "files": 7, "bytes": 16 * GIB, "seconds": 412.5, "path": "/x"}


def test_the_deployment_waits_for_the_download_job() -> None:
    cluster = _Cluster(_body())
    first = cluster.decide()
    assert _kinds(first) == ["Job", "PersistentVolumeClaim"]  # no Deployment yet
    for obj in first.apply:
        assert obj["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    cached = _condition(first, "ModelCached")
    assert (cached["status"], cached["reason"]) == ("False", "Downloading")
    assert first.status["phase"] == "Progressing"
    assert _condition(first, "Progressing")["reason"] == "WaitingForModelCache"
    assert first.delete == [] and first.scale == {}

    assert _kinds(cluster.decide()) == ["Job", "PersistentVolumeClaim"]  # still running

    cluster.finish("Complete", OK)
    ready = cluster.decide()
    assert "Deployment" in _kinds(ready)
    assert {"Job", "PersistentVolumeClaim"} <= set(_kinds(ready))  # kept, not pruned
    assert ready.delete == []
    cached = _condition(ready, "ModelCached")
    assert (cached["status"], cached["reason"]) == ("True", "Verified")
    assert "7 files (16.0 GiB) verified in 412.5 s" in cached["message"]
    assert f"/models/meta-llama--Llama-3.1-8B-Instruct/{REV}" in cached["message"]


@pytest.mark.parametrize(
    ("result", "reason", "words"),
    [
        (
            {"ok": False, "reason": "RevisionNotFound", "message": "404 from the hub: Invalid rev id: x"},
            "RevisionNotFound",
            "Invalid rev id: x",
        ),
        (
            {"ok": False, "reason": "Unauthorized", "message": "401 from the hub: Invalid credentials"},
            "Unauthorized",
            "Invalid credentials",
        ),
        (
            {"ok": False, "reason": "HashMismatch", "message": "model-00001-of-00004.safetensors: sha256 a, the hub says b"},
            "HashMismatch",
            "model-00001-of-00004.safetensors",
        ),
        ("Traceback ...\nPermissionError: [Errno 13] /models", "DownloadFailed", "PermissionError"),
    ],
)  # fmt: skip
def test_a_failed_download_says_why_and_touches_nothing_that_serves(
    result: dict[str, Any] | str, reason: str, words: str
) -> None:
    cluster = _Cluster(_body())
    cluster.decide()
    cluster.finish("Complete", OK)
    at_rest = cluster.decide()
    [stable] = [o for o in at_rest.apply if o["kind"] == "Deployment"]
    serving = copy.deepcopy(cluster.owned)

    cluster.body["spec"]["model"]["revision"] = NEW_REV  # a new revision, which fails
    cluster.body["metadata"]["generation"] = 2
    started = cluster.decide()
    assert _kinds(started) == ["Job", "PersistentVolumeClaim"]
    assert started.delete == [] and started.scale == {}
    cluster.cache_pods = []
    cluster.finish("Failed", result)
    failed = cluster.decide()
    assert _kinds(failed) == ["Job", "PersistentVolumeClaim"]
    assert failed.delete == [] and failed.scale == {}
    cached = _condition(failed, "ModelCached")
    assert (cached["status"], cached["reason"]) == ("False", reason)
    assert words in cached["message"] and NEW_REV in cached["message"]
    assert _condition(failed, "Degraded")["reason"] == "ModelCacheFailed"
    assert _condition(failed, "Available")["status"] == "True"  # the old revision serves
    assert failed.status["phase"] == "Degraded"
    assert failed.status["revisions"]["stable"] in stable["metadata"]["name"]
    assert [(e.type, e.reason) for e in failed.events] == [("Warning", "ModelCacheFailed")]
    # The serving Deployment, Service, PDB, ... are as they were.
    for key, obj in serving.items():
        assert cluster.owned[key] == obj  # the old revision's Job too: nothing is pruned
    assert cluster.decide().events == []  # said once


def test_without_the_operators_image_there_is_no_job_and_it_says_so() -> None:
    decision = _Cluster(_body()).decide(runtime=None)
    assert _kinds(decision) == ["PersistentVolumeClaim"]
    cached = _condition(decision, "ModelCached")
    assert cached["reason"] == "NoOperatorImage"
    assert "LLMSERVICE_OPERATOR_IMAGE" in cached["message"]


def test_the_pvc_keeps_the_size_it_was_made_with() -> None:
    cluster = _Cluster(_body())
    cluster.decide()
    [key] = [k for k in cluster.owned if k[0] == "PersistentVolumeClaim"]
    cluster.owned[key]["spec"]["resources"]["requests"]["storage"] = "999Gi"
    again = cluster.decide()
    [pvc] = [o for o in again.apply if o["kind"] == "PersistentVolumeClaim"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "999Gi"


def test_a_retried_attempt_is_shown_while_the_job_goes_on() -> None:
    job = {"metadata": {"name": "j"}, "spec": {}, "status": {"failed": 1, "active": 1}}
    pods = _job_done(
        {"metadata": {"name": "j"}, "spec": {"template": {"metadata": {"labels": {}}}}},
        "Failed",
        {"ok": False, "reason": "HubUnavailable", "message": "503 from the hub: busy"},
    )
    state = cache_state(job, pods, REV, "/models/x")
    assert (state.status, state.reason) == ("False", "Downloading")
    assert "attempt 1 failed (503 from the hub: busy); retrying" in state.message


def _prune_jobs(decision: Decision) -> list[dict[str, Any]]:
    return [
        o for o in decision.apply if o["kind"] == "Job" and PRUNE_LABEL in o["metadata"]["labels"]
    ]


def test_once_the_revision_alone_serves_the_other_revisions_are_cleaned_up() -> None:
    cluster = _Cluster(_body())
    cluster.decide()
    cluster.finish("Complete", OK)
    assert _prune_jobs(cluster.decide()) == []  # the Deployment is only being made
    [prune] = _prune_jobs(cluster.decide())
    [container] = prune["spec"]["template"]["spec"]["containers"]
    keep = f"meta-llama--Llama-3.1-8B-Instruct/{REV}"
    assert container["args"] == ["cache-prune", "--root", "/models", "--keep", keep]
    assert "HF_TOKEN" not in {e["name"] for e in container["env"]}
    assert container["image"] == RUNTIME.image

    # A new revision while the clean-up runs: its download waits for it (it could remove
    # the directory the download writes).
    cluster.body["spec"]["model"]["revision"] = NEW_REV
    cluster.body["metadata"]["generation"] = 2
    waiting = cluster.decide()
    assert _kinds(waiting) == ["PersistentVolumeClaim"]
    cached = _condition(waiting, "ModelCached")
    assert cached["reason"] == "Downloading"
    assert f"waiting for the clean-up Job {prune['metadata']['name']}" in cached["message"]
    key = ("Job", prune["metadata"]["name"])
    cluster.owned[key]["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    started = cluster.decide()
    assert cluster.job()["metadata"]["annotations"]["llmservice.dev/model-revision"] == NEW_REV
    assert _kinds(started) == ["Job", "PersistentVolumeClaim"]


def test_a_claim_someone_named_is_never_cleaned_up() -> None:
    cluster = _Cluster(_body({"claimName": "shared-weights"}))
    cluster.decide()
    cluster.finish("Complete", OK)
    cluster.decide()
    assert _prune_jobs(cluster.decide()) == []


def test_plan_prints_the_pvc_and_says_where_the_weights_go(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from llmservice_operator.cli import main

    assert main(["plan", "-f", str(ROOT / "examples" / "cache" / "llama-3.1-8b-cache.yaml")]) == 0
    out, err = capsys.readouterr()
    kinds = [d["kind"] for d in yaml.safe_load_all(out)]
    assert kinds.count("PersistentVolumeClaim") == 1 and kinds.count("Deployment") == 1
    assert (
        "model cache: /models/meta-llama--Llama-3.1-8B-Instruct/"
        "0e9e39f249a16976918f6564b8830bc894c89659 on PVC llama-8b-cached-model-cache" in err
    )
