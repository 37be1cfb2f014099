"""The model cache's objects (pure): its PVC, and the Job that fills it for one revision.

``spec.model.cache`` puts the weights on a PVC, downloaded once per revision by a Job running
the operator's own image (``llmservice cache-model``: huggingface_hub's ``snapshot_download``,
then each file checked against the hub's sha256 and sizes, then a manifest). The serving pods
mount the PVC read-only and load the revision's directory with ``HF_HUB_OFFLINE=1``
(render/objects.py); the operator creates their Deployment only once the Job has succeeded
(the ``ModelCached`` condition, decide.py). See docs/model-cache.md.

The Job's name is a hash of what it downloads (repo, revision, hub, token, claim): a new
revision is a new Job, next to the old one's directory; a finished Job is kept as the record of
its revision until the service no longer serves that revision.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from .cache_layout import (
    CACHE_LABEL,
    CACHE_MOUNT_DIR,
    CACHE_PERMANENT_EXIT,
    PRUNE_LABEL,
    cache_claim_name,
    revision_dir,
)
from .labels import MANAGED_BY, SERVICE
from .load_test import LoadTestRuntime
from .objects import RenderInput, _render

__all__ = [
    "CACHE_SIZE_MARGIN",
    "cache_job",
    "cache_job_name",
    "cache_prune_job",
    "cache_pvc",
    "default_cache_size",
]

GIB = 1024**3
#: The default PVC size: twice the weights (a new revision downloads next to the serving one),
#: plus this share of that, plus 1 GiB (tokenizer, config, the manifest, file-system overhead).
CACHE_SIZE_MARGIN = 0.10


def default_cache_size(weight_bytes: int) -> str:
    """``2 x weights x 1.1 + 1 GiB``, rounded up to whole GiB."""
    return f"{math.ceil(2 * weight_bytes * (1 + CACHE_SIZE_MARGIN) / GIB) + 1}Gi"


def _labels(render_input: RenderInput, component: str) -> dict[str, str]:
    return {
        SERVICE: render_input.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": "llmservice",
        "app.kubernetes.io/managed-by": MANAGED_BY,
    }


def cache_pvc(
    render_input: RenderInput, weight_bytes: int, existing_size: str | None = None
) -> dict[str, Any] | None:
    """The PVC the operator makes; None when the spec names its own claim.

    ``existing_size``: the size of the PVC as it exists, kept (a claim cannot shrink, and a
    changed default must not try to)."""
    cache = render_input.spec.model.cache
    if cache is None or cache.claim_name is not None:
        return None
    size = cache.size or existing_size or default_cache_size(weight_bytes)
    return _render(
        "cache-pvc.yaml.j2",
        name=cache_claim_name(render_input.name, render_input.spec.model),
        namespace=render_input.namespace,
        labels=_labels(render_input, "model-cache"),
        access_modes=list(cache.access_modes or ["ReadWriteMany"]),
        storage_class_name=cache.storage_class_name,
        size=size,
    )


def _job_args(render_input: RenderInput) -> list[str]:
    model = render_input.spec.model
    assert model.cache is not None and model.revision is not None  # the spec requires both
    args = [
        "cache-model",
        "--repo", model.id,
        "--revision", model.revision,
        "--dir", f"{CACHE_MOUNT_DIR}/{revision_dir(model.id, model.revision)}",
    ]  # fmt: skip
    if model.cache.endpoint is not None:
        args += ["--endpoint", model.cache.endpoint]
    return args


def cache_job_name(render_input: RenderInput) -> str:
    """``<service>-cache-<hash of repo, revision, hub, token, claim>``."""
    model = render_input.spec.model
    assert model.cache is not None
    token = render_input.spec.engine.hf_token_secret_ref
    what = [
        _job_args(render_input),
        cache_claim_name(render_input.name, model),
        None if token is None else [token.name, token.key],
    ]
    digest = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()
    return f"{render_input.name[:40]}-cache-{digest[:10]}"


def cache_job(render_input: RenderInput, runtime: LoadTestRuntime) -> dict[str, Any]:
    """The Job filling the PVC with the pinned revision (the operator's image, ``runtime``)."""
    model = render_input.spec.model
    if model.cache is None or model.revision is None:
        raise ValueError("spec.model.cache (with model.revision) is not set")
    return _job(render_input, runtime, cache_job_name(render_input), _job_args(render_input), {})


def cache_prune_job(render_input: RenderInput, runtime: LoadTestRuntime) -> dict[str, Any]:
    """The clean-up Job: every other revision's directory removed from the PVC the operator
    made (``llmservice cache-prune``), once the pinned revision alone serves."""
    model = render_input.spec.model
    if model.cache is None or model.revision is None:
        raise ValueError("spec.model.cache (with model.revision) is not set")
    keep = revision_dir(model.id, model.revision)
    claim = cache_claim_name(render_input.name, model)
    digest = hashlib.sha256(json.dumps([keep, claim]).encode()).hexdigest()
    name = f"{render_input.name[:34]}-cache-prune-{digest[:10]}"
    args = ["cache-prune", "--root", CACHE_MOUNT_DIR, "--keep", keep]
    return _job(render_input, runtime, name, args, {PRUNE_LABEL: render_input.name})


def _job(
    render_input: RenderInput,
    runtime: LoadTestRuntime,
    name: str,
    args: list[str],
    extra_labels: dict[str, str],
) -> dict[str, Any]:
    model = render_input.spec.model
    assert model.revision is not None
    env: list[dict[str, Any]] = [
        {"name": "HF_HOME", "value": "/tmp/hf-home"},
        {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
        {"name": "HF_HUB_DISABLE_PROGRESS_BARS", "value": "1"},
    ]
    token = render_input.spec.engine.hf_token_secret_ref
    if token is not None and PRUNE_LABEL not in extra_labels:  # the clean-up needs no hub
        ref = {"name": token.name, "key": token.key}
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": ref}})
    labels = {
        **_labels(render_input, "model-cache"),
        CACHE_LABEL: render_input.name,
        **extra_labels,
    }
    job = _render(
        "cache-job.yaml.j2",
        name=name,
        namespace=render_input.namespace,
        labels=labels,
        annotations={
            "llmservice.dev/model": model.id,
            "llmservice.dev/model-revision": model.revision,
        },
        pod_labels=labels,
        image=runtime.image,
        pull_policy=runtime.pull_policy,
        args=args,
        env=env,
        permanent_exit=CACHE_PERMANENT_EXIT,
        mount_dir=CACHE_MOUNT_DIR,
        claim_name=cache_claim_name(render_input.name, model),
    )
    job["spec"]["template"]["spec"].update(dict(runtime.pod_spec))
    return job
