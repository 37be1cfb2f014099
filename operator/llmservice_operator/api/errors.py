"""Spec errors: permanent, name the field, say what to change."""

from __future__ import annotations

__all__ = ["SpecError"]


class SpecError(ValueError):
    """The spec cannot be served as written. `field` is the dotted path, e.g. spec.engine.maxModelLen."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
