"""Operator settings, from ``DOCKYARD_OPERATOR_*`` environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class OperatorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DOCKYARD_OPERATOR_", extra="ignore")

    health_host: str = Field(default="127.0.0.1", description="address of /healthz and /readyz")
    health_port: int = Field(default=8081, ge=0, le=65535, description="port of /healthz and /readyz")
    kubeconfig: str | None = Field(default=None, description="unset: KUBECONFIG, then in-cluster")
