"""The LeaderWorkerSet controller (``sigs.k8s.io/lws``) in the local control plane.

The controller runs as a process on loopback, like kube-controller-manager. It has webhooks:
defaulting and validation of LeaderWorkerSets, and a pod mutating webhook that gives each pod
of a group its labels (``worker-index``, ``group-index``, ``group-key``) and its ``LWS_*``
variables; without it no group comes up. Its own certificate management (a Secret and a
Service in ``lws-system``) cannot work here (no Service IP is reachable), so it is off: the
webhook server listens on 127.0.0.1 with a certificate from the cluster CA, and the API server
calls it by ``url`` (the ``clientConfig.url`` form of an admission webhook).

Pure functions: the controller's configuration file, its arguments and the two webhook
configurations (the paths, rules and object selectors of the module's config/webhook).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

__all__ = [
    "LWS_GROUP",
    "LWS_LABEL_GROUP_INDEX",
    "LWS_LABEL_NAME",
    "LWS_LABEL_WORKER_INDEX",
    "MUTATING_WEBHOOK_CONFIGURATION",
    "VALIDATING_WEBHOOK_CONFIGURATION",
    "controller_args",
    "controller_config",
    "webhook_configurations",
]

LWS_GROUP = "leaderworkerset.x-k8s.io"
LWS_LABEL_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_LABEL_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_LABEL_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
MUTATING_WEBHOOK_CONFIGURATION = "lws-mutating-webhook-configuration"
VALIDATING_WEBHOOK_CONFIGURATION = "lws-validating-webhook-configuration"
#: The paths the controller's webhook server serves (config/webhook/manifests.yaml).
_LWS_MUTATE = "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset"
_LWS_VALIDATE = "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset"
_POD_MUTATE = "/mutate--v1-pod"
_POD_VALIDATE = "/validate--v1-pod"
#: The pod webhooks see only LWS pods (config/webhook/{mutating,validating}-patch.yaml): the
#: rest of the cluster keeps working while the controller is down.
_LWS_PODS = {"matchExpressions": [{"key": LWS_LABEL_NAME, "operator": "Exists"}]}


def controller_config(*, webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    """The controller's ``config.lws.x-k8s.io/v1alpha1`` Configuration: webhooks on loopback
    with the certificate in ``cert_dir`` (``tls.crt``/``tls.key``), no certificate rotation,
    no leader election, no metrics endpoint, health on loopback."""
    return {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
    }


def controller_args(config_file: Path, kubeconfig: Path) -> list[str]:
    """The controller's command line."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--config={config_file}",
        "--zap-devel=false",
        "--zap-log-level=info",
    ]


def webhook_configurations(webhook_port: int, ca_crt: bytes) -> list[dict[str, Any]]:
    """The Mutating- and ValidatingWebhookConfiguration of the controller, by loopback URL."""
    base = f"https://127.0.0.1:{webhook_port}"
    bundle = base64.b64encode(ca_crt).decode()

    def hook(
        name: str, path: str, group: str, resource: str, ops: list[str], **extra: Any
    ) -> dict[str, Any]:
        return {
            "name": name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": f"{base}{path}", "caBundle": bundle},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "timeoutSeconds": 10,
            "rules": [
                {
                    "apiGroups": [group],
                    "apiVersions": ["v1"],
                    "operations": ops,
                    "resources": [resource],
                }
            ],
            **extra,
        }

    create_update = ["CREATE", "UPDATE"]
    # The pod webhooks' verbs are the kubebuilder markers' of pkg/webhooks/pod_webhook.go, less
    # the validation of UPDATE (a no-op in v0.7): each annotation patch of the simulator
    # runner would otherwise make a round trip to the controller.
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": MUTATING_WEBHOOK_CONFIGURATION},
            "webhooks": [
                hook("mleaderworkerset.kb.io", _LWS_MUTATE, LWS_GROUP, "leaderworkersets",
                     create_update),
                hook("mpod.kb.io", _POD_MUTATE, "", "pods", ["CREATE"],
                     objectSelector=_LWS_PODS),
            ],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": VALIDATING_WEBHOOK_CONFIGURATION},
            "webhooks": [
                hook("vleaderworkerset.kb.io", _LWS_VALIDATE, LWS_GROUP, "leaderworkersets",
                     create_update),
                hook("vpod.kb.io", _POD_VALIDATE, "", "pods", ["CREATE"],
                     objectSelector=_LWS_PODS),
            ],
        },
    ]  # fmt: skip
