"""Status bounded by construction (issue 38, finding 7): etcd holds an object of at most
1.5 MiB, spec and status together. The status kept ten copies of the pod-making spec sections,
so a spec of ~140 KB broke every status write; now the copies share a fixed budget, text is
cut where it is written, and every list has a length. The largest spec the schema allows
(tests/unit/largest_spec.py) is written through ten revisions and measured."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from llmservice_operator.api import LLMServiceStatus
from llmservice_operator.api.crd import crd_manifest
from llmservice_operator.api.status import (
    REVISION_SPECS_BUDGET,
    Condition,
    RevisionEntry,
    keep_specs,
)
from llmservice_operator.api.text import TEXT_MAX, clip
from llmservice_operator.decide import REVISION_SPEC_KEYS, decide
from llmservice_operator.observed import ObservedState
from llmservice_operator.sizing import load_catalog

from .largest_spec import largest_body
from .test_spec_bounds import unbounded

CATALOG = load_catalog()
NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
ETCD_LIMIT = 1536 * 1024  # etcd's --max-request-bytes default: the largest object stored
#: What the object's metadata may take beside spec and status: annotations are at most
#: 256 KiB together (kubectl's last-applied-configuration among them), and managedFields.
METADATA_ALLOWANCE = 384 * 1024


def _size(value: Any) -> int:
    """Bytes of ``value`` as etcd stores it (JSON, UTF-8)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _status_schema() -> dict[str, Any]:
    root = crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema: dict[str, Any] = root["properties"]["status"]
    return schema


def test_every_string_list_and_map_of_the_status_is_bounded() -> None:
    """Numbers are left open (a number's size is fixed); sizes are not."""
    assert unbounded(_status_schema(), "status", numbers=False) == []
    log = _status_schema()["properties"]["revisions"]["properties"]["log"]
    assert log["items"]["properties"]["spec"]["maxProperties"] == 8 >= len(REVISION_SPEC_KEYS)


def _largest_status_bytes(node: dict[str, Any], path: str) -> int:
    """The most bytes of JSON the schema lets through under ``node``, at one byte a character
    (the operator's text is ASCII but for the names it quotes); the spec copies in
    revisions.log[] are counted once, as REVISION_SPECS_BUDGET."""
    kind = node.get("type")
    if path.endswith("log[].spec"):
        return 2
    if "enum" in node:
        return 2 + max(len(str(e)) for e in node["enum"])
    if kind == "string":
        return 2 + int(node["maxLength"])
    if kind in ("integer", "number"):
        return 24
    if kind == "boolean":
        return 5
    if kind == "array":
        return 2 + int(node["maxItems"]) * (_largest_status_bytes(node["items"], f"{path}[]") + 1)
    assert kind == "object" and "additionalProperties" not in node, path
    return 2 + sum(
        len(key) + 4 + _largest_status_bytes(sub, f"{path}.{key}")
        for key, sub in node.get("properties", {}).items()
    )


def test_the_largest_status_the_schema_allows_leaves_room_for_the_largest_spec() -> None:
    status = _largest_status_bytes(_status_schema(), "status") + REVISION_SPECS_BUDGET
    spec = _size(largest_body()["spec"])
    print(f"largest status {status:,} B; largest spec {spec:,} B")
    assert status < 640 * 1024
    assert spec + status + METADATA_ALLOWANCE < ETCD_LIMIT


def _secrets(body: dict[str, Any]) -> dict[str, set[str] | None]:
    refs = [body["spec"]["engine"]["hfTokenSecretRef"], body["spec"]["serving"]["apiKeySecretRef"]]
    return {ref["name"]: {ref["key"]} for ref in refs}


def test_the_largest_spec_through_ten_revisions_writes_a_small_status() -> None:
    status: dict[str, Any] = {}
    for number in range(12):  # each a new pod template: a revision, remembered in the log
        body = largest_body(f"r{number}-")
        body["status"] = status
        observed = ObservedState(owned={}, secrets=_secrets(body))
        now = NOW + timedelta(minutes=number)
        decision = decide(body, observed, CATALOG, now, "http://prom:9090")
        assert decision.status["phase"] == "Progressing", decision.status["conditions"]
        status = decision.status
    log = status["revisions"]["log"]
    assert len(log) == 10
    assert all(
        entry["spec"] == {} and entry["specOmittedBytes"] > REVISION_SPECS_BUDGET for entry in log
    )
    spec, written = _size(body["spec"]), _size(status)
    print(f"largest spec {spec:,} B, its status after 12 revisions {written:,} B")
    assert written < 64 * 1024  # ten copies of its pod-making sections were ~5.4 MB
    assert spec + written + METADATA_ALLOWANCE < ETCD_LIMIT


def _entry(number: int, size: int) -> RevisionEntry:
    spec = {"engine": {"env": [{"name": "A", "value": "x" * size}]}}
    return RevisionEntry(number=number, revision=f"r{number}", spec=spec, created="t")


def test_revision_specs_share_a_budget_newest_first() -> None:
    quarter = REVISION_SPECS_BUDGET // 4
    log = [_entry(n, quarter) for n in range(1, 6)]
    kept = keep_specs(log)
    assert [bool(e.spec) for e in kept] == [False, False, True, True, True]
    assert [e.spec_omitted_bytes for e in kept[:2]] == [_size(log[0].spec)] * 2
    assert sum(_size(e.spec) for e in kept if e.spec) <= REVISION_SPECS_BUDGET
    small = [_entry(n, 1000) for n in range(1, 11)]
    assert keep_specs(small) == small  # a typical spec: every revision keeps its own
    assert keep_specs([_entry(1, REVISION_SPECS_BUDGET)])[0].spec == {}  # too large alone


def test_text_is_cut_where_the_status_is_written() -> None:
    long = "x" * (TEXT_MAX * 5)
    condition = Condition(
        type="Degraded", status="True", reason="R", message=long, last_transition_time="t"
    )
    written = condition.model_dump(by_alias=True, mode="json")["message"]
    assert len(written) == TEXT_MAX and written.endswith(" [...]") and written == clip(long)
    assert condition.message == long  # in memory as made; cut on the way out


def test_a_long_invalid_spec_message_is_one_event_not_one_per_reconcile() -> None:
    body = largest_body()
    secrets = _secrets(body)
    token = body["spec"]["engine"]["hfTokenSecretRef"]["name"]
    secrets[token] = {f"some-other-key-{i:04}" for i in range(300)}  # listed in the message
    observed = ObservedState(owned={}, secrets=secrets)
    first = decide(body, observed, CATALOG, NOW, "")
    [cond] = [c for c in first.status["conditions"] if c["type"] == "InvalidSpec"]
    assert "has no key" in cond["message"] and len(cond["message"]) == TEXT_MAX
    assert [e.reason for e in first.events] == ["InvalidSpec"]
    body["status"] = first.status
    again = decide(body, observed, CATALOG, NOW, "")
    assert again.events == []


def test_a_status_frozen_under_older_bounds_keeps_its_revisions() -> None:
    """An analysis setting frozen before a bound was added (failureLimit 5000) does not make
    the whole status unreadable: the revisions and history stay, the rollout freezes again."""
    body = largest_body()
    first = decide(body, ObservedState(owned={}, secrets=_secrets(body)), CATALOG, NOW, "")
    status = first.status
    frozen = {
        "analysis": {"failureLimit": 5000},
        "slo": {},
    }
    status["rollout"] = {**(status.get("rollout") or {}), "frozen": frozen}
    LLMServiceStatus.model_validate(first.status | {"rollout": None})  # the rest is valid
    body["status"] = status
    again = decide(body, ObservedState(owned={}, secrets=_secrets(body)), CATALOG, NOW, "")
    assert again.status["revisions"]["stable"] == first.status["revisions"]["stable"]
    assert again.status["revisions"]["log"] == first.status["revisions"]["log"]
