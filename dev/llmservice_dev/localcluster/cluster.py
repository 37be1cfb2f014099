"""Start and stop a real local control plane: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok (fake GPU nodes), plus Prometheus and the simulator runner (live
``llmservice sim`` processes behind LLMService pods), all bound to loopback, all state in one
directory."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .binaries import Versions, cache_dir, ensure_binaries, pinned_versions, repo_root
from .binaries import bin_dir as default_bin_dir
from .nodes import (
    DEFAULT_NODES,
    KWOK_NODE_ANNOTATION,
    KWOK_NODE_ANNOTATION_VALUE,
    NODE_IP,
    POD_FALLBACK_CIDR,
    FakeNodeSpec,
    node_manifest,
)
from .pki import FRONT_PROXY_CLIENT, PKI, create_pki
from .ports import free_ports
from .prometheus import (
    DEFAULT_SCRAPE_INTERVAL,
    SCRAPE_INTERVAL_ENV,
    find_prometheus,
    prometheus_args,
    prometheus_config,
)

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
ADMIN_USER = "admin"
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "prometheus",
    "simrunner",
)
#: The simulators' clock: S simulated seconds per wall second (the runner's default).
SIM_TIME_SCALE_ENV = "LLMSERVICE_SIM_TIME_SCALE"
DEFAULT_SIM_TIME_SCALE = 10.0
#: kwok stages for LLMService pods (Ready only when the simulator runner says so).
SERVICE_LABEL = "llmservice.dev/service"
_STATE_FILE = "state.json"
_LOG_TAIL_LINES = 40


class ClusterError(RuntimeError):
    """The local cluster failed to start (the message carries the component's log tail)."""


@dataclass(frozen=True)
class ClusterInfo:
    """How to reach a running local cluster."""

    kubeconfig: Path
    server: str
    token: str
    bin_dir: Path
    ca_file: Path
    state_dir: Path
    k8s_version: str
    prometheus_url: str = ""
    """Prometheus scraping every LLMService pod (labels namespace, pod, llmservice, revision)."""
    sim_time_scale: float = DEFAULT_SIM_TIME_SCALE
    """Simulated seconds per wall second of every pod's simulator (match it in the load)."""
    simrunner_url: str = ""
    """The simulator runner's ``/healthz`` and ``/pods``."""

    @property
    def kubectl(self) -> Path:
        return self.bin_dir / "kubectl"

    @property
    def helm(self) -> Path:
        return self.bin_dir / "helm"

    def env(self) -> dict[str, str]:
        """Environment for subprocesses (kubectl, helm, the operator) using this cluster."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def run_kubectl(self, *args: str, stdin: str | None = None) -> str:
        """Run the pinned kubectl against this cluster; its stdout (raises when it fails)."""
        return subprocess.run(
            [str(self.kubectl), *args],
            env=self.env(),
            input=stdin,
            text=True,
            capture_output=True,
            check=True,
        ).stdout

    def wait_crd_established(self, name: str, timeout: float = 60) -> None:
        """Wait for the CRD ``name`` to be served. Polled: ``kubectl wait`` fails at once on a CRD
        whose status has no conditions yet (just applied)."""
        deadline = time.monotonic() + timeout
        while True:
            crd = json.loads(self.run_kubectl("get", "crd", name, "-o", "json"))
            conditions = (crd.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established within {timeout:g}s")
            time.sleep(0.5)


def default_state_dir() -> Path:
    """``$LLMSERVICE_CLUSTER_DIR`` or ``<cache>/cluster``."""
    env = os.environ.get("LLMSERVICE_CLUSTER_DIR")
    return Path(env) if env else cache_dir() / "cluster"


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _pid_alive(pid: int, exe: Path) -> bool:
    """Is ``pid`` a live (non-zombie) process running ``exe``?"""
    proc = Path(f"/proc/{pid}")
    try:
        stat = (proc / "stat").read_text()
        cmdline = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
    return state not in ("Z", "X") and bool(cmdline) and cmdline[0] == os.fsencode(str(exe))


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


class LocalCluster:
    """A local control plane living in ``state_dir``.

    >>> info = LocalCluster().up()      # builds binaries if needed, reuses a healthy cluster
    >>> info.kubeconfig
    """

    def __init__(
        self,
        state_dir: Path | None = None,
        *,
        bin_dir: Path | None = None,
        nodes: Sequence[FakeNodeSpec] = DEFAULT_NODES,
        startup_timeout: float = 90.0,
        sim_time_scale: float | None = None,
        scrape_interval: str | None = None,
    ) -> None:
        self.state_dir = (state_dir or default_state_dir()).resolve()
        self._bin_dir = bin_dir
        self.nodes = tuple(nodes)
        self.startup_timeout = startup_timeout
        self.sim_time_scale = sim_time_scale or float(
            os.environ.get(SIM_TIME_SCALE_ENV) or DEFAULT_SIM_TIME_SCALE
        )
        self.scrape_interval = scrape_interval or (
            os.environ.get(SCRAPE_INTERVAL_ENV) or DEFAULT_SCRAPE_INTERVAL
        )
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # ----------------------------------------------------------------- paths
    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    def log_file(self, component: str) -> Path:
        return self.log_dir / f"{component}.log"

    def _pid_file(self, component: str) -> Path:
        return self.state_dir / "pids" / f"{component}.pid"

    @property
    def _state_file(self) -> Path:
        return self.state_dir / _STATE_FILE

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        lock_path = self.state_dir.parent / f".{self.state_dir.name}.lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with lock_path.open("w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    # ----------------------------------------------------------------- state
    def _load_state(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self._state_file.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _info(self, state: dict[str, Any]) -> ClusterInfo:
        return ClusterInfo(
            kubeconfig=self.kubeconfig,
            server=str(state["server"]),
            token=str(state["tokens"]["admin"]),
            bin_dir=Path(state["bin_dir"]),
            ca_file=PKI(self.state_dir / "pki").ca_crt,
            state_dir=self.state_dir,
            k8s_version=str(state["versions"]["k8s"]),
            prometheus_url=f"http://127.0.0.1:{state['ports']['prometheus']}",
            sim_time_scale=float(state["sim_time_scale"]),
            simrunner_url=f"http://127.0.0.1:{state['ports']['simrunner']}",
        )

    def info(self) -> ClusterInfo | None:
        """The running cluster's details, or None when it is not up."""
        state = self._load_state()
        if state is None or not self._healthy(state):
            return None
        return self._info(state)

    def is_up(self) -> bool:
        return self.info() is not None

    def _healthy(self, state: dict[str, Any]) -> bool:
        if "exes" not in state:  # started by an older version without Prometheus/the runner
            return False
        for component in COMPONENTS:
            pid = self._read_pid(component)
            if pid is None or not _pid_alive(pid, _exe(state, component)):
                return False
        ctx = ssl.create_default_context(cafile=str(PKI(self.state_dir / "pki").ca_crt))
        status, _ = _http_get(
            f"{state['server']}/readyz", ctx=ctx, token=str(state["tokens"]["admin"])
        )
        return status == 200

    def _read_pid(self, component: str) -> int | None:
        try:
            return int(self._pid_file(component).read_text().strip())
        except (OSError, ValueError):
            return None

    # ----------------------------------------------------------------- up
    def up(self) -> ClusterInfo:
        """Start the cluster (or return the healthy one already running from this state dir)."""
        with self._lock():
            state = self._load_state()
            if state is not None and self._healthy(state):
                versions = pinned_versions()
                if state["versions"] == _versions_dict(versions):
                    return self._info(state)
            self._stop_processes()
            if self.state_dir.exists():
                shutil.rmtree(self.state_dir)
            bins = self._bin_dir or ensure_binaries()
            try:
                return self._start(bins)
            except BaseException:
                self._stop_processes()
                raise

    def _start(self, bins: Path) -> ClusterInfo:
        versions = pinned_versions()
        for sub in ("logs", "pids", "pki", "etcd", "config"):
            (self.state_dir / sub).mkdir(parents=True, exist_ok=True)
        pki = create_pki(self.state_dir / "pki", service_ip=SERVICE_IP)
        prometheus_exe = find_prometheus()
        ports = free_ports(8)
        etcd_client, etcd_peer, api_port, kcm_port, sched_port, kwok_port = ports[:6]
        prom_port, runner_port = ports[6:]
        server = f"https://127.0.0.1:{api_port}"
        tokens = {
            name: secrets.token_hex(24)
            for name in ("admin", "kcm", "scheduler", "kwok", "simrunner")
        }
        exes = {component: str(bins / component) for component in COMPONENTS}
        exes["prometheus"] = str(prometheus_exe)
        exes["simrunner"] = sys.executable
        state: dict[str, Any] = {
            "server": server,
            "bin_dir": str(bins),
            "versions": _versions_dict(versions),
            "ports": {
                "etcd": etcd_client,
                "etcd_peer": etcd_peer,
                "kube-apiserver": api_port,
                "kube-controller-manager": kcm_port,
                "kube-scheduler": sched_port,
                "kwok": kwok_port,
                "prometheus": prom_port,
                "simrunner": runner_port,
            },
            "tokens": tokens,
            "exes": exes,
            "sim_time_scale": self.sim_time_scale,
            "scrape_interval": self.scrape_interval,
        }
        cfg = self.state_dir / "config"
        token_file = cfg / "tokens.csv"
        token_file.write_text(
            f'{tokens["admin"]},{ADMIN_USER},uid-admin,"system:masters"\n'
            f"{tokens['kcm']},system:kube-controller-manager,uid-kcm\n"
            f"{tokens['scheduler']},system:kube-scheduler,uid-scheduler\n"
            f'{tokens["kwok"]},kwok,uid-kwok,"system:masters"\n'
            # The runner watches pods and nodes, annotates pods and serves Prometheus's
            # discovery (Debian's Prometheus has no Kubernetes discovery of its own).
            f'{tokens["simrunner"]},simrunner,uid-simrunner,"system:masters"\n'
        )
        token_file.chmod(0o600)
        _write_kubeconfig(self.kubeconfig, server, pki.ca_crt, ADMIN_USER, tokens["admin"])
        kcm_kc = cfg / "kube-controller-manager.kubeconfig"
        sched_kc = cfg / "kube-scheduler.kubeconfig"
        kwok_kc = cfg / "kwok.kubeconfig"
        _write_kubeconfig(kcm_kc, server, pki.ca_crt, "kube-controller-manager", tokens["kcm"])
        _write_kubeconfig(sched_kc, server, pki.ca_crt, "kube-scheduler", tokens["scheduler"])
        _write_kubeconfig(kwok_kc, server, pki.ca_crt, "kwok", tokens["kwok"])
        runner_kc = cfg / "simrunner.kubeconfig"
        _write_kubeconfig(runner_kc, server, pki.ca_crt, "simrunner", tokens["simrunner"])
        prom_config = cfg / "prometheus.yml"
        prom_config.write_text(
            prometheus_config(
                runner_url=f"http://127.0.0.1:{runner_port}", interval=self.scrape_interval
            )
        )
        kwok_config = cfg / "kwok.yaml"
        kwok_config.write_text(_kwok_config(bins / "stages", sim_stages_dir()))
        self._state_file.write_text(json.dumps(state, indent=2))
        self._state_file.chmod(0o600)

        deadline = time.monotonic() + self.startup_timeout
        api_ctx = ssl.create_default_context(cafile=str(pki.ca_crt))
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE

        etcd_url = f"http://127.0.0.1:{etcd_client}"
        self._spawn(
            "etcd",
            bins,
            [
                "--name=local",
                f"--data-dir={self.state_dir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-cluster=local=http://127.0.0.1:{etcd_peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._wait("etcd", deadline, lambda: _body_ok(_http_get(f"{etcd_url}/health"), "true"))

        self._spawn(
            "kube-apiserver",
            bins,
            [
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                # Loopback may not be published as the kubernetes Service endpoint.
                "--endpoint-reconciler-type=none",
                f"--secure-port={api_port}",
                f"--tls-cert-file={pki.apiserver_crt}",
                f"--tls-private-key-file={pki.apiserver_key}",
                f"--client-ca-file={pki.ca_crt}",
                f"--token-auth-file={token_file}",
                "--authorization-mode=Node,RBAC",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # Front proxy: lets aggregated APIs (metrics adapters) authenticate the apiserver.
                f"--requestheader-client-ca-file={pki.front_proxy_ca_crt}",
                f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki.front_proxy_client_crt}",
                f"--proxy-client-key-file={pki.front_proxy_client_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
            ],
        )
        self._wait(
            "kube-apiserver",
            deadline,
            lambda: _http_get(f"{server}/readyz", ctx=api_ctx, token=tokens["admin"])[0] == 200,
        )
        # Prometheus and the runner start now and are waited for last: their start-up
        # overlaps the controllers'.
        self._spawn(
            "prometheus",
            bins,
            prometheus_args(prom_config, self.state_dir / "prometheus", prom_port),
            exe=prometheus_exe,
        )
        self._spawn(
            "simrunner",
            bins,
            [
                "-m",
                "llmservice_dev.simrunner",
                f"--kubeconfig={runner_kc}",
                f"--port={runner_port}",
                f"--time-scale={self.sim_time_scale:g}",
                f"--log-dir={self.log_dir / 'sims'}",
                f"--node-annotation={KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
            ],
            exe=Path(sys.executable),
        )

        self._spawn(
            "kube-controller-manager",
            bins,
            [
                f"--kubeconfig={kcm_kc}",
                f"--authentication-kubeconfig={kcm_kc}",
                f"--authorization-kubeconfig={kcm_kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca_crt}",
                f"--cluster-signing-cert-file={pki.ca_crt}",
                f"--cluster-signing-key-file={pki.ca_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--controllers=*",
                "--allocate-node-cidrs=false",
                "--v=1",
            ],
        )
        self._spawn(
            "kube-scheduler",
            bins,
            [
                f"--kubeconfig={sched_kc}",
                f"--authentication-kubeconfig={sched_kc}",
                f"--authorization-kubeconfig={sched_kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={sched_port}",
                "--leader-elect=false",
                "--v=1",
            ],
        )
        self._spawn(
            "kwok",
            bins,
            [
                f"--kubeconfig={kwok_kc}",
                f"--config={kwok_config}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector="
                f"{KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
                f"--server-address=127.0.0.1:{kwok_port}",
                f"--cidr={POD_FALLBACK_CIDR}",
                f"--node-ip={NODE_IP}",
                "--node-lease-duration-seconds=40",
            ],
        )
        self._wait(
            "kube-controller-manager",
            deadline,
            lambda: _http_get(f"https://127.0.0.1:{kcm_port}/healthz", ctx=insecure)[0] == 200,
        )
        self._wait(
            "kube-scheduler",
            deadline,
            lambda: _http_get(f"https://127.0.0.1:{sched_port}/healthz", ctx=insecure)[0] == 200,
        )
        self._wait(
            "kwok",
            deadline,
            lambda: _http_get(f"http://127.0.0.1:{kwok_port}/healthz")[0] == 200,
        )

        api = _Api(server, api_ctx, tokens["admin"])
        for index, spec in enumerate(self.nodes):
            api.request("POST", "/api/v1/nodes", node_manifest(spec, index))
        names = {spec.name for spec in self.nodes}
        self._wait("kwok", deadline, lambda: names <= _ready_nodes(api), what="nodes Ready")
        self._wait(
            "kube-controller-manager",
            deadline,
            lambda: api.exists("/api/v1/namespaces/default/serviceaccounts/default"),
            what="the default ServiceAccount",
        )
        self._wait(
            "prometheus",
            deadline,
            lambda: _http_get(f"http://127.0.0.1:{prom_port}/-/ready")[0] == 200,
        )
        self._wait(
            "simrunner",
            deadline,
            lambda: _http_get(f"http://127.0.0.1:{runner_port}/healthz")[0] == 200,
        )
        self._procs.clear()
        return self._info(state)

    def _spawn(
        self, component: str, bins: Path, args: list[str], *, exe: Path | None = None
    ) -> None:
        exe = exe or bins / component
        log = self.log_file(component).open("ab")
        try:
            proc = subprocess.Popen(
                [str(exe), *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.state_dir,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            log.close()
        self._procs[component] = proc
        self._pid_file(component).write_text(f"{proc.pid}\n")

    def _wait(
        self,
        component: str,
        deadline: float,
        check: Callable[[], bool],
        *,
        what: str = "healthy",
    ) -> None:
        proc = self._procs.get(component)
        while True:
            if proc is not None and proc.poll() is not None:
                raise ClusterError(
                    f"{component} exited with code {proc.returncode} before becoming {what}; "
                    f"log {self.log_file(component)}:\n{_tail(self.log_file(component))}"
                )
            with contextlib.suppress(OSError, ValueError, ClusterError):
                if check():
                    return
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"timed out after {self.startup_timeout:.0f}s waiting for {component} to be "
                    f"{what}; log {self.log_file(component)}:\n{_tail(self.log_file(component))}"
                )
            time.sleep(0.25)

    # ----------------------------------------------------------------- down
    def down(self) -> None:
        """Stop every component (by pidfile) and remove the state directory."""
        with self._lock():
            self._stop_processes()
            if self.state_dir.exists():
                shutil.rmtree(self.state_dir)

    def _stop_processes(self, grace: float = 10.0) -> None:
        state = self._load_state()
        if state is None:
            bins = self._bin_dir or _safe_bin_dir()
            state = {"bin_dir": str(bins)} if bins is not None else None
        pids: list[tuple[str, int]] = []
        for component in reversed(COMPONENTS):
            pid = self._read_pid(component)
            exe = _exe(state, component) if state is not None else None
            if pid is not None and exe is not None and _pid_alive(pid, exe):
                pids.append((component, pid))
        deadline = time.monotonic() + grace
        # etcd last: a kube-apiserver whose etcd is gone does not finish its graceful
        # shutdown and would sit out the whole grace period.
        for wave in ([p for p in pids if p[0] != "etcd"], [p for p in pids if p[0] == "etcd"]):
            for _, pid in wave:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            for component, pid in wave:
                exe = _exe(state, component) if state is not None else None
                while exe is not None and time.monotonic() < deadline:
                    _reap(pid)
                    if not _pid_alive(pid, exe):
                        break
                    time.sleep(0.1)
                else:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    _reap(pid)
        for proc in self._procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self._procs.clear()
        for component in COMPONENTS:
            self._pid_file(component).unlink(missing_ok=True)


def _exe(state: dict[str, Any], component: str) -> Path:
    """The executable a component runs as (its cmdline[0]), from the cluster state."""
    exes = state.get("exes") or {}
    if component in exes:
        return Path(exes[component])
    return Path(state["bin_dir"]) / component


def sim_stages_dir() -> Path:
    """hack/kwok-stages: the kwok stages that make LLMService pods Ready only when their
    simulator is (see dev/llmservice_dev/simrunner)."""
    root = repo_root()
    if root is None:
        raise ClusterError("hack/kwok-stages not found: the local cluster needs a source checkout")
    return root / "hack" / "kwok-stages"


def _safe_bin_dir() -> Path | None:
    try:
        return default_bin_dir()
    except RuntimeError:
        return None


def _versions_dict(v: Versions) -> dict[str, str]:
    return {"k8s": v.k8s, "etcd": v.etcd, "kwok": v.kwok, "helm": v.helm}


def _write_kubeconfig(path: Path, server: str, ca: Path, user: str, token: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "llmservice-local",
                "cluster": {
                    "server": server,
                    # Embedded, so the kubeconfig also works when copied elsewhere.
                    "certificate-authority-data": base64.b64encode(ca.read_bytes()).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {"name": "llmservice-local", "context": {"cluster": "llmservice-local", "user": user}}
        ],
        "current-context": "llmservice-local",
        "preferences": {},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def _leave_llmservice_pods(doc: str) -> str:
    """kwok's own pod stages that set a status skip LLMService pods (ours handle those)."""
    stage = yaml.safe_load(doc)
    spec = stage.get("spec") if isinstance(stage, dict) else None
    if not isinstance(spec, dict) or (spec.get("resourceRef") or {}).get("kind") != "Pod":
        return doc
    if (spec.get("next") or {}).get("delete") or spec.get("selector") is None:
        return doc
    selector = spec["selector"]
    selector.setdefault("matchExpressions", []).append(
        {"key": f'.metadata.labels["{SERVICE_LABEL}"]', "operator": "DoesNotExist"}
    )
    return yaml.safe_dump(stage, sort_keys=False)


def _kwok_config(stages_dir: Path, sim_stages: Path | None = None) -> str:
    docs = [
        yaml.safe_dump(
            {
                "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
                "kind": "KwokConfiguration",
                "options": {
                    "cidr": POD_FALLBACK_CIDR,
                    "nodeIP": NODE_IP,
                    "nodeLeaseDurationSeconds": 40,
                    # A config file does not get kwok's flag defaults: set them explicitly.
                    "nodeLeaseParallelism": 4,
                    "nodePlayStageParallelism": 4,
                    "podPlayStageParallelism": 4,
                    "podsOnNodeSyncParallelism": 2,
                },
            },
            sort_keys=False,
        )
    ]
    upstream = [p.read_text() for p in sorted(stages_dir.glob("*.yaml"))]
    if not upstream:
        raise ClusterError(f"no kwok stage files in {stages_dir}")
    if sim_stages is not None:
        ours = [p.read_text() for p in sorted(sim_stages.glob("*.yaml"))]
        if not ours:
            raise ClusterError(f"no kwok stage files in {sim_stages}")
        docs += [_leave_llmservice_pods(doc) for doc in upstream] + ours
    else:
        docs += upstream
    return "\n---\n".join(doc.strip() for doc in docs) + "\n"


def _http_get(
    url: str, *, ctx: ssl.SSLContext | None = None, token: str | None = None, timeout: float = 3
) -> tuple[int, str]:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
            return int(resp.status), resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError):
        return 0, ""


def _body_ok(result: tuple[int, str], needle: str) -> bool:
    return result[0] == 200 and needle in result[1]


class _Api:
    """The few raw API calls start-up needs (urllib; no client library)."""

    def __init__(self, server: str, ctx: ssl.SSLContext, token: str) -> None:
        self.server, self.ctx, self.token = server, ctx, token

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.server}{path}", data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=10, context=self.ctx) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            if exc.code == 409 and method == "POST":
                return None
            raise ClusterError(
                f"{method} {path}: HTTP {exc.code}: {exc.read().decode(errors='replace')}"
            ) from exc

    def exists(self, path: str) -> bool:
        status, _ = _http_get(f"{self.server}{path}", ctx=self.ctx, token=self.token)
        return status == 200


def _ready_nodes(api: _Api) -> set[str]:
    data = api.request("GET", "/api/v1/nodes")
    ready: set[str] = set()
    for item in data.get("items", []):
        for cond in item.get("status", {}).get("conditions") or []:
            if cond.get("type") == "Ready" and cond.get("status") == "True":
                ready.add(item["metadata"]["name"])
    return ready
