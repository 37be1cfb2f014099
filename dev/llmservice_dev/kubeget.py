"""``kubectl get ... -o json`` answered in process, for the tests' polling.

The integration tests read the API server hundreds of times a minute (a status, a
Deployment, the Events), each through a new kubectl: a Go process, a TLS handshake and a
discovery read. In the parallel group that was about 2,500 processes and 190 CPU-s of the
machine's 1,584 (docs/testing.md). This client answers the common shapes of ``get`` over one
kept-alive connection with the same JSON kubectl prints (managedFields dropped, each list item
with its kind and apiVersion); any other shape, or anything it cannot resolve, returns None
and the caller runs kubectl. Writes always go through kubectl.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import config
from kubernetes.client.exceptions import ApiException

__all__ = ["Answer", "KubeGet", "for_kubeconfig"]

#: Seconds to connect and to read one answer.
TIMEOUT = (5.0, 30.0)


@dataclass(frozen=True)
class Answer:
    """What kubectl would have said: exit code, stdout, stderr."""

    returncode: int
    stdout: str
    stderr: str = ""


@dataclass(frozen=True)
class _Resource:
    group: str
    version: str
    name: str
    kind: str
    namespaced: bool
    aliases: frozenset[str]

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None, name: str | None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.name}"
        return base + (f"/{name}" if name else "")


@dataclass
class _Query:
    resource: str
    name: str | None
    namespace: str
    all_namespaces: bool
    params: dict[str, str]


def _parse(args: tuple[str, ...]) -> _Query | None:
    """The ``get`` this client answers, or None: one type (TYPE, TYPE NAME or TYPE/NAME),
    -n/--namespace, -A, -l/--selector, --field-selector, and ``-o json``."""
    words: list[str] = []
    namespace, everywhere, output = "default", False, None
    params: dict[str, str] = {}
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        flag, eq, value = arg.partition("=")
        if flag in ("-n", "--namespace", "-l", "--selector", "--field-selector", "-o", "--output"):
            if not eq:
                if not rest:
                    return None
                value = rest.pop(0)
            if flag in ("-n", "--namespace"):
                namespace = value
            elif flag in ("-l", "--selector"):
                params["labelSelector"] = value
            elif flag == "--field-selector":
                params["fieldSelector"] = value
            else:
                output = value
        elif arg in ("-A", "--all-namespaces"):
            everywhere = True
        elif arg.startswith("-"):
            return None
        else:
            words.append(arg)
    if output != "json" or not words or words.pop(0) != "get" or not 1 <= len(words) <= 2:
        return None
    kind, _, slash_name = words[0].partition("/")
    if "," in kind or (slash_name and len(words) > 1):
        return None
    name = slash_name or (words[1] if len(words) > 1 else None)
    if name is not None and (everywhere or params):
        return None
    return _Query(kind.lower(), name, namespace, everywhere, params)


class KubeGet:
    """The client for one kubeconfig (its current context); thread-safe."""

    def __init__(self, kubeconfig: Path) -> None:
        api = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        self._host = api.configuration.host
        self._rest = api.rest_client
        self._headers = {"Accept": "application/json"}
        for auth in api.configuration.auth_settings().values():
            if auth.get("in") == "header" and auth.get("value"):
                self._headers[auth["key"]] = auth["value"]
        self._lock = threading.Lock()
        self._resources: list[_Resource] | None = None

    def get(self, *args: str) -> Answer | None:
        """kubectl's answer to ``kubectl ARGS``, or None when kubectl must answer it."""
        query = _parse(args)
        if query is None:
            return None
        resource = self._resolve(query.resource)
        if resource is None:
            return None
        namespace = None if query.all_namespaces else query.namespace
        path = resource.path(namespace, query.name)
        if query.params:
            path += "?" + urllib.parse.urlencode(query.params)
        status, body = self._read(path)
        if status == 404 and query.name is not None:
            what = f"{resource.name}.{resource.group}" if resource.group else resource.name
            return Answer(1, "", f'Error from server (NotFound): {what} "{query.name}" not found')
        if status != 200:
            return Answer(1, "", f"Error from server ({status}): {body.get('message', body)}")
        return Answer(0, json.dumps(_as_kubectl_prints(body, resource), indent=4) + "\n")

    def _read(self, path: str) -> tuple[int, dict[str, Any]]:
        try:
            response = self._rest.request(
                "GET", self._host + path, headers=self._headers, _request_timeout=TIMEOUT
            )
            data = response.read()
        except ApiException as err:  # the client's own failures (TLS): status 0
            return int(err.status or 0), {"message": str(err.reason)}
        try:
            body = json.loads(data or b"{}")
        except ValueError:
            body = {"message": data.decode(errors="replace")[:500]}
        return int(response.status), body

    def _resolve(self, word: str) -> _Resource | None:
        """kubectl's choice for a type word: ``name[.group]`` by plural, singular, short name
        or kind; the core group first; None when unknown or ambiguous."""
        plural, _, group = word.partition(".")
        resources = self._discovered()
        found = [r for r in resources if plural in r.aliases and (not group or r.group == group)]
        core = [r for r in found if not r.group]
        if core:
            return core[0]
        groups = {r.group for r in found}
        return found[0] if len(groups) == 1 else None

    def _discovered(self) -> list[_Resource]:
        with self._lock:
            if self._resources is None:
                self._resources = self._discover()
            return self._resources

    def _discover(self) -> list[_Resource]:
        found = self._group_resources("", "v1", "/api/v1")
        status, groups = self._read("/apis")
        if status != 200:
            raise RuntimeError(f"discovery: /apis answered {status}")
        for entry in groups.get("groups") or []:
            version = entry["preferredVersion"]["version"]
            found += self._group_resources(
                entry["name"], version, f"/apis/{entry['name']}/{version}"
            )
        return found

    def _group_resources(self, group: str, version: str, path: str) -> list[_Resource]:
        status, body = self._read(path)
        if status != 200:
            return []
        out = []
        for r in body.get("resources") or []:
            if "/" in r["name"] or "get" not in (r.get("verbs") or []):
                continue
            aliases = {r["name"], r.get("singularName") or "", r["kind"].lower()}
            aliases.update(r.get("shortNames") or [])
            out.append(
                _Resource(group, version, r["name"], r["kind"], r["namespaced"], frozenset(aliases))
            )
        return out


def _as_kubectl_prints(body: dict[str, Any], resource: _Resource) -> dict[str, Any]:
    """An object as kubectl -o json prints it: managedFields hidden; a list becomes a ``List``
    whose items carry their kind and apiVersion."""
    if "items" not in body:
        body.get("metadata", {}).pop("managedFields", None)
        return body
    items = []
    for item in body["items"]:
        item.get("metadata", {}).pop("managedFields", None)
        items.append({"apiVersion": resource.api_version, "kind": resource.kind, **item})
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}


_CLIENTS: dict[Path, KubeGet] = {}
_CLIENTS_LOCK = threading.Lock()


def for_kubeconfig(kubeconfig: Path) -> KubeGet:
    """One client per kubeconfig per process."""
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(kubeconfig)
        if client is None:
            client = _CLIENTS[kubeconfig] = KubeGet(kubeconfig)
        return client
