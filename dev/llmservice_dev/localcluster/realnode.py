"""One real worker node in the local cluster: a kubelet with containerd and Debian's runc.

This is where the operator's own image runs, installed by its Helm chart, under its own
ServiceAccount. The GPU nodes stay kwok nodes. Settings that matter on this kind of machine:

- The host has cgroup v1: the kubelet needs ``failCgroupV1: false`` and the cgroupfs driver.
- Root lacks CAP_SYS_RESOURCE: containerd needs ``restrict_oom_score_adj = true`` (without it
  every sandbox fails with "can't get final child's PID from pipe").
- The kubelet refuses a loopback ``--node-ip``: it starts with ``--cloud-provider=external``,
  then we act as the cloud provider: the node's only address becomes InternalIP 127.0.0.1
  (no Hostname address, which the API server would resolve through DNS) and the
  ``uninitialized`` taint goes.
- Pods are hostNetwork only: no CNI plugin runs, but the runtime reports NetworkReady only when
  a CNI config file exists, so one is written. There is no kube-proxy: pods are told the API
  server's loopback address (the chart's ``apiServer`` values).
- The sandbox ("pause") image and the operator image are imported from ``docker save`` tars.
- The kubelet changes some sysctls (``vm.overcommit_memory``, ``kernel.panic``,
  ``kernel.panic_on_oops``); :meth:`RealNode.cleanup` restores them.
- The API server reaches the kubelet (``kubectl logs``/``exec``) with a client certificate
  (``--kubelet-client-certificate``); the kubelet authenticates it against the cluster CA and
  authorizes through the API server (webhook), never anonymously.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .pki import PKI, make_client_cert, make_serving_cert

__all__ = [
    "REAL_NODE_LABEL",
    "REAL_NODE_NAME",
    "REAL_NODE_TAINT",
    "RealNode",
    "RealNodeError",
    "real_node_scheduling",
]

REAL_NODE_NAME = "llmservice-real-node"
REAL_NODE_LABEL = "llmservice.local/real-node"
#: Only pods that tolerate this land on the real node (the operator's chart, in tests).
REAL_NODE_TAINT = {"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}
CONTAINERD = "/usr/bin/containerd"
CTR = "/usr/bin/ctr"
CNI_BIN_DIR = "/usr/lib/cni"
SANDBOX_IMAGE = "docker.io/llmservice-local/pause:1"
#: Sysctls the kubelet sets (kubelet/cm/container_manager_linux.go setupKernelTunables).
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
)
_CGROUP_ROOT = Path("/sys/fs/cgroup")


class RealNodeError(RuntimeError):
    """The real node could not be started (the message carries what failed)."""


def real_node_scheduling() -> dict[str, Any]:
    """Chart values that put a pod on the real node: its label and a toleration of its taint."""
    return {
        "nodeSelector": {REAL_NODE_LABEL: "true"},
        "tolerations": [{"key": REAL_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
    }


@dataclass(frozen=True)
class RealNode:
    """The real node's files live in ``directory`` (inside the cluster's state dir)."""

    directory: Path
    name: str = REAL_NODE_NAME

    # ------------------------------------------------------------------ paths
    @property
    def _id(self) -> str:
        return "llmservice-node-" + hashlib.sha256(str(self.directory).encode()).hexdigest()[:10]

    @property
    def run_dir(self) -> Path:
        # Sockets live under /run: the state dir's path may exceed the 108 bytes of sun_path.
        return Path("/run") / self._id

    @property
    def cgroup_root(self) -> str:
        """The node's own cgroup (in every v1 hierarchy): its pods live under it, so another
        local cluster's node (or anything else on the host) is never touched by this one."""
        return f"/{self._id}"

    @property
    def containerd_socket(self) -> Path:
        return self.run_dir / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.directory / "containerd" / "config.toml"

    @property
    def kubelet_config(self) -> Path:
        return self.directory / "kubelet" / "config.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.directory / "kubelet" / "kubeconfig"

    @property
    def kubelet_root(self) -> Path:
        return self.directory / "kubelet" / "root"

    @property
    def pod_logs(self) -> Path:
        return self.directory / "kubelet" / "pod-logs"

    @property
    def _sysctl_backup(self) -> Path:
        return self.directory / "sysctl.orig.json"

    # ------------------------------------------------------------------ config
    def write_config(
        self, pki: PKI, server: str, kubelet_port: int, healthz_port: int
    ) -> list[str]:
        """Certificates, containerd's and the kubelet's configuration; returns the kubelet's
        command-line arguments."""
        for sub in ("containerd", "kubelet", "cni/net.d", "pki"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)
        node_pki = self.directory / "pki"
        make_client_cert(
            pki, node_pki, "kubelet-client", f"system:node:{self.name}", "system:nodes"
        )
        make_serving_cert(pki, node_pki, "kubelet", self.name, ["IP:127.0.0.1", f"DNS:{self.name}"])
        self.containerd_config.write_text(self._containerd_toml())
        (self.directory / "cni" / "net.d" / "10-llmservice-hostnet.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "0.4.0",
                    "name": "llmservice-hostnet",
                    # Never used: every pod here is hostNetwork. Its presence makes the
                    # runtime report NetworkReady.
                    "plugins": [{"type": "loopback"}],
                }
            )
        )
        self.kubelet_config.write_text(
            yaml.safe_dump(self._kubelet_configuration(pki, node_pki, kubelet_port, healthz_port))
        )
        self.kubelet_kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "local",
                            "cluster": {"server": server, "certificate-authority": str(pki.ca_crt)},
                        }
                    ],
                    "users": [
                        {
                            "name": "node",
                            "user": {
                                "client-certificate": str(node_pki / "kubelet-client.crt"),
                                "client-key": str(node_pki / "kubelet-client.key"),
                            },
                        }
                    ],
                    "contexts": [{"name": "node", "context": {"cluster": "local", "user": "node"}}],
                    "current-context": "node",
                }
            )
        )
        self.kubelet_root.mkdir(parents=True, exist_ok=True)
        self.pod_logs.mkdir(parents=True, exist_ok=True)
        return [
            f"--config={self.kubelet_config}",
            f"--kubeconfig={self.kubelet_kubeconfig}",
            f"--root-dir={self.kubelet_root}",
            f"--hostname-override={self.name}",
            "--cloud-provider=external",
            f"--node-labels={REAL_NODE_LABEL}=true",
            "--v=1",
        ]

    def _containerd_toml(self) -> str:
        root = self.directory / "containerd"
        return f"""version = 2
root = "{root / "root"}"
state = "{self.run_dir / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{self.containerd_socket}"
[ttrpc]
  address = "{self.containerd_socket}.ttrpc"
[debug]
  level = "warn"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{SANDBOX_IMAGE}"
  enable_selinux = false
  # Root has no CAP_SYS_RESOURCE in this VM: without it every sandbox fails to start.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{self.directory / "cni" / "net.d"}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{root / "opt"}"
"""

    def _kubelet_configuration(
        self, pki: PKI, node_pki: Path, kubelet_port: int, healthz_port: int
    ) -> dict[str, Any]:
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,  # the host is cgroup v1
            "cgroupDriver": "cgroupfs",
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "address": "127.0.0.1",
            "port": kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": healthz_port,
            "tlsCertFile": str(node_pki / "kubelet.crt"),
            "tlsPrivateKeyFile": str(node_pki / "kubelet.key"),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(pki.ca_crt)},
            },
            "authorization": {"mode": "Webhook"},
            "cgroupRoot": self.cgroup_root,
            "registerNode": True,
            "registerWithTaints": [REAL_NODE_TAINT],
            "podLogsDir": str(self.pod_logs),
            "maxPods": 40,
            "failSwapOn": False,
            # Images are imported, never pulled: never collect them.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
            },
            "resolvConf": "/etc/resolv.conf",
            "serializeImagePulls": False,
            "nodeStatusReportFrequency": "10s",
            "syncFrequency": "10s",
            "shutdownGracePeriod": "0s",
        }

    # ------------------------------------------------------------------ run
    def save_sysctls(self) -> None:
        if self._sysctl_backup.exists():
            return
        values = {}
        for key in KUBELET_SYSCTLS:
            with contextlib.suppress(OSError):
                values[key] = (Path("/proc/sys") / key).read_text().strip()
        self._sysctl_backup.write_text(json.dumps(values))

    def prepare_run_dir(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for hierarchy in _cgroup_hierarchies():  # the kubelet wants its cgroup root to exist
            root = hierarchy / self.cgroup_root.lstrip("/")
            with contextlib.suppress(OSError):
                root.mkdir(exist_ok=True)
                for inherited in ("cpuset.cpus", "cpuset.mems"):  # empty: no task may join
                    if (hierarchy / inherited).is_file():
                        (root / inherited).write_text((hierarchy / inherited).read_text())

    def ctr(self, *args: str, timeout: float = 120) -> str:
        result = subprocess.run(
            [CTR, "--address", str(self.containerd_socket), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise RealNodeError(f"ctr {' '.join(args[:2])} failed: {result.stderr.strip()}")
        return result.stdout

    def containerd_ready(self) -> bool:
        try:
            self.ctr("version", timeout=5)
        except (RealNodeError, subprocess.TimeoutExpired):
            return False
        return True

    def image_names(self) -> set[str]:
        return {line.split()[0] for line in self.ctr("images", "ls", "-q").splitlines() if line}

    def import_image(self, tar: Path) -> None:
        self.ctr("images", "import", str(tar), timeout=600)

    # ------------------------------------------------------------------ clean up
    def cleanup(self) -> None:
        """After the kubelet and containerd are stopped: kill what the pods left running,
        unmount, remove the pod cgroups and restore the sysctls the kubelet changed."""
        self.kill_pods()
        self._kill_shims()
        self._unmount_under(self.directory)
        self._unmount_under(self.run_dir)
        self._remove_pod_cgroups()
        self._restore_sysctls()
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def kill_pods(self) -> None:
        """SIGKILL every process in this node's cgroup (its containers and sandboxes)."""
        for root in self._cgroup_roots():
            for procs in root.rglob("cgroup.procs"):
                for pid in _read_pids(procs):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)

    def _cgroup_roots(self) -> list[Path]:
        roots = [h / self.cgroup_root.lstrip("/") for h in _cgroup_hierarchies()]
        return [r for r in roots if r.is_dir()]

    def _kill_shims(self) -> None:
        needle = str(self.containerd_socket).encode()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if b"containerd-shim" in cmdline and needle in cmdline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(proc.name), signal.SIGKILL)

    def _unmount_under(self, top: Path) -> None:
        prefix = str(top.resolve() if top.exists() else top)
        try:
            mounts = Path("/proc/self/mounts").read_text().splitlines()
        except OSError:
            return
        points = sorted(
            {
                line.split()[1].encode().decode("unicode_escape")
                for line in mounts
                if len(line.split()) > 1
            },
            reverse=True,
        )
        for point in points:
            if point == prefix or point.startswith(prefix + "/"):
                subprocess.run(["umount", "-l", point], capture_output=True, check=False)

    def _remove_pod_cgroups(self) -> None:
        for root in self._cgroup_roots():
            for _ in range(20):  # processes may still be exiting
                dirs = sorted(
                    (p for p in root.rglob("*") if p.is_dir()),
                    key=lambda p: len(p.parts),
                    reverse=True,
                )
                for d in [*dirs, root]:
                    with contextlib.suppress(OSError):
                        d.rmdir()
                if not root.exists():
                    break
                time.sleep(0.1)

    def _restore_sysctls(self) -> None:
        try:
            values = json.loads(self._sysctl_backup.read_text())
        except (OSError, ValueError):
            return
        for key, value in values.items():
            with contextlib.suppress(OSError):
                (Path("/proc/sys") / key).write_text(f"{value}\n")


def _cgroup_hierarchies() -> list[Path]:
    try:
        return [p for p in _CGROUP_ROOT.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


def _read_pids(path: Path) -> list[int]:
    try:
        return [int(x) for x in path.read_text().split()]
    except (OSError, ValueError):
        return []
