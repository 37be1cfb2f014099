"""The Helm chart's checks: no wildcard grants, its catalog is current, and the admin policy's
values reach the operator's settings (rendered by helm where it is installed). That its
ClusterRole is enough (and only what is used) is checked for real by the integration suite,
which runs the chart-installed operator and counts the API server's 403 answers to it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmservice_operator.api.policy import AdminPolicy
from llmservice_operator.settings import OperatorSettings

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
    applies Deployment.spec.replicas), events.k8s.io (Events are core/v1) and every `get` of an
    owned kind (the operator lists them by label)."""
    rules = _chart_rules()
    assert not {r for r in rules if r[1] in ("deployments/scale", "leaderworkersets/scale")}
    assert not {r for r in rules if r[0] == "events.k8s.io"}
    owned = {"deployments", "services", "poddisruptionbudgets", "networkpolicies", "pods"}
    assert not {r for r in rules if r[1] in owned and r[2] == "get"}


def test_every_owned_kind_is_granted_what_the_operator_does_with_it() -> None:
    """Multi-node replicas: the LeaderWorkerSets are listed, watched, applied and pruned."""
    rules = _chart_rules()
    for verb in ("list", "watch", "create", "patch", "delete"):
        assert ("leaderworkerset.x-k8s.io", "leaderworkersets", verb) in rules, verb


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


def _helm() -> str | None:
    """The helm the local cluster's tooling downloads, or one on PATH."""
    cached = sorted(Path.home().glob(".cache/llmservice-operator/bin-*/helm"))
    return str(cached[-1]) if cached else shutil.which("helm")


def _operator_env(*sets: str) -> dict[str, str]:
    helm = _helm()
    if helm is None:
        pytest.skip("no helm binary")
    args = [helm, "template", "r", str(CHART), "--kube-version", "1.34.0"]
    for value in sets:
        args += ["--set", value]
    rendered = subprocess.run(args, capture_output=True, text=True, check=True, timeout=60)
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
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
