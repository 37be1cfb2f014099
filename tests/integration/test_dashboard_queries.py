"""Every PromQL expression of the chart's Grafana dashboard, and of every example's alert rules,
is a query the local cluster's real Prometheus accepts.

Grafana's variables are filled in as the unit test fills them (tests/unit/test_dashboard.py);
each expression runs as an instant query and as a range query (what a Grafana panel sends),
and Prometheus must answer ``success``: a parse error, an unknown function or a type error
(a range vector where an instant one belongs, a many-to-many match it refuses) fails the test.
An empty result is fine: no service need be serving.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from llmservice_dev.localcluster import ClusterInfo
from llmservice_operator.commands.plan import plan_documents
from tests.unit.test_dashboard import expressions, filled

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def _ask(url: str, path: str, params: dict[str, str]) -> dict[str, Any]:
    full = f"{url}{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(full, timeout=30) as response:
            answer: dict[str, Any] = json.load(response)
    except urllib.error.HTTPError as err:  # 400 bad_data, 422 execution: the body says why
        answer = json.load(err)
    return answer


def _check(url: str, promql: str) -> None:
    now = time.time()
    instant = _ask(url, "/api/v1/query", {"query": promql})
    assert instant.get("status") == "success", f"{promql}\n-> {instant}"
    ranged = _ask(
        url,
        "/api/v1/query_range",
        {"query": promql, "start": f"{now - 600:.3f}", "end": f"{now:.3f}", "step": "15"},
    )
    assert ranged.get("status") == "success", f"{promql}\n-> {ranged}"


def _rule_expressions() -> list[str]:
    found = []
    for example in EXAMPLES:
        for plan in plan_documents(example, None, "http://prometheus.monitoring.svc:9090"):
            for obj in plan.objects:
                if obj["kind"] == "PrometheusRule":
                    found += [r["expr"] for g in obj["spec"]["groups"] for r in g["rules"]]
    return found


def test_prometheus_refuses_a_broken_query(cluster: ClusterInfo) -> None:
    """The check below can fail."""
    answer = _ask(cluster.prometheus_url, "/api/v1/query", {"query": "sum by (le (rate(x[1m]))"})
    assert answer.get("status") == "error"


@pytest.mark.parametrize("index", range(len(expressions())))
def test_every_dashboard_expression_is_a_valid_query(cluster: ClusterInfo, index: int) -> None:
    _check(cluster.prometheus_url, filled(expressions()[index]))


def test_every_alert_rule_expression_is_a_valid_query(cluster: ClusterInfo) -> None:
    rules = _rule_expressions()
    assert len(rules) > 20
    for promql in rules:
        _check(cluster.prometheus_url, promql)
