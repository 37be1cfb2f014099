"""The PrometheusRule each LLMService renders (render/alerts.py), judged by Prometheus's own
tool: every example's rule groups pass ``promtool check rules``, and ``promtool test rules``
runs synthetic series through them that make each alert fire, and then resolve.

promtool comes from Debian's ``prometheus`` package (``make install``). Without it the tests
skip on a developer's machine and fail in CI (``CI=true``): a check that cannot run must not
pass there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmservice_operator.api import parse_llmservice
from llmservice_operator.commands.plan import plan_documents
from llmservice_operator.render.alerts import (
    BURN_RATE_WINDOWS,
    RECORDED_WINDOWS,
    bucket_label,
    ttft_good_rate,
)
from llmservice_operator.render.objects import prometheus_rule
from llmservice_operator.service_plan import plan_service
from llmservice_operator.sizing import builtin_catalog
from llmservice_operator.vllm.metrics import metric_names

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
#: Every alert, with SLOs, operator scaling and a maxReplicas (6) and target queue (4).
CANARY = ROOT / "examples" / "llama-3.1-70b-canary.yaml"
NS, NAME = "default", "llama-70b"
PROMETHEUS_URL = "http://prometheus.monitoring.svc:9090"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        message = "promtool is not installed (Debian's prometheus package: `make install`)"
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail(f"{message}; CI must run the rule checks")
        pytest.skip(message)
    return found


def _rule_object(example: Path, change: dict[str, Any] | None = None) -> dict[str, Any]:
    doc = yaml.safe_load(example.read_text())
    for key, value in (change or {}).items():
        doc["spec"][key] = value
    plan = plan_service(parse_llmservice(doc), builtin_catalog(), PROMETHEUS_URL)
    return prometheus_rule(plan.render_input)


def _groups(rule: dict[str, Any]) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def _rules(rule: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for group in _groups(rule) for r in group["rules"]]


def _write_rules(rule: dict[str, Any], path: Path) -> Path:
    path.write_text(yaml.safe_dump({"groups": _groups(rule)}, sort_keys=False))
    return path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], capture_output=True, text=True, timeout=120, check=False
    )


# -- promtool check rules ------------------------------------------------------------------


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_examples_rule_groups_pass_promtool_check(example: Path, tmp_path: Path) -> None:
    [plan] = plan_documents(example, None, PROMETHEUS_URL)
    [rule] = [o for o in plan.objects if o["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == plan.service.metadata.namespace
    done = _run("check", "rules", str(_write_rules(rule, tmp_path / "rules.yaml")))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_rules(rule))} rules found" in done.stdout, done.stdout


def test_a_mistake_in_a_rule_is_what_promtool_check_refuses(tmp_path: Path) -> None:
    """The check above can fail: a broken expression is refused."""
    rule = _rule_object(CANARY)
    _groups(rule)[0]["rules"][0]["expr"] += " and ("
    done = _run("check", "rules", str(_write_rules(rule, tmp_path / "rules.yaml")))
    assert done.returncode != 0


# -- what is rendered when -----------------------------------------------------------------


def _alert_names(rule: dict[str, Any]) -> set[str]:
    return {r["alert"] for r in _rules(rule) if "alert" in r}


def test_every_alert_and_two_groups_with_slos() -> None:
    rule = _rule_object(CANARY)
    assert [g["name"] for g in _groups(rule)] == [
        "llmservice.default.llama-70b.serving",
        "llmservice.default.llama-70b.slo",
    ]
    assert _alert_names(rule) == {
        "LLMServiceKVCacheFull",
        "LLMServiceGPUIdle",
        "LLMServiceQueueAtMaxReplicas",
        "LLMServiceErrorBudgetBurn",
        "LLMServiceTTFTBudgetBurn",
    }
    burns = [r for r in _rules(rule) if r.get("alert", "").endswith("BudgetBurn")]
    assert sorted(r["labels"]["severity"] for r in burns) == ["critical"] * 2 + ["warning"] * 2
    records = [r["record"] for r in _rules(rule) if "record" in r]
    assert len(records) == 2 * len(RECORDED_WINDOWS)
    windows = {w for burn in BURN_RATE_WINDOWS for w in (burn.long, burn.short)}
    assert windows == set(RECORDED_WINDOWS)


def test_no_slo_no_slo_group_and_manual_scaling_no_queue_alert() -> None:
    rule = _rule_object(ROOT / "examples" / "llama-3.1-8b.yaml")
    assert [g["name"].rsplit(".", 1)[1] for g in _groups(rule)] == ["serving"]
    assert "LLMServiceQueueAtMaxReplicas" in _alert_names(rule)
    manual = _rule_object(
        ROOT / "examples" / "llama-3.1-8b.yaml",
        {"scaling": {"mode": "manual", "minReplicas": 2, "maxReplicas": 2}},
    )
    assert _alert_names(manual) == {"LLMServiceKVCacheFull", "LLMServiceGPUIdle"}


def test_the_metric_names_are_the_pinned_vllms() -> None:
    """The names come from vllm/metrics.py's table for spec.engine.vllmVersion."""
    for example in EXAMPLES:
        doc = yaml.safe_load(example.read_text())
        names = metric_names(doc["spec"].get("engine", {}).get("vllmVersion", "0.33.0"))
        exprs = "\n".join(r["expr"] for r in _rules(_rule_object(example)))
        assert f"{names.kv_cache_usage}{{" in exprs, example.name
        assert f"{names.num_requests_waiting}{{" in exprs, example.name
        if doc["spec"].get("slo", {}).get("ttftP99Ms"):
            assert f"{names.ttft}_bucket{{" in exprs, example.name


def test_the_ttft_threshold_between_buckets_is_interpolated() -> None:
    histogram, selector = "h", 'namespace="ml"'
    on_bound = ttft_good_rate(histogram, selector, 1.0, "5m")
    assert on_bound.count("_bucket") == 1 and 'le="1.0"' in on_bound
    between = ttft_good_rate(histogram, selector, 0.8, "5m")  # 0.75 .. 1.0: a fifth of the way
    assert 'le="0.75"' in between and 'le="1.0"' in between and "* 0.2)" in between
    beyond = ttft_good_rate(histogram, selector, 5000.0, "5m")
    assert "h_count" in beyond and "_bucket" not in beyond
    below = ttft_good_rate(histogram, selector, 0.0005, "5m")
    assert 'le="0.001"' in below and "* 0.5" in below
    assert [bucket_label(b) for b in (1, 0.75, 2560, 0.001)] == ["1.0", "0.75", "2560.0", "0.001"]


# -- promtool test rules: each alert fires, then resolves ----------------------------------

VLLM = {"namespace": NS, "llmservice": NAME, "revision": "7c9f2d0a1b", "engine": "0"}
POD = f"{NAME}-7c9f2d0a1b-5d8f9c7b4-x2k9p"


def _series(metric: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{inner}}}", "values": values}


def _vllm(metric: str, pod: str, values: str, **extra: str) -> dict[str, str]:
    return _series(metric, {**VLLM, "pod": pod, "model_name": NAME, **extra}, values)


def _annotations(rule: dict[str, Any], labels: dict[str, str], value: str) -> dict[str, str]:
    """The rule's annotations as Prometheus expands them for ``labels`` and ``value``."""
    expanded = {}
    for key, text in rule["annotations"].items():
        for label, label_value in labels.items():
            text = text.replace(f"{{{{ $labels.{label} }}}}", label_value)
        text = text.replace("{{ $value | humanizePercentage }}", value)
        text = text.replace('{{ $value | printf "%.1f" }}', value)
        expanded[key] = text
    return expanded


def _expect(
    rules: list[dict[str, Any]],
    alert: str,
    labels: dict[str, str],
    severity: str,
    value: str = "",
) -> dict[str, Any]:
    [rule] = [r for r in rules if r.get("alert") == alert and r["labels"]["severity"] == severity]
    exp_labels = {**labels, **rule["labels"]}
    return {"exp_labels": exp_labels, "exp_annotations": _annotations(rule, exp_labels, value)}


def _kv_cache_case(rules: list[dict[str, Any]]) -> dict[str, Any]:
    """One pod's KV cache at 95% from minute 10 to 29, another's at 50% throughout."""
    full = {"namespace": NS, "llmservice": NAME, "pod": POD}
    return {
        "interval": "1m",
        "input_series": [
            _vllm("vllm:kv_cache_usage_perc", POD, "0.5x9 0.95x19 0.5x30"),
            _vllm("vllm:kv_cache_usage_perc", f"{NAME}-7c9f2d0a1b-5d8f9c7b4-q7w2e", "0.5x60"),
        ],
        "alert_rule_test": [
            {"eval_time": "12m", "alertname": "LLMServiceKVCacheFull", "exp_alerts": []},
            {
                "eval_time": "20m",
                "alertname": "LLMServiceKVCacheFull",
                "exp_alerts": [_expect(rules, "LLMServiceKVCacheFull", full, "warning", "95%")],
            },
            {"eval_time": "40m", "alertname": "LLMServiceKVCacheFull", "exp_alerts": []},
        ],
    }


def _gpu(metric: str, pod: str, values: str, gpu: str = "0") -> dict[str, str]:
    labels = {
        "gpu": gpu,
        "UUID": f"GPU-{pod}-{gpu}",
        "device": f"nvidia{gpu}",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "gpu-node-1",
        "container": "vllm",
        "namespace": NS,
        "pod": pod,
    }
    return _series(metric, labels, values)


def _gpu_idle_case(rules: list[dict[str, Any]]) -> dict[str, Any]:
    """Two GPUs of a serving pod: 94% memory, 5% and 10% busy until minute 60, then 90%.
    Another service's pod in the namespace idles the same way and is not this alert's."""
    other = "chat-0a1b2c3d4e-6c7d8e9f0-zz9yy"
    series = []
    for pod in (POD, other):
        for gpu, idle in (("0", "5"), ("1", "10")):
            series += [
                _gpu("DCGM_FI_DEV_FB_USED", pod, "75000x120", gpu),
                _gpu("DCGM_FI_DEV_FB_FREE", pod, "5000x120", gpu),
                _gpu("DCGM_FI_DEV_GPU_UTIL", pod, f"{idle}x59 90x60", gpu),
            ]
    series.append(_vllm("vllm:num_requests_running", POD, "0x120"))
    idling = {"namespace": NS, "pod": POD}
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {"eval_time": "20m", "alertname": "LLMServiceGPUIdle", "exp_alerts": []},
            {
                "eval_time": "45m",
                "alertname": "LLMServiceGPUIdle",
                "exp_alerts": [_expect(rules, "LLMServiceGPUIdle", idling, "warning")],
            },
            {"eval_time": "75m", "alertname": "LLMServiceGPUIdle", "exp_alerts": []},
        ],
    }


def _queue_case(rules: list[dict[str, Any]], pods: int) -> dict[str, Any]:
    """``pods`` replicas each queueing 10 (the target is 4) from minute 10 to 29."""
    series = [
        _vllm("vllm:num_requests_waiting", f"{NAME}-7c9f2d0a1b-5d8f9c7b4-p{i}", "1x9 10x19 1x30")
        for i in range(pods)
    ]
    at_max = {"namespace": NS, "llmservice": NAME}
    firing = [_expect(rules, "LLMServiceQueueAtMaxReplicas", at_max, "warning", "10.0")]
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {"eval_time": "12m", "alertname": "LLMServiceQueueAtMaxReplicas", "exp_alerts": []},
            {
                "eval_time": "20m",
                "alertname": "LLMServiceQueueAtMaxReplicas",
                # Below maxReplicas (6) the autoscaler can still add replicas: no alert.
                "exp_alerts": firing if pods >= 6 else [],
            },
            {"eval_time": "40m", "alertname": "LLMServiceQueueAtMaxReplicas", "exp_alerts": []},
        ],
    }


SERVICE = {"namespace": NS, "llmservice": NAME}


def _http(status: str, values: str) -> dict[str, str]:
    labels = {**VLLM, "pod": POD, "handler": "/v1/chat/completions", "method": "POST"}
    return _series("http_requests_total", {**labels, "status": status}, values)


def _burns(rules: list[dict[str, Any]], alert: str, *severities: str) -> list[dict[str, Any]]:
    return [_expect(rules, alert, SERVICE, severity) for severity in severities]


def _error_fast_burn_case(rules: list[dict[str, Any]]) -> dict[str, Any]:
    """100 requests a minute; 5 of them answered 5xx from minute 61 to 90 (a 5% error rate,
    50 times the 0.1% budget). The page needs the hour to have burnt 14.4x (from about minute
    80) and clears 5 minutes after the errors stop; the ticket clears 30 minutes after."""
    alert = "LLMServiceErrorBudgetBurn"
    return {
        "interval": "1m",
        "input_series": [
            _http("2xx", "0+95x200"),
            _http("5xx", "0x60 5+5x29 150x110"),
            # Not an inference handler: its 5xx are not the SLO's.
            _series(
                "http_requests_total",
                {**VLLM, "pod": POD, "handler": "/v1/models", "method": "GET", "status": "5xx"},
                "0+50x200",
            ),
        ],
        "alert_rule_test": [
            {"eval_time": "60m", "alertname": alert, "exp_alerts": []},
            {"eval_time": "72m", "alertname": alert, "exp_alerts": []},
            {"eval_time": "88m", "alertname": alert, "exp_alerts": _burns(rules, alert, "critical", "warning")},
            {"eval_time": "100m", "alertname": alert, "exp_alerts": _burns(rules, alert, "warning")},
            {"eval_time": "130m", "alertname": alert, "exp_alerts": []},
        ],
    }  # fmt: skip


def _error_slow_burn_case(rules: list[dict[str, Any]]) -> dict[str, Any]:
    """1% errors for 400 minutes: 10x the budget, a ticket (6x) but no page (14.4x)."""
    alert = "LLMServiceErrorBudgetBurn"
    return {
        "interval": "1m",
        "input_series": [_http("2xx", "0+99x480"), _http("5xx", "0+1x400 400x80")],
        "alert_rule_test": [
            {"eval_time": "300m", "alertname": alert, "exp_alerts": _burns(rules, alert, "warning")},
            {"eval_time": "470m", "alertname": alert, "exp_alerts": []},
        ],
    }  # fmt: skip


def _ttft_case(rules: list[dict[str, Any]]) -> dict[str, Any]:
    """100 requests a minute, all under 0.5 s but for minutes 61 to 90, when half of them take
    2 s: half over the 800 ms SLO against a budget of 1%."""
    alert = "LLMServiceTTFTBudgetBurn"
    histogram = "vllm:time_to_first_token_seconds"
    fast = "0+100x59 6000+50x30 7600+100x100"
    every = "0+100x191"
    series = [
        _vllm(f"{histogram}_bucket", POD, fast, le="0.5"),
        _vllm(f"{histogram}_bucket", POD, fast, le="0.75"),
        _vllm(f"{histogram}_bucket", POD, fast, le="1.0"),
        _vllm(f"{histogram}_bucket", POD, every, le="2.5"),
        _vllm(f"{histogram}_bucket", POD, every, le="+Inf"),
        _vllm(f"{histogram}_count", POD, every),
    ]
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {"eval_time": "60m", "alertname": alert, "exp_alerts": []},
            {"eval_time": "88m", "alertname": alert, "exp_alerts": _burns(rules, alert, "critical", "warning")},
            {"eval_time": "100m", "alertname": alert, "exp_alerts": _burns(rules, alert, "warning")},
            {"eval_time": "130m", "alertname": alert, "exp_alerts": []},
        ],
    }  # fmt: skip


def _test_file(rules_file: Path, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "rule_files": [str(rules_file)],
        "evaluation_interval": "1m",
        "tests": [
            _kv_cache_case(rules),
            _gpu_idle_case(rules),
            _queue_case(rules, pods=6),
            _queue_case(rules, pods=5),
            _error_fast_burn_case(rules),
            _error_slow_burn_case(rules),
            _ttft_case(rules),
        ],
    }


def test_promtool_unit_tests_fire_and_resolve_every_alert(tmp_path: Path) -> None:
    rule = _rule_object(CANARY)
    rules = _rules(rule)
    rules_file = _write_rules(rule, tmp_path / "rules.yaml")
    spec = _test_file(rules_file, rules)
    tested = {t["alertname"] for case in spec["tests"] for t in case["alert_rule_test"]}
    assert tested == _alert_names(rule), "every alert has a test"
    for alert in tested:  # each fires somewhere, and is silent again later in the same case
        fired = [
            case
            for case in spec["tests"]
            for i, t in enumerate(case["alert_rule_test"])
            if t["alertname"] == alert
            and t["exp_alerts"]
            and any(not later["exp_alerts"] for later in case["alert_rule_test"][i + 1 :])
        ]
        assert fired, f"{alert} is never seen firing and then resolved"
    test_file = tmp_path / "tests.yaml"
    test_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = _run("test", "rules", str(test_file))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout, done.stdout


def test_promtool_test_rules_would_catch_a_wrong_threshold(tmp_path: Path) -> None:
    """The unit tests can fail: with the KV limit at 99% the 95% cache does not alert."""
    rule = _rule_object(CANARY)
    rules = _rules(rule)
    [kv] = [r for r in rules if r.get("alert") == "LLMServiceKVCacheFull"]
    kv["expr"] = kv["expr"].replace("> 0.9", "> 0.99")
    rules_file = _write_rules(rule, tmp_path / "rules.yaml")
    spec = {
        "rule_files": [str(rules_file)],
        "evaluation_interval": "1m",
        "tests": [_kv_cache_case(rules)],
    }
    test_file = tmp_path / "tests.yaml"
    test_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = _run("test", "rules", str(test_file))
    assert done.returncode != 0
