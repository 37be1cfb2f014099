"""The largest LLMService spec the schema allows that the operator still serves: every string
at its maxLength, every list at its maxItems, every map at its maxProperties, the architecture
at its keys and bytes, free text in four-byte characters (the most bytes a character takes in
etcd's JSON). Where a value must mean something (a catalog GPU, a cron expression, a model
that fits) it is the longest such value. tests/unit/test_status_bounds.py writes its status."""

from __future__ import annotations

import json
from typing import Any

from llmservice_operator.api.architecture import MAX_ARCHITECTURE_BYTES
from llmservice_operator.api.base import MAX_DURATION
from llmservice_operator.api.k8s_values import PEER_LABELS
from llmservice_operator.api.schedule import MAX_SCHEDULES
from llmservice_operator.api.spec import (
    BUILTIN_CHECKS,
    MAX_ENV_TOTAL,
    MAX_ENV_VALUE,
    MAX_EXTRA_ARG,
    MAX_EXTRA_ARGS_TOTAL,
)
from llmservice_operator.api.tiers import MAX_TIERS
from llmservice_operator.sizing import load_builtin_model, load_catalog
from llmservice_operator.sizing.limits import MAX_ARCHITECTURE_KEYS

#: Four bytes in UTF-8, one character to the schema's maxLength.
WIDE = "\U0001f600"


def wide(n: int, prefix: str = "") -> str:
    return prefix + WIDE * (n - len(prefix))


def name(n: int, tag: object = "") -> str:
    """A Kubernetes name of exactly ``n`` characters, distinct per ``tag``."""
    text = f"{tag}".replace("_", "-")
    return ("a" * (n - len(text) - 1) + "x" + text)[-n:] if text else "a" * n


def label_key(tag: object) -> str:
    return "a" * 253 + "/" + name(63, tag)


def labels(count: int) -> dict[str, str]:
    return {label_key(i): "v" * 63 for i in range(count)}


def _architecture() -> dict[str, Any]:
    config = load_builtin_model("meta-llama/Llama-3.1-8B-Instruct")
    assert config is not None
    keys: dict[str, Any] = dict(config)
    room = MAX_ARCHITECTURE_BYTES - len(json.dumps(keys, ensure_ascii=False).encode()) - 64
    fillers = MAX_ARCHITECTURE_KEYS - len(keys)
    each = room // fillers - len(json.dumps({"extra_000": ""}).encode()) - 2
    for i in range(fillers):
        keys[f"extra_{i:03}"] = WIDE * (each // 4)
    assert len(keys) == MAX_ARCHITECTURE_KEYS
    assert len(json.dumps(keys, ensure_ascii=False).encode()) <= MAX_ARCHITECTURE_BYTES
    return keys


def _engine() -> dict[str, Any]:
    values = MAX_ENV_TOTAL // MAX_ENV_VALUE
    env = [
        {"name": name(256, f"V{i}").upper().replace("-", "_"), "value": wide(MAX_ENV_VALUE)}
        for i in range(values)
    ]
    env += [
        {"name": name(256, f"E{i}").upper().replace("-", "_"), "value": ""}
        for i in range(values, 64)
    ]
    short = ["--b"] * (64 - 2)
    long = min(MAX_EXTRA_ARG, (MAX_EXTRA_ARGS_TOTAL - len("".join(short))) // 2)
    args = [wide(long, f"--a{i}=") for i in range(2)] + short
    return {
        "vllmVersion": "0.33.0",
        "image": wide(512, "registry.example/vllm:"),
        "maxModelLen": 8192,
        "maxNumSeqs": 64,
        "maxNumBatchedTokens": 8192,
        "kvCacheDtype": "auto",
        "prefixCaching": True,
        "chunkedPrefill": True,
        "schedulingPolicy": "priority",
        "gpuMemoryUtilization": 0.99,
        "extraArgs": args,
        "env": env,
        "hfTokenSecretRef": {"name": name(253, "hf"), "key": wide(253)},
    }


def _resources() -> dict[str, Any]:
    longest = max(load_catalog().names(), key=len)
    return {
        "gpu": "auto",
        "allowedGPUs": [longest] * 32,
        "minConcurrency": 1,
        "cpu": "1" * 64,
        "memory": "1" * 62 + "Ki",
        "nodeSelector": labels(64),
        "tolerations": [
            {
                "key": label_key(i),
                "operator": "Equal",
                "value": "v" * 63,
                "effect": "PreferNoSchedule",
            }
            for i in range(32)
        ],
        "topologyKey": label_key("topology"),
    }


def _scaling() -> dict[str, Any]:
    cron_start, cron_end = "0 8 * * 1-5", "0 20 * * 1-5"
    pad = lambda cron: cron.replace(" ", " " * 48, 1)  # noqa: E731 - blanks are allowed between fields
    return {
        "mode": "operator",
        "minReplicas": 1,
        "maxReplicas": 1000,
        "targetQueueDepth": 100_000,
        "kvCacheUsageCeiling": 1,
        "targetUtilization": 1,
        "capacityPriorScale": 1000,
        "evaluationIntervalSeconds": 600,
        "metricsSource": "prometheus",
        "scaleUp": {
            "stabilizationWindowSeconds": 3600,
            "maxReplicasPerPeriod": 1000,
            "periodSeconds": 1800,
        },
        "scaleDown": {
            "stabilizationWindowSeconds": 3600,
            "maxReplicasPerPeriod": 1000,
            "periodSeconds": 1800,
        },
        "arrivalRateQuery": wide(2000, "sum(rate(x[1m])) # "),
        "schedules": [
            {
                "name": name(63, i),
                "start": pad(cron_start),
                "end": pad(cron_end),
                "timeZone": "America/Argentina/ComodRivadavia",
                "minReplicas": 1000,
                "maxReplicas": 1000,
            }
            for i in range(MAX_SCHEDULES)
        ],
    }


def _rollout() -> dict[str, Any]:
    duration = "1s" * (MAX_DURATION // 2)
    checks = [
        {"name": name(63, i), "query": wide(1024, "up # "), "operator": ">=", "threshold": -1e15}
        for i in range(16)
    ]
    steps: list[dict[str, Any]] = [{"setWeight": w} for w in range(0, 100, 10)]
    steps += [{"analysis": {"count": 100, "interval": duration}}] * 11
    steps += [{"pause": {"duration": duration}}] * (32 - len(steps))
    return {
        "strategy": "canary",
        "steps": steps,
        "analysis": {
            "interval": duration,
            "count": 100,
            "window": duration,
            "initialDelay": duration,
            "errorRetryInterval": duration,
            "minSamples": 1_000_000_000,
            "failureLimit": 1000,
            "inconclusiveLimit": 1000,
            "consecutiveErrorLimit": 1000,
            "onNoData": "inconclusive",
            "compareToStable": {"ttftP99MaxIncreasePercent": 1e5, "tpotP99MaxIncreasePercent": 1e5},
            "customChecks": checks,
            "dryRun": [*BUILTIN_CHECKS, *(c["name"] for c in checks)][:24],
        },
        "progressDeadlineSeconds": 86_400,
        "blueGreen": {
            "scaleDownDelaySeconds": 86_400,
            "autoPromote": True,
            "previewReplicaCount": 1000,
            "loadTest": {
                "rate": 1000,
                "promptTokens": 1_048_576,
                "outputTokens": 1_048_576,
                "endpoint": "completions",
            },
        },
        "smokeTest": {"enabled": True, "timeoutSeconds": 3600},
        "gatewayParentRef": {
            "name": name(253, "gw"),
            "namespace": name(63, "ns"),
            "sectionName": name(253, "s"),
        },
        "backgroundAnalysis": {"startingStep": 32},
        "rollbackWindow": {"revisions": 9},
        "abortScaleDownDelaySeconds": 86_400,
    }


def _serving() -> dict[str, Any]:
    return {
        "port": 65535,
        "apiKeySecretRef": {"name": name(253, "key"), "key": wide(253)},
        "networkPolicy": {
            "enabled": True,
            "allowFrom": [
                {"namespaceSelector": labels(PEER_LABELS), "podSelector": labels(PEER_LABELS)}
            ]
            * 16,
            "prometheusNamespaceSelector": labels(64),
        },
        "drainSeconds": 3600,
        "inferencePool": {
            "endpointPicker": {
                "image": wide(512, "registry.example/epp:"),
                "replicas": 10,
                "scorers": ["queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer"],
                "failureMode": "FailClose",
                "secureServing": True,
            }
        },
        "tiers": [
            {
                "name": name(40, i),
                "priority": 1_000_000 - i,
                "slo": {"ttftP99Ms": 3.6e6, "tpotP99Ms": 3.6e6},
            }
            for i in range(MAX_TIERS)
        ],
    }


def largest_spec() -> dict[str, Any]:
    return {
        "model": {
            "id": wide(512, "acme/"),
            "revision": wide(256),
            "servedName": wide(256),
            "source": {"type": "hf", "claimName": wide(253), "path": wide(1024), "uri": wide(2048)},
            "architecture": _architecture(),
            "dtype": "bfloat16",
            "quantization": "none",
        },
        "engine": _engine(),
        "resources": _resources(),
        "slo": {"ttftP99Ms": 3.6e6, "tpotP99Ms": 3.6e6, "maxErrorRate": 1},
        "scaling": _scaling(),
        "replicas": 1000,
        "rollout": _rollout(),
        "serving": _serving(),
    }


def largest_body(revision: str = "") -> dict[str, Any]:
    """The whole object; ``revision`` changes the model revision (a new pod template)."""
    spec = largest_spec()
    if revision:
        spec["model"]["revision"] = wide(256, revision)
    return {
        "apiVersion": "serving.llmservice.dev/v1alpha1",
        "kind": "LLMService",
        "metadata": {"name": name(63), "namespace": name(63, "ns"), "uid": "u-1", "generation": 1},
        "spec": spec,
    }
