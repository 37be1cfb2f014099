"""The LLMService API: pydantic models of spec and status, and the CRD generated from them."""

from .base import parse_duration_seconds
from .errors import SpecError
from .resource import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    LLMService,
    ObjectMeta,
    parse_llmservice,
    parse_spec,
)
from .spec import LLMServiceSpec
from .status import Condition, LLMServiceStatus

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "VERSION",
    "Condition",
    "LLMService",
    "LLMServiceSpec",
    "LLMServiceStatus",
    "ObjectMeta",
    "SpecError",
    "parse_duration_seconds",
    "parse_llmservice",
    "parse_spec",
]
