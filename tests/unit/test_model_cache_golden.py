"""Golden files of examples/cache/ (UPDATE_GOLDEN=1 rewrites them, as ``make golden`` does):
what the operator applies while the revision downloads, then once the Job has verified it, and
every object validates against the upstream Kubernetes OpenAPI schemas (the Job's
podFailurePolicy and termination message fields, the PVC, the read-only mount)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from llmservice_operator.decide import decide
from llmservice_operator.observed import ObservedState
from llmservice_operator.render.load_test import LoadTestRuntime
from llmservice_operator.sizing import load_catalog

from .test_golden import assert_matches_golden

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples" / "cache").glob("*.yaml"))
GOLDEN = ROOT / "tests" / "golden" / "cache"
K8S_SCHEMA_VERSION = "1.37.0"
NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
RUNTIME = LoadTestRuntime("ghcr.io/llmservice/llmservice-operator:0.1.0", "IfNotPresent")
CATALOG = load_catalog()


def _states(example: Path) -> dict[str, list[dict[str, Any]]]:
    body: dict[str, Any] = yaml.safe_load(example.read_text())
    body["metadata"].update({"uid": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "generation": 1})
    secrets: dict[str, set[str] | None] = {"hf-token": {"token"}}
    downloading = decide(
        body, ObservedState(secrets=secrets), CATALOG, NOW, "", load_test=RUNTIME
    ).apply
    owned = {(o["kind"], o["metadata"]["name"]): copy.deepcopy(o) for o in downloading}
    [job] = [o for (kind, _n), o in owned.items() if kind == "Job"]
    job["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    message = {"ok": True, "files": 9, "bytes": 16_069_726_548, "seconds": 212.4}
    pod = {
        "metadata": {"name": "p", "labels": {"job-name": job["metadata"]["name"]}},
        "status": {
            "containerStatuses": [
                {"name": "cache", "state": {"terminated": {"message": json.dumps(message)}}}
            ]
        },
    }
    observed = ObservedState(owned=owned, secrets=secrets, cache_pods=[pod])
    verified = decide(body, observed, CATALOG, NOW, "", load_test=RUNTIME).apply
    return {"downloading": downloading, "verified": verified}


CASES = {
    f"{example.stem}.{state}": (example, state)
    for example in EXAMPLES
    for state in ("downloading", "verified")
}


@pytest.mark.parametrize("case", CASES)
def test_applied_objects_match_golden(case: str) -> None:
    example, state = CASES[case]
    objects = _states(example)[state]
    assert_matches_golden(GOLDEN / f"{case}.yaml", objects)
    for obj in objects:
        if not obj["apiVersion"].startswith("monitoring.coreos.com/"):  # a CRD's
            kubernetes_validate.validate(obj, K8S_SCHEMA_VERSION, strict=True)


def test_the_examples_download_before_they_serve() -> None:
    assert EXAMPLES
    for example in EXAMPLES:
        states = _states(example)
        kinds = {state: sorted(o["kind"] for o in objs) for state, objs in states.items()}
        assert kinds["downloading"] == ["Job", "PersistentVolumeClaim"], example.name
        assert "Deployment" in kinds["verified"], example.name
        assert {"Job", "PersistentVolumeClaim"} <= set(kinds["verified"]), example.name
