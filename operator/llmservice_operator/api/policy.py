"""The operator-wide admin policy (chart values ``policy.*``): specs outside it are InvalidSpec.

Pure: :func:`check` takes a spec and the policy and raises the :class:`SpecError` that
decide() turns into the InvalidSpec condition. The policy is read once, at start
(settings.py: ``LLMSERVICE_POLICY_*``); a change needs a restart, as every setting does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .errors import SpecError
from .images import spec_images
from .spec import LLMServiceSpec

__all__ = [
    "MAX_POLICY_ENTRIES",
    "MAX_POLICY_ENTRY_LENGTH",
    "NO_POLICY",
    "AdminPolicy",
    "check",
    "parse_list",
]

MAX_POLICY_ENTRIES = 64
MAX_POLICY_ENTRY_LENGTH = 512
#: Prefixes named in one message; the rest are counted (a condition message is clipped).
_SHOWN_PREFIXES = 5
_ASK = "ask the cluster admin"


def parse_list(raw: str, what: str) -> tuple[str, ...]:
    """A comma-separated setting as its entries: blanks dropped, duplicates once, bounded."""
    entries = tuple(dict.fromkeys(e.strip() for e in raw.split(",") if e.strip()))
    if len(entries) > MAX_POLICY_ENTRIES:
        raise ValueError(f"{what}: at most {MAX_POLICY_ENTRIES} entries, got {len(entries)}")
    for entry in entries:
        if len(entry) > MAX_POLICY_ENTRY_LENGTH:
            raise ValueError(
                f"{what}: {entry[:40]}... is over {MAX_POLICY_ENTRY_LENGTH} characters"
            )
        if any(c.isspace() for c in entry):
            raise ValueError(f"{what}: {entry!r} has whitespace in it")
    return entries


def _flag_name(arg: str) -> str | None:
    """The option an argument names, as vLLM's parser reads it: the part before `=` (and
    before a `.`, its JSON sub-keys), underscores read as dashes. None for a non-option."""
    if not arg.startswith("--") or len(arg) == 2:
        return None
    name = arg[2:].split("=", 1)[0].split(".", 1)[0]
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class AdminPolicy:
    #: Empty: any image.
    allowed_image_prefixes: tuple[str, ...] = ()
    #: Normalized by :meth:`of` (`--flag`, dashes).
    forbidden_engine_flags: tuple[str, ...] = ()

    @classmethod
    def of(cls, prefixes: Iterable[str], flags: Iterable[str]) -> AdminPolicy:
        """A policy from its lists, checked: every flag is a `--name`."""
        normalized = []
        for flag in flags:
            name = _flag_name(flag)
            if name is None or name != flag.replace("_", "-"):
                raise ValueError(f"policy.forbiddenEngineFlags: {flag!r} is not a --flag name")
            normalized.append(name)
        return cls(tuple(prefixes), tuple(dict.fromkeys(normalized)))


NO_POLICY = AdminPolicy()


def check(spec: LLMServiceSpec, policy: AdminPolicy) -> None:
    """Raise SpecError naming the field and the policy entry the spec goes against."""
    _check_images(spec, policy.allowed_image_prefixes)
    _check_flags(spec.engine.extra_args, policy.forbidden_engine_flags)


def _check_images(spec: LLMServiceSpec, prefixes: tuple[str, ...]) -> None:
    if not prefixes:
        return
    for field, image, chosen in spec_images(spec):
        if image.startswith(prefixes):
            continue
        shown = ", ".join(prefixes[:_SHOWN_PREFIXES])
        if len(prefixes) > _SHOWN_PREFIXES:
            shown += f" and {len(prefixes) - _SHOWN_PREFIXES} more"
        what = image if chosen else f"unset, and its default {image}"
        raise SpecError(
            field,
            f"{what} does not start with a prefix the operator's policy allows "
            f"(policy.allowedImagePrefixes: {shown}); use an image under one, or {_ASK}",
        )


def _check_flags(args: list[str], forbidden: tuple[str, ...]) -> None:
    for arg in args:
        name = _flag_name(arg)
        if name is None:
            continue
        for flag in forbidden:
            # vLLM's parser (argparse) takes an unambiguous abbreviation: --trust-remote.
            if name == flag or flag.startswith(name):
                said = name if name == flag else f"{name} (vLLM reads it as {flag})"
                raise SpecError(
                    "spec.engine.extraArgs",
                    f"{said} is forbidden by the operator's policy "
                    f"(policy.forbiddenEngineFlags); {_ASK}",
                )
