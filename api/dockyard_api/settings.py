"""Facade settings, from ``DOCKYARD_API_*`` environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ApiSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DOCKYARD_API_", extra="ignore")

    host: str = Field(default="127.0.0.1", description="address to listen on")
    port: int = Field(default=8080, ge=0, le=65535, description="port to listen on")
    kubeconfig: str | None = Field(
        default=None, description="kubeconfig path; unset: KUBECONFIG, then in-cluster config"
    )
    readiness_timeout_seconds: float = Field(default=2.0, gt=0, description="API-server check budget")
