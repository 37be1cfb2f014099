"""vllm/metrics.py: names by version, buckets as vLLM ships them, PromQL helper."""

from __future__ import annotations

import pytest

from llmservice_operator.vllm.metrics import (
    INTER_TOKEN_LATENCY_BUCKETS,
    LATEST_KNOWN_VLLM_VERSION,
    REQUEST_LATENCY_BUCKETS,
    TIME_TO_FIRST_TOKEN_BUCKETS,
    metric_names,
    parse_vllm_version,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.10.2", (0, 10, 2)),
        ("v0.9.2", (0, 9, 2)),
        ("0.11.0rc1", (0, 11, 0)),
        ("0.12", (0, 12, 0)),
    ],
)
def test_versions_parse(text: str, expected: tuple[int, int, int]) -> None:
    assert parse_vllm_version(text) == expected


@pytest.mark.parametrize("text", ["", "latest", "x0.1"])
def test_bad_versions_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a vLLM version"):
        parse_vllm_version(text)


def test_pre_v1_versions_are_refused() -> None:
    with pytest.raises(ValueError, match="predates the V1 engine"):
        metric_names("0.6.3")


@pytest.mark.parametrize(
    ("version", "kv", "itl", "tpot"),
    [
        ("0.8.5", "gpu_cache_usage_perc", "time_per_output_token_seconds", None),
        ("0.9.2", "kv_cache_usage_perc", "time_per_output_token_seconds", None),
        ("0.10.2", "kv_cache_usage_perc", "inter_token_latency_seconds", None),
        ("0.11.0", "kv_cache_usage_perc", "inter_token_latency_seconds", None),
        ("0.12.0", "kv_cache_usage_perc", "inter_token_latency_seconds", "request_time"),
        ("0.33.0", "kv_cache_usage_perc", "inter_token_latency_seconds", "request_time"),
    ],
)
def test_renames_follow_the_version(version: str, kv: str, itl: str, tpot: str | None) -> None:
    names = metric_names(version)
    assert names.kv_cache_usage == f"vllm:{kv}"
    assert names.itl == f"vllm:{itl}"
    expected_tpot = "vllm:request_time_per_output_token_seconds" if tpot else names.itl
    assert names.tpot == expected_tpot
    for role in (names.kv_cache_usage, names.itl, names.tpot, names.ttft, names.e2e_latency):
        names.spec(role)  # every role names an exposed family


def test_deprecated_names_stay_exposed_until_hidden() -> None:
    def exposed(version: str) -> set[str]:
        return {spec.name for spec in metric_names(version).exposed}

    assert {"vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"} <= exposed("0.10.1")
    assert "vllm:gpu_cache_usage_perc" not in exposed("0.11.0")
    assert {"vllm:time_per_output_token_seconds", "vllm:inter_token_latency_seconds"} <= exposed(
        "0.11.0"
    )
    assert "vllm:time_per_output_token_seconds" not in exposed("0.12.0")


def test_latest_version_exposes_the_documented_set() -> None:
    names = metric_names(LATEST_KNOWN_VLLM_VERSION)
    kinds = {spec.name: spec.kind for spec in names.exposed}
    assert kinds == {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:prompt_tokens_total": "counter",
        "vllm:generation_tokens_total": "counter",
        "vllm:request_success_total": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:request_time_per_output_token_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
        "vllm:request_queue_time_seconds": "histogram",
        "http_requests_total": "counter",
    }
    assert names.labels == ("model_name", "engine")
    assert names.spec("vllm:request_success_total").labels[-1] == "finished_reason"
    assert names.finished_reasons == ("stop", "length", "abort", "error", "repetition")
    assert metric_names("0.11.0").finished_reasons == ("stop", "length", "abort")
    assert names.spec("vllm:prompt_tokens_total").registered_name == "vllm:prompt_tokens"


def test_buckets_are_vllms() -> None:
    names = metric_names("0.33.0")
    assert names.spec(names.ttft).buckets == TIME_TO_FIRST_TOKEN_BUCKETS
    assert names.spec(names.itl).buckets == INTER_TOKEN_LATENCY_BUCKETS
    assert names.spec(names.e2e_latency).buckets == REQUEST_LATENCY_BUCKETS
    assert names.spec(names.queue_time).buckets == REQUEST_LATENCY_BUCKETS
    assert (len(TIME_TO_FIRST_TOKEN_BUCKETS), TIME_TO_FIRST_TOKEN_BUCKETS[-1]) == (22, 2560.0)
    assert (len(INTER_TOKEN_LATENCY_BUCKETS), INTER_TOKEN_LATENCY_BUCKETS[-1]) == (19, 80.0)
    assert (len(REQUEST_LATENCY_BUCKETS), REQUEST_LATENCY_BUCKETS[-1]) == (21, 7680.0)
    for buckets in (TIME_TO_FIRST_TOKEN_BUCKETS, INTER_TOKEN_LATENCY_BUCKETS):
        assert list(buckets) == sorted(set(buckets))


def test_histogram_quantile_promql() -> None:
    names = metric_names("0.33.0")
    query = names.histogram_quantile(0.99, names.ttft, 'namespace="ml"', "2m")
    assert query == (
        "histogram_quantile(0.99, sum by (le) "
        '(rate(vllm:time_to_first_token_seconds_bucket{namespace="ml"}[2m])))'
    )
    with pytest.raises(ValueError, match="not a histogram"):
        names.histogram_quantile(0.5, names.num_requests_waiting)
    with pytest.raises(KeyError):
        names.histogram_quantile(0.5, "vllm:gpu_cache_usage_perc")
