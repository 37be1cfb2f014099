"""That nothing was written, observed: a watch from the resourceVersion an object was read at.

Two GETs some seconds apart only say the versions match at those two moments; a watch from the
version read reports every write after it (an ERROR event if that version is no longer
served), and the API server ends it after exactly the time asked for.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kubernetes.dynamic import DynamicClient

__all__ = ["writes_within"]


def _changed(before: Any, after: Any, path: str = "") -> list[str]:
    """The paths (a.b.c) whose values differ, for the failure message."""
    if isinstance(before, dict) and isinstance(after, dict):
        found = []
        for key in sorted(before.keys() | after.keys()):
            if key not in ("resourceVersion", "managedFields"):
                found += _changed(before.get(key), after.get(key), f"{path}.{key}".lstrip("."))
        return found
    return [] if before == after else [path]


def writes_within(
    api_client: Any, objects: list[dict[str, Any]], seconds: int, under: str | None = None
) -> list[str]:
    """Watch each of ``objects`` (as they were read) from its resourceVersion, all at once, for
    ``seconds``: one line per event seen, naming the fields it changed, and one per watch that
    failed or ended early. Empty: nothing was written to any of them in that time.

    ``under`` (e.g. ``"spec"``): count only the writes that change a field under that path,
    against the object as read (a Deployment's status follows its pods; its spec is ours)."""
    dynamic = DynamicClient(api_client)  # type: ignore[no-untyped-call]
    found: list[str] = []
    lock = threading.Lock()

    def watch(obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        what = f"{obj['kind']} {meta['name']}"
        seen: list[str] = []
        started = time.monotonic()
        try:
            resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            for event in dynamic.watch(  # type: ignore[no-untyped-call]
                resource,
                namespace=meta["namespace"],
                name=meta["name"],
                resource_version=meta["resourceVersion"],
                timeout=seconds,
            ):
                raw = event.get("raw_object") or {}
                version = (raw.get("metadata") or {}).get("resourceVersion")
                changed = _changed(obj, raw)
                if under is not None:
                    changed = [p for p in changed if p == under or p.startswith(under + ".")]
                    if not changed and event["type"] == "MODIFIED":
                        continue
                detail = (
                    str(raw.get("message"))
                    if event["type"] == "ERROR"
                    else "changing " + ", ".join(changed)
                )
                seen.append(
                    f"{what}: {event['type']} at resourceVersion {version} "
                    f"(watched from {meta['resourceVersion']}): {detail}"
                )
        except Exception as err:  # noqa: BLE001 - reported: a watch that failed saw nothing
            seen.append(f"{what}: the watch failed: {type(err).__name__}: {err}")
        elapsed = time.monotonic() - started
        if not seen and elapsed < seconds - 1:
            seen.append(f"{what}: the watch ended after {elapsed:.1f}s of {seconds}s")
        with lock:
            found.extend(seen)

    threads = [threading.Thread(target=watch, args=(o,), daemon=True) for o in objects]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 30)
        assert not thread.is_alive(), "a watch outlived its timeout"
    return found
