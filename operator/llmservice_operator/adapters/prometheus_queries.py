"""Prometheus queries for rollout analysis (prometheus-api-client)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from ..rollout import QueryResult, ResolvedCheck, parse_prometheus_response

__all__ = ["PrometheusAdapter"]

log = logging.getLogger(__name__)


class PrometheusAdapter:
    def __init__(self, url: str, timeout_seconds: float = 10.0) -> None:
        self._url = url
        # Bounded, because a reconcile waits for it: the library's default retries with
        # backoff and no client timeout would stall every worker while Prometheus is down.
        self._client = PrometheusConnect(
            url=url,
            disable_ssl=True,
            retry=Retry(total=1, backoff_factor=0),
            timeout=(2, timeout_seconds + 2),  # type: ignore[arg-type,unused-ignore]
        )
        self._timeout = timeout_seconds

    def query(self, promql: str) -> QueryResult:
        """One instant query: its series, or an error message (errors are not failures)."""
        try:
            result = self._client.custom_query(
                query=promql, params={"timeout": f"{self._timeout:g}s"}
            )
        except (PrometheusApiClientException, requests.RequestException, ValueError) as err:
            return f"Prometheus at {self._url} did not answer: {err}"
        payload = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return parse_prometheus_response(payload)

    def measure(self, checks: Sequence[ResolvedCheck]) -> dict[str, QueryResult]:
        results: dict[str, QueryResult] = {}
        for check in checks:
            if check.error is not None:
                continue
            results[check.name] = self.query(check.query)
        return results
