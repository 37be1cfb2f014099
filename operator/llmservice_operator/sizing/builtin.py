"""config.json files carried for well-known models, so sizing works without the Hub.

``data/models/index.json`` maps HuggingFace ids to files; the files are verbatim copies of the
public config.json of each model.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["builtin_model_ids", "load_builtin_model"]

_PACKAGE = "llmservice_operator.sizing"


@cache
def _index() -> dict[str, str]:
    text = resources.files(_PACKAGE).joinpath("data", "models", "index.json").read_text("utf-8")
    models: dict[str, str] = json.loads(text)["models"]
    return models


def builtin_model_ids() -> list[str]:
    """HuggingFace ids with a carried config.json."""
    return sorted(_index())


def _lookup(model_id: str) -> str | None:
    index = _index()
    wanted = model_id.strip().split("@", 1)[0].rstrip("/")
    if wanted in index:
        return index[wanted]
    lowered = wanted.lower()
    for key, filename in index.items():
        if key.lower() == lowered:
            return filename
    base = lowered.rsplit("/", 1)[-1]
    for key, filename in index.items():
        if key.lower().rsplit("/", 1)[-1] == base:
            return filename
    return None


def load_builtin_model(model_id: str) -> dict[str, Any] | None:
    """The carried config.json for ``model_id`` (HF id or its base name), or None.

    Matching is exact first, then case-insensitive, then on the part after the last '/'
    (so ``Llama-3.1-8B-Instruct`` and ``meta-llama/Meta-Llama-3.1-8B-Instruct`` both work).
    Each call returns a fresh dict.
    """
    filename = _lookup(model_id)
    if filename is None:
        return None
    config: dict[str, Any] = json.loads(_model_text(filename))
    return config


@cache
def _model_text(filename: str) -> str:
    """A carried config.json's text, read once (every plan resolves its model's)."""
    return resources.files(_PACKAGE).joinpath("data", "models", filename).read_text("utf-8")
