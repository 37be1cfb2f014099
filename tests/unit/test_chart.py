"""The Helm chart, rendered by the pinned helm (`make install` builds it; its absence fails):
no wildcard grants, cluster mode's ClusterRole, and the namespaced mode's Roles and small
ClusterRole; its catalog is current; the admin policy's values reach the operator's settings. That the grants are enough (and only what is
used) is checked for real by the integration suite, which runs the chart-installed operator
(namespaced: each release watches its test's namespace) and counts the API server's 403s."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmservice_dev.localcluster.binaries import bin_dir, pinned_versions
from llmservice_operator.api.policy import AdminPolicy
from llmservice_operator.settings import OperatorSettings

CHART = Path(__file__).parents[2] / "charts" / "llmservice-operator"
RELEASE, RELEASE_NAMESPACE = "rel", "rel-ns"
WATCHED = ("a", "b")
NAMESPACED = f"watchNamespaces={{{','.join(WATCHED)}}}"
READS = {"get", "list", "watch"}
#: What no ClusterRole of the namespaced mode may name, whatever the verb.
NAMESPACE_ONLY = {"secrets", "pods", "deployments", "jobs", "roles", "rolebindings"}
CLUSTER_SCOPED = {("apiextensions.k8s.io", "customresourcedefinitions"), ("", "namespaces")}
_OWNED = ("get", "list", "watch", "create", "patch", "delete")
#: Cluster mode's ClusterRole: (group, resource): verbs.
CLUSTER_MODE = {
    ("serving.llmservice.dev", "llmservices"): ("list", "watch", "patch"),
    ("serving.llmservice.dev", "llmservices/status"): ("patch",),
    **{
        owned: _OWNED
        for owned in (
            ("apps", "deployments"),
            ("", "services"),
            ("leaderworkerset.x-k8s.io", "leaderworkersets"),
            ("", "persistentvolumeclaims"),
            ("policy", "poddisruptionbudgets"),
            ("networking.k8s.io", "networkpolicies"),
            ("autoscaling", "horizontalpodautoscalers"),
            ("keda.sh", "scaledobjects"),
            ("gateway.networking.k8s.io", "httproutes"),
            ("inference.networking.k8s.io", "inferencepools"),
            ("inference.networking.x-k8s.io", "inferenceobjectives"),
            ("", "serviceaccounts"),
            ("rbac.authorization.k8s.io", "roles"),
            ("rbac.authorization.k8s.io", "rolebindings"),
            ("monitoring.coreos.com", "prometheusrules"),
            ("batch", "jobs"),
        )
    },
    ("", "pods"): ("list", "watch"),
    ("", "secrets"): ("get",),
    ("", "events"): ("create",),
    ("coordination.k8s.io", "leases"): ("get", "create", "update"),
    ("apiextensions.k8s.io", "customresourcedefinitions"): ("list", "watch"),
    ("", "namespaces"): ("list", "watch"),
}

Rule = tuple[str, str, str]
"""(API group, resource, verb)."""


@functools.cache
def _render(*values: str) -> tuple[dict[str, Any], ...]:
    """Every object `helm template` renders with these --set values."""
    versions = pinned_versions()
    helm = bin_dir(versions) / "helm"
    if not helm.is_file():
        pytest.fail(f"helm is not installed ({helm}): run `make install`")
    args = [str(helm), "template", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE]
    args += ["--kube-version", versions.k8s]
    for value in values:
        args += ["--set", value]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return tuple(d for d in yaml.safe_load_all(done.stdout) if d)


def _of(docs: tuple[dict[str, Any], ...], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def _rules(role: dict[str, Any]) -> set[Rule]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _cluster_role(*values: str) -> dict[str, Any]:
    [role] = _of(_render(*values), "ClusterRole")
    return role


def _chart_rules() -> set[Rule]:
    """Cluster mode's ClusterRole."""
    return _rules(_cluster_role())


def _roles(*values: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (r["metadata"]["namespace"], r["metadata"]["name"]): r
        for r in _of(_render(*values), "Role")
    }


def _service_account(*values: str) -> dict[str, str]:
    [account] = _of(_render(*values), "ServiceAccount")
    meta = account["metadata"]
    return {"kind": "ServiceAccount", "name": meta["name"], "namespace": meta["namespace"]}


def _lease_name(*values: str) -> str:
    [deployment] = _of(_render(*values), "Deployment")
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    [name] = [e["value"] for e in env if e["name"] == "LLMSERVICE_LEASE_NAME"]
    return str(name)


@pytest.mark.parametrize("values", [(), (NAMESPACED,)], ids=["cluster", "namespaced"])
def test_no_wildcards(values: tuple[str, ...]) -> None:
    docs = _render(*values)
    roles = _of(docs, "ClusterRole") + _of(docs, "Role")
    assert roles
    for role in roles:
        assert _rules(role)
        for group, resource, verb in _rules(role):
            assert "*" not in (group, resource, verb), role["metadata"]
        for rule in role["rules"]:
            assert "*" not in rule.get("resourceNames", ()), role["metadata"]


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


def test_cluster_mode_is_one_cluster_role_with_every_rule() -> None:
    expected = {(g, r, v) for (g, r), verbs in CLUSTER_MODE.items() for v in verbs}
    assert _chart_rules() == expected
    assert not _roles() and not _of(_render(), "RoleBinding")
    [binding] = _of(_render(), "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == _cluster_role()["metadata"]["name"]
    assert binding["subjects"] == [_service_account()]


def test_namespaced_mode_cluster_role_only_reads_cluster_scoped_resources() -> None:
    rules = _rules(_cluster_role(NAMESPACED))
    assert rules == {(g, r, v) for g, r in CLUSTER_SCOPED for v in ("list", "watch")}
    assert not {r for r in rules if r[1] in NAMESPACE_ONLY or r[2] not in READS}
    [binding] = _of(_render(NAMESPACED), "ClusterRoleBinding")
    assert binding["subjects"] == [_service_account(NAMESPACED)]


def test_each_watched_namespace_gets_the_namespaced_rules_bound_to_the_account() -> None:
    namespaced = {r for r in _chart_rules() if r[:2] not in CLUSTER_SCOPED}
    namespaced -= {r for r in namespaced if r[1] == "leases"}  # the release namespace's
    roles = _roles(NAMESPACED)
    for namespace in WATCHED:
        [role] = [r for (ns, _), r in roles.items() if ns == namespace]
        assert _rules(role) == namespaced, namespace
        assert _bound(role, NAMESPACED) == [_service_account(NAMESPACED)], namespace
    assert {ns for ns, _ in roles} == {*WATCHED, RELEASE_NAMESPACE}


def _bound(role: dict[str, Any], *values: str) -> list[dict[str, str]]:
    """The subjects of the RoleBindings of ``role`` (in its namespace)."""
    meta = role["metadata"]
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": meta["name"]}
    return [
        subject
        for binding in _of(_render(*values), "RoleBinding")
        if binding["metadata"]["namespace"] == meta["namespace"] and binding["roleRef"] == ref
        for subject in binding["subjects"]
    ]


@pytest.mark.parametrize("lease", ["", "shared-lease"])
def test_the_release_namespace_can_manage_its_lease(lease: str) -> None:
    values = (NAMESPACED, f"leaderElection.leaseName={lease}")
    [role] = [r for (ns, _), r in _roles(*values).items() if ns == RELEASE_NAMESPACE]
    assert _bound(role, *values) == [_service_account(*values)]
    by_verb = {
        verb: rule.get("resourceNames")
        for rule in role["rules"]
        if rule["apiGroups"] == ["coordination.k8s.io"] and rule["resources"] == ["leases"]
        for verb in rule["verbs"]
    }
    name = _lease_name(*values)
    assert name == (lease or RELEASE)
    assert by_verb == {"create": None, "get": [name], "update": [name]}


def test_namespaced_mode_grants_together_what_cluster_mode_grants() -> None:
    roles = set().union(*(_rules(r) for r in _roles(NAMESPACED).values()))
    assert roles == {r for r in _chart_rules() if r[:2] not in CLUSTER_SCOPED}
    assert roles | _rules(_cluster_role(NAMESPACED)) == _chart_rules()


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


def test_the_policy_values_are_joined_into_the_settings_env() -> None:
    """Without helm: each list is joined with commas, which settings.py splits."""
    text = (CHART / "templates" / "deployment.yaml").read_text()
    for name, value in [
        ("LLMSERVICE_POLICY_ALLOWED_IMAGE_PREFIXES", "allowedImagePrefixes"),
        ("LLMSERVICE_POLICY_FORBIDDEN_ENGINE_FLAGS", "forbiddenEngineFlags"),
    ]:
        expected = f'{{name: {name}, value: {{{{ join "," .Values.policy.{value} | quote }}}}}}'
        assert expected in text, name


def _operator_env(*sets: str) -> dict[str, str]:
    [deployment] = _of(_render(*sets), "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    env: list[dict[str, Any]] = container["env"]
    return {e["name"]: e["value"] for e in env if "value" in e}


def _policy_from(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> AdminPolicy:
    for name in os.environ:
        if name.startswith("LLMSERVICE_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith("LLMSERVICE_POLICY_"):
            monkeypatch.setenv(name, value)
    return OperatorSettings().admin_policy


def test_the_default_policy_values_reach_the_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())["policy"]
    assert values == {"allowedImagePrefixes": [], "forbiddenEngineFlags": ["--trust-remote-code"]}
    policy = _policy_from(_operator_env(), monkeypatch)
    assert policy == AdminPolicy((), ("--trust-remote-code",))


def test_the_policy_values_are_passed_as_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    env = _operator_env(
        "policy.allowedImagePrefixes={mirror.example/,ghcr.io/acme/}",
        "policy.forbiddenEngineFlags={--trust-remote-code,--enforce-eager}",
    )
    assert _policy_from(env, monkeypatch) == AdminPolicy(
        ("mirror.example/", "ghcr.io/acme/"), ("--trust-remote-code", "--enforce-eager")
    )
    env = _operator_env("policy.forbiddenEngineFlags={}")  # the admin allows every flag
    assert _policy_from(env, monkeypatch) == AdminPolicy()
