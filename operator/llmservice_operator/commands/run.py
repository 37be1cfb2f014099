"""`llmservice run`: the operator process (leader election, kopf, /healthz, /metrics)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
from typing import Any

__all__ = ["add_parser", "run"]


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "run", help="run the operator", description="Settings come from LLMSERVICE_* variables."
    )
    parser.add_argument("--no-leader-election", action="store_true")


def run(args: argparse.Namespace) -> int:
    import kopf
    from prometheus_client import start_http_server

    from ..adapters.kube import load_kube_config
    from ..adapters.leader import LeaseElector
    from ..adapters.metrics import OperatorMetrics
    from ..handlers import OperatorState, register
    from ..settings import OperatorSettings

    settings = OperatorSettings()
    handler = logging.StreamHandler()
    if settings.log_format == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=settings.log_level, handlers=[handler], force=True)

    metrics = OperatorMetrics.create()
    if settings.metrics_port:
        start_http_server(settings.metrics_port, registry=metrics.registry)
    if settings.leader_election and not args.no_leader_election:
        identity = settings.identity or f"{socket.gethostname()}-{os.getpid()}"
        elector = LeaseElector(
            load_kube_config(),
            settings.lease_name,
            settings.lease_namespace,
            identity,
            settings.lease_duration_seconds,
        )
        elector.acquire()
        elector.keep_renewing()

    registry = kopf.OperatorRegistry()
    register(registry, OperatorState(settings=settings, metrics=metrics))
    namespaces = settings.namespace_list()
    kopf.run(
        registry=registry,
        standalone=True,
        clusterwide=not namespaces,
        namespaces=namespaces,
        # Port 0 turns the endpoint off (kopf would read it as its default, 80).
        liveness_endpoint=(
            f"http://0.0.0.0:{settings.health_port}/healthz" if settings.health_port else None
        ),
    )
    return 0
