"""What the templates' ``tojson`` writes: JSON that is also YAML the C loader reads back.

The templates put every value through ``tojson`` (JSON is YAML, and it quotes safely), and the
objects are the YAML parsed back. JSON escapes a character outside the Basic Multilingual Plane
(an emoji, many CJK ideographs) as a UTF-16 surrogate pair, ``"\\ud83d\\ude00"``; YAML has no
surrogate escapes: libyaml refuses them ("found invalid Unicode character escape code") and
PyYAML's pure loader makes two lone surrogates of them, which no JSON encoder sends to the API
server. So each pair is written as YAML's own 32-bit escape, ``"\\U0001f600"``, which both
loaders read as the one character. Everything else is written as before (byte for byte: the
revision hashes of existing services do not change).

A lone surrogate (JSON ``"\\ud83d"`` with no partner, U+D800..U+DFFF on its own) is not a
character at all, and UTF-8 (what JSON on the wire and etcd hold) cannot encode it: no
Kubernetes object can carry it. The API server never hands one over (Go's JSON decoder turns
an unpaired escape into U+FFFD), but a file given to ``llmservice plan`` can hold one, as can
a body written by Python code. :func:`unrenderable` names it, for an ``InvalidSpec``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

__all__ = ["LONE_SURROGATE", "lone_surrogate", "template_dumps", "unrenderable"]

#: A JSON escape, taken whole from the backslash: a surrogate pair (groups 1, 2) or any other
#: (a backslash-escaped backslash is consumed here, so ``\\\\ud83d`` is never mistaken for one).
_ESCAPE = re.compile(r"\\(?:u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})|.)")


def _yaml_escape(match: re.Match[str]) -> str:
    high, low = match.group(1), match.group(2)
    if high is None:
        return match.group(0)
    code = 0x10000 + ((int(high, 16) - 0xD800) << 10) + (int(low, 16) - 0xDC00)
    return f"\\U{code:08x}"


def template_dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` (ASCII only), with surrogate-pair escapes written as YAML ``\\U``
    escapes. jinja2's ``tojson`` calls it (``policies["json.dumps_function"]``)."""
    text = json.dumps(obj, **kwargs)
    if "\\ud" not in text:
        return text
    return _ESCAPE.sub(_yaml_escape, text)


def unrenderable(context: Mapping[str, Any]) -> str | None:
    """Which value of a template's ``context`` holds a lone surrogate, and which one
    (``"env[0].value holds \\ud83d"``); None if none does."""
    found = lone_surrogate(context)
    return None if found is None else f"{found[0]} holds {found[1]}"


#: What a lone surrogate is, for the person who wrote one.
LONE_SURROGATE = (
    "one half of a UTF-16 surrogate pair without the other: not a character, and no Kubernetes "
    "object can carry it; write the character itself"
)


_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(value: Any, path: str = "") -> tuple[str, str] | None:
    """The first (path, escaped surrogate) in ``value``: a string, or mappings, lists, pydantic
    models and dataclasses of them (keys included); None when there is none. Paths read like
    ``spec.engine.env[0].value``."""
    try:  # the common case, a tenth of the walk's time: plain JSON that all encodes
        json.dumps(value, ensure_ascii=False).encode()
        return None
    except (UnicodeEncodeError, TypeError, ValueError):  # TypeError: models, dataclasses
        return _walk(value, path)


def _walk(value: Any, path: str) -> tuple[str, str] | None:
    if isinstance(value, str):
        if value.isascii():
            return None
        match = _SURROGATE.search(value)
        if match is None:
            return None
        return path or "a value", match.group(0).encode("unicode_escape").decode()
    if isinstance(value, Mapping):
        items = [(_join(path, key), key) for key in value]  # a key can hold one too
        items += [(_join(path, key), item) for key, item in value.items()]
    elif isinstance(value, list | tuple):
        items = [(f"{path}[{index}]", item) for index, item in enumerate(value)]
    elif isinstance(value, BaseModel):
        items = [(_join(path, name), getattr(value, name)) for name in type(value).model_fields]
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [(_join(path, f.name), getattr(value, f.name)) for f in dataclasses.fields(value)]
    else:
        return None
    return next((found for where, item in items if (found := _walk(item, where))), None)


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)
