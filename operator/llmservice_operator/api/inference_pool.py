"""spec.serving.inferencePool: model-aware routing with the Gateway API Inference Extension.

The operator renders one ``InferencePool`` (inference.networking.k8s.io/v1, extension v1.0.0)
per serving role (the stable revision; during a rollout the candidate too) and an endpoint
picker (EPP) for each; the HTTPRoute's backends are then the pools, with the rollout's weights.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import ApiModel

__all__ = ["EPP_VERSION", "EndpointPickerSpec", "InferencePoolSpec", "Scorer"]

#: The extension release whose API, flags and default plugins the operator renders.
EPP_VERSION = "v1.0.0"

Scorer = Literal["queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer"]


def _default_scorers() -> list[Scorer]:
    return ["queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer"]


class EndpointPickerSpec(ApiModel):
    """The endpoint picker Deployment the operator runs for each pool."""

    image: str | None = Field(
        default=None,
        max_length=512,
        description=(
            "Default registry.k8s.io/gateway-api-inference-extension/epp:"
            f"{EPP_VERSION} (the flags rendered are that release's)."
        ),
    )
    replicas: int = Field(default=1, ge=1, le=10)
    scorers: list[Scorer] = Field(
        default_factory=_default_scorers,
        min_length=1,
        max_length=3,
        description=(
            "The default scheduling profile's scorers, in order (the extension chart's default: "
            "queue depth, KV-cache use, prefix-cache affinity)."
        ),
    )
    failure_mode: Literal["FailOpen", "FailClose"] = Field(
        default="FailClose",
        description="What the gateway does when the picker does not answer (the pool's field).",
    )
    secure_serving: bool = Field(
        default=True,
        description="TLS on the ext_proc port (the extension's default; gateways expect it).",
    )


class InferencePoolSpec(ApiModel):
    """Route through InferencePools (needs rollout.gatewayParentRef: the route refers to them)."""

    endpoint_picker: EndpointPickerSpec = Field(default_factory=EndpointPickerSpec)
