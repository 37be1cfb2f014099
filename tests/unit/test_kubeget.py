"""The in-process ``kubectl get -o json`` of the integration tests (dev/llmservice_dev/kubeget.py):
which shapes it answers and which it leaves to kubectl, and the JSON it prints. Its answers
are compared with kubectl's on the real cluster in tests/integration/test_localcluster.py."""

from __future__ import annotations

import pytest

from llmservice_dev.kubeget import _as_kubectl_prints, _parse, _Resource


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("get", "llmservice", "chat", "-o", "json"), ("llmservice", "chat", "default", False, {})),
        (("-n", "ns", "get", "pods", "-l", "a=b", "-o", "json"),
         ("pods", None, "ns", False, {"labelSelector": "a=b"})),
        (("get", "--namespace=ns", "deploy/x", "--output=json"), ("deploy", "x", "ns", False, {})),
        (("get", "events", "-A", "--field-selector=involvedObject.name=x", "-o", "json"),
         ("events", None, "default", True, {"fieldSelector": "involvedObject.name=x"})),
        (("get", "Deployments.apps", "-o", "json"), ("deployments.apps", None, "default", False, {})),
    ],
)  # fmt: skip
def test_the_shapes_it_answers(args: tuple[str, ...], expected: tuple[object, ...]) -> None:
    query = _parse(args)
    assert query is not None
    assert (query.resource, query.name, query.namespace, query.all_namespaces, query.params) == (
        expected
    )


@pytest.mark.parametrize(
    "args",
    [
        ("get", "pods", "-o", "yaml"),
        ("get", "pods", "-o", "jsonpath={.items}"),
        ("get", "pods"),
        ("get", "deploy,svc", "-o", "json"),
        ("get", "pods", "a", "b", "-o", "json"),
        ("get", "pods", "--ignore-not-found", "-o", "json"),
        ("get", "pods", "a", "-l", "x=y", "-o", "json"),
        ("apply", "-f", "-", "-o", "json"),
        ("get", "pods", "-n"),
        ("describe", "pods", "-o", "json"),
    ],
)
def test_everything_else_goes_to_kubectl(args: tuple[str, ...]) -> None:
    assert _parse(args) is None


def test_lists_print_as_kubectl_prints_them() -> None:
    deployments = _Resource("apps", "v1", "deployments", "Deployment", True, frozenset())
    body = {
        "kind": "DeploymentList",
        "apiVersion": "apps/v1",
        "metadata": {"resourceVersion": "12"},
        "items": [{"metadata": {"name": "a", "managedFields": [{"manager": "x"}]}, "spec": {}}],
    }
    assert _as_kubectl_prints(body, deployments) == {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a"}, "spec": {}}
        ],
    }
    one = {"kind": "Deployment", "metadata": {"name": "a", "managedFields": []}}
    assert _as_kubectl_prints(one, deployments) == {"kind": "Deployment", "metadata": {"name": "a"}}
