"""Spec errors: permanent, name the field, say what to change."""

from __future__ import annotations

from typing import Literal

__all__ = ["SpecError", "SpecErrorKind"]

#: ``invalid``: the spec says something the operator cannot serve (a bad value, a missing
#: Secret, an unknown architecture). ``does_not_fit``: valid, but the model does not fit the
#: resources it is given (or names a GPU it cannot have); the Sized condition says so too.
SpecErrorKind = Literal["invalid", "does_not_fit"]


class SpecError(ValueError):
    """The spec cannot be served as written. `field` is the dotted path, e.g. spec.engine.maxModelLen."""

    def __init__(self, field: str, message: str, *, kind: SpecErrorKind = "invalid") -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.kind: SpecErrorKind = kind
