"""``python -m llmservice_operator.localcluster up|down|status|build``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .binaries import BinariesError, ensure_binaries
from .cluster import ClusterError, LocalCluster
from .pki import PKIError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m llmservice_operator.localcluster",
        description="Local Kubernetes control plane with fake GPU nodes (kwok).",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="cluster state directory (default: $LLMSERVICE_CLUSTER_DIR or "
        "$LLMSERVICE_CACHE/cluster)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="build binaries if needed, start (or reuse) the cluster")
    up.add_argument("--timeout", type=float, default=90.0, help="start-up timeout in seconds")
    sub.add_parser("down", help="stop the cluster and remove its state")
    sub.add_parser("status", help="exit 0 when the cluster is up and healthy")
    sub.add_parser("build", help="build the pinned binaries (hack/build-binaries.sh)")
    sub.add_parser("kubeconfig", help="print the admin kubeconfig path (exit 1 when down)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "build":
            print(ensure_binaries())
            return 0
        cluster = LocalCluster(args.state_dir, startup_timeout=getattr(args, "timeout", 90.0))
        if args.command == "up":
            info = cluster.up()
            print(f"local cluster up: {info.server} (Kubernetes {info.k8s_version})")
            print(f"binaries:   {info.bin_dir}")
            print(f"logs:       {cluster.log_dir}")
            print(f"kubeconfig: {info.kubeconfig}")
            print(f"  export KUBECONFIG={info.kubeconfig} PATH={info.bin_dir}:$PATH")
            return 0
        if args.command == "down":
            cluster.down()
            print(f"local cluster down (removed {cluster.state_dir})")
            return 0
        info_or_none = cluster.info()
        if args.command == "kubeconfig":
            if info_or_none is None:
                return 1
            print(info_or_none.kubeconfig)
            return 0
        if info_or_none is None:
            print(f"local cluster is not running (state dir {cluster.state_dir})")
            return 1
        print(f"local cluster up: {info_or_none.server} (Kubernetes {info_or_none.k8s_version})")
        print(f"kubeconfig: {info_or_none.kubeconfig}")
        return 0
    except (BinariesError, ClusterError, PKIError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
