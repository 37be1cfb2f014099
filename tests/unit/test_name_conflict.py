"""Adoption refused: an object of a wanted name that is not the service's own (its uid) is
never applied over nor pruned; the service shows Degraded NameConflict naming it, with a
Warning Event, and looks again until the name is free. At most one lookup per new name."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from llmservice_operator.adapters.kube import AppliedLedger, KubeAdapter
from llmservice_operator.reconcile import Reconciler
from llmservice_operator.render.labels import SERVICE
from llmservice_operator.sizing import load_catalog

from .test_reconcile import T0, FakeKube, _body, _conditions


def _reconciler(kube: FakeKube, clock: list[Any]) -> Reconciler:
    return Reconciler(kube, load_catalog(), "http://prometheus:9090", clock=lambda: clock[0])


def _foreign_service(owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "chat", "namespace": "ml", "resourceVersion": "5"}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {"ports": [1]}}


def test_an_unowned_service_of_the_name_is_not_applied_over() -> None:
    clock = [T0]
    kube = FakeKube(_body())
    theirs = _foreign_service()
    kube.unlabelled[("Service", "chat")] = copy.deepcopy(theirs)
    reconciler = _reconciler(kube, clock)

    result = reconciler.reconcile(copy.deepcopy(kube.body))

    assert kube.applied_names == [] and kube.deleted == [] and kube.scaled == []
    assert kube.unlabelled[("Service", "chat")] == theirs
    degraded = _conditions(kube)["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "NameConflict")
    assert "Service/chat (owned by no owner)" in degraded["message"]
    assert kube.body["status"]["phase"] == "Degraded"
    assert _conditions(kube)["Ready"]["status"] == "False"
    warnings = [e for e in result.events if e.type == "Warning"]
    assert [e.reason for e in warnings] == ["NameConflict"]
    assert "Service/chat" in warnings[0].message
    assert result.requeue_at is not None and result.requeue_at <= T0 + timedelta(seconds=30)

    clock[0] += timedelta(seconds=30)  # still taken: looked at again, said once
    again = reconciler.reconcile(copy.deepcopy(kube.body))
    assert kube.applied_names == []
    assert [e for e in again.events if e.reason == "NameConflict"] == []

    del kube.unlabelled[("Service", "chat")]  # the name is freed
    clock[0] += timedelta(seconds=30)
    reconciler.reconcile(copy.deepcopy(kube.body))
    assert ("Service", "chat") in kube.applied_names
    assert _conditions(kube)["Degraded"]["reason"] != "NameConflict"


def test_an_object_of_another_llmservice_is_not_applied_over_nor_pruned() -> None:
    """Labelled like ours and owned by an LLMService of the same name, but another uid (the
    service deleted and made again before the garbage collector took its objects)."""
    kube = FakeKube(_body())
    owner = {"apiVersion": "serving.llmservice.dev/v1alpha1", "kind": "LLMService",
             "name": "chat", "uid": "u-old", "controller": True}  # fmt: skip
    theirs = _foreign_service(owner)
    theirs["metadata"]["labels"] = {SERVICE: "chat"}
    kube.others[("Service", "chat")] = copy.deepcopy(theirs)  # in the watch cache

    result = _reconciler(kube, [T0]).reconcile(copy.deepcopy(kube.body))

    assert kube.applied_names == [] and kube.deleted == []
    assert kube.others[("Service", "chat")] == theirs
    degraded = _conditions(kube)["Degraded"]
    assert degraded["reason"] == "NameConflict"
    assert "Service/chat (owned by LLMService/chat (uid u-old))" in degraded["message"]
    assert "NameConflict" in [e.reason for e in result.events if e.type == "Warning"]


def test_its_own_object_applies_as_before_with_one_lookup_per_new_name() -> None:
    """Its own Service (its uid), not in the cache: applied. Every new name is looked up once,
    also while the watch cache lags behind its first applies; at rest nothing is."""
    clock = [T0]
    kube = FakeKube(_body())
    ours = _foreign_service({"kind": "LLMService", "name": "chat", "uid": "u-1"})
    kube.unlabelled[("Service", "chat")] = ours
    reconciler = _reconciler(kube, clock)
    lagging = kube.observe
    kube.observe = lambda *a: type(lagging(*a))()  # type: ignore[method-assign]

    reconciler.reconcile(copy.deepcopy(kube.body))
    assert ("Service", "chat") in kube.applied_names
    assert _conditions(kube)["Degraded"]["reason"] != "NameConflict"
    first = list(kube.lookups)
    assert len(first) == len(set(first)) and ("Service", "chat") in first

    clock[0] += timedelta(seconds=1)
    kube.body["metadata"]["annotations"] = {"touch": "1"}  # decided again, cache still behind
    kube.body["metadata"]["resourceVersion"] = "99"
    reconciler.reconcile(copy.deepcopy(kube.body))
    assert kube.lookups == first

    kube.observe = lagging  # type: ignore[method-assign]
    for _ in range(3):
        clock[0] += timedelta(seconds=1)
        reconciler.reconcile(copy.deepcopy(kube.body))
    assert kube.lookups == first


def test_a_labelled_but_foreign_object_is_never_pruned_its_own_is() -> None:
    """Anyone may set the service's label on an object, and even point an owner reference at
    the service by name: only its uid makes it the service's to delete."""
    kube = FakeKube(_body())
    reconciler = _reconciler(kube, [T0])
    reconciler.reconcile(copy.deepcopy(kube.body))
    planted = {
        ("HorizontalPodAutoscaler", "chat-x"): {
            "kind": "LLMService",
            "name": "chat",
            "uid": "evil",
        },
        ("ConfigMap", "chat-y"): None,
    }
    for (kind, name), ref in planted.items():
        meta: dict[str, Any] = {"name": name, "labels": {SERVICE: "chat"}}
        if ref is not None:
            meta["ownerReferences"] = [ref]
        kube.others[(kind, name)] = {"apiVersion": "v1", "kind": kind, "metadata": meta}

    mine = {"kind": "LLMService", "name": "chat", "uid": "u-1"}
    kube.others[("HorizontalPodAutoscaler", "chat-old")] = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "chat-old", "uid": "obj-9", "ownerReferences": [mine]},
    }

    kube.body["metadata"]["resourceVersion"] = "42"
    reconciler.reconcile(copy.deepcopy(kube.body))

    # Its own is pruned, and only as the very object observed (a uid precondition).
    assert kube.deleted == [("HorizontalPodAutoscaler", "chat-old", "obj-9")]
    assert set(planted) <= set(kube.others)


def test_the_adapter_reads_an_unknown_name_once_and_deletes_only_the_object_it_saw() -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    class Resource:
        def get(self, **kwargs: Any) -> dict[str, Any]:
            calls.append(("get", kwargs))
            return {"metadata": {"name": kwargs["name"]}}

        def delete(self, **kwargs: Any) -> None:
            calls.append(("delete", kwargs))

    kube = KubeAdapter.__new__(KubeAdapter)
    kube._watches = None
    kube._ledger = AppliedLedger()
    kube._resource = lambda _v, _k: Resource()  # type: ignore[method-assign]

    assert kube.existing("v1", "Service", "ml", "chat") == {"metadata": {"name": "chat"}}
    kube.delete("v1", "Service", "ml", "chat", "obj-uid")
    assert [c[0] for c in calls] == ["get", "delete"]
    assert calls[1][1]["body"]["preconditions"] == {"uid": "obj-uid"}
