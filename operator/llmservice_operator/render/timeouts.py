"""The HTTPRoute's timeouts: a stream must never be cut by the gateway (seed 000 §5.5).

The longest generation a replica can be asked for is bounded by the context: at most
``maxModelLen`` tokens, each within the TPOT p99 the SLO allows, after the first token within
the TTFT p99. Without an SLO the bounds are :data:`DEFAULT_TPOT_MS` and :data:`DEFAULT_TTFT_MS`
(slow, but not unusual, for a loaded replica). A margin covers queueing in the gateway, and
the timeout is never shorter than the drain budget of a scale-down (plus a minute), which the
route used alone before.

Gateway API (v1.6, GEP-1742) has two timeouts: ``request`` (the whole request, from the
gateway receiving it to the last byte of the response) and ``backendRequest`` (one attempt to
a backend, at most ``request``). Both are set to the same bound: some implementations apply a
short default per backend attempt (Envoy's route timeout is 15 s) when only ``request`` is
set. The spec has no idle (between-bytes) timeout; an SSE stream sends a chunk per token, so an
implementation's stream-idle timeout (Envoy's default 5 minutes) is only at risk before the
first token, which the TTFT bound keeps far below it.
"""

from __future__ import annotations

import math

from ..api.spec import LLMServiceSpec

__all__ = [
    "DEFAULT_TPOT_MS",
    "DEFAULT_TTFT_MS",
    "MARGIN_SECONDS",
    "gateway_duration",
    "route_timeout_seconds",
]

DEFAULT_TPOT_MS = 100.0
DEFAULT_TTFT_MS = 30_000.0
MARGIN_SECONDS = 60


def route_timeout_seconds(spec: LLMServiceSpec) -> int:
    """Seconds for both HTTPRoute timeouts: the longest generation, plus a margin."""
    tpot_ms = spec.slo.tpot_p99_ms or DEFAULT_TPOT_MS
    ttft_ms = spec.slo.ttft_p99_ms or DEFAULT_TTFT_MS
    longest = (ttft_ms + spec.engine.max_model_len * tpot_ms) / 1000
    return max(math.ceil(longest) + MARGIN_SECONDS, spec.serving.drain_seconds + 60)


def gateway_duration(seconds: int) -> str:
    """A Gateway API Duration (at most 5 digits per unit): 983 -> "16m23s"."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "", f"{secs}s"]
    text = "".join(parts)
    return text if secs or not (hours or minutes) else text.removesuffix("0s")
