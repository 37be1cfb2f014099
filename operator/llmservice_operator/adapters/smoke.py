"""Send the smoke test's requests to a candidate pod and record what came back.

Bounded (adapters/bounded_http.py): each request ends by its ``timeout_seconds`` (connect to
last byte), and its stream is cut past SMOKE_STREAM_MAX_BYTES. Only the stream's ``data:``
payloads are kept, which is what the verdict reads; of an error answer, its first
ERROR_BODY_BYTES. A request cut by either limit ends the test (the verdict fails it)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from ..rollout import SmokeObservation, SmokeRequest
from .bounded_http import ERRORS, Limits, open_url

__all__ = ["ERROR_BODY_BYTES", "SMOKE_CONNECT_S", "SMOKE_STREAM_MAX_BYTES", "run_smoke"]

#: One request's stream. A smoke request asks for 16 tokens: vLLM streams them as about 20
#: ``data:`` events of 0.3-0.5 KiB (under 10 KiB); a quarter of a MiB is 25 times that.
SMOKE_STREAM_MAX_BYTES = 256 * 1024
#: What is read of an answer that is not 200, for the message (which keeps 500 characters).
ERROR_BODY_BYTES = 4 * 1024
#: A Ready pod on the cluster network accepts a connection in milliseconds.
SMOKE_CONNECT_S = 5.0


def _has_text(payload: str) -> bool:
    try:
        chunk = json.loads(payload)
    except json.JSONDecodeError:
        return False
    if not isinstance(chunk, dict):
        return False
    for choice in chunk.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta") or {}
        if (isinstance(delta, dict) and delta.get("content")) or choice.get("text"):
            return True
    return False


def _one(base_url: str, request: SmokeRequest, api_key: str | None) -> SmokeObservation:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    limits = Limits(SMOKE_STREAM_MAX_BYTES, request.timeout_seconds, SMOKE_CONNECT_S)
    started = time.monotonic()
    first: float | None = None
    chunks: list[str] = []
    try:
        with open_url(
            "POST",
            base_url + request.path,
            limits,
            body=json.dumps(request.body).encode(),
            headers=headers,
        ) as response:
            if response.status != 200:
                text = response.prefix(ERROR_BODY_BYTES).decode(errors="replace")
                return SmokeObservation(request.name, response.status, body=text[:500])
            try:
                for raw in response.lines():
                    line = raw.decode(errors="replace")
                    if not line.startswith("data:"):
                        continue  # comments, event names, the blank line between events
                    payload = line.removeprefix("data:").strip()
                    if first is None and _has_text(payload):
                        first = time.monotonic() - started
                    chunks.append(payload)
            except ERRORS as err:  # cut: what came is kept, and why it stopped
                return SmokeObservation(request.name, 200, tuple(chunks), first, error=str(err))
            return SmokeObservation(request.name, 200, tuple(chunks), first)
    except ERRORS as err:
        return SmokeObservation(request.name, None, error=str(err))


def run_smoke(
    base_url: str, requests_: Sequence[SmokeRequest], api_key: str | None
) -> list[SmokeObservation]:
    """Requests in order, stopping at the first that got no answer (nothing to judge) or whose
    answer was cut (the verdict fails it: the next would only take as long)."""
    observations: list[SmokeObservation] = []
    for request in requests_:
        observation = _one(base_url, request, api_key)
        observations.append(observation)
        if observation.status is None or observation.error is not None:
            break
    return observations
