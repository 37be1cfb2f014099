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


_REQUEST = "prompt_tokens_total generation_tokens_total request_success_total"
_TAIL = "e2e_request_latency_seconds request_queue_time_seconds http_requests_total"


def _families(variable_kv: str, variable_latency: str) -> str:
    return (
        f"num_requests_running num_requests_waiting {variable_kv} {_REQUEST} "
        f"time_to_first_token_seconds {variable_latency} {_TAIL}"
    )


# Each release line's exposed families in order ("!": the help carries vLLM's DEPRECATED note),
# then the kv / itl / tpot roles and the finished reasons. Written from the table as it was
# before it became data rows (one function of version checks); each boundary and the release
# just before it.
_OLD_TPOT = "time_per_output_token_seconds"
_ITL = "inter_token_latency_seconds"
_REQ_TPOT = "request_time_per_output_token_seconds"
_RELEASE_LINES = [
    ("0.8.0", _families("gpu_cache_usage_perc", _OLD_TPOT), "gpu", _OLD_TPOT, _OLD_TPOT, 3),
    ("0.9.1", _families("gpu_cache_usage_perc", _OLD_TPOT), "gpu", _OLD_TPOT, _OLD_TPOT, 3),
    ("0.9.2", _families("gpu_cache_usage_perc! kv_cache_usage_perc", _OLD_TPOT), "kv", _OLD_TPOT,
     _OLD_TPOT, 3),
    ("0.10.1", _families("gpu_cache_usage_perc! kv_cache_usage_perc", _OLD_TPOT), "kv",
     _OLD_TPOT, _OLD_TPOT, 3),
    ("0.10.2", _families("gpu_cache_usage_perc! kv_cache_usage_perc", f"{_OLD_TPOT}! {_ITL}"),
     "kv", _ITL, _ITL, 3),
    ("0.11.0", _families("kv_cache_usage_perc", f"{_OLD_TPOT}! {_ITL}"), "kv", _ITL, _ITL, 3),
    ("0.11.2", _families("kv_cache_usage_perc", f"{_OLD_TPOT}! {_ITL}"), "kv", _ITL, _ITL, 3),
    ("0.12.0", _families("kv_cache_usage_perc", f"{_ITL} {_REQ_TPOT}"), "kv", _ITL, _REQ_TPOT, 4),
    ("0.16.1", _families("kv_cache_usage_perc", f"{_ITL} {_REQ_TPOT}"), "kv", _ITL, _REQ_TPOT, 4),
    ("0.17.0", _families("kv_cache_usage_perc", f"{_ITL} {_REQ_TPOT}"), "kv", _ITL, _REQ_TPOT, 5),
    ("0.33.0", _families("kv_cache_usage_perc", f"{_ITL} {_REQ_TPOT}"), "kv", _ITL, _REQ_TPOT, 5),
]  # fmt: skip

# What a family is does not depend on the release: kind, labels, buckets.
_VLLM = ("model_name", "engine")
_FAMILY_SHAPES = {
    "num_requests_running": ("gauge", _VLLM, ()),
    "num_requests_waiting": ("gauge", _VLLM, ()),
    "gpu_cache_usage_perc": ("gauge", _VLLM, ()),
    "kv_cache_usage_perc": ("gauge", _VLLM, ()),
    "prompt_tokens_total": ("counter", _VLLM, ()),
    "generation_tokens_total": ("counter", _VLLM, ()),
    "request_success_total": ("counter", (*_VLLM, "finished_reason"), ()),
    "time_to_first_token_seconds": ("histogram", _VLLM, TIME_TO_FIRST_TOKEN_BUCKETS),
    _OLD_TPOT: ("histogram", _VLLM, INTER_TOKEN_LATENCY_BUCKETS),
    _ITL: ("histogram", _VLLM, INTER_TOKEN_LATENCY_BUCKETS),
    _REQ_TPOT: ("histogram", _VLLM, INTER_TOKEN_LATENCY_BUCKETS),
    "e2e_request_latency_seconds": ("histogram", _VLLM, REQUEST_LATENCY_BUCKETS),
    "request_queue_time_seconds": ("histogram", _VLLM, REQUEST_LATENCY_BUCKETS),
    "http_requests_total": ("counter", ("handler", "method", "status"), ()),
}
_DEPRECATION = {
    "gpu_cache_usage_perc": " DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
    _OLD_TPOT: " DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
}


@pytest.mark.parametrize(
    ("version", "families", "kv", "itl", "tpot", "reasons"),
    _RELEASE_LINES,
    ids=[row[0] for row in _RELEASE_LINES],
)
def test_each_release_line_exposes_its_families(
    version: str, families: str, kv: str, itl: str, tpot: str, reasons: int
) -> None:
    names = metric_names(version)

    def short(name: str) -> str:
        return name.removeprefix("vllm:")

    shown = [
        short(s.name) + ("!" if s.help.endswith(_DEPRECATION.get(short(s.name), "\0")) else "")
        for s in names.exposed
    ]
    assert shown == families.split()
    assert short(names.kv_cache_usage) == f"{kv}_cache_usage_perc"
    assert (short(names.itl), short(names.tpot)) == (itl, tpot)
    all_reasons = ("stop", "length", "abort", "error", "repetition")
    assert names.finished_reasons == all_reasons[:reasons]
    for spec in names.exposed:
        assert (spec.kind, spec.labels, spec.buckets) == _FAMILY_SHAPES[short(spec.name)]
        assert "DEPRECATED" not in spec.help.removesuffix(_DEPRECATION.get(short(spec.name), ""))
    assert names.labels == _VLLM
    assert (names.num_requests_running, names.num_requests_waiting, names.ttft) == (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:time_to_first_token_seconds",
    )
