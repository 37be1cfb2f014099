"""Where the Prometheus Operator's CRD is served, the chart-installed operator creates each
service's PrometheusRule (render/alerts.py), and the API server accepts it against the real
CRD's schema (monitoring.coreos.com_prometheusrules.yaml from the prometheus-operator Go
module, hack/fetch-crds.sh). Where it is not served, nothing is tried: the unit tests
(test_decide, test_reconcile) cover that path, like KEDA's."""

from __future__ import annotations

from typing import Any

from llmservice_dev.localcluster import ClusterInfo

from .operator_fixtures import ROOT, OperatorFactory, wait_for
from .test_operator import _apply, _example, _secrets
from .test_scalers import third_party_crds  # noqa: F401  (the PrometheusRule CRD with KEDA's)

PROMETHEUS_RULE_CRD = "prometheusrules.monitoring.coreos.com"


def test_the_operator_creates_the_services_prometheusrule(
    cluster: ClusterInfo,
    namespace: str,
    kubectl: Any,
    kubectl_json: Any,
    operators: OperatorFactory,
    third_party_crds: None,  # noqa: F811
) -> None:
    cluster.wait_crd_established(PROMETHEUS_RULE_CRD)
    operators.start(namespace)
    _secrets(kubectl, namespace)
    _apply(kubectl, _example(ROOT / "examples" / "llama-3.1-70b-canary.yaml", namespace))
    rule = wait_for(
        "PrometheusRule created",
        lambda: kubectl_json("-n", namespace, "prometheusrules", "llama-70b"),
        90,
    )
    groups = rule["spec"]["groups"]
    assert [g["name"] for g in groups] == [
        f"llmservice.{namespace}.llama-70b.serving",
        f"llmservice.{namespace}.llama-70b.slo",
    ]
    alerts = {r["alert"] for g in groups for r in g["rules"] if "alert" in r}
    assert "LLMServiceTTFTBudgetBurn" in alerts and "LLMServiceGPUIdle" in alerts
    assert f'namespace="{namespace}",llmservice="llama-70b"' in groups[0]["rules"][0]["expr"]
    [owner] = rule["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("LLMService", "llama-70b", True)
