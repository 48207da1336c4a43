"""Facade settings, from ``DOCKYARD_API_*`` environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from dockyard_api.modelstore import default_root

MiB = 1024 * 1024
GiB = 1024 * MiB


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

    # --- chunked model import (SPEC.md §1 to §3) ---
    model_store: Path = Field(
        default_factory=default_root,
        description="model store directory, shared with the operator (the Helm chart mounts a PVC at "
        "/var/lib/dockyard/model-store); default <checkout>/.dockyard/model-store",
    )
    max_chunk_bytes: int = Field(default=64 * MiB, ge=1, description="largest chunk accepted (413 above)")
    max_file_bytes: int = Field(default=200 * GiB, ge=1, description="largest fileSize a session may declare")
    session_lifetime_seconds: float = Field(
        default=24 * 3600, gt=0, description="an import session expires this long after its start"
    )
    sweep_interval_seconds: float = Field(
        default=60, ge=0, description="how often expired sessions are deleted (0: never, e.g. in tests)"
    )
    fsync_chunks: bool = Field(
        default=True, description="flush each chunk to disk before acknowledging it (survives a node crash)"
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
