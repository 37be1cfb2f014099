"""Operator settings from the environment (LLMSERVICE_*), e.g. set by the Helm chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .adapters.ports_file import PORTS_FILE_NAME
from .api.policy import AdminPolicy, parse_list
from .lease_timing import LeaseTiming, derived, timing_problem

__all__ = ["OperatorSettings"]


class OperatorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LLMSERVICE_", frozen=True)

    namespaces: str = Field(
        default="", description="Comma-separated namespaces to watch; empty watches all."
    )
    prometheus_url: str = "http://prometheus.monitoring.svc:9090"
    gpu_catalog: Path | None = Field(default=None, description="YAML file overriding the catalog.")
    log_format: Literal["text", "json"] = "text"
    log_level: str = "INFO"
    reconcile_interval_seconds: float = Field(
        default=300.0,
        gt=0,
        description="The resync: a service that nothing reconciled for this long is reconciled "
        "(a safety net; changes and due times wake a service at once).",
    )
    workers: int = Field(
        default=4, ge=1, le=64, description="Services reconciled at once (one worker per key)."
    )
    health_port: int = Field(
        default=8080, ge=0, le=65535, description="/healthz and /readyz; 0 picks a free port."
    )
    metrics_port: int = Field(
        default=8081, ge=0, le=65535, description="/metrics; 0 picks a free port."
    )
    runtime_dir: Path = Field(
        default=Path("/tmp"),
        description="Writable directory: the ports in use (for exec probes), discovery cache.",
    )
    api_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="Start-up gives up when the API server is not reached in this long, and "
        "every API call when it cannot connect in this long.",
    )
    operator_namespace: str | None = Field(
        default=None,
        description="The operator's own namespace (the chart sets it): the NetworkPolicies it "
        "renders let it in, for smoke tests and pod scrapes.",
    )
    operator_image: str = Field(
        default="",
        description="The operator's own image (the chart sets it): a blue-green preview's load "
        "test Job runs it; empty: no load test.",
    )
    operator_image_pull_policy: str = "IfNotPresent"
    load_test_pod_spec: dict[str, Any] = Field(
        default_factory=dict,
        description="JSON merged into the load test Job's pod spec (the chart gives the "
        "operator's own hostNetwork, nodeSelector and tolerations).",
    )
    leader_election: bool = True
    lease_name: str = "llmservice-operator"
    lease_namespace: str = "default"
    lease_duration_seconds: float = Field(
        default=15.0,
        ge=3,
        description="A standby takes the Lease after seeing it unchanged for this long.",
    )
    lease_renew_deadline_seconds: float | None = Field(
        default=None,
        gt=0,
        description="The leader acts only this long after its last renewal was sent; shorter "
        "than the lease duration. Unset: 2/3 of it (client-go's 10 s of 15 s).",
    )
    lease_retry_period_seconds: float | None = Field(
        default=None,
        gt=0,
        description="Time between tries to take or renew the Lease (jittered). Unset: 2/15 of "
        "the lease duration (client-go's 2 s of 15 s).",
    )
    identity: str = Field(
        default="", description="Leader-election identity prefix (the pod name in the chart)."
    )
    policy_allowed_image_prefixes: str = Field(
        default="",
        description="Comma-separated prefixes every image a spec runs must start with (the "
        "engine's, the endpoint picker's); empty: any image.",
    )
    policy_forbidden_engine_flags: str = Field(
        default="--trust-remote-code",
        description="Comma-separated vLLM flags a spec may not pass in engine.extraArgs.",
    )

    @model_validator(mode="after")
    def _policy_parses(self) -> OperatorSettings:
        _ = self.admin_policy
        return self

    @property
    def admin_policy(self) -> AdminPolicy:
        """The admin policy (api/policy.py); a bad list fails the start."""
        return AdminPolicy.of(
            parse_list(
                self.policy_allowed_image_prefixes, "LLMSERVICE_POLICY_ALLOWED_IMAGE_PREFIXES"
            ),
            parse_list(
                self.policy_forbidden_engine_flags, "LLMSERVICE_POLICY_FORBIDDEN_ENGINE_FLAGS"
            ),
        )

    @model_validator(mode="after")
    def _lease_timing_holds(self) -> OperatorSettings:
        problem = timing_problem(
            *derived(
                self.lease_duration_seconds,
                self.lease_renew_deadline_seconds,
                self.lease_retry_period_seconds,
            )
        )
        if problem is not None:
            raise ValueError(f"LLMSERVICE_LEASE_*: {problem}")
        return self

    @property
    def lease_timing(self) -> LeaseTiming:
        """The leader election's durations (lease_timing.py), checked at start."""
        return LeaseTiming.for_lease(
            self.lease_duration_seconds,
            self.lease_renew_deadline_seconds,
            self.lease_retry_period_seconds,
        )

    @property
    def ports_file(self) -> Path:
        return self.runtime_dir / PORTS_FILE_NAME

    def namespace_list(self) -> list[str]:
        return [n.strip() for n in self.namespaces.split(",") if n.strip()]
