"""Carried config.json files and their lookup by HF id."""

from __future__ import annotations

import pytest

from llmservice_operator.sizing import builtin_model_ids, load_builtin_model

REQUIRED = [
    "meta-llama/Llama-3.1-8B",
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B",
    "meta-llama/Llama-3.1-70B-Instruct",
    "mistralai/Mistral-7B-v0.1",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "Qwen/Qwen2.5-7B-Instruct",
    "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-30B-A3B",
    "google/gemma-2-9b-it",
    "microsoft/Phi-3-mini-4k-instruct",
    "deepseek-ai/DeepSeek-V2-Lite",
    "EleutherAI/pythia-6.9b",
]


@pytest.mark.parametrize("model_id", REQUIRED)
def test_required_models_are_carried(model_id: str) -> None:
    assert model_id in builtin_model_ids()
    config = load_builtin_model(model_id)
    assert config is not None and "model_type" in config


@pytest.mark.parametrize(
    ("query", "hidden"),
    [
        ("Llama-3.1-8B-Instruct", 4096),
        ("meta-llama/Meta-Llama-3.1-70B-Instruct", 8192),
        ("META-LLAMA/LLAMA-3.1-8B", 4096),
        ("someorg/Qwen2.5-7B-Instruct", 3584),
        ("Qwen/Qwen3-8B@main", 4096),
    ],
)
def test_lookup_forms(query: str, hidden: int) -> None:
    config = load_builtin_model(query)
    assert config is not None and config["hidden_size"] == hidden


def test_unknown_and_fresh_copies() -> None:
    assert load_builtin_model("acme/unknown-13b") is None
    first = load_builtin_model("Qwen/Qwen3-8B")
    assert first is not None
    first["hidden_size"] = 1
    again = load_builtin_model("Qwen/Qwen3-8B")
    assert again is not None and again["hidden_size"] == 4096
