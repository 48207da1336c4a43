"""Management: usage statistics of an environment per UTC day and per API key, and the interventions of
its guardrails and PII protection (HTTP only; the logic is
:class:`~dockyard_api.management.usage.service.UsageService`)."""

from __future__ import annotations

from datetime import date
from typing import Annotated

from fastapi import APIRouter, Query

from dockyard_api.deps import EnvName, NamespaceParam, UsageDep
from dockyard_api.management.usage.schemas import InterventionList, UsageReportView

router = APIRouter(prefix="/api/v1/namespaces/{namespace}", tags=["environments and API keys"])


@router.get(
    "/environments/{environment}/usage",
    summary="Usage statistics of an environment per day and per API key (kept after the environment is deleted)",
)
async def environment_usage(
    namespace: NamespaceParam,
    environment: EnvName,
    usage: UsageDep,
    since: Annotated[
        date | None, Query(alias="from", description="first UTC day (YYYY-MM-DD); default: 29 days before to")
    ] = None,
    until: Annotated[date | None, Query(alias="to", description="last UTC day (YYYY-MM-DD); default: today")] = None,
) -> UsageReportView:
    return await usage.environment_usage(namespace, environment, since, until)


@router.get(
    "/environments/{environment}/interventions",
    summary="What guardrails and the PII protection did to the environment's turns, newest first (never the values)",
)
async def environment_interventions(
    namespace: NamespaceParam,
    environment: EnvName,
    usage: UsageDep,
    limit: Annotated[int, Query(description="how many, newest first (1 to 500)")] = 50,
) -> InterventionList:
    return await usage.interventions(namespace, environment, limit)
