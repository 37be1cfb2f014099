"""Where the model cache keeps what (pure): the PVC's name and each revision's directory.

One PVC per service holds every revision the service has needed, each in its own directory,
``<repo id with / as -->/<revision>``, so a new revision downloads next to the one serving.
The serving pods mount the PVC read-only at ``CACHE_MOUNT_DIR`` and start ``vllm serve`` on the
revision's directory; the download Job mounts it read-write at the same place.
"""

from __future__ import annotations

import re

from ..api.spec import ModelSpec

__all__ = [
    "CACHE_LABEL",
    "CACHE_MANIFEST",
    "CACHE_MOUNT_DIR",
    "CACHE_PERMANENT_EXIT",
    "PRUNE_LABEL",
    "cache_claim_name",
    "cached_model_path",
    "revision_dir",
]

#: On the download Job and its pods, with the service's name.
CACHE_LABEL = "llmservice.dev/model-cache"
#: On the clean-up Job (and its pods), with the service's name, besides CACHE_LABEL.
PRUNE_LABEL = "llmservice.dev/cache-prune"
CACHE_MOUNT_DIR = "/models"
#: The manifest the download Job writes, last, in a revision's directory (files, hashes).
CACHE_MANIFEST = "llmservice-manifest.json"
#: The download Job's exit status for what only a spec change fixes (its podFailurePolicy
#: fails the Job at once on it; other failures are retried).
CACHE_PERMANENT_EXIT = 3
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def cache_claim_name(service_name: str, model: ModelSpec) -> str:
    """The PVC: the one the spec names, else the one the operator makes."""
    cache = model.cache
    if cache is not None and cache.claim_name:
        return cache.claim_name
    return f"{service_name}-model-cache"


def revision_dir(model_id: str, revision: str) -> str:
    """``org--name/<revision>``: no '/' of a branch name, no '..', nothing a shell quotes."""
    repo = _UNSAFE.sub("_", model_id.replace("/", "--"))
    rev = _UNSAFE.sub("_", revision.replace("/", "--"))
    return f"{repo.lstrip('.') or '_'}/{rev.lstrip('.') or '_'}"


def cached_model_path(model: ModelSpec) -> str:
    """The directory the serving pods load: the pinned revision's, in the mounted PVC."""
    assert model.revision is not None  # the spec requires one with a cache
    return f"{CACHE_MOUNT_DIR}/{revision_dir(model.id, model.revision)}"
