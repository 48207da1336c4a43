"""The FastAPI facade: ``create_app()`` wires settings, the Kubernetes client, errors and routers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from dockyard_api import __version__
from dockyard_api.auth import Authenticator
from dockyard_api.errors import install_error_handlers
from dockyard_api.kube import api_client
from dockyard_api.kubehttp import AsyncKube
from dockyard_api.routers import health
from dockyard_api.settings import ApiSettings


def create_app(settings: ApiSettings | None = None) -> FastAPI:
    settings = settings or ApiSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.settings = settings
        app.state.api_client = api_client(settings.kubeconfig)
        app.state.kube = AsyncKube(settings.kubeconfig)
        app.state.authenticator = Authenticator(app.state.kube, settings)
        try:
            yield
        finally:
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
    return app
