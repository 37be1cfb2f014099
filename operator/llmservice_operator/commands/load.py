"""`llmservice load`: open-loop load against OpenAI-compatible endpoints, with a latency report.

    llmservice load --target http://10.0.0.5:8000 --target http://10.0.0.6:8000 \\
        --rate 4 --duration 120 --prompt-tokens lognormal:800:0.7 --output-tokens 200
    llmservice load --service chat --namespace ml --rate 4 --duration 120

``--service`` sends to the Ready pods behind the LLMService's Service (pod IPs, re-read every
``--refresh`` seconds during the run), in proportion to the number of Ready pods.

Rates and durations are per second of the run's clock; with ``--time-scale S`` (to match
``llmservice sim --sim-time-scale S``) they are simulated seconds and the run takes 1/S of the
wall time, and the report's latencies are simulated seconds too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp

from llmservice_operator.loadgen.client import (
    LoadConfig,
    TargetSource,
    run_load,
    static_targets,
)
from llmservice_operator.loadgen.distributions import LengthDist, parse_length_dist
from llmservice_operator.loadgen.schedule import RateSchedule, load_schedule

from .errors import report

__all__ = ["add_parser", "build_config", "run"]


def _length_distribution(text: str) -> LengthDist:
    """A DIST flag's value; argparse reports the problem as it is (not a function's name)."""
    try:
        return parse_length_dist(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a length distribution: use N, fixed:N, uniform:LOW:HIGH or "
            "lognormal:MEDIAN:SIGMA[:MAX]"
        ) from None


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "load",
        help="send OpenAI-style load and report TTFT/TPOT percentiles",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_where_options(parser.add_argument_group("where to (one of --target or --service)"))
    _add_arrival_options(parser.add_argument_group("arrivals (Poisson)"))
    _add_request_options(parser.add_argument_group("requests"))
    _add_run_options(parser.add_argument_group("run"))


def _add_where_options(where: argparse._ArgumentGroup) -> None:
    where.add_argument(
        "--target",
        action="append",
        metavar="URL",
        help="base URL of a server (repeat for several; requests go round-robin)",
    )
    where.add_argument(
        "--service", metavar="NAME", help="an LLMService: its Ready pods, found in the cluster"
    )
    where.add_argument("--namespace", "-n", default="default", help="of --service")
    where.add_argument(
        "--kubeconfig", help="for --service (default: $KUBECONFIG, ~/.kube/config, in-cluster)"
    )
    where.add_argument(
        "--refresh", type=float, default=2.0, help="seconds between pod list reads (default 2)"
    )
    where.add_argument(
        "--wait-ready",
        type=float,
        default=60.0,
        help="seconds to wait for a first Ready pod of --service (default 60)",
    )


def _add_arrival_options(rate: argparse._ArgumentGroup) -> None:
    rate.add_argument("--rate", type=float, help="requests per second")
    rate.add_argument("--duration", type=float, help="seconds to send for")
    rate.add_argument(
        "--schedule",
        type=Path,
        help="YAML list of {duration_s, rate} segments (instead of --rate/--duration)",
    )
    rate.add_argument("--max-requests", type=int, help="stop sending after this many requests")


def _add_request_options(shape: argparse._ArgumentGroup) -> None:
    shape.add_argument(
        "--prompt-tokens",
        type=_length_distribution,
        default=parse_length_dist("256"),
        metavar="DIST",
        help="N, fixed:N, uniform:LOW:HIGH or lognormal:MEDIAN:SIGMA[:MAX] (default 256)",
    )
    shape.add_argument(
        "--output-tokens",
        type=_length_distribution,
        default=parse_length_dist("128"),
        metavar="DIST",
        help="as --prompt-tokens (default 128); sent as max_tokens with ignore_eos",
    )
    shape.add_argument(
        "--endpoint", choices=("completions", "chat"), default="completions", help="API to call"
    )
    shape.add_argument("--model", help="model name to send (default: the first target's first)")
    shape.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="send the API key in this environment variable as 'Authorization: Bearer' (as "
        "clients of a service with serving.apiKeySecretRef do; never on the command line)",
    )
    shape.add_argument(
        "--no-ignore-eos",
        dest="ignore_eos",
        action="store_false",
        help="let the server stop early instead of asking for exactly the drawn length",
    )


def _add_run_options(run_group: argparse._ArgumentGroup) -> None:
    run_group.add_argument("--seed", type=int, default=0, help="seed for arrivals and lengths")
    run_group.add_argument(
        "--time-scale", type=float, default=1.0, help="run S times faster (match the simulator)"
    )
    run_group.add_argument(
        "--timeout", type=float, default=600.0, help="seconds one request may take (default 600)"
    )
    run_group.add_argument(
        "--drain-timeout",
        type=float,
        default=600.0,
        help="seconds to wait for in-flight requests after the last send (default 600)",
    )
    run_group.add_argument(
        "--output", choices=("text", "json"), default="text", help="report format"
    )


def build_config(args: argparse.Namespace) -> LoadConfig:
    """The run's configuration; ValueError with a readable message when the flags disagree."""
    if args.schedule is not None:
        if args.rate is not None or args.duration is not None:
            raise ValueError("give either --schedule or --rate/--duration, not both")
        schedule = load_schedule(args.schedule)
    else:
        if args.rate is None or args.duration is None:
            raise ValueError("give --rate and --duration (or --schedule FILE)")
        schedule = RateSchedule.constant(args.rate, args.duration)
    return LoadConfig(
        schedule=schedule,
        prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens,
        endpoint=args.endpoint,
        model=args.model,
        max_requests=args.max_requests,
        seed=args.seed,
        time_scale=args.time_scale,
        request_timeout_s=args.timeout,
        drain_timeout_s=args.drain_timeout,
        ignore_eos=args.ignore_eos,
        api_key=_api_key(args.api_key_env),
    )


def _api_key(variable: str | None) -> str | None:
    if variable is None:
        return None
    value = os.environ.get(variable)
    if not value:
        raise ValueError(f"--api-key-env {variable}: the variable is not set or empty")
    return value


def run(args: argparse.Namespace) -> int:
    try:
        config = build_config(args)
        if (args.target is None) == (args.service is None):
            raise ValueError("give --target URL (repeatable) or --service NAME")
        if args.refresh <= 0:
            raise ValueError("--refresh must be > 0")
    except OSError as exc:
        return report("load", f"cannot read {exc.filename}: {exc.strerror}")
    except ValueError as exc:
        return report("load", exc)
    if args.target is not None:
        try:
            targets = static_targets(args.target)
        except ValueError as exc:
            return report("load", exc)
        return _run(args, config, targets)
    return _run_service(args, config)


def _run_service(args: argparse.Namespace, config: LoadConfig) -> int:
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException

    from llmservice_operator.loadgen.targets import PodTargets

    try:
        pods = PodTargets.from_kubeconfig(
            args.service, args.namespace, args.kubeconfig, refresh_s=args.refresh
        )
        ready = pods.wait_ready(args.wait_ready)
    except (ApiException, ConfigException, OSError, TimeoutError, ValueError) as exc:
        return report("load", f"{args.namespace}/{args.service}: {exc}")
    print(
        f"llmservice load: {len(ready)} Ready pods of {args.namespace}/{args.service}",
        file=sys.stderr,
    )
    with pods:
        return _run(args, config, pods)


def _run(args: argparse.Namespace, config: LoadConfig, targets: TargetSource) -> int:
    try:
        result = asyncio.run(run_load(config, targets))
    except (
        OSError,
        ValueError,
        aiohttp.ClientError,
    ) as exc:  # e.g. the first target's /v1/models is unreachable
        return report("load", exc)
    print(result.to_json() if args.output == "json" else result.to_text(), end="")
    return 0 if result.completed or not result.requests else 1
