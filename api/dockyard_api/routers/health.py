"""Liveness and readiness of the facade."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter

from dockyard_api.deps import Kube, Settings
from dockyard_core.errors import NotReadyError

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the process serves requests")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: the Kubernetes API server answers")
async def readyz(kube: Kube, settings: Settings) -> dict[str, Any]:
    try:
        info = await asyncio.wait_for(kube.request("GET", "/version"), settings.readiness_timeout_seconds)
        version = str(info.get("gitVersion"))
    except Exception as exc:  # any failure to reach the API server means "not ready"
        raise NotReadyError("the Kubernetes API server is not reachable", details=str(exc)) from exc
    return {"status": "ok", "kubernetes": version}
