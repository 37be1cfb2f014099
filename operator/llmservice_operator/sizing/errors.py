"""The one exception the sizing package raises for input it cannot use."""

from __future__ import annotations

__all__ = ["SizingError"]


class SizingError(ValueError):
    """Input that sizing cannot work with: a spec error, permanent until the spec changes.

    ``field`` names the spec field to change, relative to ``spec`` (for example
    ``model.architecture``, ``resources.gpu``, ``engine.maxModelLen``); ``missing`` lists the
    config.json keys that were needed and absent, when that is the problem.
    """

    def __init__(self, message: str, *, field: str, missing: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.field = field
        self.missing = missing
