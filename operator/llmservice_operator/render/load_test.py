"""The built-in load test of a blue-green preview (pure): a Job running ``llmservice load``.

``rollout.blueGreen.loadTest`` gives the preview traffic, so that its pre-promotion analysis
has requests to judge. The Job runs the operator's own image (``llmservice load``: the
product's load generator) against the candidate's Ready pods, as the smoke test does (pod IPs
and the serving port: no Service, no DNS, no kube-proxy needed), at the spec's rate and prompt
and output lengths. With ``serving.apiKeySecretRef`` it sends the key as clients do
(``Authorization: Bearer``), read from the Secret into the container's environment by the
kubelet: the key never appears in the Job's arguments or in the operator.

Its pods carry no ``llmservice.dev/service`` label: no Service or PodDisruptionBudget of the
service selects them, and the operator's pod cache does not count them. The Job is named after
a hash of what it sends to, so a changed target (a candidate pod replaced) is a new Job; the
reconcile removes the old one, and the last one at the switch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .labels import MANAGED_BY
from .objects import RenderInput, _render

__all__ = ["LOAD_REVISION", "LOAD_TEST_LABEL", "LoadTestRuntime", "load_test_job"]

#: On the load test's pods (and Job), with the service's name.
LOAD_TEST_LABEL = "llmservice.dev/load-test"
#: The pod label naming the revision a load test Job sends to.
LOAD_REVISION = "llmservice.dev/load-revision"
#: The environment variable the Job's container reads the API key from.
API_KEY_ENV = "LLMSERVICE_LOAD_API_KEY"


@dataclass(frozen=True)
class LoadTestRuntime:
    """What the operator knows of itself for the Job: its image, and where its pods run."""

    image: str
    pull_policy: str = "IfNotPresent"
    pod_spec: Mapping[str, Any] = field(default_factory=dict)
    """Merged into the Job's pod spec (nodeSelector, tolerations, hostNetwork: the chart gives
    the operator's own), so the load runs where the operator can reach the pods from."""


def load_test_job(
    render_input: RenderInput,
    revision: str,
    targets: Sequence[str],
    runtime: LoadTestRuntime,
) -> dict[str, Any]:
    """The Job loading ``targets`` (``http://podIP:port`` of the candidate ``revision``)."""
    settings = render_input.spec.rollout.blue_green.load_test
    if settings is None:
        raise ValueError("rollout.blueGreen.loadTest is not set")
    args = ["load"]
    for url in sorted(targets):
        args += ["--target", url]
    args += [
        "--model",
        render_input.service.served_model_name,
        "--endpoint",
        settings.endpoint,
        "--rate",
        f"{settings.rate:g}",
        "--duration",
        "86400",
        "--prompt-tokens",
        str(settings.prompt_tokens),
        "--output-tokens",
        str(settings.output_tokens),
        "--timeout",
        "600",
        "--output",
        "json",
    ]
    env: list[dict[str, Any]] = []
    ref = render_input.spec.serving.api_key_secret_ref
    if ref is not None:
        args += ["--api-key-env", API_KEY_ENV]
        env.append(
            {"name": API_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}
        )
    digest = hashlib.sha256(json.dumps([revision, args], sort_keys=True).encode()).hexdigest()
    name = f"{render_input.name[:40]}-loadtest-{digest[:10]}"
    job = _render(
        "loadtest-job.yaml.j2",
        name=name,
        namespace=render_input.namespace,
        labels={
            LOAD_TEST_LABEL: render_input.name,
            "app.kubernetes.io/component": "load-test",
            "app.kubernetes.io/managed-by": MANAGED_BY,
        },
        pod_labels={LOAD_TEST_LABEL: render_input.name, LOAD_REVISION: revision},
        image=runtime.image,
        pull_policy=runtime.pull_policy,
        args=args,
        env=env,
    )
    job["spec"]["template"]["spec"].update(dict(runtime.pod_spec))
    return job
