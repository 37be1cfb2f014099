"""The Events a person sees on an LLMService (pure): what `kubectl describe` lists.

Every part of the core that has something to say (the rollout machine, the reconcile's
decision) says it with this one type; the shell posts them (adapters/kube.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Event", "EventType"]

EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True)
class Event:
    type: EventType
    reason: str
    """CamelCase, e.g. RolloutStarted, AnalysisFailed."""
    message: str
