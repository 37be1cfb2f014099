"""``kubectl llms``: what it shows (get, history), the annotation each control sets, and the
undo patch, from statuses the step machine wrote (harness.World); its command line."""

from __future__ import annotations

import re
from typing import Any

import pytest

from llmservice_operator.api.spec import RolloutSpec
from llmservice_operator.api.status import REVISION_SPECS_BUDGET
from llmservice_operator.kubectl_llms import cli, view
from llmservice_operator.rollout.machine import (
    ABORT_ANNOTATION,
    PROMOTE_FULL_ANNOTATION,
    RETRY_ANNOTATION,
)

from .harness import NEW, NEWER, OLD, Behaviour, World

SPEC: dict[str, Any] = {
    "steps": [{"setWeight": 50}, {"analysis": {}}, {"pause": {}}],
    "analysis": {"interval": "1m", "count": 3},
    "backgroundAnalysis": {"startingStep": 0},
}
ENGINE = {"maxModelLen": 4096, "env": [{"name": "A", "value": "1"}]}


def engine(value: str, **more: Any) -> dict[str, Any]:
    return {**ENGINE, "env": [{"name": "A", "value": value}], **more}


def world() -> World:
    w = World(spec=RolloutSpec.model_validate(SPEC))
    w.revision_spec = {"engine": engine("1")}
    w.settle_initial()
    return w


def roll(w: World, revision: str, spec: dict[str, Any]) -> None:
    w.revision, w.revision_spec = revision, spec


def obj(w: World, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "chat",
            "namespace": "ml",
            "creationTimestamp": "2026-03-01T11:00:00Z",
        },
        "spec": {"rollout": SPEC, **(spec or w.revision_spec or {})},
        "status": w.status,
    }


def owned(w: World) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    stamp = "2026-03-01T11:58:00Z"
    deployments = [
        {
            "metadata": {
                "name": f"chat-{r}",
                "labels": {"llmservice.dev/revision": r},
                "creationTimestamp": stamp,
            },
            "spec": {"replicas": o.replicas},
            "status": {"readyReplicas": o.ready},
        }
        for r, o in w.deployments.items()
    ]
    pods = [
        {
            "metadata": {
                "name": f"chat-{r}-{i}",
                "labels": {"llmservice.dev/revision": r},
                "creationTimestamp": stamp,
            },
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }
        for r, o in w.deployments.items()
        for i in range(o.ready)
    ]
    return deployments, pods


def test_get_shows_the_tree_the_step_and_each_checks_measurements() -> None:
    w = world()
    roll(w, NEW, {"engine": engine("2")})
    w.run_until(
        lambda d: bool(
            d.rollout and d.rollout.analysis and d.rollout.analysis.measurements_taken == 2
        )
    )
    text = view.render_get(obj(w), *owned(w), w.now)
    lines = text.splitlines()
    assert lines[:3] == [
        "Name:            chat",
        "Namespace:       ml",
        "Status:          ◌ Progressing",
    ]
    assert "  Step:          2/4" in lines and "  SetWeight:     50" in lines
    assert "  ActualWeight:  50" in lines
    tree = "\n".join(lines)
    assert f"├──# revision:2 {NEW}  candidate" in tree
    assert f"└──# revision:1 {OLD}  stable" in tree
    assert any(f"⧉ chat-{NEW}" in line and "✔ 2/2 Ready" in line for line in lines)
    assert any(f"□ chat-{NEW}-1" in line and "✔ Ready" in line for line in lines)
    assert any(re.match(r"^⟳ chat +LLMService +◌ Progressing +6\dm$", line) for line in lines)
    analysis = text.split("\nAnalysis: ", 1)[1]
    assert analysis.startswith("◌ Running (2 measured: 2 successful")
    assert "  ttftP99Ms           800  ✔ 400  ✔ 400" in analysis
    assert "Background analysis: ◌ Running" in text
    assert view.render_get(obj(w), *owned(w), None) != text  # ages left out to compare frames


def test_get_shows_a_failed_check_with_its_message() -> None:
    w = world()
    w.behaviours[NEW] = Behaviour(ttft_ms=1500)
    roll(w, NEW, {"engine": engine("2")})
    w.run_until(lambda d: d.revisions.candidate is None)
    text = view.render_get(obj(w), *owned(w), w.now)
    assert "Status:          ✖ Degraded (RolledBack: AnalysisFailed)" in text
    assert "ttftP99Ms           800  ✖ 1500" in text
    assert "ttftP99Ms: 1500 ms, want <= 800 ms" in text


def test_controls_name_the_revision_they_are_for() -> None:
    w = world()
    with pytest.raises(ValueError, match=f"chat has no rollout in progress \\(revision {OLD}"):
        view.control(obj(w), "abort")
    roll(w, NEW, {"engine": engine("2")})
    w.tick()
    abort = view.control(obj(w), "abort")
    assert (abort.annotation, abort.value) == (ABORT_ANNOTATION, NEW)
    full = view.control(obj(w), "promote-full")
    assert (full.annotation, full.value) == (PROMOTE_FULL_ANNOTATION, NEW)
    with pytest.raises(ValueError, match="no aborted or rolled-back revision to retry"):
        view.control(obj(w), "retry")
    with pytest.raises(ValueError, match="is not paused"):
        view.control(obj(w), "resume")
    w.annotations[ABORT_ANNOTATION] = abort.value
    w.run_until(lambda d: d.revisions.candidate is None)
    retry = view.control(obj(w), "retry")
    assert (retry.annotation, retry.value) == (RETRY_ANNOTATION, NEW)
    assert "Status:          ✖ Degraded (Aborted)" in view.render_get(obj(w), *owned(w), w.now)


def test_history_numbers_revisions_with_their_change_and_outcome() -> None:
    w = world()
    roll(w, NEW, {"engine": engine("2")})
    w.annotations[PROMOTE_FULL_ANNOTATION] = "x"
    w.run_until(lambda d: d.revisions.candidate is None)
    w.behaviours[NEWER] = Behaviour(error_rate=0.5)
    roll(w, NEWER, {"engine": engine("2", maxModelLen=8192, image="vllm:next")})
    w.run_until(lambda d: d.revisions.candidate is None)
    rows = [line.split() for line in view.render_history(obj(w)).splitlines()]
    assert rows[0] == ["REVISION", "HASH", "OUTCOME", "STABLE", "CHANGE"]
    assert rows[1][:3] == ["1", OLD, "Superseded"]
    assert rows[2][:3] == ["2", NEW, "stable"]
    text = view.render_history(obj(w))
    assert "engine.env[A]: 1 -> 2" in text
    assert "RolledBack (AnalysisFailed)" in text
    assert "+engine.image=vllm:next; engine.maxModelLen: 4096 -> 8192" in text


def test_undo_patch_restores_the_previous_stable_spec() -> None:
    w = world()
    roll(w, NEW, {"engine": engine("2", image="vllm:next"), "slo": {"ttftP99Ms": 500}})
    w.annotations[PROMOTE_FULL_ANNOTATION] = "x"
    w.run_until(lambda d: d.revisions.candidate is None)
    current = obj(w)
    patch, about = view.undo_patch(current)
    assert about == f"revision 1 ({OLD})"
    # env back, the added image and slo removed (null): exactly revision 1's spec
    assert patch == {
        "spec": {"engine": {"env": [{"name": "A", "value": "1"}], "image": None}, "slo": None}
    }
    same, _ = view.undo_patch(current, 2)
    assert same == {}
    with pytest.raises(ValueError, match=r"revision 7 is not in the history \(kept: 1, 2\)"):
        view.undo_patch(current, 7)
    fresh = world()
    with pytest.raises(ValueError, match="no earlier revision served as stable"):
        view.undo_patch(obj(fresh))


def test_history_and_undo_say_when_a_spec_was_not_kept() -> None:
    """The specs in status share a budget (issue 38): an old large one gives its copy up."""
    w = world()
    large = "x" * (REVISION_SPECS_BUDGET // 2)
    roll(w, NEW, {"engine": {"env": [{"name": "A", "value": large}]}})
    w.annotations[PROMOTE_FULL_ANNOTATION] = "x"
    w.run_until(lambda d: d.revisions.candidate is None)
    roll(w, NEWER, {"engine": {"env": [{"name": "A", "value": large + "y"}]}})
    w.annotations[PROMOTE_FULL_ANNOTATION] = "x"
    w.run_until(lambda d: d.revisions.candidate is None)
    log = w.status["revisions"]["log"]
    assert [bool(e["spec"]) for e in log] == [True, False, True]  # the newest and the small
    text = view.render_history(obj(w))
    assert "(its spec, 65,580 bytes, was not kept: over the status' budget)" in text
    assert "(the spec before it was not kept)" in text
    with pytest.raises(ValueError, match=r"revision 2's spec \(65,580 bytes\) was not kept"):
        view.undo_patch(obj(w), 2)
    patch, about = view.undo_patch(obj(w), 1)
    assert about == f"revision 1 ({OLD})" and patch["spec"]["engine"]["env"] == [
        {"name": "A", "value": "1"}
    ]


def test_spec_changes() -> None:
    old = {"model": {"id": "m", "revision": "a"}, "engine": {"env": [{"name": "X", "value": "1"}]}}
    new = {"model": {"id": "m", "revision": "b"}, "engine": {"env": []}}
    assert view.spec_changes(old, new) == [
        "+engine.env=[]",
        "-engine.env[X]",
        "model.revision: a -> b",
    ]
    assert view.spec_changes(None, new) == []


def test_command_line_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["undo"])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("kubectl llms undo: error: the following arguments are required: NAME")
    missing = tmp_path / "nothing"
    assert cli.main(["--kubeconfig", str(missing), "get", "chat"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kubectl llms get: error: no usable kubeconfig:") and err.count("\n") == 1
