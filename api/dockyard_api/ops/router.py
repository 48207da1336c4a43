"""Operations: liveness, readiness and the Prometheus metrics of this facade replica."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from dockyard_api import metrics
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


@router.get("/metrics", summary="Prometheus metrics of this facade replica", include_in_schema=False)
async def prometheus_metrics() -> Response:
    """The text exposition format 0.0.4."""
    body, content_type = metrics.exposition()
    return Response(body, media_type=content_type)
