"""``GET /metrics``: the facade's Prometheus metrics (text exposition format 0.0.4)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from dockyard_api import metrics

router = APIRouter(tags=["health"])


@router.get("/metrics", summary="Prometheus metrics of this facade replica", include_in_schema=False)
async def prometheus_metrics() -> Response:
    body, content_type = metrics.exposition()
    return Response(body, media_type=content_type)
