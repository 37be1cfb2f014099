"""The model cache's ``ModelCached`` condition, from its download Job and the Job's pods (pure).

The Job (render/model_cache.py) writes one JSON line as its container's termination message
(commands/cache_model.py): ``{"ok": true, "files", "bytes", "seconds", "path", "commit"}`` or
``{"ok": false, "reason", "message"}``. The condition carries it: True (``Verified``) once the
Job is Complete; False while it runs (``Downloading``, or the last attempt's failure while it is
retried); False with the program's reason (``RevisionNotFound``, ``Unauthorized``,
``HashMismatch``, ...) and the hub's message once the Job has failed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .api.status import ConditionStatus

__all__ = ["CacheState", "cache_state", "job_finished", "job_result"]

JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")


@dataclass(frozen=True)
class CacheState:
    status: ConditionStatus
    reason: str
    message: str

    @property
    def ready(self) -> bool:
        return self.status == "True"


def _true_conditions(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    conditions = (job.get("status") or {}).get("conditions") or []
    return {str(c.get("type")): c for c in conditions if c.get("status") == "True"}


def job_finished(job: dict[str, Any]) -> bool:
    """Complete or failed (or about to be: SuccessCriteriaMet, FailureTarget)."""
    done = {"Complete", "Failed", "SuccessCriteriaMet", "FailureTarget"}
    return bool(done & set(_true_conditions(job)))


def job_result(job_name: str, pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest termination message of the Job's ``cache`` container, parsed; a message that
    is not the program's JSON (the log tail: FallbackToLogsOnError) as ``{"message": text}``."""
    found: list[tuple[str, str]] = []
    for pod in pods:
        labels = pod.get("metadata", {}).get("labels") or {}
        if not any(labels.get(key) == job_name for key in JOB_NAME_LABELS):
            continue
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status.get("name") != "cache":
                continue
            for state in (status.get("state") or {}, status.get("lastState") or {}):
                terminated = state.get("terminated") or {}
                message = terminated.get("message")
                if message:
                    found.append((str(terminated.get("finishedAt") or ""), str(message)))
    if not found:
        return None
    text = max(found)[1].strip()
    try:
        parsed = json.loads(text.splitlines()[-1]) if text else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return parsed
    return {"ok": False, "message": text[-1000:]}


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def cache_state(
    job: dict[str, Any] | None,
    pods: list[dict[str, Any]],
    revision: str,
    path: str,
) -> CacheState:
    """ModelCached for the revision whose download Job is ``job`` (None: not made yet)."""
    if job is None:
        return CacheState("False", "Downloading", f"revision {revision}: starting the download Job")
    name = str(job["metadata"]["name"])
    true = _true_conditions(job)
    result = job_result(name, pods)
    if "Complete" in true or "SuccessCriteriaMet" in true:
        if result is not None and result.get("ok"):
            message = (
                f"revision {revision}: {result.get('files')} files "
                f"({_size(int(result.get('bytes') or 0))}) verified in "
                f"{float(result.get('seconds') or 0):.1f} s, at {path}"
            )
        else:
            message = f"revision {revision}: verified by Job {name}, at {path}"
        return CacheState("True", "Verified", message)
    failed = true.get("Failed") or true.get("FailureTarget")
    if failed is not None:
        if result is not None and not result.get("ok"):
            reason = str(result.get("reason") or "DownloadFailed")
            said = str(result.get("message") or "")
        else:
            reason = "DownloadFailed"
            said = str(failed.get("message") or failed.get("reason") or "the Job failed")
        return CacheState(
            "False",
            reason,
            f"revision {revision}: {said} (Job {name}; fix the spec, or delete the Job to retry)",
        )
    attempts = int((job.get("status") or {}).get("failed") or 0)
    if attempts and result is not None and not result.get("ok"):
        said = str(result.get("message") or "")
        return CacheState(
            "False",
            "Downloading",
            f"revision {revision}: attempt {attempts} failed ({said}); retrying (Job {name})",
        )
    return CacheState(
        "False", "Downloading", f"revision {revision}: downloading into {path} (Job {name})"
    )
