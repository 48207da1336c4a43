"""The FastAPI facade: ``create_app()`` wires settings, the Kubernetes client, errors and routers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI

from dockyard_api import __version__
from dockyard_api.auth import Authenticator
from dockyard_api.cache import ObjectCache
from dockyard_api.errors import install_error_handlers
from dockyard_api.imports import ImportService
from dockyard_api.kube import api_client
from dockyard_api.kubehttp import AsyncKube
from dockyard_api.routers import apps, deploy, dock_status, environments, health, imports
from dockyard_api.settings import ApiSettings

ENVIRONMENT_PREFIX = "/e/{namespace}/{environment}"
"""Prefix of the public API: an environment's base URL ends with it."""

log = logging.getLogger("dockyard.api")


async def _sweep_forever(service: ImportService, interval: float) -> None:
    """Delete expired import sessions now and then (every replica may: the sweep is idempotent)."""
    while True:
        try:
            counts = await anyio.to_thread.run_sync(service.sweep)
            if any(counts.values()):
                log.info("import sweep: %s", counts)
        except Exception:  # a failed sweep (API server away) is retried at the next tick
            log.warning("import sweep failed", exc_info=True)
        await asyncio.sleep(interval)


def create_app(settings: ApiSettings | None = None) -> FastAPI:
    settings = settings or ApiSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.settings = settings
        app.state.api_client = api_client(settings.kubeconfig)
        app.state.kube = AsyncKube(settings.kubeconfig)
        app.state.authenticator = Authenticator(app.state.kube, settings)
        app.state.imports = ImportService(settings, app.state.api_client)
        app.state.imports.store.ensure()
        sweeper = None
        if settings.sweep_interval_seconds > 0:
            sweeper = asyncio.create_task(_sweep_forever(app.state.imports, settings.sweep_interval_seconds))
        app.state.models = ObjectCache(app.state.kube, "models") if settings.watch_models else None
        if app.state.models is not None:
            app.state.models.start()
        try:
            yield
        finally:
            if app.state.models is not None:
                await app.state.models.stop()
            if sweeper is not None:
                sweeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sweeper
            await app.state.kube.aclose()
            app.state.api_client.close()

    app = FastAPI(
        title="Dockyard",
        version=__version__,
        description="Moves AI applications and the models they use from development to live environments "
        "on Kubernetes. Public API: chunked model import, model and tool deployment, dock status.",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    app.include_router(health.router)
    # SPEC's {base_url} is the environment's address: public APIs live under it. They come first: a
    # request is matched against the routes in order, and the public calls are the frequent ones.
    app.include_router(deploy.router, prefix=ENVIRONMENT_PREFIX)
    app.include_router(dock_status.router, prefix=ENVIRONMENT_PREFIX)
    app.include_router(imports.router, prefix=ENVIRONMENT_PREFIX)
    app.include_router(apps.router)
    app.include_router(environments.router)
    return app
