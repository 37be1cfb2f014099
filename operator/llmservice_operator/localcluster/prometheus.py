"""Prometheus for the local cluster: Debian's ``prometheus`` binary scraping the simulators
behind LLMService pods, with the production scrape job's relabelling (docs/prometheus.md).

Discovery: production uses ``kubernetes_sd_configs`` (role pod). Debian builds Prometheus
without Kubernetes discovery (its changelog: "Kubernetes support has been completely removed"),
so locally the simulator runner, which watches the pods through the real API server anyway,
serves the same target groups (``__meta_kubernetes_pod_*`` labels, one target per container
port, as Prometheus's pod role builds them) on ``/sd`` for ``http_sd_configs``; the relabel
rules that follow are the production ones, unchanged.

:func:`scrape_job` builds the job; :func:`query` and :func:`targets` are small read helpers for
tests and the demo.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "JOB_NAME",
    "PrometheusError",
    "find_prometheus",
    "kubernetes_sd",
    "runner_sd",
    "prometheus_args",
    "prometheus_config",
    "query",
    "scrape_job",
    "targets",
]

JOB_NAME = "llmservice-vllm"
SCRAPE_INTERVAL_ENV = "LLMSERVICE_PROMETHEUS_SCRAPE_INTERVAL"
DEFAULT_SCRAPE_INTERVAL = "1s"


class PrometheusError(RuntimeError):
    """Prometheus is missing, or a query failed."""


def find_prometheus() -> Path:
    """The ``prometheus`` binary (Debian's package installs /usr/bin/prometheus)."""
    found = shutil.which("prometheus")
    if found is None:
        raise PrometheusError(
            "the prometheus binary is not installed: run `make install-system` "
            "(or `apt-get install prometheus`)"
        )
    return Path(found).resolve()


def kubernetes_sd() -> dict[str, Any]:
    """Production discovery: every LLMService pod, through the API server (in-cluster)."""
    return {
        "kubernetes_sd_configs": [
            {
                "role": "pod",
                # Server-side filter: only LLMService pods are listed and watched.
                "selectors": [{"role": "pod", "label": "llmservice.dev/service"}],
            }
        ]
    }


def runner_sd(runner_url: str, interval: str = DEFAULT_SCRAPE_INTERVAL) -> dict[str, Any]:
    """Local discovery: the simulator runner's ``/sd`` (the pod role's target groups)."""
    return {"http_sd_configs": [{"url": f"{runner_url}/sd", "refresh_interval": interval}]}


def scrape_job(*, interval: str = "15s", discovery: dict[str, Any] | None = None) -> dict[str, Any]:
    """The scrape job for every LLMService pod: one target per pod, at podIP:containerPort.

    ``discovery`` defaults to :func:`kubernetes_sd` (production). Only Running pods that carry
    ``llmservice.dev/service`` and declare a container port named ``http`` are scraped; each
    series gets the labels ``namespace``, ``pod``, ``llmservice`` and ``revision`` that the
    operator's queries select on.
    """
    return {
        "job_name": JOB_NAME,
        "scrape_interval": interval,
        "scrape_timeout": interval if _seconds(interval) < 10 else "10s",
        "metrics_path": "/metrics",
        **(discovery if discovery is not None else kubernetes_sd()),
        "relabel_configs": [
            {
                "source_labels": ["__meta_kubernetes_pod_labelpresent_llmservice_dev_service"],
                "regex": "true",
                "action": "keep",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_phase"],
                "regex": "Running",
                "action": "keep",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                "regex": "http",
                "action": "keep",
            },
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {
                "source_labels": ["__meta_kubernetes_pod_label_llmservice_dev_service"],
                "target_label": "llmservice",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_label_llmservice_dev_revision"],
                "target_label": "revision",
            },
        ],
    }


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    for suffix in ("ms", "s", "m", "h"):
        if duration.endswith(suffix):
            try:
                return float(duration[: -len(suffix)]) * units[suffix]
            except ValueError:
                break
    raise ValueError(f"{duration!r} is not a Prometheus duration such as 1s or 15s")


def prometheus_config(*, runner_url: str, interval: str = DEFAULT_SCRAPE_INTERVAL) -> str:
    """prometheus.yml for the local cluster (targets from the simulator runner)."""
    _seconds(interval)
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [
            scrape_job(interval=interval, discovery=runner_sd(runner_url, interval))
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)


def prometheus_args(config_file: Path, data_dir: Path, port: int) -> list[str]:
    return [
        f"--config.file={config_file}",
        f"--storage.tsdb.path={data_dir}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1d",
        "--web.enable-lifecycle",
        "--log.level=warn",
    ]


def _get(url: str, timeout: float) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise PrometheusError(f"{url}: HTTP {exc.code}: {exc.read()[:500]!r}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise PrometheusError(f"{url}: {exc}") from exc
    if body.get("status") != "success":
        raise PrometheusError(f"{url}: {body.get('error', body)}")
    return body["data"]


def query(url: str, promql: str, *, at: float | None = None, timeout: float = 10) -> list[Any]:
    """An instant query's result vector (``[{"metric": {...}, "value": [t, "v"]}, ...]``)."""
    params = {"query": promql}
    if at is not None:
        params["time"] = f"{at:.3f}"
    data = _get(f"{url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout)
    result = data.get("result") or []
    if data.get("resultType") == "scalar":
        return [{"metric": {}, "value": result}]
    return list(result)


def targets(url: str, *, timeout: float = 10) -> list[dict[str, Any]]:
    """The active targets of the LLMService scrape job."""
    data = _get(f"{url}/api/v1/targets?state=active", timeout)
    return [t for t in data.get("activeTargets", []) if t.get("scrapePool") == JOB_NAME]
