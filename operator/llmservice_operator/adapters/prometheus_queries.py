"""Prometheus instant queries, for the autoscaler and rollout analysis.

Bounded (adapters/bounded_http.py): Prometheus evaluates a query for at most ``timeout_seconds``
(its ``timeout`` parameter), and its answer must be in within 2 s more and be at most
PROMETHEUS_MAX_BYTES: a tenant writes queries (``arrivalRateQuery``, analysis checks), and one
can select every series Prometheus has. The whole answer goes to
:func:`~llmservice_operator.rollout.parse_prometheus_response`, whatever its ``resultType``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from urllib.parse import urlencode

from ..rollout import QueryResult, ResolvedCheck, parse_prometheus_response
from .bounded_http import ERRORS, Limits, ReadRefused, open_url

__all__ = ["PROMETHEUS_MAX_BYTES", "PrometheusAdapter"]

#: One answer. The autoscaler's batch at 1,000 services of 3 pods is 3,000 series of about
#: 150 bytes (450 KiB) per query; 4 MiB holds about 27,000. Parsed, JSON takes several times
#: its size in memory, and the operator's limit is 512 MiB.
PROMETHEUS_MAX_BYTES = 4 * 1024 * 1024
#: Beyond the query's own timeout: the connection, and the answer's way back.
_SLACK_S = 2.0


class PrometheusAdapter:
    def __init__(
        self, url: str, timeout_seconds: float = 10.0, *, max_bytes: int = PROMETHEUS_MAX_BYTES
    ) -> None:
        self._url = url.rstrip("/")
        self._timeout = timeout_seconds
        # Bounded, because a reconcile waits for it (no retries: the next evaluation is one).
        self._limits = Limits(max_bytes, timeout_seconds + _SLACK_S, _SLACK_S)

    def query(self, promql: str) -> QueryResult:
        """One instant query: its series, or an error message (errors are not failures)."""
        form = urlencode({"query": promql, "timeout": f"{self._timeout:g}s"}).encode()
        try:
            with open_url(
                "POST",
                f"{self._url}/api/v1/query",
                self._limits,
                body=form,
                headers={"Content-Type": "application/x-www-form-urlencoded"},
                verify_tls=False,
            ) as response:
                status, raw = response.status, response.read()
        except ReadRefused as err:
            return f"Prometheus at {self._url}: {err}"
        except ERRORS as err:
            return f"Prometheus at {self._url} did not answer: {err}"
        try:
            payload = json.loads(raw)
        except ValueError:
            return f"Prometheus at {self._url} answered HTTP {status}, not JSON: {raw[:200]!r}"
        if not isinstance(payload, dict):
            return f"Prometheus at {self._url} answered HTTP {status}, not a JSON object"
        # An error's answer (4xx, 5xx) is JSON too: its errorType and error make the message.
        return parse_prometheus_response(payload)

    def measure(self, checks: Sequence[ResolvedCheck]) -> dict[str, QueryResult]:
        results: dict[str, QueryResult] = {}
        for check in checks:
            if check.error is not None:
                continue
            results[check.name] = self.query(check.query)
        return results
