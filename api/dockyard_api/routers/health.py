"""Liveness and readiness of the facade."""

from __future__ import annotations

from typing import Any

import anyio
from fastapi import APIRouter
from kubernetes import client

from dockyard_api.deps import ApiClient, Settings
from dockyard_core.errors import NotReadyError

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the process serves requests")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: the Kubernetes API server answers")
async def readyz(
    api: ApiClient,
    settings: Settings,
) -> dict[str, Any]:
    def probe() -> str:
        info = client.VersionApi(api).get_code(_request_timeout=settings.readiness_timeout_seconds)
        return str(info.git_version)

    try:
        version = await anyio.to_thread.run_sync(probe)
    except Exception as exc:  # any failure to reach the API server means "not ready"
        raise NotReadyError("the Kubernetes API server is not reachable", details=str(exc)) from exc
    return {"status": "ok", "kubernetes": version}
