"""The whole `LLMService` object, and parsing it from YAML/JSON with errors that name fields."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import SpecError
from .spec import LLMServiceSpec
from .status import LLMServiceStatus

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "VERSION",
    "LLMService",
    "ObjectMeta",
    "parse_llmservice",
    "parse_spec",
]

GROUP = "serving.llmservice.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "LLMService"
PLURAL = "llmservices"
SINGULAR = "llmservice"
SHORT_NAMES = ["llms"]


class ObjectMeta(BaseModel):
    """The parts of metadata the operator reads; everything else is ignored, not rejected."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    namespace: str = "default"
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class LLMService(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    api_version: Literal["serving.llmservice.dev/v1alpha1"] = Field(
        default="serving.llmservice.dev/v1alpha1", alias="apiVersion"
    )
    kind: Literal["LLMService"] = "LLMService"
    metadata: ObjectMeta
    spec: LLMServiceSpec
    status: LLMServiceStatus | None = None

    @property
    def served_model_name(self) -> str:
        """The model name the OpenAI API answers to: ``spec.model.servedName``, else the
        service's own name."""
        return self.spec.model.served_name or self.metadata.name


def _field_path(prefix: str, loc: tuple[int | str, ...]) -> str:
    path = prefix
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path.lstrip(".")


def _as_spec_error(prefix: str, err: ValidationError) -> SpecError:
    first = err.errors()[0]
    loc = tuple(p for p in first["loc"] if not str(p).startswith("function-"))
    message = str(first["msg"]).removeprefix("Value error, ")
    more = len(err.errors()) - 1
    if more:
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    return SpecError(_field_path(prefix, loc), message)


def parse_spec(spec: dict[str, Any]) -> LLMServiceSpec:
    """Validate a spec dict (as kopf hands it over) into the typed model, or raise SpecError."""
    try:
        return LLMServiceSpec.model_validate(spec)
    except ValidationError as err:
        raise _as_spec_error("spec", err) from err


def parse_llmservice(obj: dict[str, Any]) -> LLMService:
    """Validate a whole LLMService document, or raise SpecError naming the field."""
    if obj.get("kind") != KIND:
        raise SpecError("kind", f"expected {KIND}, got {obj.get('kind')!r}")
    try:
        return LLMService.model_validate(obj)
    except ValidationError as err:
        raise _as_spec_error("", err) from err
