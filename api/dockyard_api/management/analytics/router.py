"""Management: analytics of an environment per app version and UTC day (HTTP only; the logic is
:class:`~dockyard_api.management.analytics.service.AnalyticsService`)."""

from __future__ import annotations

from datetime import date
from typing import Annotated

from fastapi import APIRouter, Query

from dockyard_api.deps import AnalyticsDep, EnvName, NamespaceParam
from dockyard_api.management.analytics.schemas import AnalyticsView

router = APIRouter(prefix="/api/v1/namespaces/{namespace}", tags=["environments and API keys"])


@router.get(
    "/environments/{environment}/analytics",
    summary="Turns, errors, users, tokens, latency percentiles and tool calls per app version and day",
)
async def environment_analytics(
    namespace: NamespaceParam,
    environment: EnvName,
    analytics: AnalyticsDep,
    since: Annotated[
        date | None, Query(alias="from", description="first UTC day (YYYY-MM-DD); default: 13 days before to")
    ] = None,
    until: Annotated[date | None, Query(alias="to", description="last UTC day (YYYY-MM-DD); default: today")] = None,
    version: Annotated[str | None, Query(description="one app version (1.2.0 or draft); default: all")] = None,
) -> AnalyticsView:
    return await analytics.environment_analytics(namespace, environment, since, until, version)
