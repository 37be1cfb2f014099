"""Priority tiers of one service (`spec.serving.tiers`): online chat and offline batch sharing GPUs.

A tier is a name, a vLLM priority and optional SLOs. The priority has vLLM's meaning: a request
with a lower value is scheduled first (then arrival order), and when the KV cache runs out the
running request with the highest value is preempted. Tiers need
`spec.engine.schedulingPolicy: priority` (with fcfs vLLM ignores a request's priority).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from .base import ApiModel, cel

__all__ = [
    "MAX_LATENCY_MS",
    "MAX_TIERS",
    "ServiceTier",
    "TierSLO",
    "TIERS_NEED_PRIORITY_POLICY",
    "TIER_SLOS_NOT_JUDGED",
    "check_tiers",
    "tiers_rules",
]

MAX_TIERS = 16
#: vLLM accepts any int64; the InferenceObjective carries its negation (see render/tiers.py),
#: so the range stays far inside both.
MAX_ABS_PRIORITY = 1_000_000
#: A latency objective (TTFT, TPOT) in ms: at most an hour.
MAX_LATENCY_MS = 3_600_000

TIERS_NEED_PRIORITY_POLICY = (
    "serving.tiers need engine.schedulingPolicy: priority (with fcfs vLLM ignores a "
    "request's priority)"
)
_NAMES_ONCE = "serving.tiers: each tier name at most once"


class TierSLO(ApiModel):
    """What the tier's own requests should see (judged client-side: vLLM's histograms have
    no priority label)."""

    ttft_p99_ms: float | None = Field(
        default=None, gt=0, le=MAX_LATENCY_MS, description="Time to first token, p99."
    )
    tpot_p99_ms: float | None = Field(
        default=None, gt=0, le=MAX_LATENCY_MS, description="Time per output token, p99."
    )


class ServiceTier(ApiModel):
    name: str = Field(
        min_length=1,
        max_length=40,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description=(
            "Tier name: the InferenceObjective is <service>-<name>, and the value of the "
            "x-gateway-inference-objective header that selects it."
        ),
    )
    priority: int = Field(
        ge=-MAX_ABS_PRIORITY,
        le=MAX_ABS_PRIORITY,
        description=(
            "vLLM priority of the tier's requests: lower is served first (e.g. online 0, "
            "batch 10). Clients send it as the request's `priority` field."
        ),
    )
    slo: TierSLO | None = None


def tiers_rules() -> list[dict[str, Any]]:
    """CEL rules of `spec` (the root: tiers live in serving, the policy in engine)."""
    return [
        cel(
            "!has(self.serving) || !has(self.serving.tiers) || size(self.serving.tiers) == 0 "
            "|| (has(self.engine.schedulingPolicy) && self.engine.schedulingPolicy == 'priority')",
            TIERS_NEED_PRIORITY_POLICY,
        )
    ]


def check_tiers(tiers: Sequence[ServiceTier], scheduling_policy: str) -> None:
    """The pydantic side of the CEL rule and of the list-map key (raises ValueError)."""
    names = [tier.name for tier in tiers]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"{_NAMES_ONCE}: {', '.join(twice)} given more than once")
    if tiers and scheduling_policy != "priority":
        raise ValueError(TIERS_NEED_PRIORITY_POLICY)


#: Why the operator does not judge `serving.tiers[].slo` (the TierSLOsJudged condition).
TIER_SLOS_NOT_JUDGED = (
    "serving.tiers[].slo is not judged by the operator: vLLM's latency histograms "
    "(time_to_first_token_seconds, inter_token_latency_seconds) carry no priority label, so "
    "the rollout analysis judges spec.slo over every tier together; judge a tier's SLO on "
    "the client side (the load test's or your clients' own per-tier TTFT)"
)
