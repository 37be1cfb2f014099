"""The runner: one live ``llmservice sim`` process per LLMService pod on the fake (kwok) nodes.

It plays the kubelet's part for those pods: it watches them, starts a simulator bound to each
pod's IP once kwok has made the pod ``Running`` (see :mod:`.podspec`), probes the pod's
readiness probe on it and reports the result in the pod's ``llmservice.dev/sim-ready``
annotation (the local cluster's kwok stages turn that into the Ready condition), restarts a
simulator that exits (crash fault) with the kubelet's back-off, counting restarts in
``llmservice.dev/sim-restarts``, and stops it when the pod goes away (SIGTERM, then SIGKILL).

Threads: the Kubernetes watch runs in a thread (the client is synchronous) and hands pod
events to the asyncio loop, which owns every simulator. A small HTTP server on loopback says
``/healthz`` (200 once the first pod list is handled) and ``/pods`` (what runs where), and
serves ``/sd``: Prometheus ``http_sd_configs`` target groups for every LLMService pod, built
as Kubernetes discovery builds them (:mod:`.discovery`; Debian's Prometheus has none).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import aiohttp
import urllib3
from aiohttp import web
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from llmservice_operator.render.labels import SERVICE

from ..engine import EnginePaths, engine_argv, engine_env, engine_installed, engine_paths
from ._child import PARENT_ENV
from .discovery import target_groups
from .podspec import (
    READY_ANNOTATION,
    RESTARTS_ANNOTATION,
    SIM_ENV_PREFIX,
    Probe,
    SimLaunch,
    annotations_patch,
    launch_for,
    worker_ready,
)

__all__ = ["PodSim", "Runner", "RunnerConfig"]

log = logging.getLogger("llmservice.simrunner")

#: kubelet's container restart back-off: 10 s doubling to 5 min (simulated seconds).
_BACKOFF_BASE_S = 10.0
_BACKOFF_MAX_S = 300.0
_PR_SET_PDEATHSIG = 1
_WATCH_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError, KeyError)


#: Pod env var (LLMSERVICE_SIM_* are passed through): "1" marks the pod Ready with no process.
NO_PROCESS_ENV = "LLMSERVICE_SIM_NO_PROCESS"


@dataclass(frozen=True)
class RunnerConfig:
    time_scale: float = 10.0
    log_dir: Path = Path("sims")
    #: Only pods on nodes with this annotation (kwok's fake nodes) get a simulator.
    node_annotation: tuple[str, str] = ("kwok.x-k8s.io/node", "fake")
    stop_grace_s: float = 2.0
    #: Seconds between full re-lists of pods and nodes (the watch restarts then too).
    resync_s: float = 30.0
    python: str = sys.executable
    extra_env: Mapping[str, str] = field(default_factory=dict)
    #: Cores the real engines are spread over (VLLM_CPU_OMP_THREADS_BIND), one engine a core.
    engine_cores: tuple[str, ...] = tuple(str(c) for c in range(os.cpu_count() or 1))


class PodSim:
    """One pod's simulator: process, probe loop, restarts and the pod's annotations."""

    def __init__(self, runner: Runner, launch: SimLaunch, annotations: Mapping[str, str]) -> None:
        self.runner = runner
        self.launch = launch
        self.annotations = dict(annotations)
        try:
            self.restarts = int(annotations.get(RESTARTS_ANNOTATION, "0"))
        except ValueError:
            self.restarts = 0
        self.ready = False
        self.state = "starting"
        self.last_exit: int | None = None
        self.process: asyncio.subprocess.Process | None = None
        #: The real engine's install and core (VLLM_CPU_OMP_THREADS_BIND), when it runs one.
        self.paths: EnginePaths | None = None
        self.core: str | None = None
        self.stop_event = asyncio.Event()
        self.task = asyncio.create_task(self._supervise(), name=f"sim {launch.key}")

    # ------------------------------------------------------------------ lifecycle
    async def _supervise(self) -> None:
        try:
            while not self.stop_event.is_set():
                await self.runner.wait_address_free(self)
                if self.stop_event.is_set():
                    break
                if not await self._start_process():
                    code = 127  # the engine is not installed: back off like a crash loop
                elif self.launch.engine is not None:
                    code = await self._probe_engine_until_exit()
                else:
                    code = await self._probe_until_exit()
                if self.stop_event.is_set():
                    break
                self.ready = False
                self.restarts += 1
                self.last_exit = code
                self.state = "backoff"
                delay = min(_BACKOFF_MAX_S, _BACKOFF_BASE_S * 2 ** (self.restarts - 1))
                if self.launch.engine is None:  # a real engine lives on the wall clock
                    delay /= self.runner.config.time_scale
                log.warning(
                    "%s: simulator exited with code %s; restart %d in %.1fs",
                    self.launch.key,
                    code,
                    self.restarts,
                    delay,
                )
                await self.sync_annotations()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop_event.wait(), delay)
        finally:
            await self._terminate()
            self.ready = False
            self.state = "stopped"

    async def _start_process(self) -> bool:
        if self.launch.engine is not None:
            return await self._start_engine()
        config = self.runner.config
        log_dir = config.log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        path = log_dir / f"{self.launch.namespace}.{self.launch.name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith(SIM_ENV_PREFIX)}
        env.update(config.extra_env)
        env.update(self.launch.env)
        env[PARENT_ENV] = str(os.getpid())
        with path.open("ab") as out:
            out.write(f"--- start {' '.join(self.launch.argv)}\n".encode())
            out.flush()
            self.process = await asyncio.create_subprocess_exec(
                config.python,
                "-m",
                "llmservice_dev.simrunner._child",
                *self.launch.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                close_fds=True,
            )
        self.state = "running"
        log.info(
            "%s: started simulator pid %d on %s:%d (gpu %s)",
            self.launch.key,
            self.process.pid,
            self.launch.ip,
            self.launch.probe.port,
            self.launch.gpu,
        )
        return True

    async def _start_engine(self) -> bool:
        """The real CPU vLLM for this pod (False when it is not installed: logged)."""
        engine = self.launch.engine
        assert engine is not None
        paths = engine_paths()
        missing = engine_installed(paths)
        if missing is not None:
            self.state = f"failed: {missing}"
            log.error("%s: cannot start the real engine: %s", self.launch.key, missing)
            return False
        api_key = None
        if engine.api_key_ref is not None:
            api_key = await self.runner.secret_value(self.launch.namespace, *engine.api_key_ref)
        self.core = self.runner.claim_core(self)
        argv = engine_argv(
            engine.command,
            engine.args,
            paths=paths,
            host=self.launch.ip,
            port=self.launch.probe.port,
        )
        base = {k: v for k, v in os.environ.items() if not k.startswith(SIM_ENV_PREFIX)}
        env = {**engine_env(base, omp_threads_bind=self.core, api_key=api_key), **engine.env}
        path = self.runner.config.log_dir / f"{self.launch.namespace}.{self.launch.name}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as out:
            out.write(f"--- start {' '.join(argv)}\n".encode())
            out.flush()
            self.process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                close_fds=True,
                start_new_session=True,  # its engine-core children are stopped with it
                preexec_fn=_terminate_with_parent,
            )
        self.paths = paths
        self.state = "running"
        log.info(
            "%s: started the real engine (vLLM %s) pid %d on %s:%d, core %s",
            self.launch.key,
            paths.version,
            self.process.pid,
            self.launch.ip,
            self.launch.probe.port,
            self.core,
        )
        return True

    async def _probe_until_exit(self) -> int:
        """Probe until the process exits (its code) or the pod is gone (-1)."""
        assert self.process is not None
        probe = self.launch.probe
        exited = asyncio.ensure_future(self.process.wait())
        stopped = asyncio.ensure_future(self.stop_event.wait())
        successes = failures = 0
        try:
            while True:
                if await self.runner.probe(self.launch):
                    successes, failures = successes + 1, 0
                else:
                    successes, failures = 0, failures + 1
                if not self.ready and successes >= probe.success_threshold:
                    self.ready = True
                    log.info("%s: ready", self.launch.key)
                elif self.ready and failures >= probe.failure_threshold:
                    self.ready = False
                    log.info("%s: not ready (%d failed probes)", self.launch.key, failures)
                await self.sync_annotations()
                done, _ = await asyncio.wait(
                    {exited, stopped}, timeout=probe.period_s, return_when=asyncio.FIRST_COMPLETED
                )
                if stopped in done:
                    return -1
                if exited in done:
                    return exited.result()
        finally:
            for future in (exited, stopped):
                if not future.done():
                    future.cancel()

    async def _probe_engine_until_exit(self) -> int:
        """The kubelet's three probes for a real engine: startup (until it answers; the
        container is restarted past its budget), then readiness and liveness (restarted after
        ``failureThreshold`` failures in a row). Returns the exit code, or -1 when stopped."""
        assert self.process is not None and self.launch.engine is not None
        engine = self.launch.engine
        exited = asyncio.ensure_future(self.process.wait())
        stopped = asyncio.ensure_future(self.stop_event.wait())

        async def pause(probe: Probe) -> int | None:
            done, _ = await asyncio.wait(
                {exited, stopped}, timeout=probe.period_s, return_when=asyncio.FIRST_COMPLETED
            )
            if stopped in done:
                return -1
            return exited.result() if exited in done else None

        try:
            failures = 0
            while not await self.runner.probe(self.launch, engine.startup):
                failures += 1
                if failures >= engine.startup.failure_threshold:
                    log.warning("%s: startup probe failed %d times", self.launch.key, failures)
                    return await self._kill_for_probe()
                if (code := await pause(engine.startup)) is not None:
                    return code
            log.info("%s: the engine answers (startup probe passed)", self.launch.key)
            ready_ok = ready_bad = live_bad = 0
            while True:
                if await self.runner.probe(self.launch):
                    ready_ok, ready_bad = ready_ok + 1, 0
                else:
                    ready_ok, ready_bad = 0, ready_bad + 1
                live_bad = (
                    0 if await self.runner.probe(self.launch, engine.liveness) else live_bad + 1
                )
                if not self.ready and ready_ok >= self.launch.probe.success_threshold:
                    self.ready = True
                    log.info("%s: ready", self.launch.key)
                elif self.ready and ready_bad >= self.launch.probe.failure_threshold:
                    self.ready = False
                    log.info("%s: not ready (%d failed probes)", self.launch.key, ready_bad)
                await self.sync_annotations()
                if live_bad >= engine.liveness.failure_threshold:
                    log.warning("%s: liveness probe failed %d times", self.launch.key, live_bad)
                    return await self._kill_for_probe()
                if (code := await pause(self.launch.probe)) is not None:
                    return code
        finally:
            for future in (exited, stopped):
                if not future.done():
                    future.cancel()

    async def _kill_for_probe(self) -> int:
        """What the kubelet does to a container that fails its startup or liveness probe."""
        self.ready = False
        await self._stop_engine(grace_s=self.runner.config.stop_grace_s, drain=False)
        return 137

    async def _terminate(self) -> None:
        if self.launch.engine is not None:
            await self._stop_engine(grace_s=self.launch.engine.grace_s, drain=True)
            return
        process = self.process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            await asyncio.wait_for(process.wait(), self.runner.config.stop_grace_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        log.info("%s: stopped simulator pid %d", self.launch.key, process.pid)

    async def _stop_engine(self, grace_s: float, drain: bool) -> None:
        """As the kubelet stops a container: its preStop hook (the drain, when the pod is
        deleted), then SIGTERM, then SIGKILL once the grace period is spent."""
        process, engine = self.process, self.launch.engine
        try:
            if process is None or process.returncode is not None or engine is None:
                return
            deadline = time.monotonic() + grace_s
            if drain and engine.pre_stop:
                await self._run_pre_stop(engine.pre_stop, grace_s)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            remaining = max(self.runner.config.stop_grace_s, deadline - time.monotonic())
            try:
                await asyncio.wait_for(process.wait(), remaining)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # engine-core children left behind
            log.info("%s: stopped the engine pid %d", self.launch.key, process.pid)
        finally:
            self.runner.release_core(self)

    async def _run_pre_stop(self, command: tuple[str, ...], budget_s: float) -> None:
        """The pod's preStop exec, where the pod's own loopback is its IP (the engine binds
        that) and its python is the engine's."""
        argv = [arg.replace("127.0.0.1", self.launch.ip) for arg in command]
        if argv and argv[0] in ("python", "python3") and self.paths is not None:
            argv[0] = str(self.paths.python)
        started = time.monotonic()
        hook = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        try:
            await asyncio.wait_for(hook.wait(), budget_s)
        except TimeoutError:
            hook.kill()
            await hook.wait()
        log.info("%s: preStop took %.1fs", self.launch.key, time.monotonic() - started)

    def stop(self) -> None:
        self.stop_event.set()

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    # ------------------------------------------------------------------ annotations
    def observe(self, annotations: Mapping[str, str]) -> None:
        """The pod's annotations as last seen by the watch."""
        self.annotations = dict(annotations)

    async def sync_annotations(self) -> None:
        if self.stop_event.is_set():
            return
        patch = annotations_patch(self.annotations, ready=self.ready, restarts=self.restarts)
        if patch is not None and await self.runner.patch_annotations(self.launch, patch):
            self.annotations.update(patch)

    def describe(self) -> dict[str, Any]:
        return {
            "namespace": self.launch.namespace,
            "name": self.launch.name,
            "uid": self.launch.uid,
            "service": self.launch.service,
            "revision": self.launch.revision,
            "ip": self.launch.ip,
            "port": self.launch.probe.port,
            "gpu": self.launch.gpu,
            "pid": self.process.pid if self.process else None,
            "state": self.state,
            "ready": self.ready,
            "restarts": self.restarts,
            "last_exit": self.last_exit,
            "argv": list(self.launch.argv),
            "engine": "vllm" if self.launch.engine is not None else "sim",
            "core": self.core,
        }


class Runner:
    """Watches LLMService pods and keeps one :class:`PodSim` per pod that should have one."""

    def __init__(self, api_client: client.ApiClient, config: RunnerConfig) -> None:
        self.config = config
        self._watch_api = client.CoreV1Api(api_client)
        self._api = client.CoreV1Api(api_client)
        self.sims: dict[str, PodSim] = {}
        #: Every LLMService pod the watch knows, by uid (for /sd).
        self.pods: dict[str, Mapping[str, Any]] = {}
        self._stopping: set[PodSim] = set()
        self._nodes: dict[str, dict[str, str] | None] = {}
        self._synced = False
        self._halt = threading.Event()
        self._session: aiohttp.ClientSession | None = None

    # ------------------------------------------------------------------ main loop
    async def run(self, port: int | None = None) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        self._session = aiohttp.ClientSession()
        site_runner = await self._serve(port) if port is not None else None
        thread = threading.Thread(
            target=self._watch_thread, args=(loop, queue), name="pod-watch", daemon=True
        )
        thread.start()
        stopped = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                got = asyncio.ensure_future(queue.get())
                await asyncio.wait({got, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if not got.done():
                    got.cancel()
                    break
                kind, payload = got.result()
                if kind == "fatal":
                    raise RuntimeError(payload)
                await self._handle(kind, payload)
                if kind == "snapshot":
                    self._synced = True
        finally:
            self._halt.set()
            await self.shutdown()
            if site_runner is not None:
                await site_runner.cleanup()
            await self._session.close()

    async def shutdown(self) -> None:
        sims = [*self.sims.values(), *self._stopping]
        for sim in sims:
            sim.stop()
        if sims:
            await asyncio.gather(*(sim.task for sim in sims), return_exceptions=True)
        self.sims.clear()

    async def _handle(self, kind: str, payload: Any) -> None:
        if kind == "snapshot":
            nodes, pods = payload
            self._nodes = {name: labels for name, labels in nodes.items()}
            self.pods = {str(p["metadata"].get("uid")): p for p in pods}
            uids = set(self.pods)
            for uid in [u for u in self.sims if u not in uids]:
                self._stop(uid)
            for pod in pods:
                await self._pod(pod)
        elif kind in ("ADDED", "MODIFIED"):
            self.pods[str(payload["metadata"].get("uid"))] = payload
            await self._pod(payload)
        elif kind == "DELETED":
            uid = str(payload["metadata"].get("uid"))
            self.pods.pop(uid, None)
            self._stop(uid)

    async def _pod(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid"))
        node_name = (pod.get("spec") or {}).get("nodeName")
        node_labels = await self._node_labels(node_name) if node_name else None
        worker = worker_ready(pod, node_labels)
        if worker is not None:  # an LWS worker: no process, Ready by the kubelet's rule
            await self._sync_worker(pod, worker)
            return
        launch = launch_for(pod, node_labels, time_scale=self.config.time_scale)
        existing = self.sims.get(uid)
        if launch is None:
            if existing is not None:
                self._stop(uid)
            return
        annotations = meta.get("annotations") or {}
        if launch.env.get(NO_PROCESS_ENV) == "1":
            # Benchmarks of the control plane alone: Ready without a simulator process.
            if annotations.get(READY_ANNOTATION) != "true":
                await self.patch_annotations(launch, {READY_ANNOTATION: "true"})
            return
        if existing is None:
            self.sims[uid] = PodSim(self, launch, annotations)
        else:
            existing.observe(annotations)

    async def _sync_worker(self, pod: Mapping[str, Any], ready: bool) -> None:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp") or not (pod.get("status") or {}).get("podIP"):
            return
        current = meta.get("annotations") or {}
        patch = annotations_patch(current, ready=ready, restarts=0)
        if patch is not None:
            target = SimLaunch(
                namespace=str(meta.get("namespace", "")),
                name=str(meta.get("name", "")),
                uid=str(meta.get("uid", "")),
                ip=str(pod["status"]["podIP"]),
                argv=(),
            )
            await self.patch_annotations(target, patch)

    def _stop(self, uid: str) -> None:
        sim = self.sims.pop(uid, None)
        if sim is None:
            return
        sim.stop()
        self._stopping.add(sim)
        sim.task.add_done_callback(lambda _t: self._stopping.discard(sim))

    async def wait_address_free(self, sim: PodSim) -> None:
        """Wait until no other simulator holds ``sim``'s IP and port (kwok reuses pod IPs)."""
        while True:
            holders = [
                other
                for other in [*self._stopping, *self.sims.values()]
                if other is not sim and other.launch.address == sim.launch.address and other.alive
            ]
            if not holders:
                return
            await asyncio.wait({h.task for h in holders}, timeout=1.0)

    async def _node_labels(self, name: str) -> dict[str, str] | None:
        if name not in self._nodes:
            try:
                node = await asyncio.to_thread(self._read_node, name)
            except ApiException as exc:
                if exc.status != 404:
                    log.warning("reading node %s: %s", name, exc.reason)
                return None
            self._nodes[name] = _managed_labels(node, self.config.node_annotation)
        return self._nodes[name]

    # ------------------------------------------------------------------ Kubernetes
    def _read_node(self, name: str) -> Any:
        return _json(self._api.read_node(name, _preload_content=False, _request_timeout=10))

    def _watch_thread(
        self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[tuple[str, Any]]
    ) -> None:
        def post(kind: str, payload: Any) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, (kind, payload))

        while not self._halt.is_set():
            try:
                nodes = _json(self._watch_api.list_node(_preload_content=False))
                pods = _json(
                    self._watch_api.list_pod_for_all_namespaces(
                        label_selector=SERVICE, _preload_content=False
                    )
                )
                managed = {
                    n["metadata"]["name"]: _managed_labels(n, self.config.node_annotation)
                    for n in nodes.get("items", [])
                }
                post("snapshot", (managed, pods.get("items", [])))
                stream = _RawWatch()  # type: ignore[no-untyped-call]
                for event in stream.stream(  # type: ignore[no-untyped-call]
                    self._watch_api.list_pod_for_all_namespaces,
                    label_selector=SERVICE,
                    resource_version=pods["metadata"]["resourceVersion"],
                    timeout_seconds=max(1, int(self.config.resync_s)),
                    _request_timeout=self.config.resync_s + 10,
                ):
                    if self._halt.is_set():
                        stream.stop()  # type: ignore[no-untyped-call]
                        break
                    kind = event.get("type")
                    raw = event.get("raw_object")
                    if kind in ("ADDED", "MODIFIED", "DELETED") and isinstance(raw, dict):
                        post(kind, raw)
            except ApiException as exc:
                if exc.status in (401, 403):
                    post("fatal", f"the API server refused the runner: {exc.status} {exc.reason}")
                    return
                if exc.status != 410:
                    log.warning("pod watch: %s %s; re-listing", exc.status, exc.reason)
                    self._halt.wait(1.0)
            except _WATCH_ERRORS as exc:
                log.warning("pod watch: %s; re-listing", exc)
                self._halt.wait(1.0)

    def claim_core(self, sim: PodSim) -> str:
        """The core with the fewest real engines on it (vLLM's own binding would put every
        engine on core 0)."""
        users = {core: 0 for core in self.config.engine_cores}
        for other in [*self.sims.values(), *self._stopping]:
            if other is not sim and other.core in users:
                users[other.core] += 1
        return min(users, key=lambda core: (users[core], core))

    def release_core(self, sim: PodSim) -> None:
        sim.core = None

    async def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        """One key of a Secret, as the kubelet would put it into the container's env."""
        try:
            secret = await asyncio.to_thread(
                self._api.read_namespaced_secret, name, namespace, _request_timeout=10
            )
        except ApiException as exc:
            log.warning("Secret %s/%s: %s %s", namespace, name, exc.status, exc.reason)
            return None
        raw = (secret.data or {}).get(key)
        return base64.b64decode(raw).decode() if raw else None

    async def patch_annotations(self, launch: SimLaunch, annotations: dict[str, str]) -> bool:
        body = {"metadata": {"uid": launch.uid, "annotations": annotations}}
        try:
            await asyncio.to_thread(
                self._api.patch_namespaced_pod,
                launch.name,
                launch.namespace,
                body,
                _preload_content=False,
                _request_timeout=10,
            )
        except ApiException as exc:
            if exc.status not in (404, 409, 422):  # gone, or a new pod of the same name
                log.warning("%s: patching annotations: %s %s", launch.key, exc.status, exc.reason)
            return False
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            log.warning("%s: patching annotations: %s", launch.key, exc)
            return False
        return True

    # ------------------------------------------------------------------ probes and HTTP
    async def probe(self, launch: SimLaunch, probe: Probe | None = None) -> bool:
        """An HTTP GET probe (the pod's readiness probe unless ``probe`` says otherwise)."""
        assert self._session is not None
        probe = probe or launch.probe
        url = f"http://{launch.ip}:{probe.port}{probe.path}"
        try:
            async with self._session.get(
                url, timeout=aiohttp.ClientTimeout(total=probe.timeout_s)
            ) as response:
                await response.read()
                return 200 <= response.status < 400
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False

    async def _serve(self, port: int) -> web.AppRunner:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/pods", self._pods)
        app.router.add_get("/sd", self._sd)
        site_runner = web.AppRunner(app, access_log=None)
        await site_runner.setup()
        await web.TCPSite(site_runner, "127.0.0.1", port).start()
        return site_runner

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(status=200 if self._synced else 503, text="ok\n")

    async def _pods(self, _request: web.Request) -> web.Response:
        return web.json_response([sim.describe() for sim in self.sims.values()])

    async def _sd(self, _request: web.Request) -> web.Response:
        if not self._synced:  # Prometheus keeps its last targets on an error
            return web.Response(status=503, text="no pod list yet\n")
        return web.json_response(target_groups(self.pods.values()))


class _RawWatch(watch.Watch):
    """The client's watch without its model of each event's pod (the runner reads
    ``raw_object``): building a V1Pod for every event was most of the runner's CPU with a
    thousand pods."""

    def get_return_type(self, func: Any) -> None:
        return None


def _terminate_with_parent() -> None:
    """In the engine's child, before exec: SIGTERM it when the runner dies (no engine is left
    holding a pod's IP)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _json(response: object) -> Any:
    """The parsed body of a ``_preload_content=False`` response."""
    return json.loads(cast(Any, response).data)


def _managed_labels(node: Mapping[str, Any], annotation: tuple[str, str]) -> dict[str, str] | None:
    meta = node.get("metadata") or {}
    key, value = annotation
    if (meta.get("annotations") or {}).get(key) != value:
        return None
    return dict(meta.get("labels") or {})
