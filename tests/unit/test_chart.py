"""The Helm chart's static checks: no wildcard grants, and its catalog is current. That its
ClusterRole is enough (and only what is used) is checked for real by the integration suite,
which runs the chart-installed operator and counts the API server's 403 answers to it."""

from __future__ import annotations

from pathlib import Path

import yaml

CHART = Path(__file__).parents[2] / "charts" / "llmservice-operator"


def _chart_rules() -> set[tuple[str, str, str]]:
    text = (CHART / "templates" / "rbac.yaml").read_text()
    docs = [d for d in yaml.safe_load_all(text.replace("{{", "#{{")) if d]
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_no_wildcards() -> None:
    rules = _chart_rules()
    assert rules
    for group, resource, verb in rules:
        assert "*" not in (group, resource, verb)


def test_no_grant_the_code_never_uses() -> None:
    """The grants an earlier chart had and nothing calls: the scale subresource (the autoscaler
    applies Deployment.spec.replicas), events.k8s.io (Events are core/v1) and `get` of pods
    (listed by label). An owned kind's `get` is used: a name not in the watch caches is read
    before its first apply, to see whose it is (adoption refused)."""
    rules = _chart_rules()
    assert not {r for r in rules if r[1] in ("deployments/scale", "leaderworkersets/scale")}
    assert not {r for r in rules if r[0] == "events.k8s.io"}
    assert ("", "pods", "get") not in rules


def test_every_owned_kind_is_granted_what_the_operator_does_with_it() -> None:
    """Every owned kind is read (whose a name is), listed, watched, applied and pruned."""
    from llmservice_operator.adapters.kube import OWNED_KINDS

    rules = _chart_rules()
    for api_version, kind in OWNED_KINDS:
        group = api_version.rpartition("/")[0]
        resource = {"PodDisruptionBudget": "poddisruptionbudgets",
                    "NetworkPolicy": "networkpolicies"}.get(kind, kind.lower() + "s")  # fmt: skip
        for verb in ("get", "list", "watch", "create", "patch", "delete"):
            assert (group, resource, verb) in rules, (kind, verb)


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
