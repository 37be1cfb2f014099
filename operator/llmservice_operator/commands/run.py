"""`llmservice run`: the operator process (leader election, kopf, /healthz, /readyz, /metrics).

Start-up fails fast: bad settings, no credentials, an API server that does not answer or a GPU
catalog that does not load print one line (`llmservice run: error: ...`) and exit 1, so a pod
shows CrashLoopBackOff with the reason in `kubectl logs` instead of looking alive.
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import sys
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubernetes import client

    from ..adapters.health import Health
    from ..adapters.leader import LeaseElector
    from ..adapters.metrics import OperatorMetrics
    from ..settings import OperatorSettings

__all__ = ["add_parser", "run"]

log = logging.getLogger("llmservice.run")


class StartupError(Exception):
    """The operator cannot start; the message says what to change."""


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
        "run",
        help="run the operator",
        description="Run the operator. Settings come from LLMSERVICE_* variables "
        "(see operator/llmservice_operator/settings.py).",
    )
    parser.add_argument(
        "--no-leader-election",
        action="store_true",
        help="act at once, without taking the Lease (only when a single replica runs)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except StartupError as err:
        print(f"llmservice run: error: {err}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    import kopf

    from ..adapters.background import BackgroundIO
    from ..adapters.fence import FencedKube
    from ..adapters.health import Health
    from ..adapters.kube import KubeAdapter
    from ..adapters.metrics import OperatorMetrics
    from ..adapters.service_metrics import ServiceStatusCollector
    from ..arrivals import Wave
    from ..handlers import OperatorState, register
    from ..reconcile import Reconciler

    settings = _settings()
    _configure_logging(settings)
    catalog = _catalog(settings)
    api_client = _connect(settings)
    metrics = OperatorMetrics.create()
    health = Health(stale_after_s=max(60.0, 3 * settings.lease_duration_seconds))
    _serve_http(settings, health, metrics)

    # Unique per process: a container restarted in the same pod must not inherit the lease.
    identity = f"{settings.identity or socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    elector = None
    if settings.leader_election and not args.no_leader_election:
        elector = _elect(settings, api_client, health, identity)
    metrics.leader.set(1)
    health.set_role("leader")

    kube = KubeAdapter(
        api_client, cache_dir=settings.runtime_dir, namespaces=settings.namespace_list()
    )
    # The fence: without the Lease, no reconcile starts (handlers.py) and none writes.
    leading = elector.leading if elector is not None else _always
    background = BackgroundIO()
    wave = Wave()
    state = OperatorState(
        settings=settings,
        metrics=metrics,
        kube=kube,
        background=background,
        reconciler=Reconciler(
            FencedKube(kube, leading),
            catalog,
            settings.prometheus_url,
            metrics,
            background=background,
            operator_namespace=settings.operator_namespace,
            load_test=_load_test_runtime(settings),
            in_wave=wave.active,
            policy=settings.admin_policy,
        ),
        heartbeat=health.beat,
        wave=wave,
        leading=leading,
    )
    # Per-service gauges for the chart's dashboard, read from the bodies at scrape time.
    metrics.registry.register(ServiceStatusCollector(lambda: state.bodies.values()))
    registry = kopf.OperatorRegistry()
    register(registry, state)
    namespaces = settings.namespace_list()
    try:
        kopf.run(
            registry=registry,
            standalone=True,
            clusterwide=not namespaces,
            namespaces=namespaces,
            liveness_endpoint=None,  # ours (adapters/health.py) also answers while standing by
            # Given, or kopf asks getpass for a user name: none exists for a uid with no
            # /etc/passwd entry (the image runs as 10001).
            identity=identity,  # type: ignore[arg-type]  # kopf's NewType of str
        )
    finally:
        health.set_role("stopping")
        metrics.leader.set(0)
        if elector is not None:
            elector.release()
    return 0


def _always() -> bool:
    return True


def _load_test_runtime(settings: OperatorSettings) -> Any:
    """The image and placement of a blue-green preview's load test Job (None: no image known)."""
    from ..render.load_test import LoadTestRuntime

    if not settings.operator_image:
        return None
    return LoadTestRuntime(
        settings.operator_image, settings.operator_image_pull_policy, settings.load_test_pod_spec
    )


def _settings() -> OperatorSettings:
    from pydantic import ValidationError

    from ..settings import OperatorSettings

    try:
        return OperatorSettings()
    except ValidationError as err:
        problems = "; ".join(
            f"LLMSERVICE_{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}"
            if e["loc"]
            else e["msg"]  # a check of several (the lease timing): its message names them
            for e in err.errors()
        )
        raise StartupError(f"bad settings: {problems}") from None


def _configure_logging(settings: OperatorSettings) -> None:
    handler = logging.StreamHandler()
    if settings.log_format == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=settings.log_level, handlers=[handler], force=True)
    # kopf logs "Handler 'llmservice_event' succeeded." at INFO for every LLMService event: a
    # line per watch event that says nothing (our handler only enqueues), and 6% of the
    # operator's CPU while a thousand services arrived. Its warnings and errors still show.
    quiet = settings.log_level.upper() != "DEBUG"
    logging.getLogger("kopf.objects").setLevel(logging.WARNING if quiet else logging.NOTSET)


def _connect(settings: OperatorSettings) -> client.ApiClient:
    """Credentials (in-cluster, else kubeconfig) and one authenticated call to prove them."""
    import urllib3
    from kubernetes import client, config

    from ..adapters.kube import load_kube_config

    try:
        api_client = load_kube_config(settings.api_timeout_seconds)
    except (config.ConfigException, OSError) as err:
        raise StartupError(
            "no Kubernetes credentials: not in a pod with a ServiceAccount token, and no "
            f"usable kubeconfig ($KUBECONFIG or ~/.kube/config): {err}"
        ) from None
    host = api_client.configuration.host
    timeout = settings.api_timeout_seconds
    try:
        review = client.AuthenticationV1Api(api_client).create_self_subject_review(
            client.V1SelfSubjectReview(), _request_timeout=(timeout, timeout)
        )
    except client.ApiException as err:
        raise StartupError(
            f"the API server at {host} refused us: {err.status} {err.reason}"
        ) from None
    except (urllib3.exceptions.HTTPError, OSError) as err:
        reason = getattr(err, "reason", None) or err
        raise StartupError(f"cannot reach the API server at {host}: {reason}") from None
    user = review.status.user_info.username if review.status and review.status.user_info else "?"
    log.info("connected to %s as %s", host, user)
    return api_client


def _catalog(settings: OperatorSettings) -> Any:
    from ..sizing import load_catalog

    try:
        return load_catalog(settings.gpu_catalog)
    except (OSError, ValueError) as err:
        raise StartupError(str(err)) from None


def _serve_http(settings: OperatorSettings, health: Health, metrics: OperatorMetrics) -> None:
    from ..adapters.health import HealthServer
    from ..adapters.ports_file import write_ports

    try:
        shared = settings.metrics_port == settings.health_port != 0
        registry = metrics.registry
        health_server = HealthServer(settings.health_port, health, registry if shared else None)
        health_server.start()
        metrics_port = (
            health_server.port
            if shared
            else HealthServer(settings.metrics_port, health, registry).start().port
        )
        ports = {"health": health_server.port, "metrics": metrics_port}
        write_ports(settings.ports_file, ports)
    except OSError as err:
        raise StartupError(
            f"cannot serve the health/metrics ports ({settings.health_port}, "
            f"{settings.metrics_port}) or write {settings.ports_file}: {err}"
        ) from None
    log.info("serving /healthz, /readyz on :%d and /metrics on :%d", ports["health"], metrics_port)


def _elect(
    settings: OperatorSettings, api_client: client.ApiClient, health: Health, identity: str
) -> LeaseElector:
    from ..adapters.leader import LeaseElector

    elector = LeaseElector(
        _lease_api(api_client),
        settings.lease_name,
        settings.lease_namespace,
        identity,
        settings.lease_timing,
    )
    health.set_role("standby")
    elector.acquire(on_try=health.beat)
    elector.keep_renewing()
    return elector


def _lease_api(api_client: client.ApiClient) -> Any:
    """The Lease calls on a client of their own, as client-go's leader election has: its own
    connections, and no urllib3 retries (the elector tries again every retryPeriod, within its
    deadline; retried inside one call, a hung API server would take 4 request timeouts)."""
    import copy

    from kubernetes import client

    configuration = copy.deepcopy(api_client.configuration)
    configuration.retries = False
    return client.CoordinationV1Api(client.ApiClient(configuration))
