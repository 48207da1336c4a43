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
    access_log: bool = Field(
        default=False,
        description="log one line per request (uvicorn's access log; it costs about 0.3 ms of CPU per request, "
        "see docs/benchmarks.md). Deployments are recorded on the objects themselves (requested-by annotation, "
        "Events, dock jobs) and the API server's audit log",
    )
    readiness_timeout_seconds: float = Field(default=2.0, gt=0, description="API-server check budget")
    api_key_cache_seconds: float = Field(
        default=5.0,
        ge=0,
        description="how long a verified API key is cached: a revocation reaches other replicas within it",
    )
    token_cache_seconds: float = Field(default=10.0, ge=0, description="how long a TokenReview result is cached")
    last_used_interval_seconds: float = Field(
        default=60.0, ge=0, description="an API key's last-used time is written at most this often"
    )
    sync_deploy_timeout_seconds: float = Field(
        default=120.0,
        gt=0,
        le=3600,
        description="how long a synchronous tool deploy (isAsync: false) waits for SUCCESS or FAILED before it "
        "answers with the job still IN_PROGRESS",
    )
    sync_deploy_poll_seconds: float = Field(
        default=0.25, gt=0, le=10, description="how often a synchronous tool deploy reads the job's progress"
    )
    watch_models: bool = Field(
        default=True,
        description="keep a watch-fed cache of Models so that a model deploy costs one API call; a cache miss, or "
        "a Model the cache does not show as ReadyToDeploy, is read from the API server",
    )
