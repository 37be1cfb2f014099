"""``python -m llmservice_dev.simrunner``: run the simulator runner until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from kubernetes import config

from .runner import Runner, RunnerConfig

TIME_SCALE_ENV = "LLMSERVICE_SIM_TIME_SCALE"
DEFAULT_TIME_SCALE = 10.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m llmservice_dev.simrunner",
        description="Give every LLMService pod on kwok nodes a live `llmservice sim` process.",
    )
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), help="kubeconfig")
    parser.add_argument(
        "--port", type=int, default=None, help="loopback port for /healthz and /pods (0: any)"
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=float(os.environ.get(TIME_SCALE_ENV) or DEFAULT_TIME_SCALE),
        help=f"simulators run S x faster than the wall clock (${TIME_SCALE_ENV}, default "
        f"{DEFAULT_TIME_SCALE:g})",
    )
    parser.add_argument(
        "--log-dir", type=Path, default=Path("sims"), help="one log file per simulator here"
    )
    parser.add_argument(
        "--node-annotation",
        default="kwok.x-k8s.io/node=fake",
        help="manage pods on nodes with this annotation (KEY=VALUE)",
    )
    parser.add_argument("--stop-grace", type=float, default=2.0, help="SIGTERM to SIGKILL, s")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not (args.time_scale > 0 and math.isfinite(args.time_scale)):
        print(f"simrunner: the time scale must be positive, got {args.time_scale}", file=sys.stderr)
        return 2
    key, sep, value = args.node_annotation.partition("=")
    if not sep or not key:
        print("simrunner: --node-annotation wants KEY=VALUE", file=sys.stderr)
        return 2
    api_client = config.new_client_from_config(config_file=args.kubeconfig)  # type: ignore[no-untyped-call]
    runner = Runner(
        api_client,
        RunnerConfig(
            time_scale=args.time_scale,
            log_dir=args.log_dir,
            node_annotation=(key, value),
            stop_grace_s=args.stop_grace,
        ),
    )
    asyncio.run(runner.run(args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
