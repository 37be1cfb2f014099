"""Any character a spec may hold renders as itself (issue 38, finding 6): an emoji in an env
value once came out of the templates as a JSON surrogate-pair escape that the C YAML loader
refuses, and the service was retried for ever. What no object can carry (a lone surrogate) is
InvalidSpec with the reason and an Event, once."""

from __future__ import annotations

import copy
import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

import llmservice_operator.decide as decide_module
from llmservice_operator.api import SpecError, parse_llmservice
from llmservice_operator.api.spec import EnvVar
from llmservice_operator.cli import main
from llmservice_operator.decide import decide
from llmservice_operator.observed import ObservedState
from llmservice_operator.render.objects import _environment, pod_template
from llmservice_operator.render.template_json import lone_surrogate, template_dumps
from llmservice_operator.service_plan import plan_service
from llmservice_operator.sizing import load_catalog

ROOT = Path(__file__).parents[2]
CATALOG = load_catalog()
NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
#: Astral (an emoji, a CJK extension ideograph, a math letter), BMP, control, and text that
#: merely looks like a JSON escape.
VALUES = [
    "hi \U0001f600 there",
    "\U00020000\U0001d4b3",
    "caf\u00e9 \u4e2d\u6587 \u2603",
    "tab\tnl\nnul\x00del\x7f",
    "\\ud83d\\ude00 is written, not meant",
    "\"quoted\" <b>&amp;</b> 'single'",
]


def _body() -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "llama-3.1-8b.yaml").read_text())
    body["metadata"].update({"uid": "u-1", "generation": 1})
    return body


def _observed() -> ObservedState:
    return ObservedState(owned={}, secrets={"hf-token": {"token"}})


@pytest.mark.parametrize("value", VALUES)
def test_tojson_writes_yaml_that_both_loaders_read_back_as_the_value(value: str) -> None:
    text = _environment().from_string("v: {{ value | tojson }}").render(value=value)
    assert text.isascii()
    for loader in (yaml.CSafeLoader, yaml.SafeLoader):
        assert yaml.load(text, Loader=loader) == {"v": value}


def test_only_surrogate_pairs_change_from_plain_json() -> None:
    for value in VALUES:
        plain = json.dumps(value, sort_keys=True)
        if value.isascii() or all(ord(c) <= 0xFFFF for c in value):
            assert template_dumps(value, sort_keys=True) == plain  # revision hashes stay
    assert template_dumps("\U0001f600") == '"\\U0001f600"'
    assert template_dumps("\\ud83d\\ude00") == json.dumps("\\ud83d\\ude00")


def test_emoji_everywhere_a_spec_takes_free_text_render_as_themselves() -> None:
    body = _body()
    spec = body["spec"]
    spec["model"]["servedName"] = "llama \U0001f999"
    spec["engine"]["env"] = [{"name": f"V{i}", "value": v} for i, v in enumerate(VALUES)]
    spec["engine"]["extraArgs"] = ["--chat-template-content-format=\U0001f916"]
    spec["rollout"] = {"gatewayParentRef": {"name": "gw \U0001f600"}}
    decision = decide(body, _observed(), CATALOG, NOW, "http://prom:9090")
    assert decision.status["phase"] != "InvalidSpec", decision.status["conditions"]
    [deployment] = [o for o in decision.apply if o["kind"] == "Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert [env[f"V{i}"] for i in range(len(VALUES))] == VALUES
    assert "llama \U0001f999" in container["args"]
    assert "--chat-template-content-format=\U0001f916" in container["args"]
    [route] = [o for o in decision.apply if o["kind"] == "HTTPRoute"]
    assert route["spec"]["parentRefs"][0]["name"] == "gw \U0001f600"
    json.dumps(decision.apply, ensure_ascii=False).encode()  # what the API client sends


def test_the_plan_cli_prints_them_too(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    body = _body()
    body["spec"]["engine"]["env"] = [{"name": "GREETING", "value": "hi \U0001f600"}]
    path = tmp_path / "emoji.yaml"
    path.write_text(yaml.safe_dump(body, allow_unicode=True), "utf-8")
    assert main(["plan", "-f", str(path)]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    assert {"name": "GREETING", "value": "hi \U0001f600"} in (
        deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    )


def _lone(body: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["spec"]["engine"]["env"] = [{"name": "HALF", "value": "x\ud83dy"}]
    return body


def test_a_lone_surrogate_is_invalid_spec_with_an_event_once() -> None:
    body = _lone(_body())
    first = decide(body, _observed(), CATALOG, NOW, "")
    assert first.apply == [] and first.status["phase"] == "InvalidSpec"
    [cond] = [c for c in first.status["conditions"] if c["type"] == "InvalidSpec"]
    assert cond["status"] == "True" and "env" in cond["message"]
    [event] = first.events
    assert (event.type, event.reason) == ("Warning", "InvalidSpec")
    json.dumps(first.status, ensure_ascii=False).encode()  # the status write can carry it
    body["status"] = first.status
    again = decide(body, _observed(), CATALOG, NOW, "")
    assert again.events == [] and again.status == first.status  # no retry loop, no new Event


def test_the_renderer_refuses_a_lone_surrogate_as_a_spec_error() -> None:
    """Whatever the parse lets through, a value the templates cannot carry is a SpecError
    naming it, never a YAML error that would be retried for ever."""
    render_input = plan_service(parse_llmservice(_body()), CATALOG).render_input
    spec = render_input.spec
    half = EnvVar.model_construct(name="HALF", value="x\ud83dy")  # what no parse lets through
    engine = spec.engine.model_copy(update={"env": [half]})
    service = render_input.service.model_copy(
        update={"spec": spec.model_copy(update={"engine": engine})}
    )
    with pytest.raises(SpecError) as refused:
        pod_template(dataclasses.replace(render_input, service=service))
    assert refused.value.field == "spec"
    assert "cannot be rendered into pod.yaml.j2: env[" in refused.value.message
    assert ".value holds \\ud83d, one half of a UTF-16 surrogate pair" in refused.value.message


def test_a_spec_error_while_rendering_after_the_plan_is_invalid_spec(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise SpecError("spec", "a value cannot be rendered into httproute.yaml.j2: ...")

    monkeypatch.setattr(decide_module, "http_route", refuse)
    decision = decide(_body(), _observed(), CATALOG, NOW, "")
    assert decision.apply == [] and decision.status["phase"] == "InvalidSpec"
    assert [e.reason for e in decision.events] == ["InvalidSpec"]


def test_plan_names_the_field_of_a_lone_surrogate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "lone.json"
    path.write_text(json.dumps(_lone(_body())), "utf-8")  # JSON: "x\\ud83dy"
    assert main(["plan", "-f", str(path)]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"llmservice plan: error: {path}: spec.engine.env[0].value: holds ")
    assert lone_surrogate({"a": ["ok", {"b\udfff": 1}]}) == ("a[1].b\udfff", "\\udfff")
    assert lone_surrogate({"a": ["ok", "\U0001f600"]}) is None
