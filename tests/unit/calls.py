"""A unit-test helper: the calls a module-level function gets, recorded while it still runs."""

from __future__ import annotations

from typing import Any

import pytest


def record_calls(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[tuple[Any, ...]]:
    """Replace ``owner.name`` for the test with a wrapper that records each call's arguments
    and returns what the real one does; the list of recorded arguments."""
    calls: list[tuple[Any, ...]] = []
    real = getattr(owner, name)

    def recording(*args: Any) -> Any:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(owner, name, recording)
    return calls
