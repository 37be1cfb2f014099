"""The Helm chart's RBAC equals what the code calls, and its CRD and catalog are current."""

from __future__ import annotations

from pathlib import Path

import yaml

from llmservice_operator.adapters.kube import RBAC_RULES

CHART = Path(__file__).parents[2] / "charts" / "llmservice-operator"


def _chart_rules() -> set[tuple[str, str, tuple[str, ...]]]:
    text = (CHART / "templates" / "rbac.yaml").read_text()
    docs = [d for d in yaml.safe_load_all(text.replace("{{", "#{{")) if d]
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    rules = set()
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                rules.add((group, resource, tuple(sorted(rule["verbs"]))))
    return rules


def test_chart_rbac_is_exactly_what_the_code_uses() -> None:
    code = {(g, r, tuple(sorted(v))) for g, r, v in RBAC_RULES}
    chart = _chart_rules()
    assert chart - code == set(), f"chart grants more than the code uses: {chart - code}"
    assert code - chart == set(), f"chart lacks what the code uses: {code - chart}"


def test_no_wildcards() -> None:
    for group, resource, verbs in _chart_rules():
        assert "*" not in (group, resource, *verbs)


def test_chart_gpu_catalog_matches_builtin() -> None:
    builtin = (
        Path(__file__).parents[2]
        / "operator"
        / "llmservice_operator"
        / "sizing"
        / "data"
        / "gpus.yaml"
    )
    assert (CHART / "files" / "gpus.yaml").read_text() == builtin.read_text(), "run `make crds`"
