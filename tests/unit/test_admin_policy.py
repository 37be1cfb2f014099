"""The operator-wide admin policy (api/policy.py): what it refuses, how decide() and the
reconcile report it (InvalidSpec, nothing created), and how it is read from the environment."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from llmservice_operator.api import LLMServiceSpec, SpecError, parse_spec
from llmservice_operator.api.policy import (
    MAX_POLICY_ENTRIES,
    NO_POLICY,
    AdminPolicy,
    check,
    parse_list,
)
from llmservice_operator.decide import decide
from llmservice_operator.observed import ObservedState
from llmservice_operator.reconcile import Reconciler
from llmservice_operator.settings import OperatorSettings
from llmservice_operator.sizing import load_catalog

from .test_reconcile import T0, FakeKube
from .test_reconcile import _body as reconcile_body

ROOT = Path(__file__).parents[2]
NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
CATALOG = load_catalog()
TRUST = AdminPolicy.of([], ["--trust-remote-code"])
PICKER = "spec.serving.inferencePool.endpointPicker.image"


def _body() -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "llama-3.1-8b.yaml").read_text())
    body["metadata"].update({"uid": "u-1", "generation": 1})
    return body


def _spec(
    args: list[str] | None = None, image: str | None = None, picker: str | None = "unset"
) -> LLMServiceSpec:
    raw = _body()["spec"]
    raw["engine"]["extraArgs"] = args or []
    if image is not None:
        raw["engine"]["image"] = image
    if picker is not None:  # "unset": a pool whose picker runs the default image
        pool = {} if picker == "unset" else {"endpointPicker": {"image": picker}}
        raw["serving"] = {"inferencePool": pool}
        raw["rollout"] = {"gatewayParentRef": {"name": "gw", "namespace": "gateways"}}
    return parse_spec(raw)


def _refusal(spec: LLMServiceSpec, policy: AdminPolicy) -> SpecError:
    with pytest.raises(SpecError) as caught:
        check(spec, policy)
    return caught.value


# ------------------------------------------------------------------ the check


def test_the_empty_policy_allows_any_image_and_any_flag() -> None:
    check(_spec(["--trust-remote-code"], image="evil.example/x:1", picker="evil/epp:1"), NO_POLICY)
    check(_spec(["--trust-remote-code"]), AdminPolicy.of([], []))


@pytest.mark.parametrize(
    "arg",
    [
        "--trust-remote-code",
        "--trust-remote-code=true",
        "--trust_remote_code",  # vLLM reads underscores as dashes
        "--trust-remote",  # an abbreviation argparse takes
    ],
)
def test_a_forbidden_flag_is_refused_in_each_form_vllm_accepts(arg: str) -> None:
    err = _refusal(_spec(["--enforce-eager", arg]), TRUST)
    assert err.field == "spec.engine.extraArgs"
    assert "policy.forbiddenEngineFlags" in err.message and "--trust-remote" in err.message


def test_the_refusal_names_the_field_the_flag_and_the_policy() -> None:
    err = _refusal(_spec(["--trust-remote-code"]), TRUST)
    assert str(err) == (
        "spec.engine.extraArgs: --trust-remote-code is forbidden by the operator's policy "
        "(policy.forbiddenEngineFlags); ask the cluster admin"
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--no-trust-remote-code"],  # the flag turned off
        ["--trust-request-chat-template"],  # another flag sharing a prefix
        ["--chat-template", "trust-remote-code"],  # a value, not a flag
        ["--enforce-eager", "--max-loras=2"],
    ],
)
def test_other_flags_pass(args: list[str]) -> None:
    check(_spec(args), TRUST)


def test_a_flag_the_admin_removed_from_the_list_passes() -> None:
    check(_spec(["--trust-remote-code"]), AdminPolicy.of([], ["--enforce-eager"]))


def test_images_under_an_allowed_prefix_pass() -> None:
    policy = AdminPolicy.of(["mirror.example/", "vllm/"], [])
    check(_spec(image="mirror.example/vllm:1", picker="mirror.example/epp:1"), policy)
    check(_spec(picker=None), policy)  # the default engine image is under vllm/


def test_an_engine_image_outside_the_prefixes_is_refused() -> None:
    err = _refusal(_spec(image="evil.example/vllm:1", picker=None), AdminPolicy.of(["a/"], []))
    assert str(err) == (
        "spec.engine.image: evil.example/vllm:1 does not start with a prefix the operator's "
        "policy allows (policy.allowedImagePrefixes: a/); use an image under one, or ask the "
        "cluster admin"
    )


def test_an_unset_image_is_judged_by_the_default_the_operator_would_run() -> None:
    err = _refusal(_spec(picker=None), AdminPolicy.of(["mirror.example/"], []))
    assert err.field == "spec.engine.image"
    assert "unset, and its default vllm/vllm-openai:v" in err.message


def test_the_endpoint_picker_image_is_checked_too() -> None:
    policy = AdminPolicy.of(["mirror.example/"], [])
    err = _refusal(_spec(image="mirror.example/vllm:1", picker="evil/epp:1"), policy)
    assert err.field == PICKER and "evil/epp:1" in err.message
    err = _refusal(_spec(image="mirror.example/vllm:1"), policy)  # its default
    assert err.field == PICKER and "registry.k8s.io/" in err.message


def test_a_long_prefix_list_is_shortened_in_the_message() -> None:
    policy = AdminPolicy.of([f"p{i}/" for i in range(8)], [])
    err = _refusal(_spec(picker=None), policy)
    assert "p4/ and 3 more" in err.message and "p5/" not in err.message


# ------------------------------------------------------------------ the lists


def test_lists_parse_commas_blanks_and_duplicates() -> None:
    assert parse_list(" a/ ,, b/,a/ ,", "X") == ("a/", "b/")
    assert parse_list("", "X") == ()


@pytest.mark.parametrize(
    "raw",
    [
        ",".join(f"p{i}/" for i in range(MAX_POLICY_ENTRIES + 1)),
        "x" * 513,
        "a/ b/",
    ],
)
def test_lists_are_bounded(raw: str) -> None:
    with pytest.raises(ValueError, match="X: "):
        parse_list(raw, "X")


def test_flags_are_normalized_and_must_be_flag_names() -> None:
    assert AdminPolicy.of([], ["--trust_remote_code"]).forbidden_engine_flags == (
        "--trust-remote-code",
    )
    for bad in ("trust-remote-code", "--", "-t", "--a=b"):
        with pytest.raises(ValueError, match="is not a --flag name"):
            AdminPolicy.of([], [bad])


# ------------------------------------------------------------------ settings


def test_settings_default_forbid_trust_remote_code_and_allow_any_image(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LLMSERVICE_POLICY_ALLOWED_IMAGE_PREFIXES", raising=False)
    monkeypatch.delenv("LLMSERVICE_POLICY_FORBIDDEN_ENGINE_FLAGS", raising=False)
    assert OperatorSettings().admin_policy == TRUST


def test_settings_read_the_policy_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMSERVICE_POLICY_ALLOWED_IMAGE_PREFIXES", "mirror.example/, ghcr.io/acme/")
    monkeypatch.setenv("LLMSERVICE_POLICY_FORBIDDEN_ENGINE_FLAGS", "")  # the admin allows all
    assert OperatorSettings().admin_policy == AdminPolicy(("mirror.example/", "ghcr.io/acme/"))


def test_a_bad_policy_stops_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMSERVICE_POLICY_FORBIDDEN_ENGINE_FLAGS", "trust-remote-code")
    with pytest.raises(ValidationError, match="is not a --flag name"):
        OperatorSettings()


# ------------------------------------------------------------------ decide and the reconcile


def test_decide_with_the_policy_is_invalid_spec_and_creates_nothing() -> None:
    body = _body()
    body["spec"]["engine"]["extraArgs"] = ["--trust-remote-code"]
    observed = ObservedState(secrets={"hf-token": {"token"}})
    assert decide(copy.deepcopy(body), observed, CATALOG, NOW, "").apply  # no policy: served

    decision = decide(body, observed, CATALOG, NOW, "", policy=TRUST)
    assert decision.apply == [] and decision.delete == [] and decision.scale == {}
    assert decision.status["phase"] == "InvalidSpec"
    [cond] = [c for c in decision.status["conditions"] if c["type"] == "InvalidSpec"]
    assert cond["status"] == "True" and cond["reason"] == "InvalidSpec"
    assert cond["message"].startswith("spec.engine.extraArgs: --trust-remote-code is forbidden")
    assert [(e.type, e.reason) for e in decision.events] == [("Warning", "InvalidSpec")]


def test_the_reconciler_hands_its_policy_to_decide() -> None:
    body = reconcile_body()
    body["spec"]["engine"]["image"] = "evil.example/vllm:1"
    kube = FakeKube(body)
    policy = AdminPolicy.of(["mirror.example/"], [])
    reconciler = Reconciler(
        kube, CATALOG, "http://prometheus:9090", clock=lambda: T0, policy=policy
    )
    reconciler.reconcile(copy.deepcopy(kube.body))
    assert kube.applied == [] and kube.deployments == {}
    assert kube.body["status"]["phase"] == "InvalidSpec"
