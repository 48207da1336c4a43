"""Operations: liveness, readiness and the Prometheus metrics of this facade replica."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from dockyard_api import metrics
from dockyard_api.deps import Kube, Settings
from dockyard_api.ops.schemas import Liveness, Readiness
from dockyard_api.ops.service import kubernetes_version

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the process serves requests")
async def healthz() -> Liveness:
    return Liveness()


@router.get("/readyz", summary="Readiness: the Kubernetes API server answers")
async def readyz(kube: Kube, settings: Settings) -> Readiness:
    return Readiness(kubernetes=await kubernetes_version(kube, settings.readiness_timeout_seconds))


@router.get("/metrics", summary="Prometheus metrics of this facade replica", include_in_schema=False)
async def prometheus_metrics() -> Response:
    """The text exposition format 0.0.4."""
    body, content_type = metrics.exposition()
    return Response(body, media_type=content_type)
