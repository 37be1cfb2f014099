"""Shared fixtures: the built-in GPU catalog and architectures of the carried configs."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llmservice_operator.sizing import (
    GpuCatalog,
    ModelArchitecture,
    load_builtin_model,
    load_catalog,
    parse_hf_config,
)


@pytest.fixture(scope="session")
def catalog() -> GpuCatalog:
    return load_catalog()


def builtin_architecture(model_id: str) -> ModelArchitecture:
    config = load_builtin_model(model_id)
    assert config is not None, model_id
    return parse_hf_config(config)


@pytest.fixture(scope="session")
def arch() -> Callable[[str], ModelArchitecture]:
    return builtin_architecture
