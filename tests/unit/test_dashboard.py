"""The chart's Grafana dashboard (files/dashboards/llmservice.json) and the operator gauges it
shows (adapters/service_metrics.py).

Structure: every panel has targets with PromQL; the panels the issue asks for are there; every
series it names is one vLLM (the pinned versions), the DCGM exporter or the operator exports.
Parsing: each expression, with Grafana's variables filled in, passes ``promtool check rules``
as a recording rule (promtool's parser is Prometheus's). Whether Prometheus answers each one
is tests/integration/test_dashboard_queries.py.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from llmservice_operator.adapters.service_metrics import (
    AUTOSCALER_REASONS,
    ServiceStatusCollector,
    autoscaler_reason,
)
from llmservice_operator.vllm.metrics import metric_names
from tests.unit.test_alert_rules import promtool

CHART = Path(__file__).parents[2] / "charts" / "llmservice-operator"
DASHBOARD = CHART / "files" / "dashboards" / "llmservice.json"
#: What Grafana substitutes, as the integration test substitutes it too.
VARIABLES = {"$__rate_interval": "1m", "$namespace": "default", "$llmservice": "llama-8b"}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def expressions() -> list[str]:
    """Every PromQL expression: the panels' targets and the variables' label_values selectors."""
    found = [t["expr"] for p in dashboard()["panels"] for t in p["targets"]]
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            match = re.fullmatch(r"label_values\((.+), *(\w+)\)", query)
            assert match, query
            found.append(match.group(1))
    return found


def filled(expr: str) -> str:
    for name, value in sorted(VARIABLES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    assert "$" not in expr, f"a variable the tests do not fill in: {expr}"
    return expr


def test_every_panel_has_targets_with_promql() -> None:
    board = dashboard()
    assert board["uid"] and board["title"]
    panels = board["panels"]
    assert len(panels) >= 7
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        assert panel["title"] and panel["type"] in ("timeseries", "state-timeline"), panel
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]), panel["title"]
        targets = panel["targets"]
        assert targets, f"{panel['title']} has no targets"
        assert len({t["refId"] for t in targets}) == len(targets), panel["title"]
        for target in targets:
            assert target["expr"].strip(), panel["title"]
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    names = [v["name"] for v in board["templating"]["list"]]
    assert names == ["datasource", "namespace", "llmservice"]


def _panel_exprs(word: str) -> str:
    return "\n".join(
        t["expr"] for p in dashboard()["panels"] if word in p["title"] for t in p["targets"]
    )


def test_the_panels_the_issue_asks_for() -> None:
    ttft = _panel_exprs("TTFT")
    assert "histogram_quantile(0.5," in ttft and "histogram_quantile(0.99," in ttft
    assert "vllm:time_to_first_token_seconds_bucket" in ttft and "by (revision, le)" in ttft
    tpot = _panel_exprs("TPOT")
    assert "histogram_quantile(0.5," in tpot and "histogram_quantile(0.99," in tpot
    assert "vllm:request_time_per_output_token_seconds_bucket" in tpot
    assert "vllm:num_requests_waiting" in _panel_exprs("Queue")
    assert "vllm:kv_cache_usage_perc" in _panel_exprs("KV")
    replicas = _panel_exprs("Replicas")
    assert "llmservice_desired_replicas" in replicas and "llmservice_ready_replicas" in replicas
    assert "llmservice_rollout_step" in _panel_exprs("Rollout")
    assert "llmservice_autoscaler_reason" in _panel_exprs("Autoscaler")


def _operator_series() -> set[str]:
    registry = CollectorRegistry()
    registry.register(ServiceStatusCollector(lambda: [_body()]))
    text = generate_latest(registry).decode()
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}


def test_every_series_is_one_something_exports() -> None:
    vllm = {
        spec.name
        for version in ("0.10.2", "0.32.0", "0.33.0")
        for spec in metric_names(version).exposed
    }
    dcgm = {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_UTIL"}
    known = vllm | dcgm | _operator_series()
    for expr in expressions():
        for name in re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\{", expr):
            base = re.sub(r"_(bucket|count|sum)$", "", name)
            assert name in known or base in known, f"{name} is exported by nothing: {expr}"


def test_every_expression_parses(tmp_path: Path) -> None:
    rules = [
        {"record": f"dashboard:expr:{i}", "expr": filled(e)} for i, e in enumerate(expressions())
    ]
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(
        [promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout


def test_the_chart_ships_it_as_a_labelled_configmap() -> None:
    template = (CHART / "templates" / "grafana-dashboard.yaml").read_text()
    assert 'grafana_dashboard: "1"' in template
    assert '.Files.Get "files/dashboards/llmservice.json"' in template
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["grafanaDashboard"]["enabled"] is True


# -- the operator's gauges ------------------------------------------------------------------


def _body(**status: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "replicas": 3,
        "readyReplicas": 2,
        "autoscaling": {"desiredReplicas": 4, "reason": "scale up 3 -> 4: 12 waiting"},
        "revisions": {"stable": "aaaa", "candidate": "bbbb"},
        "rollout": {"step": 2, "weight": 50},
    }
    return {"metadata": {"namespace": "ml", "name": "chat"}, "status": {**base, **status}}


@pytest.mark.parametrize(
    ("autoscaling", "kind"),
    [
        ({"desiredReplicas": 3, "reason": "scale up 2 -> 3: 9 waiting over 2 ready"}, "scale_up"),
        ({"desiredReplicas": 1, "reason": "scale down 2 -> 1: idle (nothing running)"}, "scale_down"),
        ({"desiredReplicas": 1, "reason": "activating 0 -> 1: 2 request(s) waiting"}, "activate"),
        ({"desiredReplicas": 2, "reason": "holding 2: waiting for replicas to load"}, "hold"),
        ({"desiredReplicas": 2, "reason": "holding 2: x", "degradedReason": "no metrics"}, "metrics_unavailable"),
    ],
)  # fmt: skip
def test_the_autoscaler_reason_is_one_of_a_few_kinds(
    autoscaling: dict[str, Any], kind: str
) -> None:
    assert autoscaler_reason({"autoscaling": autoscaling}) == kind
    assert kind in AUTOSCALER_REASONS


def test_no_autoscaler_record_no_reason() -> None:
    assert autoscaler_reason({}) is None


def _samples(*bodies: dict[str, Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(ServiceStatusCollector(lambda: list(bodies)))
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
    }


def test_the_gauges_read_the_status() -> None:
    samples = _samples(_body())
    key = (("llmservice", "chat"), ("namespace", "ml"))
    assert samples[("llmservice_desired_replicas", key)] == 4
    assert samples[("llmservice_replicas", key)] == 3
    assert samples[("llmservice_ready_replicas", key)] == 2
    rev = tuple(sorted((*key, ("revision", "bbbb"))))
    assert samples[("llmservice_rollout_step", rev)] == 2
    assert samples[("llmservice_rollout_weight", rev)] == 50
    reasons = {
        dict(labels)["reason"]: value
        for (name, labels), value in samples.items()
        if name == "llmservice_autoscaler_reason"
    }
    assert reasons == {r: (1.0 if r == "scale_up" else 0.0) for r in AUTOSCALER_REASONS}


def test_at_rest_no_rollout_series_and_without_an_autoscaler_no_reason() -> None:
    body = _body(revisions={"stable": "aaaa"}, rollout=None)
    del body["status"]["autoscaling"]
    samples = _samples(body)
    names = {name for name, _ in samples}
    assert "llmservice_rollout_step" not in names
    assert "llmservice_autoscaler_reason" not in names
    key = (("llmservice", "chat"), ("namespace", "ml"))
    assert samples[("llmservice_desired_replicas", key)] == 3  # the Deployments' replicas


def test_a_service_not_yet_reconciled_exports_nothing() -> None:
    assert _samples({"metadata": {"namespace": "ml", "name": "new"}}) == {}
    assert _samples({"metadata": {"namespace": "ml", "name": "new"}, "status": {}}) == {}
