"""What ``kubectl llms`` shows and sends, from objects as the API server returns them (pure).

No I/O and no clock here (``now`` is an argument): :mod:`.cli` reads the LLMService, its
Deployments and Pods, and prints what these functions make of them.

* :func:`render_get`: the rollout as a tree (revisions, their Deployments and pods), the
  step and weight, and each check's last measurements with their verdicts.
* :func:`control`: the annotation a control command sets (``rollout.CONTROL_ANNOTATIONS``),
  with the revision it is meant for as its value (the operator ignores a control meant for a
  rollout that is over), or why the command makes no sense now.
* :func:`render_history`: every revision the service ran (``status.revisions.log``), what
  changed in its spec, and how it ended.
* :func:`undo_patch`: the JSON merge patch that makes the spec ask for an earlier revision again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..api.timestamps import from_rfc3339
from ..render.labels import REVISION
from ..rollout.machine import (
    ABORT_ANNOTATION,
    PAUSE_ANNOTATION,
    PROMOTE_ANNOTATION,
    PROMOTE_FULL_ANNOTATION,
    RESUME_ANNOTATION,
    RETRY_ANNOTATION,
    SKIP_ANALYSIS_ANNOTATION,
)

__all__ = [
    "REVISION_SPEC_KEYS",
    "Control",
    "control",
    "render_get",
    "render_history",
    "spec_changes",
    "undo_patch",
]

#: The spec sections a revision is made of (decide.REVISION_SPEC_KEYS): what undo restores.
REVISION_SPEC_KEYS = ("model", "engine", "resources", "serving", "slo")

_VERDICT = {
    "Successful": "✔",
    "Failed": "✖",
    "Error": "⚠",
    "NoData": "?",
    "Inconclusive": "?",
    "Running": "◌",
}


# -- controls ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Control:
    annotation: str
    value: str
    """The revision it is meant for."""
    says: str


_CONTROLS = {
    "promote": PROMOTE_ANNOTATION,
    "promote-full": PROMOTE_FULL_ANNOTATION,
    "abort": ABORT_ANNOTATION,
    "retry": RETRY_ANNOTATION,
    "pause": PAUSE_ANNOTATION,
    "resume": RESUME_ANNOTATION,
    "skip-analysis": SKIP_ANALYSIS_ANNOTATION,
}


def control(obj: Mapping[str, Any], command: str) -> Control:
    """The annotation ``command`` sets on ``obj``; ValueError when there is nothing to act on."""
    status = obj.get("status") or {}
    revisions = status.get("revisions") or {}
    rollout = status.get("rollout") or {}
    name = obj["metadata"]["name"]
    candidate = revisions.get("candidate")
    if command == "retry":
        failed = revisions.get("failed")
        if not failed or candidate:
            raise ValueError(
                f"{name} has no aborted or rolled-back revision to retry"
                + (f" (revision {candidate} is rolling out)" if candidate else "")
            )
        return Control(RETRY_ANNOTATION, failed, f"retry of revision {failed}")
    if not candidate:
        stable = revisions.get("stable")
        raise ValueError(f"{name} has no rollout in progress (revision {stable} is stable)")
    if command == "resume" and not rollout.get("paused") and not _analysis_running(rollout):
        raise ValueError(f"{name}'s rollout of {candidate} is not paused")
    if command == "pause" and rollout.get("userPaused"):
        raise ValueError(f"{name}'s rollout of {candidate} is already paused by a person")
    says = {
        "promote": "promotion of the current step",
        "promote-full": "full promotion",
        "abort": "abort",
        "pause": "pause",
        "resume": "resume",
        "skip-analysis": "skipping the analysis",
    }[command]
    return Control(_CONTROLS[command], candidate, f"{says} of revision {candidate}")


def _analysis_running(rollout: Mapping[str, Any]) -> bool:
    return ((rollout.get("analysis") or {}).get("phase")) == "Running"


# -- get --------------------------------------------------------------------------------------


def _age(stamp: str | None, now: datetime | None) -> str:
    if not stamp or now is None:
        return ""
    seconds = max(0, int((now - from_rfc3339(stamp)).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _ready(pod: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _state(status: Mapping[str, Any]) -> str:
    """The rollout's state in a word, as Argo's ``get`` shows it."""
    revisions = status.get("revisions") or {}
    rollout = status.get("rollout") or {}
    if revisions.get("candidate"):
        reason = rollout.get("pauseReason")
        if reason in ("RollingBack", "Abandoning"):
            return f"✖ {reason}" if reason == "RollingBack" else f"◌ {reason}"
        if rollout.get("paused"):
            return f"॥ Paused ({reason})"
        return "◌ Progressing"
    failed = revisions.get("failed")
    if failed:
        for record in reversed(revisions.get("history") or []):
            if record.get("revision") == failed:
                if record.get("outcome") == "Aborted":
                    return "✖ Degraded (Aborted)"
                return f"✖ Degraded (RolledBack: {record.get('cause') or 'RolledBack'})"
        return "✖ Degraded"
    phase = status.get("phase") or "Unknown"
    return "✔ Healthy" if phase == "Available" else f"◌ {phase}"


def _checks_table(run: Mapping[str, Any], indent: str = "  ") -> list[str]:
    last = {m.get("check"): m for m in run.get("last") or []}
    history = run.get("checks") or [
        {"check": c, "threshold": m.get("threshold"), "measurements": [m]} for c, m in last.items()
    ]
    if not history:
        return []
    width = max(len(str(h.get("check"))) for h in history)
    lines = [f"{indent}{'CHECK':<{width}}  {'THRESHOLD':>10}  LAST MEASUREMENTS (oldest first)"]
    for item in history:
        name = str(item.get("check"))
        threshold = item.get("threshold")
        shown = "" if threshold is None else f"{threshold:g}"
        marks = []
        for point in item.get("measurements") or []:
            value = point.get("value")
            text = "-" if value is None else f"{value:.4g}"
            marks.append(f"{_VERDICT.get(str(point.get('verdict')), '?')} {text}")
        dry = "  (dry run)" if item.get("dryRun") else ""
        lines.append(f"{indent}{name:<{width}}  {shown:>10}  {'  '.join(marks)}{dry}")
    message = (last.get(history[-1].get("check")) or {}).get("message")
    if message and run.get("phase") in ("Failed", "Error", "Inconclusive"):
        failing = [m for m in last.values() if m.get("verdict") != "Successful"]
        for m in failing[:3]:
            lines.append(f"{indent}  {m.get('check')}: {m.get('message')}")
    return lines


def render_get(
    obj: Mapping[str, Any],
    deployments: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    now: datetime | None,
) -> str:
    """``kubectl llms get NAME``: the rollout, its revisions with their Deployments and pods,
    and each check's last measurements. ``now`` None: no ages (to tell frames apart)."""
    status = obj.get("status") or {}
    lines = _header(obj)
    lines += _tree(obj, deployments, pods, now)
    lines += _analysis_runs(status.get("rollout") or {})
    return "\n".join(lines) + "\n"


def _header(obj: Mapping[str, Any]) -> list[str]:
    """Name, status, strategy, and the rollout's step, weights and controls."""
    meta = obj["metadata"]
    status = obj.get("status") or {}
    rollout = status.get("rollout") or {}
    plan = (obj.get("spec") or {}).get("rollout") or {}
    strategy = "BlueGreen" if plan.get("strategy") == "blueGreen" else "Canary"
    lines = [
        f"Name:            {meta['name']}",
        f"Namespace:       {meta.get('namespace', '')}",
        f"Status:          {_state(status)}",
    ]
    if rollout.get("message"):
        lines.append(f"Message:         {rollout['message']}")
    lines.append(f"Strategy:        {strategy}")
    if not (status.get("revisions") or {}).get("candidate"):
        return lines
    steps = len(plan.get("steps") or [])
    fast = rollout.get("fastRollback")
    total = 1 if fast else steps + (1 if strategy == "Canary" else 2)
    lines.append(f"  Step:          {rollout.get('step', 0)}/{total}")
    if strategy == "Canary":
        lines.append(f"  SetWeight:     {_set_weight(plan, rollout)}")
    lines.append(f"  ActualWeight:  {rollout.get('weight', 0)}")
    flags = [
        label
        for key, label in (
            ("userPaused", "paused by a person"),
            ("promoteFull", "full promotion"),
            ("analysisSkipped", "analysis skipped"),
            ("fastRollback", "fast rollback"),
            ("resumeAfterAnalysis", "resume after the analysis"),
        )
        if rollout.get(key)
    ]
    if flags:
        lines.append(f"  Controls:      {', '.join(flags)}")
    return lines


def _tree(
    obj: Mapping[str, Any],
    deployments: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    now: datetime | None,
) -> list[str]:
    """The LLMService, its revisions (candidate, stable, then the rest), their Deployments."""
    meta = obj["metadata"]
    status = obj.get("status") or {}
    revisions = status.get("revisions") or {}
    candidate, stable = revisions.get("candidate"), revisions.get("stable")
    log = {e.get("revision"): e for e in revisions.get("log") or []}
    lines = ["", f"{'NAME':<52} {'KIND':<11} {'STATUS':<22} AGE"]
    lines.append(f"{'⟳ ' + meta['name']:<52} {'LLMService':<11} {_state(status):<22} "
                 f"{_age(meta.get('creationTimestamp'), now)}")  # fmt: skip
    by_revision: dict[str, list[Mapping[str, Any]]] = {}
    for dep in deployments:
        rev = (dep.get("metadata", {}).get("labels") or {}).get(REVISION)
        if rev:
            by_revision.setdefault(rev, []).append(dep)
    order = [r for r in (candidate, stable) if r] + sorted(
        r for r in by_revision if r not in (candidate, stable)
    )
    for i, rev in enumerate(order):
        role = "candidate" if rev == candidate else "stable" if rev == stable else ""
        if rev == revisions.get("failed"):
            role = (role + " failed").strip()
        number = (log.get(rev) or {}).get("number")
        label = f"# revision:{number}" if number else "# revision"
        branch, stem = ("└──", "   ") if i == len(order) - 1 else ("├──", "│  ")
        lines.append(f"{branch}{label} {rev}  {role}".rstrip())
        mine = [p for p in pods if (p.get("metadata", {}).get("labels") or {}).get(REVISION) == rev]
        lines += _deployment_lines(by_revision.get(rev, []), mine, stem, now)
    return lines


def _deployment_lines(
    deps: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    stem: str,
    now: datetime | None,
) -> list[str]:
    """One revision's Deployments, each with that revision's pods under it."""
    lines = []
    for j, dep in enumerate(deps):
        dep_status = dep.get("status") or {}
        want = (dep.get("spec") or {}).get("replicas") or 0
        ready = dep_status.get("readyReplicas") or 0
        mark = "✔" if ready >= want else "◌"
        dbranch, dstem = ("└──", "   ") if j == len(deps) - 1 else ("├──", "│  ")
        name = f"{stem}{dbranch}⧉ {dep['metadata']['name']}"
        lines.append(
            f"{name:<52} {'Deployment':<11} {mark + f' {ready}/{want} Ready':<22} "
            f"{_age(dep['metadata'].get('creationTimestamp'), now)}"
        )
        for k, pod in enumerate(sorted(pods, key=lambda p: p["metadata"]["name"])):
            pbranch = "└──" if k == len(pods) - 1 else "├──"
            if pod["metadata"].get("deletionTimestamp"):
                state = "◌ Terminating"
            elif _ready(pod):
                state = "✔ Ready"
            else:
                state = f"◌ {(pod.get('status') or {}).get('phase', 'Pending')}"
            pname = f"{stem}{dstem}{pbranch}□ {pod['metadata']['name']}"
            lines.append(
                f"{pname:<52} {'Pod':<11} {state:<22} "
                f"{_age(pod['metadata'].get('creationTimestamp'), now)}"
            )
    return lines


def _analysis_runs(rollout: Mapping[str, Any]) -> list[str]:
    """The step's analysis and the background analysis, each with its checks' measurements."""
    lines: list[str] = []
    for title, key in (("Analysis", "analysis"), ("Background analysis", "backgroundAnalysis")):
        run = rollout.get(key)
        if not run:
            continue
        counts = (
            f"{run.get('measurementsTaken', 0)} measured: {run.get('successful', 0)} successful, "
            f"{run.get('failed', 0)} failed, {run.get('inconclusive', 0)} inconclusive, "
            f"{run.get('errors', 0)} errors"
        )
        nxt = f"; next at {run['nextMeasurementAt']}" if run.get("nextMeasurementAt") else ""
        lines.append("")
        lines.append(
            f"{title}: {_VERDICT.get(str(run.get('phase')), '')} {run.get('phase')} ({counts}{nxt})"
        )
        lines.extend(_checks_table(run))
    return lines


def _set_weight(plan: Mapping[str, Any], rollout: Mapping[str, Any]) -> int:
    """The weight the plan asks for at the rollout's step (the last setWeight up to it)."""
    step_ = int(rollout.get("step") or 0)
    steps = plan.get("steps") or []
    if rollout.get("fastRollback") or step_ > len(steps):
        return 100  # the promotion
    weight = 0
    for spec_step in steps[: max(0, step_)]:
        if spec_step.get("setWeight") is not None:
            weight = int(spec_step["setWeight"])
    return weight


# -- history, undo ---------------------------------------------------------------------------


def _flatten(value: Any, prefix: str = "") -> dict[str, str]:
    """Dotted paths to leaf values; ``env`` lists keyed by name (``engine.env[NAME]``)."""
    out: dict[str, str] = {}
    if isinstance(value, Mapping):
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    elif (
        isinstance(value, list)
        and value
        and all(isinstance(v, Mapping) and "name" in v for v in value)
    ):
        for item in value:
            rest = {k: v for k, v in item.items() if k != "name"}
            shown = rest.get("value", json.dumps(rest, sort_keys=True)) if rest else ""
            out[f"{prefix}[{item['name']}]"] = str(shown)
    else:
        out[prefix] = json.dumps(value, sort_keys=True) if isinstance(value, list) else str(value)
    return out


def spec_changes(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    """What changed from ``old`` to ``new`` (revision specs), one entry per leaf."""
    if old is None:
        return []
    before, after = _flatten(old), _flatten(new)
    changes = []
    for key in sorted(before.keys() | after.keys()):
        if key not in before:
            changes.append(f"+{key}={after[key]}")
        elif key not in after:
            changes.append(f"-{key}")
        elif before[key] != after[key]:
            changes.append(f"{key}: {before[key]} -> {after[key]}")
    return changes


def _outcome(revision: str, revisions: Mapping[str, Any], rollout: Mapping[str, Any]) -> str:
    if revision == revisions.get("candidate"):
        return f"rolling out (step {rollout.get('step', 0)})"
    if revision == revisions.get("stable"):
        return "stable"
    for record in reversed(revisions.get("history") or []):
        if record.get("revision") == revision:
            cause = record.get("cause")
            return f"{record.get('outcome')}" + (f" ({cause})" if cause else "")
    return ""


def render_history(obj: Mapping[str, Any]) -> str:
    """``kubectl llms history NAME``: number, hash, how it ended, when it was stable, and
    what changed in its spec since the revision before it."""
    status = obj.get("status") or {}
    revisions = status.get("revisions") or {}
    rollout = status.get("rollout") or {}
    log = sorted(revisions.get("log") or [], key=lambda e: int(e.get("number") or 0))
    rows = [("REVISION", "HASH", "OUTCOME", "STABLE", "CHANGE")]
    previous: Mapping[str, Any] | None = None
    for entry in log:
        spec = entry.get("spec") or {}
        omitted = entry.get("specOmittedBytes")
        changes = spec_changes(previous, spec) if previous and spec else []
        change = "; ".join(changes[:4]) + (
            f"; ... ({len(changes)} in all)" if len(changes) > 4 else ""
        )
        if omitted is not None:
            change = f"(its spec, {omitted:,} bytes, was not kept: over the status' budget)"
        elif previous is None:
            change = "(the oldest kept)"
        elif not previous:
            change = "(the spec before it was not kept)"
        elif not changes:
            change = "(same spec)"
        since, until = entry.get("stableSince"), entry.get("stableUntil")
        stable = f"{since or '?'} - {until or 'now'}" if since or until else "-"
        rows.append(
            (
                str(entry.get("number")),
                str(entry.get("revision")),
                _outcome(str(entry.get("revision")), revisions, rollout),
                stable,
                change,
            )
        )
        previous = spec
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4] + "\n"
        for row in rows
    )


def _merge_patch(current: Any, wanted: Any) -> Any:
    """The JSON merge patch (RFC 7386) turning ``current`` into ``wanted``."""
    if not isinstance(current, Mapping) or not isinstance(wanted, Mapping):
        return wanted
    patch: dict[str, Any] = {}
    for key in current.keys() - wanted.keys():
        patch[key] = None
    for key, value in wanted.items():
        if key not in current:
            patch[key] = value
        elif current[key] != value:
            patch[key] = _merge_patch(current[key], value)
    return patch


def undo_patch(
    obj: Mapping[str, Any], to_revision: int | None = None
) -> tuple[dict[str, Any], str]:
    """The merge patch of ``spec`` that asks for revision ``to_revision`` again (default: the
    last revision that served as stable before the current one), and what it is.

    ValueError when there is no such revision, or its spec was not kept."""
    status = obj.get("status") or {}
    revisions = status.get("revisions") or {}
    log = revisions.get("log") or []
    stable = revisions.get("stable")
    if to_revision is None:
        served = [
            e for e in log if e.get("revision") != stable and e.get("stableUntil") is not None
        ]
        if not served:
            raise ValueError("no earlier revision served as stable: give --to-revision N")
        target = max(served, key=lambda e: from_rfc3339(str(e["stableUntil"])))
    else:
        found = [e for e in log if int(e.get("number") or 0) == to_revision]
        if not found:
            known = ", ".join(str(e.get("number")) for e in log) or "none"
            raise ValueError(f"revision {to_revision} is not in the history (kept: {known})")
        target = found[0]
    wanted = target.get("spec") or {}
    omitted = target.get("specOmittedBytes")
    if not wanted and omitted is not None:
        raise ValueError(
            f"revision {target.get('number')}'s spec ({omitted:,} bytes) was not kept: the "
            "specs in status share a fixed budget and newer ones took it; restore it from Git"
        )
    if not wanted:
        raise ValueError(f"revision {target.get('number')}'s spec was not recorded")
    spec = obj.get("spec") or {}
    current = {k: spec[k] for k in REVISION_SPEC_KEYS if k in spec}
    patch = _merge_patch(current, {k: wanted[k] for k in REVISION_SPEC_KEYS if k in wanted})
    about = f"revision {target.get('number')} ({target.get('revision')})"
    return ({"spec": patch} if patch else {}), about
