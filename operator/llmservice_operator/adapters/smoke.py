"""Send the smoke test's requests to a candidate pod and record what came back."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import requests

from ..rollout import SmokeObservation, SmokeRequest

__all__ = ["run_smoke"]


def _has_text(payload: str) -> bool:
    try:
        chunk = json.loads(payload)
    except json.JSONDecodeError:
        return False
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content") or choice.get("text"):
            return True
    return False


def _one(base_url: str, request: SmokeRequest, api_key: str | None) -> SmokeObservation:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    started = time.monotonic()
    first: float | None = None
    chunks: list[str] = []
    try:
        with requests.post(
            base_url + request.path,
            json=request.body,
            headers=headers,
            stream=True,
            timeout=request.timeout_seconds,
        ) as response:
            if response.status_code != 200:
                return SmokeObservation(
                    request.name, response.status_code, body=response.text[:500]
                )
            for raw in response.iter_lines(decode_unicode=True):
                if not raw or not raw.startswith("data:"):
                    continue
                payload = raw.removeprefix("data:").strip()
                if first is None and _has_text(payload):
                    first = time.monotonic() - started
                chunks.append(payload)
                if time.monotonic() - started > request.timeout_seconds:
                    break
            return SmokeObservation(request.name, 200, tuple(chunks), first)
    except requests.RequestException as err:
        return SmokeObservation(request.name, None, error=str(err))


def run_smoke(
    base_url: str, requests_: Sequence[SmokeRequest], api_key: str | None
) -> list[SmokeObservation]:
    """Requests in order, stopping at the first that got no answer (nothing to judge)."""
    observations: list[SmokeObservation] = []
    for request in requests_:
        observation = _one(base_url, request, api_key)
        observations.append(observation)
        if observation.status is None:
            break
    return observations
