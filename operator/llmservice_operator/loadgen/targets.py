"""Load targets from the cluster: the Ready pods behind an LLMService's Service.

    with PodTargets.from_kubeconfig("chat", "ml") as targets:
        targets.wait_ready(timeout_s=60)
        report = asyncio.run(run_load(config, targets))

Requests go to pods directly (``http://podIP:port``), as a Service's endpoints would route
them: the Service's selector picks the pods (all revisions, or the one a blue-green switch
points at), only Ready pods that are not terminating count, and the port is the Service's
``targetPort`` resolved in each pod. A background thread re-reads the pods every
``refresh_s`` seconds, so during a run requests follow pods becoming ready or going away; the
load generator spreads requests round-robin over the current list, so each pod gets a share in
proportion to the number of ready pods. Without a Service of that name the pods labelled
``llmservice.dev/service=<name>`` are used.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, cast

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from ..render.labels import SERVICE

__all__ = ["PodTargets", "ready_endpoints", "service_selector"]

log = logging.getLogger(__name__)

DEFAULT_PORT = "http"


def service_selector(service: Mapping[str, Any] | None, name: str) -> tuple[str, int | str]:
    """The label selector (``k=v,...``) and target port for the LLMService called ``name``."""
    if service is None:
        return f"{SERVICE}={name}", DEFAULT_PORT
    spec = service.get("spec") or {}
    selector = spec.get("selector") or {SERVICE: name}
    ports = spec.get("ports") or []
    port: int | str = DEFAULT_PORT
    if ports:
        chosen = next((p for p in ports if p.get("name") == "http"), ports[0])
        port = chosen.get("targetPort") or chosen.get("port") or DEFAULT_PORT
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items())), port


def _ready(pod: Mapping[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if not status.get("podIP"):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _resolve_port(pod: Mapping[str, Any], port: int | str) -> int | None:
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return int(port)
    for container in (pod.get("spec") or {}).get("containers") or []:
        for item in container.get("ports") or []:
            if item.get("name") == port:
                return int(item["containerPort"])
    return None


def ready_endpoints(pods: Sequence[Mapping[str, Any]], port: int | str) -> list[str]:
    """``http://podIP:port`` of every Ready, non-terminating pod, sorted."""
    urls = []
    for pod in pods:
        number = _resolve_port(pod, port)
        if number is not None and _ready(pod):
            urls.append(f"http://{pod['status']['podIP']}:{number}")
    return sorted(urls)


class PodTargets:
    """A :data:`~llmservice_operator.loadgen.client.TargetSource` of an LLMService's Ready pods."""

    def __init__(
        self,
        api_client: client.ApiClient,
        service: str,
        namespace: str,
        *,
        refresh_s: float = 2.0,
    ) -> None:
        if refresh_s <= 0:
            raise ValueError(f"refresh_s must be > 0, got {refresh_s}")
        self.service = service
        self.namespace = namespace
        self.refresh_s = refresh_s
        self._api = client.CoreV1Api(api_client)
        self._current: tuple[str, ...] = ()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.refreshes = 0

    @classmethod
    def from_kubeconfig(
        cls, service: str, namespace: str, kubeconfig: str | None = None, *, refresh_s: float = 2.0
    ) -> PodTargets:
        """Using ``kubeconfig`` ($KUBECONFIG, ~/.kube/config, or in-cluster when None)."""
        if kubeconfig is None:
            try:
                config.load_incluster_config()  # type: ignore[no-untyped-call]
                api_client = client.ApiClient()
            except config.ConfigException:
                api_client = config.new_client_from_config()  # type: ignore[no-untyped-call]
        else:
            api_client = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        return cls(api_client, service, namespace, refresh_s=refresh_s)

    def refresh(self) -> tuple[str, ...]:
        """Read the Service and its pods now; returns (and keeps) the Ready endpoints."""
        try:
            response = self._api.read_namespaced_service(
                self.service, self.namespace, _preload_content=False
            )
            service: Mapping[str, Any] | None = _json(response)
        except ApiException as exc:
            if exc.status != 404:
                raise
            service = None
        selector, port = service_selector(service, self.service)
        pods = _json(
            self._api.list_namespaced_pod(
                self.namespace, label_selector=selector, _preload_content=False
            )
        )
        urls = tuple(ready_endpoints(pods.get("items") or [], port))
        with self._lock:
            self._current = urls
            self.refreshes += 1
        return urls

    def __call__(self) -> Sequence[str]:
        with self._lock:
            return self._current

    def wait_ready(self, timeout_s: float = 60.0, minimum: int = 1) -> tuple[str, ...]:
        """Refresh until at least ``minimum`` pods are Ready; TimeoutError otherwise."""
        deadline = time.monotonic() + timeout_s
        while True:
            urls = self.refresh()
            if len(urls) >= minimum:
                return urls
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{len(urls)} of the {minimum} Ready pods wanted for "
                    f"{self.namespace}/{self.service} after {timeout_s:g}s"
                )
            time.sleep(min(0.5, self.refresh_s))

    # ----------------------------------------------------------------- background refresh
    def start(self) -> PodTargets:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._loop, name=f"targets {self.service}", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self.refresh()
            except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                log.warning("refreshing the pods of %s: %s", self.service, exc)  # keep the last

    def __enter__(self) -> PodTargets:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _json(response: object) -> Any:
    return json.loads(cast(Any, response).data)
