"""The Argo CD health check of docs/gitops.md, evaluated by a real Lua interpreter against
every distinct LLMService status the integration suite produced.

A watch per operator release records each LLMService version it sees in the watched namespace
(deduplicated by what the health check reads). At the end of the session every recorded object
goes through the Lua script; the verdict must agree with the object's own `Ready` condition
(Healthy exactly when Ready is True) and be one of Argo CD's health states.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from llmservice_operator.api import GROUP, PLURAL, VERSION

ROOT = Path(__file__).parents[2]
HEALTH_STATES = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}
_SEEN: dict[str, dict[str, Any]] = {}
_LOCK = threading.Lock()


def lua_script() -> str:
    """The script as docs/gitops.md gives it."""
    text = (ROOT / "docs" / "gitops.md").read_text()
    [script] = re.findall(r"```lua\n(.*?)```", text, flags=re.DOTALL)
    return script


def _signature(obj: dict[str, Any]) -> str:
    status = obj.get("status") or {}
    conditions = sorted(
        (c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or []
    )
    return json.dumps(
        [obj["metadata"].get("generation"), status.get("observedGeneration"), conditions]
    )


def record(obj: dict[str, Any]) -> None:
    with _LOCK:
        _SEEN.setdefault(_signature(obj), obj)


def recorded() -> list[dict[str, Any]]:
    with _LOCK:
        return list(_SEEN.values())


class StatusRecorder:
    """Watches the LLMServices of one namespace until stopped (a thread)."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        self._api_client = api_client
        self._namespace = namespace
        self._watch: Any = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="status recorder")

    def start(self) -> StatusRecorder:
        self._thread.start()
        return self

    def _run(self) -> None:
        from kubernetes import client, watch

        api = client.CustomObjectsApi(self._api_client)
        self._watch = watch.Watch()  # type: ignore[no-untyped-call]
        try:
            for event in self._watch.stream(  # type: ignore[no-untyped-call]
                api.list_namespaced_custom_object,
                GROUP, VERSION, self._namespace, PLURAL, timeout_seconds=3600,
            ):  # fmt: skip
                if isinstance(event.get("object"), dict):
                    record(event["object"])
        except Exception:  # noqa: BLE001 - the namespace went away, or the stream did
            return

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()


def _lua(value: Any) -> str:
    """A JSON value as a Lua literal (null is nil: absent, as Argo CD's obj has it)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # its escapes are Lua's for the characters statuses carry
    if isinstance(value, list):
        return "{" + ", ".join(_lua(v) for v in value) + "}"
    return "{" + ", ".join(f"[{json.dumps(k)}] = {_lua(v)}" for k, v in value.items()) + "}"


def evaluate(objs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(health status, message) of each object, by the Lua script, in one interpreter run."""
    lua = shutil.which("lua5.4") or shutil.which("lua")
    if lua is None:
        raise AssertionError("no Lua interpreter: make install installs Debian's lua5.4")
    body = "\n".join(f"  {line}" for line in lua_script().splitlines())
    program = [f"local function check(obj)\n{body}\nend"]
    for obj in objs:
        program.append(
            f"do local hs = check({_lua(obj)}); io.write(hs.status, '\\t', "
            "(string.gsub(hs.message or '', '\\n', ' ')), '\\n') end"
        )
    out = subprocess.run(
        [lua, "-"], input="\n".join(program), capture_output=True, text=True, check=True
    ).stdout
    return [tuple(line.split("\t", 1)) for line in out.splitlines()]  # type: ignore[misc]


def check_recorded() -> tuple[int, dict[str, int]]:
    """Evaluate everything recorded; (objects, counts by health). Raises on a disagreement."""
    objs = recorded()
    verdicts = evaluate(objs)
    assert len(verdicts) == len(objs)
    counts: dict[str, int] = {}
    wrong = []
    for obj, (health, message) in zip(objs, verdicts, strict=True):
        counts[health] = counts.get(health, 0) + 1
        ready = next(
            (c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"),
            None,
        )
        healthy = (
            ready is not None
            and ready["status"] == "True"
            and (
                obj["metadata"].get("generation")
                == (obj.get("status") or {}).get("observedGeneration")
            )
        )
        if health not in HEALTH_STATES or (health == "Healthy") != healthy:
            wrong.append((obj["metadata"]["name"], health, message, ready))
    assert not wrong, f"the Argo CD health check disagrees with Ready: {wrong[:5]}"
    return len(objs), counts
