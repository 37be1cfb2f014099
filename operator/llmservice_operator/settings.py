"""Operator settings from the environment (LLMSERVICE_*), e.g. set by the Helm chart."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

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
    reconcile_interval_seconds: float = Field(default=10.0, gt=0)
    workers: int = Field(
        default=4, ge=1, le=64, description="Services reconciled at once (one worker per key)."
    )
    health_port: int = 8080
    metrics_port: int = 8081
    leader_election: bool = True
    lease_name: str = "llmservice-operator"
    lease_namespace: str = "default"
    lease_duration_seconds: float = 15.0
    identity: str = ""

    def namespace_list(self) -> list[str]:
        return [n.strip() for n in self.namespaces.split(",") if n.strip()]
