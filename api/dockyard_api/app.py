"""The FastAPI facade: ``create_app()`` wires settings, the Kubernetes client, errors and routers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI
from fastapi.telemetry import TelemetryConfig

from dockyard_api import __version__
from dockyard_api.auth import Authenticator
from dockyard_api.bodylimit import BodyLimit
from dockyard_api.cache import Informer
from dockyard_api.console import router as console
from dockyard_api.deps import AppState
from dockyard_api.errors import install_error_handlers
from dockyard_api.management.analytics import router as analytics
from dockyard_api.management.apps import router as apps
from dockyard_api.management.canary import router as canary
from dockyard_api.management.catalog import router as catalog
from dockyard_api.management.environments import router as environments
from dockyard_api.management.evaluations import router as evaluations
from dockyard_api.management.keys import router as keys
from dockyard_api.management.tooltests import router as tooltests
from dockyard_api.management.usage import router as usage
from dockyard_api.metrics import RequestMiddleware
from dockyard_api.ops import router as ops
from dockyard_api.public.deploy import router as deploy
from dockyard_api.public.dock_status import router as dock_status
from dockyard_api.public.downloads import router as downloads
from dockyard_api.public.imports import router as import_sessions
from dockyard_api.public.imports.service import ImportService
from dockyard_api.public.knowledge import router as knowledge
from dockyard_api.rollout.start import rollout
from dockyard_api.runtime import router as execute
from dockyard_api.runtime import tracing
from dockyard_api.runtime.service import AppRuntime, RuntimeSettings
from dockyard_api.settings import ApiSettings
from dockyard_api.store import ConversationStore, default_url
from dockyard_api.store.summary import summarise_forever
from dockyard_api.web import router as web
from dockyard_api.web.service import WebService
from dockyard_core.kubeclient import AsyncKube

ENVIRONMENT_PREFIX = "/e/{namespace}/{environment}"
"""Prefix of the public API: an environment's base URL ends with it."""

log = logging.getLogger("dockyard.api")


async def _sweep_forever(service: ImportService, interval: float) -> None:
    """Delete expired import sessions now and then (every replica may: the sweep is idempotent)."""
    while True:
        try:
            counts = await service.sweep()
            if any(counts.values()):
                log.info("import sweep: %s", counts)
        except Exception:  # a failed sweep (API server away) is retried at the next tick
            log.warning("import sweep failed", exc_info=True)
        await asyncio.sleep(interval)


def runtime_settings(settings: ApiSettings) -> RuntimeSettings:
    return RuntimeSettings(
        endpoint_mode=settings.endpoint_mode,
        max_steps=settings.execute_max_steps,
        turn_timeout_seconds=settings.execute_turn_timeout_seconds,
        tool_timeout_seconds=settings.execute_tool_timeout_seconds,
        tool_max_bytes=settings.execute_tool_max_bytes,
        model_connections=settings.execute_model_connections,
        turns_preparing=settings.execute_turns_preparing,
        knowledge_index=settings.knowledge_index_url(),
    )


def create_app(settings: ApiSettings | None = None) -> FastAPI:
    settings = settings or ApiSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        kube = AsyncKube(settings.kubeconfig, timeout=settings.kube_timeout_seconds)
        authenticator = Authenticator(kube, settings)
        web_service = WebService(kube, settings)
        imports = ImportService(settings, kube)
        await anyio.to_thread.run_sync(imports.store.ensure)
        download_token_key = settings.token_key()
        console_sealer = console.sealer_for(download_token_key)
        sweeper = None
        if settings.sweep_interval_seconds > 0:
            sweeper = asyncio.create_task(_sweep_forever(imports, settings.sweep_interval_seconds))
        models = Informer(kube, "models") if settings.watch_models else None
        if models is not None:
            models.start()
        store = ConversationStore(
            settings.database_url or default_url(settings.model_store),
            history_messages=settings.history_messages,
            history_max_chars=settings.history_max_chars,
            busy_wait_seconds=settings.session_busy_wait_seconds,
            turn_lease_seconds=settings.turn_lease_seconds,
            heartbeat_seconds=settings.store_heartbeat_seconds,
            pool_size=settings.database_pool_size,
        )
        await store.start()  # migrates; a database that is away is retried in the background
        runtime = AppRuntime(kube, runtime_settings(settings), signing_key=web_service.keys.key)
        runtime.start()
        recorder, watcher = rollout(settings, kube, store, runtime)
        summaries = None
        if settings.usage_summary_seconds > 0:
            summaries = asyncio.create_task(summarise_forever(store, kube, settings.usage_summary_seconds))
        AppState(
            settings=settings,
            kube=kube,
            authenticator=authenticator,
            web=web_service,
            imports=imports,
            download_token_key=download_token_key,
            console_sealer=console_sealer,
            models=models,
            store=store,
            runtime=runtime,
        ).install(app)
        try:
            yield
        finally:
            if summaries is not None:
                summaries.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await summaries
            await watcher.aclose()
            await recorder.aclose()
            await runtime.aclose()
            await store.close()
            if models is not None:
                await models.stop()
            if sweeper is not None:
                sweeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sweeper
            await kube.aclose()
            tracing.stop()  # sends what is queued (at most 5 s)

    tracing.start()  # the OTEL_* variables turn traces on (docs/observability.md, "Traces")
    app = FastAPI(
        title="Dockyard",
        version=__version__,
        description="Moves AI applications and the models they use from development to live environments "
        "on Kubernetes. Public API: chunked model import, model and tool deployment, dock status.",
        lifespan=lifespan,
        telemetry=TelemetryConfig(tracing=False, metrics=False, logs=False, operation_spans=False),  # ours instead
    )
    install_error_handlers(app)
    # request id (header, logs, annotations), request metrics, and the request's span when tracing is on
    app.add_middleware(RequestMiddleware, trace=tracing.request, trace_done=tracing.request_done)
    app.add_middleware(BodyLimit, max_bytes=settings.max_json_body_bytes)
    # A request is matched against the routes in order, each router's in turn (a few µs per route: 27 µs for
    # the execute call when it came after the public API's 18 routes): the deployed app's execute call, the
    # most frequent of all (every turn of every chat), comes first; no other route's path can be its.
    app.include_router(execute.router, prefix=ENVIRONMENT_PREFIX)
    app.include_router(ops.router)
    # The public API's {base_url} is the environment's address (docs/public-api.md): public APIs live
    # under it. They come next: the public calls are the frequent ones after the turns.
    app.include_router(deploy.router, prefix=ENVIRONMENT_PREFIX)
    app.include_router(dock_status.router, prefix=ENVIRONMENT_PREFIX)
    app.include_router(import_sessions.router, prefix=ENVIRONMENT_PREFIX)
    app.include_router(knowledge.router, prefix=ENVIRONMENT_PREFIX)
    web.install(app, ENVIRONMENT_PREFIX)  # web client page, widget loader.js and tokens, CORS
    app.include_router(apps.router)
    app.include_router(environments.router)
    app.include_router(keys.router)
    app.include_router(tooltests.router)
    app.include_router(evaluations.router)
    app.include_router(downloads.router)
    app.include_router(usage.router)
    app.include_router(analytics.router)
    app.include_router(canary.router)
    app.include_router(catalog.router)
    console.install(app)  # the web console for people (/console/)
    return app
