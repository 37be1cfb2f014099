"""The model cache end to end: the chart-installed operator makes the download Job, which runs
the operator's own image on the real node (kubelet + containerd), downloads the tiny model from
a fake hub on loopback (tests/hubfake.py) into a hostPath PersistentVolume, verifies it and
writes its manifest; only then is the Deployment made, its pods mounting the claim read-only.
A revision the hub does not know then gives ModelCached=False with the hub's message, a file
served corrupted gives HashMismatch naming it, and the service that serves is left as it was.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from benchmarks.rollback import MODEL, llmservice

from llmservice_dev.localcluster import ClusterInfo
from llmservice_operator.render.cache_layout import CACHE_LABEL, CACHE_MANIFEST, revision_dir
from llmservice_operator.render.labels import REVISION
from tests.hubfake import COMMIT, FakeHub, tiny_model_repo

from .operator_fixtures import OperatorFactory, wait_for
from .test_rollouts import Cluster, kube

__all__ = ["kube"]  # the fixture, shared with test_rollouts

pytestmark = pytest.mark.cluster

CLAIM = "weights"


@pytest.fixture
def volume(kube: Cluster, namespace: str) -> Iterator[Path]:
    """A hostPath PersistentVolume (the real node shares this machine's file system), bound
    to the claim CLAIM in the test's namespace; the directory as this process sees it."""
    root = Path(tempfile.mkdtemp(prefix="llmservice-cache-"))
    os.chmod(root, 0o777)  # the Job runs as uid 10001; hostPath takes no fsGroup
    pv = f"cache-{namespace}"[:63]
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": str(root), "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": CLAIM},
            },
        }
    )
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": CLAIM, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": pv,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
    )
    yield root
    kube.kubectl("delete", "pv", pv, "--wait=false", "--ignore-not-found")


def _cached(kube: Cluster, name: str, status: str, reason: str) -> dict[str, Any]:
    condition = kube.condition(name, "ModelCached")
    if (condition.get("status"), condition.get("reason")) == (status, reason):
        return condition
    return {}


def test_the_cache_job_fills_the_claim_before_the_deployment_exists(
    cluster: ClusterInfo,
    namespace: str,
    kube: Cluster,
    operators: OperatorFactory,
    volume: Path,
    tmp_path: Path,
) -> None:
    repo = tiny_model_repo(tmp_path / "repo")
    with FakeHub({MODEL: repo}) as hub:
        operators.start(namespace, LLMSERVICE_PROMETHEUS_URL=cluster.prometheus_url)
        body = llmservice("cached", namespace)
        body["spec"]["model"].update(
            {"revision": COMMIT, "cache": {"claimName": CLAIM, "endpoint": hub.url}}
        )
        kube.apply(body)

        job = wait_for(
            "the download Job",
            lambda: kube.get("-n", namespace, "jobs", "-l", f"{CACHE_LABEL}=cached")["items"],
            60,
        )[0]
        assert not kube.deployments("cached"), "the Deployment came before the cache"
        verified = wait_for(
            "ModelCached True", lambda: _cached(kube, "cached", "True", "Verified"), 240
        )
        files = hub.files(MODEL)
        assert f"{len(files)} files" in verified["message"], verified
        job = kube.get("-n", namespace, "job", job["metadata"]["name"])
        [pod] = kube.get("-n", namespace, "pods", "-l", f"job-name={job['metadata']['name']}")[
            "items"
        ]
        assert pod["spec"]["nodeName"] == cluster.real_node.name  # the operator's image, run
        result = json.loads(pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"])
        print(
            f"cache Job: {result['files']} files ({result['bytes']} bytes) verified in "
            f"{result['seconds']} s by the program; Job {job['status'].get('startTime')} -> "
            f"{job['status'].get('completionTime')}"
        )
        manifest = json.loads((volume / revision_dir(MODEL, COMMIT) / CACHE_MANIFEST).read_text())
        assert manifest["commit"] == COMMIT
        assert {f["path"]: f["sha256"] for f in manifest["files"]} == {
            f.path: f.sha256 for f in files
        }

        kube.wait_available("cached")
        [stable] = kube.deployments("cached").values()
        pod_spec = stable["spec"]["template"]["spec"]
        [container] = pod_spec["containers"]
        assert container["args"][0] == f"/models/{revision_dir(MODEL, COMMIT)}"
        assert {"name": "HF_HUB_OFFLINE", "value": "1"} in container["env"]
        [weights] = [v for v in pod_spec["volumes"] if v["name"] == "weights"]
        assert weights["persistentVolumeClaim"] == {"claimName": CLAIM, "readOnly": True}

        # A revision the hub does not know: the hub's message, and nothing serving touched.
        unknown = "0" * 40
        kube.kubectl(
            "-n", namespace, "patch", "llmservice", "cached", "--type=merge",
            "-p", json.dumps({"spec": {"model": {"revision": unknown}}}),
        )  # fmt: skip
        failed = wait_for(
            "ModelCached RevisionNotFound",
            lambda: _cached(kube, "cached", "False", "RevisionNotFound"),
            180,
        )
        assert f"Invalid rev id: {unknown}" in failed["message"], failed
        assert kube.condition("cached", "Available")["status"] == "True"
        assert kube.phase("cached") == "Degraded"
        deployments = kube.deployments("cached")
        assert list(deployments) == [stable["metadata"]["labels"][REVISION]]
        assert deployments[stable["metadata"]["labels"][REVISION]]["status"]["readyReplicas"] == 1
        assert not (volume / revision_dir(MODEL, unknown) / CACHE_MANIFEST).exists()

        # A file the hub serves corrupted (one byte flipped, the same size): named.
        hub.corrupt.add("tokenizer_config.json")
        kube.kubectl(
            "-n", namespace, "patch", "llmservice", "cached", "--type=merge",
            "-p", json.dumps({"spec": {"model": {"revision": "main"}}}),
        )  # fmt: skip
        mismatch = wait_for(
            "ModelCached HashMismatch",
            lambda: _cached(kube, "cached", "False", "HashMismatch"),
            180,
        )
        assert "tokenizer_config.json: git blob id" in mismatch["message"], mismatch
        assert list(kube.deployments("cached")) == [stable["metadata"]["labels"][REVISION]]
        assert kube.condition("cached", "Available")["status"] == "True"
        assert not (volume / revision_dir(MODEL, "main") / "tokenizer_config.json").exists()
        assert not (volume / revision_dir(MODEL, "main") / CACHE_MANIFEST).exists()


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"cache": {}}, "model.cache needs model.revision"),
        (
            {"revision": COMMIT, "cache": {"claimName": CLAIM, "size": "10Gi"}},
            "model.cache.claimName names a claim you made",
        ),
        (
            {"revision": COMMIT, "cache": {}, "source": {"type": "uri", "uri": "s3://b/p"}},
            "model.cache downloads from the hub",
        ),
    ],
)
def test_the_api_server_refuses_what_pydantic_refuses(
    kubectl: Any, namespace: str, crd_installed: None, model: dict[str, Any], message: str
) -> None:
    body = llmservice("refused", namespace)
    body["spec"]["model"].update(model)
    result = kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(body), check=False)
    assert result.returncode != 0 and message in result.stderr, result.stderr
    body["spec"]["model"].pop("source", None)
    body["spec"]["model"].update({"revision": COMMIT, "cache": {}})
    kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(body))  # the fix passes
