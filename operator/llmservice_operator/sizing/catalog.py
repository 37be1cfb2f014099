"""The GPU catalog: memory, bandwidth, compute, node label, relative cost and list price of each
GPU type.

The built-in catalog is ``data/gpus.yaml``. :func:`load_catalog` reads it and, given a path,
lays a file of the same shape over it: entries are matched by name (case-insensitively) and
the file's fields win, new names are added, and ``replace: true`` at the top of the file
drops the built-in entries.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import SizingError

__all__ = ["GpuCatalog", "GpuType", "builtin_catalog", "load_catalog"]

_PACKAGE = "llmservice_operator.sizing"


class GpuType(BaseModel):
    """One GPU type as sizing and rendering see it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=64)
    memory_bytes: int = Field(gt=0, description="Total memory gpu_memory_utilization scales.")
    hbm_bandwidth_bytes_per_s: float = Field(gt=0)
    bf16_dense_tflops: float = Field(gt=0)
    fp8: bool = Field(description="FP8 tensor cores.")
    node_label_key: str = "nvidia.com/gpu.product"
    node_label: str = Field(min_length=1, description="Value of node_label_key on its nodes.")
    resource_name: str = "nvidia.com/gpu"
    vendor: Literal["nvidia", "amd"] = "nvidia"
    relative_cost_per_hour: float = Field(gt=0)
    price_per_gpu_hour: float | None = Field(
        default=None,
        ge=0,
        description="List price of one GPU-hour (USD in the built-in catalog), for status.cost; "
        "None: GPU-hours are counted, cost is not.",
    )
    gpus_per_node: int = Field(default=8, ge=1)
    interconnect: Literal["nvlink", "pcie", "xgmi"] = "nvlink"

    @property
    def node_label_value(self) -> str:
        return self.node_label


class GpuCatalog(BaseModel):
    """An ordered set of GPU types with unique names."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpus: tuple[GpuType, ...]

    def names(self) -> list[str]:
        return [gpu.name for gpu in self.gpus]

    def find(self, name: str) -> GpuType | None:
        """By name (case-insensitive) or by node label value; None if unknown."""
        wanted = name.strip().lower()
        for gpu in self.gpus:
            if gpu.name.lower() == wanted or gpu.node_label.lower() == wanted:
                return gpu
        return None

    def get(self, name: str, *, field: str = "resources.gpu") -> GpuType:
        """By name; raises SizingError naming the known GPUs when unknown."""
        gpu = self.find(name)
        if gpu is None:
            raise SizingError(
                f"unknown GPU {name!r}; the catalog has {', '.join(self.names())}",
                field=field,
            )
        return gpu

    def merged(self, entries: list[Mapping[str, Any]], *, replace: bool = False) -> GpuCatalog:
        """This catalog with ``entries`` laid over it (or replacing it)."""
        by_name: dict[str, dict[str, Any]] = {}
        if not replace:
            for gpu in self.gpus:
                by_name[gpu.name.lower()] = gpu.model_dump()
        for entry in entries:
            name = entry.get("name")
            if not isinstance(name, str) or not name:
                raise SizingError(
                    f"GPU catalog entry without a name: {dict(entry)!r}", field="gpuCatalog"
                )
            key = name.lower()
            by_name[key] = {**by_name.get(key, {}), **entry}
        return _build(list(by_name.values()))


def _build(entries: list[Mapping[str, Any]]) -> GpuCatalog:
    try:
        gpus = tuple(GpuType.model_validate(dict(entry)) for entry in entries)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SizingError(
            f"invalid GPU catalog entry: {where}: {first['msg']}", field="gpuCatalog"
        ) from err
    names = [gpu.name.lower() for gpu in gpus]
    if len(set(names)) != len(names):
        raise SizingError("GPU catalog names must be unique", field="gpuCatalog")
    if not gpus:
        raise SizingError("the GPU catalog is empty", field="gpuCatalog")
    return GpuCatalog(gpus=gpus)


def _parse(text: str, source: str) -> tuple[list[Mapping[str, Any]], bool]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise SizingError(f"{source}: not valid YAML: {err}", field="gpuCatalog") from err
    if not isinstance(data, Mapping) or not isinstance(data.get("gpus"), list):
        raise SizingError(f"{source}: expected a mapping with a 'gpus' list", field="gpuCatalog")
    entries = data["gpus"]
    if not all(isinstance(e, Mapping) for e in entries):
        raise SizingError(f"{source}: every 'gpus' entry must be a mapping", field="gpuCatalog")
    return entries, bool(data.get("replace", False))


@functools.cache
def builtin_catalog() -> GpuCatalog:
    """The catalog the package ships (parsed once: it is immutable, and a caller per pod event,
    such as the local cluster's pod runner, would parse its YAML every time)."""
    text = resources.files(_PACKAGE).joinpath("data", "gpus.yaml").read_text("utf-8")
    entries, _ = _parse(text, "gpus.yaml")
    return _build(entries)


def load_catalog(path: Path | None = None) -> GpuCatalog:
    """The built-in catalog, with the YAML file at ``path`` (if any) laid over it."""
    catalog = builtin_catalog()
    if path is None:
        return catalog
    try:
        text = Path(path).read_text("utf-8")
    except OSError as err:
        raise SizingError(
            f"cannot read GPU catalog {path}: {err.strerror}", field="gpuCatalog"
        ) from err
    except UnicodeDecodeError as err:
        raise SizingError(
            f"GPU catalog {path} is not UTF-8 text: byte 0x{err.object[err.start]:02x} at "
            f"offset {err.start}",
            field="gpuCatalog",
        ) from err
    entries, replace = _parse(text, str(path))
    return catalog.merged(entries, replace=replace)
