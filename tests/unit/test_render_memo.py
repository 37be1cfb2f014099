"""What keeps a reconcile's rendering and sizing cheap: rendered YAML parsed once, and a sizing
kept by its inputs. Both must give what the slow path gives, and a fresh object each time."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
import yaml

from llmservice_operator import service_plan
from llmservice_operator.api import parse_llmservice
from llmservice_operator.render import objects
from llmservice_operator.render.objects import _ParsedYaml
from llmservice_operator.service_plan import plan_service
from llmservice_operator.sizing import builtin, load_catalog

from .calls import record_calls

DEPLOYMENTISH = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: chat, labels: {a: "1"}}
spec:
  replicas: 2
  template:
    spec:
      containers:
      - name: vllm
        args: ["--max-model-len", "4096"]
        resources: {limits: {nvidia.com/gpu: 1}}
        env: [{name: RATIO, value: "0.9"}, {name: ON, value: "true"}]
      tolerations: []
      priority: 1.5
      hostIPC: false
      nothing: null
"""


def test_parsed_yaml_is_the_yaml_and_a_fresh_object_each_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed = _ParsedYaml(8)
    calls = []
    real_load = yaml.load

    def counting_load(text: str, Loader: Any) -> Any:
        calls.append(text)
        return real_load(text, Loader=Loader)

    monkeypatch.setattr(objects.yaml, "load", counting_load)
    first = parsed.load(DEPLOYMENTISH)
    first["metadata"]["labels"]["mine"] = "changed by a decision"
    second = parsed.load(DEPLOYMENTISH)
    assert len(calls) == 1  # parsed once
    assert second == real_load(DEPLOYMENTISH, Loader=yaml.SafeLoader)
    assert "mine" not in second["metadata"]["labels"]
    second["spec"]["replicas"] = 9
    assert parsed.load(DEPLOYMENTISH)["spec"]["replicas"] == 2


def test_parsed_yaml_keeps_only_what_json_carries_unchanged_and_only_the_last_few() -> None:
    parsed = _ParsedYaml(2)
    dated = "day: 2026-12-06\n"
    assert parsed.load(dated) == {"day": datetime.date(2026, 12, 6)}
    assert parsed.load("1: one\n") == {1: "one"}  # JSON would make the key "1"
    assert parsed.load("1: one\n") == {1: "one"}
    for i in range(3):
        parsed.load(f"n: {i}\n")
    assert len(parsed._kept) == 2


def _service(name: str, max_model_len: int = 4096) -> Any:
    return parse_llmservice(
        {
            "apiVersion": "serving.llmservice.dev/v1alpha1",
            "kind": "LLMService",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {
                "model": {"id": "meta-llama/Llama-3.1-8B-Instruct"},
                "engine": {"maxModelLen": max_model_len},
                "resources": {"gpu": "auto"},
            },
        }
    )


def test_services_of_one_shape_are_sized_once_and_another_shape_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service_plan._choose_gpu.cache_clear()
    catalog = load_catalog(None)
    real = service_plan.choose_gpu
    sized = record_calls(monkeypatch, service_plan, "choose_gpu")
    plans = [plan_service(_service(f"tenant-{i}"), catalog) for i in range(3)]
    assert len(sized) == 1
    assert {p.sizing for p in plans} == {real(*sized[0])}
    assert plans[1].render_input.name == "tenant-1"  # the rest of the plan is the service's
    longer = plan_service(_service("long", max_model_len=32768), catalog)
    assert len(sized) == 2
    assert longer.sizing.max_model_len == 32768 != plans[0].sizing.max_model_len


def test_a_deployment_puts_its_pod_template_in_after_parsing_keys_sorted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = plan_service(_service("chat"), load_catalog(None))
    parsed_texts: list[str] = []
    real_load = objects._PARSED.load

    def recording(text: str) -> Any:
        parsed_texts.append(text)
        return real_load(text)

    monkeypatch.setattr(objects._PARSED, "load", recording)
    rendered = objects.deployment(plan.render_input, plan.pod_template, plan.revision, 2)
    [text] = parsed_texts
    assert "--max-model-len" not in text  # the pod template is not parsed a second time
    template = rendered["spec"]["template"]
    assert template["metadata"]["labels"]["llmservice.dev/revision"] == plan.revision
    assert template["spec"] == plan.pod_template["spec"]
    assert template["spec"] is not plan.pod_template["spec"]  # a copy, not the plan's own
    # As jinja2's tojson embedded it (the golden files and applied objects are unchanged).
    assert list(template["spec"]) == sorted(template["spec"])


def test_the_carried_model_configs_are_read_once_and_each_call_gets_a_fresh_dict() -> None:
    builtin._model_text.cache_clear()
    first = builtin.load_builtin_model("meta-llama/Llama-3.1-8B-Instruct")
    assert first is not None
    first["hidden_size"] = -1
    again = builtin.load_builtin_model("meta-llama/Llama-3.1-8B-Instruct")
    assert again is not None and again["hidden_size"] == 4096
    assert builtin._model_text.cache_info().hits == 1
