"""Facade settings, from ``DOCKYARD_API_*`` environment variables."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from dockyard_core.storesettings import ModelStoreSettings

MiB = 1024 * 1024
GiB = 1024 * MiB


class ApiSettings(ModelStoreSettings):
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
    log_format: Literal["plain", "json"] = Field(
        default="plain", description="plain text, or one JSON object per line (with request_id)"
    )
    log_level: str = Field(default="INFO", description="root log level")
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

    max_json_body_bytes: int = Field(
        default=1 * MiB,
        ge=1024,
        description="largest request body accepted, other than a chunk upload (multipart; max_chunk_bytes): 413 "
        "above it, answered from the Content-Length or once the streamed body passes it, without reading on",
    )
    kube_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="deadline of one Kubernetes API call of the facade: an API server that does not answer in "
        "time (restarting, or its etcd is) makes the request a 503 with Retry-After",
    )

    # --- chunked model import (docs/public-api.md, 'Limits and settings') ---
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

    # --- conversation store: sessions, messages, usage statistics, rate limits (api/dockyard_api/store/) ---
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the conversation database, e.g. postgresql+asyncpg://user:pass@host/db "
        "(several facade replicas need PostgreSQL); unset: a SQLite file <model store>/dockyard.db (one replica)",
    )
    database_pool_size: int = Field(
        default=32,
        ge=1,
        le=500,
        description="PostgreSQL connections each replica keeps open: about the turns it runs at once (beyond "
        "them a transaction opens and closes a connection of its own, a new server process each; a quarter more "
        "are opened for a burst). Mind the server's max_connections across replicas",
    )
    history_messages: int = Field(
        default=20, ge=0, le=1000, description="at most this many earlier messages of a session go to the model"
    )
    history_max_chars: int = Field(
        default=24_000, ge=0, description="the history sent to the model is cut (oldest first) to this many characters"
    )
    session_busy_wait_seconds: float = Field(
        default=2.0, ge=0, le=60, description="a turn on a busy session waits this long for it, then answers 409"
    )
    turn_lease_seconds: float = Field(
        default=900.0, gt=0, description="a turn holds its session at most this long (a stuck turn frees it then)"
    )
    store_heartbeat_seconds: float = Field(
        default=2.0,
        gt=0,
        le=60,
        description="each facade replica marks itself alive this often; the turns of a replica silent for 3 "
        "heartbeats (+1 s) are free to be taken over (a killed replica's sessions are not stuck)",
    )
    usage_summary_seconds: float = Field(
        default=60.0,
        ge=0,
        description="how often the usage summary on Environments' status (kubectl describe) is refreshed; 0: never",
    )
    slo_watch_seconds: float = Field(
        default=2.0,
        ge=0,
        description="how often the SLO watcher (in the replica holding the Lease dockyard-slo-watcher) checks the "
        "environments with spec.slo; 0: no watcher in this replica (docs/promotion.md)",
    )
    slo_lease_namespace: str = Field(
        default="",
        description="the namespace of the SLO watcher's Lease; empty: the facade pod's namespace (default outside "
        "a cluster)",
    )
    turn_outcomes_flush_seconds: float = Field(
        default=0.5,
        gt=0,
        le=60,
        description="how often each replica writes its finished turns' outcomes (per version: the SLO watcher's "
        "figures, usage per version) to the conversation database",
    )

    # --- deployed-app runtime: POST {api_base_url}/v1/apps/{app_id}/execute (api/dockyard_api/runtime/) ---
    endpoint_mode: Literal["cluster", "local"] = Field(
        default="cluster",
        description="where model endpoints are found: cluster (ModelDeployment status.endpoint, the Service) or "
        "local (the local control plane: Ready model pods annotated dockyard.dev/local-endpoint by the local "
        "engine runner; make run sets it)",
    )
    execute_max_steps: int = Field(
        default=6, ge=1, le=50, description="model calls of an agent per turn; the last one offers no tools"
    )
    execute_turn_timeout_seconds: float = Field(
        default=120.0, gt=0, le=3600, description="whole-turn deadline: a slower model endpoint is a 504"
    )
    execute_tool_timeout_seconds: float = Field(default=20.0, gt=0, le=600, description="deadline of one tool call")
    execute_tool_max_bytes: int = Field(
        default=64 * 1024, ge=1024, description="a tool's answer is cut to this many bytes before the model reads it"
    )
    execute_ping_seconds: float = Field(
        default=15.0, gt=0, description="a streamed turn sends an SSE ': ping' comment after this long without events"
    )
    execute_model_connections: int = Field(
        default=256,
        ge=1,
        description="model calls the facade sends at once, all endpoints together, in each of its two clients "
        "(completions that are not streamed; streamed or https ones); more wait their turn",
    )
    execute_turns_preparing: int = Field(
        default=4,
        ge=1,
        le=1024,
        description="turns that prepare at once (environment, rate limits, session: the work before the model is "
        "asked); the others wait in arrival order, so a burst of turns reaches its models in order instead of all "
        "late together (model calls are never held back)",
    )

    # --- web client and widget (api/dockyard_api/web/, docs/web-client-and-widget.md) ---
    widget_signing_key: SecretStr | None = Field(
        default=None,
        description="HMAC key of widget and web-client tokens (at least 32 characters; the Helm chart can fill it "
        "from a Secret); unset: each namespace gets a random key in the Secret dockyard-widget-signing-key, created "
        "on first use and shared by every facade replica (delete it to rotate: every token becomes invalid)",
    )
    widget_key_cache_seconds: float = Field(
        default=60.0, ge=0, description="how long a namespace's signing key is cached after reading its Secret"
    )
    widget_config_cache_seconds: float = Field(
        default=5.0, ge=0, description="how long an Environment's widget settings (allowed origins...) are cached"
    )
    widget_renewal_days: float = Field(
        default=30.0,
        gt=0,
        description="an expired anonymous widget token may be renewed (same end user, same conversations) for "
        "this many days after it expired; later the visitor starts as a new anonymous user",
    )
    web_sign_in_seconds: int = Field(
        default=8 * 3600, ge=60, le=7 * 86400, description="how long a web-client sign-in (Kubernetes token) lasts"
    )
