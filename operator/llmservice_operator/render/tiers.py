"""InferenceObjectives of spec.serving.tiers, when spec.serving.inferencePool is used. Pure.

Gateway API Inference Extension v1.0.0 (``apix/v1alpha2/inferenceobjective_types.go``,
``pkg/epp``): a request names its objective in the ``x-gateway-inference-objective`` header
(the picker removes the header before the request reaches vLLM); the picker looks the
objective up by name among those whose ``poolRef`` is its pool, and uses its ``priority`` only
for admission: a priority below 0 is *sheddable* (refused with 429 while the pool is
saturated), 0 and above always pass. The picker does not set vLLM's per-request priority:
the client sends it (the body's ``priority``, or vLLM's ``X-Vllm-Priority`` header).

The extension's priority means the opposite of vLLM's (higher is more critical), so an
objective carries its tier's vLLM priority negated: the online tier (vLLM 0) is never shed, a
batch tier (vLLM 10 -> -10) is shed before it would queue behind saturation.

Objectives reference the stable pool only (:func:`~.pool_names.inference_pool_name`): the
name is what clients put in the header, one name per namespace, so the candidate's pool during
a rollout has none and its requests get the picker's default (0: never shed). vLLM's priority,
sent by the client, still orders them inside the engine.
"""

from __future__ import annotations

from typing import Any

from ..api.tiers import ServiceTier
from .objects import RenderInput, _common_labels, _render
from .pool_names import INFERENCE_POOL_API_GROUP, inference_pool_name

__all__ = [
    "INFERENCE_OBJECTIVE_API_VERSION",
    "OBJECTIVE_HEADER",
    "inference_objective_name",
    "inference_objectives",
    "objective_priority",
]

INFERENCE_OBJECTIVE_API_VERSION = "inference.networking.x-k8s.io/v1alpha2"
#: The request header the extension's picker reads the objective's name from
#: (pkg/epp/metadata/consts.go ObjectiveKey, v1.0.0).
OBJECTIVE_HEADER = "x-gateway-inference-objective"


def inference_objective_name(service_name: str, tier: str) -> str:
    """``<service>-<tier>``: the value of the objective header for that tier."""
    return f"{service_name}-{tier}"


def objective_priority(tier: ServiceTier) -> int:
    """The extension's priority for a tier: vLLM's (lower first) negated (higher first)."""
    return -tier.priority


def inference_objectives(render_input: RenderInput) -> list[dict[str, Any]]:
    """One InferenceObjective per tier on the stable pool; none without a pool or tiers."""
    serving = render_input.spec.serving
    if serving.inference_pool is None or not serving.tiers:
        return []
    pool = inference_pool_name(render_input.name)
    return [
        _render(
            "inferenceobjective.yaml.j2",
            name=inference_objective_name(render_input.name, tier.name),
            namespace=render_input.namespace,
            labels=_common_labels(render_input),
            tier=tier.name,
            vllm_priority=tier.priority,
            priority=objective_priority(tier),
            pool_group=INFERENCE_POOL_API_GROUP,
            pool=pool,
        )
        for tier in serving.tiers
    ]
