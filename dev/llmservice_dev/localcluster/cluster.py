"""Start and stop a real local control plane: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok (fake GPU nodes) and the LeaderWorkerSet controller (:mod:`.lws`), plus
Prometheus and the simulator runner (live ``llmservice sim`` processes behind LLMService
pods), all bound to loopback, all state in one directory."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
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

from ..images import ImageError, ensure_images
from .binaries import (
    LWS_CONTROLLER,
    LWS_CRD_FILE,
    Versions,
    cache_dir,
    ensure_binaries,
    pinned_versions,
    repo_root,
)
from .binaries import bin_dir as default_bin_dir
from .lws import controller_args, controller_config, webhook_configurations
from .nodes import (
    DEFAULT_NODES,
    KWOK_NODE_ANNOTATION,
    KWOK_NODE_ANNOTATION_VALUE,
    NODE_IP,
    POD_FALLBACK_CIDR,
    FakeNodeSpec,
    node_manifest,
)
from .pki import FRONT_PROXY_CLIENT, PKI, create_pki, make_serving_cert
from .ports import free_ports
from .prometheus import (
    DEFAULT_SCRAPE_INTERVAL,
    SCRAPE_INTERVAL_ENV,
    find_prometheus,
    prometheus_args,
    prometheus_config,
)
from .realnode import CONTAINERD, RealNode

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
ADMIN_USER = "admin"
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    LWS_CONTROLLER,
    "prometheus",
    "simrunner",
    "containerd",
    "kubelet",
)
#: Token-file users: name -> (user, group). The runner watches pods and nodes, annotates pods
#: and serves Prometheus's discovery (Debian's Prometheus has no Kubernetes discovery).
_TOKEN_USERS = {
    "admin": (ADMIN_USER, "system:masters"),
    "kcm": ("system:kube-controller-manager", ""),
    "scheduler": ("system:kube-scheduler", ""),
    "kwok": ("kwok", "system:masters"),
    "simrunner": ("simrunner", "system:masters"),
    "lws": ("lws-controller", "system:masters"),
}
_KUBECONFIG_NAMES = {"kcm": "kube-controller-manager", "scheduler": "kube-scheduler"}
UNINITIALIZED_TAINT = "node.cloudprovider.kubernetes.io/uninitialized"
#: Where the operator's chart is installed (tests, demo); its ServiceAccounts are audited.
OPERATOR_NAMESPACE = "llmservice-system"
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
    def api_port(self) -> int:
        return int(self.server.rsplit(":", 1)[1])

    @property
    def audit_log(self) -> Path:
        """The API server's audit log: the requests of OPERATOR_NAMESPACE's ServiceAccounts."""
        return self.state_dir / "logs" / "audit.log"

    @property
    def real_node(self) -> RealNode:
        return RealNode(self.state_dir / "node")

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
        """Run the pinned kubectl against this cluster; its stdout (raises when it fails). A
        plain ``get ... -o json`` is answered in process (kubeget.py)."""
        from ..kubeget import for_kubeconfig  # the kubernetes client: not for the CLI's start

        answer = None if stdin is not None else for_kubeconfig(self.kubeconfig).get(*args)
        if answer is not None:
            if answer.returncode != 0:
                raise subprocess.CalledProcessError(
                    answer.returncode, ["kubectl", *args], answer.stdout, answer.stderr
                )
            return answer.stdout
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

    @property
    def audit_log(self) -> Path:
        return self.log_dir / "audit.log"

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
        if state.get("nodes") != _nodes_list(self.nodes):  # other fake nodes: restart it
            return False
        if state.get("scrape_interval") != self.scrape_interval:  # likewise another Prometheus
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
        for sub in ("logs", "pids", "pki", "etcd", "config"):
            (self.state_dir / sub).mkdir(parents=True, exist_ok=True)
        pki = create_pki(self.state_dir / "pki", service_ip=SERVICE_IP)
        state = self._new_state(bins)
        self._write_configs(state, pki)
        kubelet_args = self._prepare_real_node(state, pki)
        self._state_file.write_text(json.dumps(state, indent=2))
        self._state_file.chmod(0o600)
        images = self._node_images()  # before the clock starts: a first build takes minutes
        deadline = time.monotonic() + self.startup_timeout
        api_ctx = ssl.create_default_context(cafile=str(pki.ca_crt))
        api = _Api(state["server"], api_ctx, state["tokens"]["admin"])
        self._start_etcd(state, deadline)
        self._start_apiserver(state, pki, api, deadline)
        # Prometheus, the runner and the real node's runtime start now and are waited for last:
        # their start-up overlaps the controllers'.
        prometheus = prometheus_args(
            self._config("prometheus.yml"),
            self.state_dir / "prometheus",
            state["ports"]["prometheus"],
        )
        self._spawn("prometheus", bins, prometheus, exe=Path(state["exes"]["prometheus"]))
        self._spawn("simrunner", bins, self._simrunner_args(state), exe=Path(sys.executable))
        containerd = ["--config", str(self.real_node.containerd_config)]
        self._spawn("containerd", bins, containerd, exe=Path(CONTAINERD))
        self._start_controllers(state, pki, deadline)
        self._start_lws(state, pki, api, deadline)
        self._register_fake_nodes(api, deadline)
        self._start_real_node(state, api, images, kubelet_args, deadline)
        self._wait(
            "kube-controller-manager",
            deadline,
            lambda: api.exists("/api/v1/namespaces/default/serviceaccounts/default"),
            what="the default ServiceAccount",
        )
        for component in ("prometheus", "simrunner"):
            path = "/-/ready" if component == "prometheus" else "/healthz"
            url = f"http://127.0.0.1:{state['ports'][component]}{path}"
            self._wait(component, deadline, _answers(url, None))
        self._procs.clear()
        return self._info(state)

    @property
    def real_node(self) -> RealNode:
        return RealNode(self.state_dir / "node")

    def _config(self, name: str) -> Path:
        return self.state_dir / "config" / name

    def _new_state(self, bins: Path) -> dict[str, Any]:
        port_names = (
            "etcd", "etcd_peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
            "kwok", "prometheus", "simrunner", "kubelet", "kubelet_healthz",
            "lws_webhook", "lws_health",
        )  # fmt: skip
        ports = dict(zip(port_names, free_ports(len(port_names)), strict=True))
        exes = {component: str(bins / component) for component in COMPONENTS}
        exes["prometheus"] = str(find_prometheus())
        exes["simrunner"] = sys.executable
        exes["containerd"] = CONTAINERD
        return {
            "server": f"https://127.0.0.1:{ports['kube-apiserver']}",
            "bin_dir": str(bins),
            "versions": _versions_dict(pinned_versions()),
            "ports": ports,
            "tokens": {name: secrets.token_hex(24) for name in _TOKEN_USERS},
            "exes": exes,
            "sim_time_scale": self.sim_time_scale,
            "nodes": _nodes_list(self.nodes),
            "scrape_interval": self.scrape_interval,
        }

    def _write_configs(self, state: dict[str, Any], pki: PKI) -> None:
        server, tokens, bins = state["server"], state["tokens"], Path(state["bin_dir"])
        token_file = self._config("tokens.csv")
        token_file.write_text(
            "".join(
                f"{tokens[name]},{user},uid-{name}{f',{group}' if group else ''}\n"
                for name, (user, group) in _TOKEN_USERS.items()
            )
        )
        token_file.chmod(0o600)
        _write_kubeconfig(self.kubeconfig, server, pki.ca_crt, ADMIN_USER, tokens["admin"])
        for name, (user, _group) in _TOKEN_USERS.items():
            if name != "admin":
                kubeconfig = self._config(f"{_KUBECONFIG_NAMES.get(name, name)}.kubeconfig")
                _write_kubeconfig(kubeconfig, server, pki.ca_crt, user, tokens[name])
        self._config("prometheus.yml").write_text(
            prometheus_config(
                runner_url=f"http://127.0.0.1:{state['ports']['simrunner']}",
                interval=self.scrape_interval,
            )
        )
        self._config("kwok.yaml").write_text(_kwok_config(bins / "stages", sim_stages_dir()))
        self._config("audit-policy.yaml").write_text(yaml.safe_dump(audit_policy()))

    def _node_images(self) -> list[Path]:
        """The real node's images as ``docker save`` tars (built now when missing)."""
        try:
            built = ensure_images(with_vllm=False)
        except ImageError as err:
            raise ClusterError(f"the real node's images: {err}") from err
        return [image.tar for image in (built["pause"], built["operator"]) if image.tar]

    def _start_etcd(self, state: dict[str, Any], deadline: float) -> None:
        ports = state["ports"]
        etcd_url = f"http://127.0.0.1:{ports['etcd']}"
        peer_url = f"http://127.0.0.1:{ports['etcd_peer']}"
        self._spawn(
            "etcd",
            Path(state["bin_dir"]),
            [
                "--name=local",
                f"--data-dir={self.state_dir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=local={peer_url}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._wait("etcd", deadline, lambda: _body_ok(_http_get(f"{etcd_url}/health"), "true"))

    def _start_apiserver(self, state: dict[str, Any], pki: PKI, api: _Api, deadline: float) -> None:
        self._spawn(
            "kube-apiserver",
            Path(state["bin_dir"]),
            [
                f"--etcd-servers=http://127.0.0.1:{state['ports']['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                # Loopback may not be published as the kubernetes Service endpoint.
                "--endpoint-reconciler-type=none",
                f"--secure-port={state['ports']['kube-apiserver']}",
                f"--tls-cert-file={pki.apiserver_crt}",
                f"--tls-private-key-file={pki.apiserver_key}",
                f"--client-ca-file={pki.ca_crt}",
                f"--token-auth-file={self._config('tokens.csv')}",
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
                # kubectl logs/exec on the real node: the kubelet authenticates us by this.
                f"--kubelet-client-certificate={pki.kubelet_client_crt}",
                f"--kubelet-client-key={pki.kubelet_client_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                # What the operator's ServiceAccounts ask, and what they are answered (403s).
                f"--audit-policy-file={self._config('audit-policy.yaml')}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-maxsize=0",
                "--allow-privileged=true",
                "--profiling=true",  # kubectl get --raw /debug/pprof/profile (admin only)
                "--v=1",
            ],
        )
        self._wait("kube-apiserver", deadline, lambda: api.get_status("/readyz") == 200)

    def _simrunner_args(self, state: dict[str, Any]) -> list[str]:
        return [
            "-m",
            "llmservice_dev.simrunner",
            f"--kubeconfig={self._config('simrunner.kubeconfig')}",
            f"--port={state['ports']['simrunner']}",
            f"--time-scale={self.sim_time_scale:g}",
            f"--log-dir={self.log_dir / 'sims'}",
            f"--node-annotation={KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
        ]

    def _start_controllers(self, state: dict[str, Any], pki: PKI, deadline: float) -> None:
        bins, ports = Path(state["bin_dir"]), state["ports"]
        kcm_kc = self._config("kube-controller-manager.kubeconfig")
        sched_kc = self._config("kube-scheduler.kubeconfig")
        self._spawn(
            "kube-controller-manager",
            bins,
            [
                f"--kubeconfig={kcm_kc}",
                f"--authentication-kubeconfig={kcm_kc}",
                f"--authorization-kubeconfig={kcm_kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['kube-controller-manager']}",
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
                f"--secure-port={ports['kube-scheduler']}",
                "--leader-elect=false",
                "--v=1",
            ],
        )
        self._spawn(
            "kwok",
            bins,
            [
                f"--kubeconfig={self._config('kwok.kubeconfig')}",
                f"--config={self._config('kwok.yaml')}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector="
                f"{KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
                f"--server-address=127.0.0.1:{ports['kwok']}",
                f"--cidr={POD_FALLBACK_CIDR}",
                f"--node-ip={NODE_IP}",
                "--node-lease-duration-seconds=40",
            ],
        )
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        for component, scheme in (
            ("kube-controller-manager", "https"),
            ("kube-scheduler", "https"),
            ("kwok", "http"),
        ):
            url = f"{scheme}://127.0.0.1:{ports[component]}/healthz"
            self._wait(component, deadline, _answers(url, insecure if scheme == "https" else None))

    def _start_lws(self, state: dict[str, Any], pki: PKI, api: _Api, deadline: float) -> None:
        """The LeaderWorkerSet CRD, its controller, then its webhooks (by loopback URL: they
        are registered once it serves them, and see only LWS objects and pods)."""
        bins, ports = Path(state["bin_dir"]), state["ports"]
        crd = yaml.safe_load((bins / "crds" / LWS_CRD_FILE).read_text())
        api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        crd_path = (
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
        )
        self._wait(
            "kube-apiserver", deadline, lambda: _established(api.request("GET", crd_path)),
            what="serving the LeaderWorkerSet CRD",
        )  # fmt: skip
        cert_dir = self.state_dir / "pki" / "lws-webhook"
        make_serving_cert(pki, cert_dir, "tls", "lws-webhook", ["IP:127.0.0.1"])
        config = controller_config(
            webhook_port=ports["lws_webhook"], health_port=ports["lws_health"], cert_dir=cert_dir
        )
        self._config("lws.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        kubeconfig = self._config("lws.kubeconfig")
        self._spawn(LWS_CONTROLLER, bins, controller_args(self._config("lws.yaml"), kubeconfig))
        self._wait(
            LWS_CONTROLLER,
            deadline,
            _answers(f"http://127.0.0.1:{ports['lws_health']}/readyz", None),
        )
        webhook_ctx = ssl.create_default_context(cafile=str(pki.ca_crt))
        pod_hook = f"https://127.0.0.1:{ports['lws_webhook']}/mutate--v1-pod"
        # Registered once served: the handler answers any POST with 200 (an AdmissionReview
        # that says what was wrong with it); an unregistered path is a 404.
        self._wait(
            LWS_CONTROLLER, deadline, lambda: _http_post_status(pod_hook, webhook_ctx) == 200,
            what="serving its webhooks",
        )  # fmt: skip
        for hooks in webhook_configurations(ports["lws_webhook"], pki.ca_crt.read_bytes()):
            plural = hooks["kind"].lower() + "s"
            api.request("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", hooks)

    def _register_fake_nodes(self, api: _Api, deadline: float) -> None:
        for index, spec in enumerate(self.nodes):
            api.request("POST", "/api/v1/nodes", node_manifest(spec, index))
        names = {spec.name for spec in self.nodes}
        self._wait("kwok", deadline, lambda: names <= _ready_nodes(api), what="nodes Ready")

    def _prepare_real_node(self, state: dict[str, Any], pki: PKI) -> list[str]:
        """The real node's certificates and configuration; returns the kubelet's arguments."""
        node = self.real_node
        node.prepare_run_dir()
        node.save_sysctls()
        ports = state["ports"]
        return node.write_config(pki, state["server"], ports["kubelet"], ports["kubelet_healthz"])

    def _start_real_node(
        self,
        state: dict[str, Any],
        api: _Api,
        images: list[Path],
        kubelet_args: list[str],
        deadline: float,
    ) -> None:
        node = self.real_node
        self._wait("containerd", deadline, node.containerd_ready, what="serving its socket")
        for tar in images:
            node.import_image(tar)
        self._spawn("kubelet", Path(state["bin_dir"]), kubelet_args)
        path = f"/api/v1/nodes/{node.name}"
        self._wait("kubelet", deadline, lambda: api.exists(path), what="registered")
        # --cloud-provider=external: we are the cloud provider (see realnode.py).
        merge = "application/merge-patch+json"
        addresses = [{"type": "InternalIP", "address": NODE_IP}]
        api.request("PATCH", f"{path}/status", {"status": {"addresses": addresses}}, merge)
        taints = api.request("GET", path)["spec"].get("taints") or []
        kept = [t for t in taints if t["key"] != UNINITIALIZED_TAINT]
        api.request("PATCH", path, {"spec": {"taints": kept}}, merge)
        self._wait("kubelet", deadline, lambda: node.name in _ready_nodes(api), what="Ready")

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
        running: list[tuple[str, int]] = []
        for component in reversed(COMPONENTS):
            pid = self._read_pid(component)
            exe = _exe(state, component) if state is not None else None
            if pid is not None and exe is not None and _pid_alive(pid, exe):
                running.append((component, pid))
        deadline = time.monotonic() + grace
        # The kubelet first (it would restart the pods' containers), then what runs in the
        # pods; etcd last: a kube-apiserver whose etcd is gone does not finish its graceful
        # shutdown and would sit out the whole grace period.
        self._stop_wave([p for p in running if p[0] == "kubelet"], state, deadline)
        self.real_node.kill_pods()
        self._stop_wave([p for p in running if p[0] not in ("kubelet", "etcd")], state, deadline)
        self._stop_wave([p for p in running if p[0] == "etcd"], state, deadline)
        self.real_node.cleanup()
        for proc in self._procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self._procs.clear()
        for component in COMPONENTS:
            self._pid_file(component).unlink(missing_ok=True)

    @staticmethod
    def _stop_wave(
        wave: list[tuple[str, int]], state: dict[str, Any] | None, deadline: float
    ) -> None:
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


def audit_policy() -> dict[str, Any]:
    """Log, at metadata level, every request of a ServiceAccount in OPERATOR_NAMESPACE (the
    chart-installed operator) and nothing else: its verbs and the codes it was answered."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "Metadata", "userGroups": [f"system:serviceaccounts:{OPERATOR_NAMESPACE}"]},
            {"level": "None"},
        ],
    }


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


def _nodes_list(nodes: Sequence[FakeNodeSpec]) -> list[dict[str, Any]]:
    """The fake nodes as the state file keeps them (JSON)."""
    return [dataclasses.asdict(spec) for spec in nodes]


def _versions_dict(v: Versions) -> dict[str, str]:
    return {"k8s": v.k8s, "etcd": v.etcd, "kwok": v.kwok, "helm": v.helm, "lws": v.lws}


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


def _http_post_status(url: str, ctx: ssl.SSLContext, timeout: float = 3) -> int:
    """The status of an empty JSON POST (0 when nothing answers)."""
    req = urllib.request.Request(url, data=b"{}", method="POST")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return 0


def _established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def _answers(url: str, ctx: ssl.SSLContext | None) -> Callable[[], bool]:
    return lambda: _http_get(url, ctx=ctx)[0] == 200


def _body_ok(result: tuple[int, str], needle: str) -> bool:
    return result[0] == 200 and needle in result[1]


class _Api:
    """The few raw API calls start-up needs (urllib; no client library)."""

    def __init__(self, server: str, ctx: ssl.SSLContext, token: str) -> None:
        self.server, self.ctx, self.token = server, ctx, token

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.server}{path}", data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=10, context=self.ctx) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            if exc.code == 409 and method == "POST":
                return None
            raise ClusterError(
                f"{method} {path}: HTTP {exc.code}: {exc.read().decode(errors='replace')}"
            ) from exc

    def get_status(self, path: str) -> int:
        return _http_get(f"{self.server}{path}", ctx=self.ctx, token=self.token)[0]

    def exists(self, path: str) -> bool:
        return self.get_status(path) == 200


def _ready_nodes(api: _Api) -> set[str]:
    data = api.request("GET", "/api/v1/nodes")
    ready: set[str] = set()
    for item in data.get("items", []):
        for cond in item.get("status", {}).get("conditions") or []:
            if cond.get("type") == "Ready" and cond.get("status") == "True":
                ready.add(item["metadata"]["name"])
    return ready
