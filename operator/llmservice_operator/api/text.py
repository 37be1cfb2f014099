"""Strings the operator writes into status, cut to a fixed length where they are written out.

What goes into a message can come from anywhere (an API server's refusal, a Prometheus error,
a pod's answer, a name in the spec), and the status must stay small whatever it is (etcd's
1.5 MiB covers spec and status together). The cut happens when the model is serialized, so
every way a status is made (validated or copied) is covered, and the CRD says the same
``maxLength``. Reading a longer one back (an older status) is fine: it is cut on the next write.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import PlainSerializer, WithJsonSchema

__all__ = [
    "BRIEF_MAX",
    "NAME_MAX",
    "TEXT_MAX",
    "TIME_MAX",
    "Brief",
    "Name",
    "Text",
    "Time",
    "clip",
]

#: Characters of a message (a condition's, the rollout's, a revision's reason).
TEXT_MAX = 2048
#: Characters of what there are many of: a measurement's query and message, a pause reason.
BRIEF_MAX = 512
#: Characters of a name, a revision, a reason (each far shorter in practice).
NAME_MAX = 64
#: Characters of a time (RFC 3339: "2026-11-30T12:00:00.123456Z" is 27).
TIME_MAX = 40
_MARK = " [...]"


def clip(text: str, limit: int = TEXT_MAX) -> str:
    """``text`` cut to ``limit`` characters, with a mark saying it was."""
    return text if len(text) <= limit else text[: limit - len(_MARK)] + _MARK


def _cut(limit: int) -> Any:
    return PlainSerializer(lambda text: clip(text, limit), return_type=str)


def _schema(limit: int) -> Any:
    return WithJsonSchema({"type": "string", "maxLength": limit})


Text = Annotated[str, _cut(TEXT_MAX), _schema(TEXT_MAX)]
Brief = Annotated[str, _cut(BRIEF_MAX), _schema(BRIEF_MAX)]
Name = Annotated[str, _cut(NAME_MAX), _schema(NAME_MAX)]
Time = Annotated[str, _cut(TIME_MAX), _schema(TIME_MAX)]
