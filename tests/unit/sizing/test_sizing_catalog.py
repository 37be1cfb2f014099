"""The GPU catalog: built-in values and overrides from a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmservice_operator.sizing import GpuCatalog, SizingError, load_catalog

EXPECTED = {
    "L4": "NVIDIA-L4",
    "A10G": "NVIDIA-A10G",
    "L40S": "NVIDIA-L40S",
    "A100-40GB": "NVIDIA-A100-SXM4-40GB",
    "A100-80GB": "NVIDIA-A100-SXM4-80GB",
    "H100-80GB": "NVIDIA-H100-80GB-HBM3",
    "H200-141GB": "NVIDIA-H200",
    "B200": "NVIDIA-B200",
    "MI300X": "AMD_Instinct_MI300X_OAM",
}


def test_builtin_catalog(catalog: GpuCatalog) -> None:
    assert {g.name: g.node_label for g in catalog.gpus} == EXPECTED
    h100 = catalog.get("H100-80GB")
    assert h100.memory_bytes == 81559 * 2**20
    assert h100.hbm_bandwidth_bytes_per_s == 3.35e12
    assert h100.bf16_dense_tflops == 989.0
    assert h100.fp8 and h100.gpus_per_node == 8
    assert h100.resource_name == "nvidia.com/gpu"
    assert h100.node_label_key == "nvidia.com/gpu.product"
    mi300x = catalog.get("MI300X")
    assert mi300x.resource_name == "amd.com/gpu"
    assert mi300x.node_label_key == "amd.com/gpu.product-name"
    assert not catalog.get("A100-80GB").fp8
    assert catalog.get("L4").gpus_per_node == 8
    costs = [catalog.get(n).relative_cost_per_hour for n in ("L4", "A100-80GB", "H100-80GB")]
    assert costs == sorted(costs)


def test_override_from_file(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(
        "gpus:\n"
        "  - name: h100-80gb\n"  # matched case-insensitively
        "    relative_cost_per_hour: 3.0\n"
        "  - name: RTX-6000-Ada\n"
        "    memory_bytes: 51527024640\n"
        "    hbm_bandwidth_bytes_per_s: 960.0e9\n"
        "    bf16_dense_tflops: 364.0\n"
        "    fp8: true\n"
        "    node_label: NVIDIA-RTX-6000-Ada-Generation\n"
        "    relative_cost_per_hour: 1.5\n"
        "    gpus_per_node: 4\n"
        "    interconnect: pcie\n"
    )
    catalog = load_catalog(path)
    assert catalog.get("H100-80GB").relative_cost_per_hour == 3.0
    assert catalog.get("H100-80GB").memory_bytes == 81559 * 2**20  # untouched fields kept
    assert catalog.get("RTX-6000-Ada").gpus_per_node == 4
    assert len(catalog.gpus) == len(EXPECTED) + 1


def test_replace_from_file(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(
        "replace: true\ngpus:\n  - {name: X1, memory_bytes: 1000000000, "
        "hbm_bandwidth_bytes_per_s: 1.0e11, bf16_dense_tflops: 10, fp8: false, node_label: X1, "
        "relative_cost_per_hour: 1}\n"
    )
    assert load_catalog(path).names() == ["X1"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpus: [{name: New}]\n", "invalid GPU catalog entry"),
        ("gpus: [{name: L4, memory_bytes: -1}]\n", "memory_bytes"),
        ("nothing: here\n", "'gpus' list"),
        ("gpus: [: bad\n", "not valid YAML"),
        ("gpus: [{memory_bytes: 1}]\n", "without a name"),
        ("gpus: [{name: L4, colour: red}]\n", "colour"),
    ],
)
def test_bad_catalog_files(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(text)
    with pytest.raises(SizingError, match=message):
        load_catalog(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SizingError, match="cannot read GPU catalog"):
        load_catalog(tmp_path / "absent.yaml")
