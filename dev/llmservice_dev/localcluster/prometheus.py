"""Prometheus for the local cluster: Debian's ``prometheus`` binary scraping the simulators
behind LLMService pods, with the production scrape job's relabelling (docs/prometheus.md).

Discovery: production uses ``kubernetes_sd_configs`` (role pod). Debian builds Prometheus
without Kubernetes discovery (its changelog: "Kubernetes support has been completely removed"),
so locally the simulator runner, which watches the pods through the real API server anyway,
serves the same target groups (``__meta_kubernetes_pod_*`` labels, one target per container
port, as Prometheus's pod role builds them) on ``/sd`` for ``http_sd_configs``; the relabel
rules that follow are the production ones, unchanged.

:func:`scrape_job` builds the job; :func:`query` and :func:`targets` are small read helpers for
tests and the demo; :class:`PrometheusServer` is a second Prometheus a test can stop and start.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from .ports import free_port

__all__ = [
    "JOB_NAME",
    "PrometheusError",
    "PrometheusServer",
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


def prometheus_config(
    *, runner_url: str, interval: str = DEFAULT_SCRAPE_INTERVAL, namespaces: Sequence[str] = ()
) -> str:
    """prometheus.yml for the local cluster (targets from the simulator runner); with
    ``namespaces``, only the pods of those namespaces are scraped."""
    _seconds(interval)
    job = scrape_job(interval=interval, discovery=runner_sd(runner_url, interval))
    if namespaces:
        keep = {
            "source_labels": ["__meta_kubernetes_namespace"],
            "regex": "|".join(namespaces),
            "action": "keep",
        }
        job["relabel_configs"].insert(0, keep)
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [job],
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


class PrometheusServer:
    """A Prometheus of one's own next to the cluster's: the same scrape job (kept to
    ``namespaces``), its own port and data directory, stopped and started at will.

    For tests of a Prometheus outage: stopping the cluster's Prometheus would also blind every
    other test using the cluster meanwhile. The port stays the same across restarts (the URL
    handed to an operator keeps working) and so does the data (the TSDB replays its WAL).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        runner_url: str = "",
        namespaces: Sequence[str] = (),
        interval: str = DEFAULT_SCRAPE_INTERVAL,
        config: str | None = None,
    ) -> None:
        """Scrapes the runner's pods (``runner_url``), or whatever ``config`` (a whole
        prometheus.yml) says."""
        self.data_dir = data_dir
        self.port = free_port()
        self._config = config or prometheus_config(
            runner_url=runner_url, interval=interval, namespaces=namespaces
        )
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.data_dir / "prometheus.log"

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 60) -> None:
        """Start (or restart) it and wait until it is ready."""
        if self.running():
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "prometheus.yml"
        config.write_text(self._config)
        args = prometheus_args(config, self.data_dir / "tsdb", self.port)
        with self.log.open("ab") as log:
            self._proc = subprocess.Popen(
                [str(find_prometheus()), *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise PrometheusError(
                    f"prometheus exited with code {self._proc.returncode}; see {self.log}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise PrometheusError(f"prometheus not ready after {timeout:g}s; see {self.log}")
            time.sleep(0.2)

    def stop(self, timeout: float = 20) -> None:
        """Stop it (SIGTERM, then SIGKILL after ``timeout``); the data stays."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


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
