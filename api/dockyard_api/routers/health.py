"""Liveness and readiness of the facade."""

from __future__ import annotations

from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Depends, Request
from kubernetes import client

from dockyard_api.settings import ApiSettings
from dockyard_core.errors import NotReadyError

router = APIRouter(tags=["health"])


def get_api_client(request: Request) -> client.ApiClient:
    api: client.ApiClient = request.app.state.api_client
    return api


def get_settings(request: Request) -> ApiSettings:
    settings: ApiSettings = request.app.state.settings
    return settings


@router.get("/healthz", summary="Liveness: the process serves requests")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: the Kubernetes API server answers")
async def readyz(
    api: Annotated[client.ApiClient, Depends(get_api_client)],
    settings: Annotated[ApiSettings, Depends(get_settings)],
) -> dict[str, Any]:
    def probe() -> str:
        info = client.VersionApi(api).get_code(_request_timeout=settings.readiness_timeout_seconds)
        return str(info.git_version)

    try:
        version = await anyio.to_thread.run_sync(probe)
    except Exception as exc:  # any failure to reach the API server means "not ready"
        raise NotReadyError("the Kubernetes API server is not reachable", details=str(exc)) from exc
    return {"status": "ok", "kubernetes": version}
