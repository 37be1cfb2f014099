"""``llmservice-dev``: the development tooling's command (``llmservice-dev cluster up``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .localcluster.binaries import BinariesError, ensure_binaries
from .localcluster.cluster import ClusterError, LocalCluster
from .localcluster.pki import PKIError

__all__ = ["main"]

PROG = "llmservice-dev"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Development tooling of llmservice-operator (never shipped in the product).",
    )
    commands = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    cluster = commands.add_parser(
        "cluster",
        help="the local control plane: etcd, kube-apiserver, controllers, kwok GPU nodes",
        description="A local Kubernetes control plane with fake GPU nodes (kwok).",
    )
    cluster.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="cluster state directory (default: $LLMSERVICE_CLUSTER_DIR or "
        "$LLMSERVICE_CACHE/cluster)",
    )
    sub = cluster.add_subparsers(dest="command", required=True, metavar="ACTION")
    up = sub.add_parser("up", help="build binaries if needed, start (or reuse) the cluster")
    up.add_argument("--timeout", type=float, default=90.0, help="start-up timeout in seconds")
    sub.add_parser("down", help="stop the cluster and remove its state")
    sub.add_parser("status", help="exit 0 when the cluster is up and healthy")
    sub.add_parser("build", help="build the pinned binaries (hack/build-binaries.sh)")
    sub.add_parser("kubeconfig", help="print the admin kubeconfig path (exit 1 when down)")
    images = commands.add_parser(
        "images",
        help="build the local images (Debian base, pause, operator, vLLM) with docker",
        description="Build what is missing, with Debian's docker.io and no registry; prints "
        "each image's size and build time.",
    )
    images.add_argument(
        "--no-vllm", action="store_true", help="skip the vLLM serving image (never run locally)"
    )
    return parser


def _images(args: argparse.Namespace) -> int:
    from .images import describe, ensure_images

    print(describe(ensure_images(with_vllm=not args.no_vllm)))
    return 0


def _cluster(args: argparse.Namespace) -> int:
    if args.command == "build":
        print(ensure_binaries())
        return 0
    cluster = LocalCluster(args.state_dir, startup_timeout=getattr(args, "timeout", 90.0))
    if args.command == "up":
        started = cluster.up()
        print(f"local cluster up: {started.server} (Kubernetes {started.k8s_version})")
        print(f"binaries:   {started.bin_dir}")
        print(f"logs:       {cluster.log_dir}")
        print(f"kubeconfig: {started.kubeconfig}")
        print(f"  export KUBECONFIG={started.kubeconfig} PATH={started.bin_dir}:$PATH")
        return 0
    if args.command == "down":
        cluster.down()
        print(f"local cluster down (removed {cluster.state_dir})")
        return 0
    info = cluster.info()
    if args.command == "kubeconfig":
        if info is None:
            return 1
        print(info.kubeconfig)
        return 0
    if info is None:
        print(f"local cluster is not running (state dir {cluster.state_dir})")
        return 1
    print(f"local cluster up: {info.server} (Kubernetes {info.k8s_version})")
    print(f"kubeconfig: {info.kubeconfig}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from .images import ImageError

    args = _parser().parse_args(argv)
    try:
        return _images(args) if args.group == "images" else _cluster(args)
    except (BinariesError, ClusterError, PKIError, ImageError) as exc:
        print(f"{PROG} {args.group}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
