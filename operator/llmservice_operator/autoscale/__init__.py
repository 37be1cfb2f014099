"""Autoscaling (pure): replica decisions from vLLM queue depth, guarded by KV-cache usage.

``decide_replicas(PolicyConfig, ScalingInputs) -> ScaleDecision``; the decision carries the
history to persist in ``status.autoscaling`` so a restarted operator resumes its windows. During
a canary or blue-green rollout the rollout shares one total between the two revisions
(``rollout.canary_replicas`` / ``stable_replicas``).
docs/autoscaling.md explains the rules and the benchmark against HPA and KEDA.
"""

from .capacity import (
    DEFAULT_MIX,
    PRIOR_DISCOUNT,
    CapacityPrior,
    RequestMix,
    TokenCapacity,
    TokenRates,
    batch_that_fits,
    measured_mix,
    rescaled_capacity,
    roofline_capacity,
)
from .counters import RATE_WINDOW_SECONDS, Reading, counter_rate
from .history import (
    LearnedCapacity,
    ScaleHistory,
    history_from_status,
    history_from_strings,
    history_to_status,
    history_to_strings,
)
from .policy import (
    Direction,
    LoadEstimate,
    PolicyConfig,
    ReplicaSample,
    ScaleDecision,
    ScalingInputs,
    burst_headroom,
    decide_replicas,
    default_target_queue_depth,
    estimate_load,
    planned_replicas,
    resolve_target_queue_depth,
)

__all__ = [
    "DEFAULT_MIX",
    "Direction",
    "LearnedCapacity",
    "PRIOR_DISCOUNT",
    "RequestMix",
    "TokenCapacity",
    "TokenRates",
    "CapacityPrior",
    "batch_that_fits",
    "measured_mix",
    "rescaled_capacity",
    "roofline_capacity",
    "LoadEstimate",
    "PolicyConfig",
    "RATE_WINDOW_SECONDS",
    "Reading",
    "ReplicaSample",
    "ScaleDecision",
    "ScaleHistory",
    "ScalingInputs",
    "burst_headroom",
    "counter_rate",
    "planned_replicas",
    "decide_replicas",
    "default_target_queue_depth",
    "estimate_load",
    "history_from_status",
    "history_from_strings",
    "history_to_status",
    "history_to_strings",
    "resolve_target_queue_depth",
]
