"""The model cache's download program (``llmservice cache-model``) against a hub on loopback.

The real ``huggingface_hub`` client downloads the repo's tiny model from tests/hubfake.py, so
every request, header and error is the library's own; only the hub is fake.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmservice_operator.cli import main
from llmservice_operator.commands.cache_model import (
    EXIT_PERMANENT,
    MANIFEST,
    CacheFailure,
    cache_model,
)
from llmservice_operator.commands.cache_prune import prune_cache
from tests.hubfake import COMMIT, FakeHub, tiny_model_repo

REPO = "llmservice-dev/tiny-llama"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model_repo(tmp_path_factory.mktemp("hub") / "tiny-llama")


@pytest.fixture
def hub(model_dir: Path) -> Iterator[FakeHub]:
    with FakeHub({REPO: model_dir}) as fake:
        yield fake


def test_a_revision_is_downloaded_verified_and_written_down(
    hub: FakeHub, model_dir: Path, tmp_path: Path
) -> None:
    target = tmp_path / "cache" / COMMIT
    cached = cache_model(REPO, COMMIT, target, endpoint=hub.url)

    served = hub.files(REPO)
    assert {f.path for f in cached.files} == {f.path for f in served}
    assert len(cached.files) >= 5
    for found in served:
        assert (target / found.path).read_bytes() == found.content
    manifest = json.loads((target / MANIFEST).read_text())
    assert manifest["revision"] == COMMIT and manifest["commit"] == COMMIT
    assert manifest["repo"] == REPO
    by_path = {f["path"]: f for f in manifest["files"]}
    assert by_path["model.safetensors"]["lfs"] is True
    assert by_path["config.json"]["lfs"] is False
    for found in served:
        assert by_path[found.path]["sha256"] == found.sha256
        assert by_path[found.path]["size"] == found.size
    # The hub's metadata was asked for with the blobs (sha256 of the LFS files).
    assert ("GET", f"/api/models/{REPO}/revision/{COMMIT}") in hub.requests
    assert cached.result()["files"] == len(served)


def test_a_branch_is_resolved_to_its_commit(hub: FakeHub, tmp_path: Path) -> None:
    cached = cache_model(REPO, "main", tmp_path / "main", endpoint=hub.url)
    assert cached.commit == COMMIT
    assert json.loads((tmp_path / "main" / MANIFEST).read_text())["commit"] == COMMIT


@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_a_file_that_does_not_match_the_hub_is_named_and_removed(
    hub: FakeHub, tmp_path: Path, name: str
) -> None:
    """An LFS file is judged by its sha256, a small file (same size, one byte flipped) by its
    git blob id: both fail, naming the file, and leave no manifest."""
    hub.corrupt.add(name)
    target = tmp_path / "cache"
    with pytest.raises(CacheFailure) as caught:
        cache_model(REPO, COMMIT, target, endpoint=hub.url)
    failure = caught.value
    assert failure.reason == "HashMismatch" and failure.permanent
    assert failure.message.startswith(f"{name}: ")
    assert not (target / name).exists()
    assert not (target / MANIFEST).exists()

    hub.corrupt.clear()  # the next run fetches the removed file again, and passes
    assert len(cache_model(REPO, COMMIT, target, endpoint=hub.url).files) == len(hub.files(REPO))


def test_an_unknown_revision_gives_the_hubs_message(hub: FakeHub, tmp_path: Path) -> None:
    with pytest.raises(CacheFailure) as caught:
        cache_model(REPO, "0" * 40, tmp_path / "x", endpoint=hub.url)
    assert caught.value.reason == "RevisionNotFound" and caught.value.permanent
    assert f"Invalid rev id: {'0' * 40}" in caught.value.message
    assert not (tmp_path / "x" / MANIFEST).exists()


def test_a_401_gives_the_hubs_message(model_dir: Path, tmp_path: Path) -> None:
    with FakeHub({REPO: model_dir}, token="hf_right") as hub:
        with pytest.raises(CacheFailure) as caught:
            cache_model(REPO, COMMIT, tmp_path / "x", endpoint=hub.url, token="hf_wrong")
        assert caught.value.reason == "Unauthorized" and caught.value.permanent
        assert "Invalid credentials in Authorization header" in caught.value.message
        assert caught.value.message.startswith("401 from the hub")
        # The right token passes, sent by the library on every request.
        cached = cache_model(REPO, COMMIT, tmp_path / "y", endpoint=hub.url, token="hf_right")
        assert cached.files


def test_an_unreachable_hub_is_a_failure_worth_retrying(tmp_path: Path) -> None:
    with pytest.raises(CacheFailure) as caught:
        cache_model(REPO, COMMIT, tmp_path / "x", endpoint="http://127.0.0.1:9")
    assert not caught.value.permanent


def test_the_command_writes_its_result_as_the_termination_message(
    hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = tmp_path / "termination-log"
    args = ["cache-model", "--repo", REPO, "--dir", str(tmp_path / "c"), "--endpoint", hub.url]
    assert main([*args, "--revision", COMMIT, "--result", str(result)]) == 0
    written = json.loads(result.read_text())
    assert written["ok"] is True and written["files"] == len(hub.files(REPO))
    assert written["commit"] == COMMIT

    monkeypatch.setenv("HF_TOKEN", "hf_unused")
    code = main([*args, "--revision", "nope", "--result", str(result)])
    assert code == EXIT_PERMANENT
    failed = json.loads(result.read_text())
    assert failed == {"ok": False, "reason": "RevisionNotFound", "message": failed["message"]}
    assert "Invalid rev id: nope" in failed["message"]


def test_the_clean_up_removes_the_other_revisions_the_job_wrote(
    hub: FakeHub, tmp_path: Path
) -> None:
    root = tmp_path / "models"
    for revision in ("old", "serving"):
        cache_model(REPO, "main", root / "org--name" / revision, endpoint=hub.url)
    (root / "org--name" / "failed" / ".cache" / "huggingface").mkdir(parents=True)
    (root / "org--name" / "someone-elses").mkdir()
    (root / "org--name" / "someone-elses" / "weights.bin").write_bytes(b"x")
    (root / "other--model" / "r1" / ".cache" / "huggingface").mkdir(parents=True)
    (root / "other--model" / "r1" / MANIFEST).write_text("{}")
    removed, freed = prune_cache(root, "org--name/serving", started=time.time() + 60)
    assert removed == ["org--name/failed", "org--name/old", "other--model/r1"]
    assert freed >= sum(f.size for f in hub.files(REPO))
    assert (root / "org--name" / "serving" / MANIFEST).is_file()
    assert (root / "org--name" / "someone-elses" / "weights.bin").is_file()  # not ours
    assert not (root / "other--model").exists()
    # What was written after the clean-up started (a download meanwhile) is kept.
    cache_model(REPO, "main", root / "org--name" / "new", endpoint=hub.url)
    assert prune_cache(root, "org--name/serving", started=time.time() - 60)[0] == []


def test_the_clean_up_command_writes_its_result(hub: FakeHub, tmp_path: Path) -> None:
    root = tmp_path / "models"
    cache_model(REPO, "main", root / "a--b" / "old", endpoint=hub.url)
    result = tmp_path / "termination-log"
    args = ["cache-prune", "--root", str(root), "--keep", "a--b/new", "--result", str(result)]
    assert main(args) == 0
    written = json.loads(result.read_text())
    assert written["ok"] is True and written["removed"] == ["a--b/old"]
