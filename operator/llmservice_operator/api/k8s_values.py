"""Kubernetes' own value rules for what a spec copies into pods and policies verbatim.

Label keys and values, resource quantities and tolerations are judged by the API server only
when the operator applies the object it rendered from them; a spec that breaks them would
reach the cluster and fail on every reconcile. Each rule is a pattern or CEL rule in the CRD
(so `kubectl apply` refuses the spec) and the same check in pydantic.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field, StringConstraints

from .base import cel

__all__ = [
    "LABEL_KEY_PATTERN",
    "PEER_LABELS",
    "LabelMap",
    "PeerSelector",
    "QUANTITY_PATTERN",
    "Quantity",
    "label_map_rules",
]

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
#: A label key: an optional DNS-subdomain prefix and '/', then a name of at most 63 characters.
LABEL_KEY_PATTERN = rf"^({_DNS_SUBDOMAIN}/)?{_NAME}$"
LABEL_VALUE_PATTERN = rf"^({_NAME})?$"
#: A resource quantity as Kubernetes parses it ("8", "500m", "64Gi", "1e3"), never negative.
QUANTITY_PATTERN = r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
_MAX_LABELS = 64
_MAX_KEY = 253 + 1 + 63


def _label_keys(labels: dict[str, str], max_labels: int = _MAX_LABELS) -> dict[str, str]:
    if len(labels) > max_labels:
        raise ValueError(f"at most {max_labels} labels")
    for key in labels:
        prefix, _, _name = key.rpartition("/")
        if len(key) > _MAX_KEY or len(prefix) > 253 or not re.fullmatch(LABEL_KEY_PATTERN, key):
            raise ValueError(
                f"{key!r} is not a label key: an optional DNS prefix and '/', then at most 63 "
                "letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
            )
    return labels


LabelValue = Annotated[str, StringConstraints(max_length=63, pattern=LABEL_VALUE_PATTERN)]
#: Labels as a selector or nodeSelector takes them.
LabelMap = Annotated[dict[str, LabelValue], AfterValidator(_label_keys)]
#: At most PEER_LABELS labels: a NetworkPolicy peer's selector (the spec has up to 16 of them).
PEER_LABELS = 8
PeerSelector = Annotated[
    dict[str, LabelValue], AfterValidator(lambda labels: _label_keys(labels, PEER_LABELS))
]
Quantity = Annotated[str, StringConstraints(pattern=QUANTITY_PATTERN, max_length=64)]


def label_map_rules(path: str, max_labels: int = _MAX_LABELS) -> dict[str, Any]:
    """The CRD side of LabelMap: a size bound and a CEL rule on its keys."""
    return {
        "maxProperties": max_labels,
        "x-kubernetes-validations": [
            cel(
                f"self.all(k, size(k) <= {_MAX_KEY} && k.matches(r'{LABEL_KEY_PATTERN}'))",
                f"{path}: every key must be a label key (an optional DNS prefix and '/', then "
                "at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter "
                "or digit)",
            )
        ],
    }


def label_map_field(
    path: str,
    *,
    optional: bool = False,
    description: str | None = None,
    max_labels: int = _MAX_LABELS,
) -> Any:
    """A Field for a LabelMap (or a PeerSelector: max_labels PEER_LABELS), with its CRD rules."""
    extra = label_map_rules(path, max_labels)
    if optional:
        return Field(default=None, description=description, json_schema_extra=extra)
    return Field(default_factory=dict, description=description, json_schema_extra=extra)
