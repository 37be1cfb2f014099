"""Every rendered LeaderWorkerSet is valid under the pinned LWS release's own CRD schema.

The CRD is the one `make install` builds next to the control-plane binaries (from
sigs.k8s.io/lws's config/crd/bases at LWS_VERSION); its absence fails (run `make install`).
The schema is made strict (no field it does not name), so a misspelt field fails here rather
than being pruned in silence by the API server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # kubernetes-validate's dependency
import pytest
import yaml

from llmservice_dev.localcluster.binaries import LWS_CRD_FILE, bin_dir

ROOT = Path(__file__).parents[2]
GOLDENS = sorted((ROOT / "tests" / "golden").glob("*multinode*.yaml"))


def _strict(schema: Any) -> None:
    if isinstance(schema, dict):
        named = schema.get("type") == "object" and "properties" in schema
        if named and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema.setdefault("additionalProperties", False)
        for value in schema.values():
            _strict(value)
    elif isinstance(schema, list):
        for value in schema:
            _strict(value)


@pytest.fixture(scope="module")
def lws_schema() -> dict[str, Any]:
    path = bin_dir() / "crds" / LWS_CRD_FILE
    if not path.is_file():
        pytest.fail(f"the LeaderWorkerSet CRD is not built ({path}): run `make install`")
    crd = yaml.safe_load(path.read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    _strict(schema)
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"
    return schema


def test_there_are_multinode_goldens() -> None:
    assert [p.name for p in GOLDENS] == [
        "llama-3.1-405b-multinode.rollout.yaml",
        "llama-3.1-405b-multinode.yaml",
    ]


@pytest.mark.parametrize("golden", GOLDENS, ids=lambda p: p.stem)
def test_rendered_leaderworkersets_validate_against_the_lws_crd(
    golden: Path, lws_schema: dict[str, Any]
) -> None:
    found = [o for o in yaml.safe_load_all(golden.read_text()) if o["kind"] == "LeaderWorkerSet"]
    assert found
    for obj in found:
        jsonschema.validate(obj, lws_schema)


def test_a_misspelt_field_is_refused(lws_schema: dict[str, Any]) -> None:
    golden = GOLDENS[-1]
    [obj] = [o for o in yaml.safe_load_all(golden.read_text()) if o["kind"] == "LeaderWorkerSet"]
    obj["spec"]["leaderWorkerTemplate"]["groupSize"] = 2
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(obj, lws_schema)
