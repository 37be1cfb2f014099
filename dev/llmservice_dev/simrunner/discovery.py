"""Prometheus target groups for pods, as ``kubernetes_sd_configs`` role ``pod`` builds them.

Debian's Prometheus is built without Kubernetes discovery, so in the local cluster the runner
(which watches the pods anyway) serves these groups for ``http_sd_configs``, and the production
relabel rules (docs/prometheus.md) apply to them unchanged. Mirrors Prometheus's
``discovery/kubernetes/pod.go``: pods without an IP have no targets; every declared container
port is one target ``podIP:port``; a container without ports is one target ``podIP``; the meta
labels are ``__meta_kubernetes_namespace`` and ``__meta_kubernetes_pod_*``. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["pod_target_groups", "sanitize_label_name", "target_groups"]

_META = "__meta_kubernetes_pod_"
_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def sanitize_label_name(name: str) -> str:
    """Prometheus's ``strutil.SanitizeLabelName``: every invalid character becomes ``_``."""
    return _INVALID.sub("_", name)


def _pod_labels(pod: Mapping[str, Any]) -> dict[str, str]:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    ready = "unknown"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            ready = str(cond.get("status", "unknown")).lower()
    labels = {
        "__meta_kubernetes_namespace": str(meta.get("namespace", "")),
        f"{_META}name": str(meta.get("name", "")),
        f"{_META}ip": str(status.get("podIP", "")),
        f"{_META}ready": ready,
        f"{_META}phase": str(status.get("phase", "")),
        f"{_META}node_name": str(spec.get("nodeName", "")),
        f"{_META}host_ip": str(status.get("hostIP", "")),
        f"{_META}uid": str(meta.get("uid", "")),
    }
    for owner in meta.get("ownerReferences") or []:
        if owner.get("controller"):
            labels[f"{_META}controller_kind"] = str(owner.get("kind", ""))
            labels[f"{_META}controller_name"] = str(owner.get("name", ""))
    for kind, values in (("label", meta.get("labels")), ("annotation", meta.get("annotations"))):
        for key, value in (values or {}).items():
            name = sanitize_label_name(str(key))
            labels[f"{_META}{kind}_{name}"] = str(value)
            labels[f"{_META}{kind}present_{name}"] = "true"
    return labels


def pod_target_groups(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One target group per target of ``pod`` (none while it has no IP)."""
    ip = (pod.get("status") or {}).get("podIP")
    if not ip:
        return []
    base = _pod_labels(pod)
    spec = pod.get("spec") or {}
    groups: list[dict[str, Any]] = []
    for init, containers in ((False, spec.get("containers")), (True, spec.get("initContainers"))):
        for container in containers or []:
            labels = {
                **base,
                f"{_META}container_name": str(container.get("name", "")),
                f"{_META}container_image": str(container.get("image", "")),
                f"{_META}container_init": "true" if init else "false",
            }
            ports = container.get("ports") or []
            if not ports:
                groups.append({"targets": [str(ip)], "labels": labels})
            for port in ports:
                number = int(port["containerPort"])
                groups.append(
                    {
                        "targets": [f"{ip}:{number}"],
                        "labels": {
                            **labels,
                            f"{_META}container_port_name": str(port.get("name", "")),
                            f"{_META}container_port_number": str(number),
                            f"{_META}container_port_protocol": str(port.get("protocol", "TCP")),
                        },
                    }
                )
    return groups


def target_groups(pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every target of ``pods``, ordered by namespace and name (stable for Prometheus)."""
    ordered = sorted(
        pods,
        key=lambda p: (
            str((p.get("metadata") or {}).get("namespace", "")),
            str((p.get("metadata") or {}).get("name", "")),
        ),
    )
    return [group for pod in ordered for group in pod_target_groups(pod)]
