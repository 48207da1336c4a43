"""Management: what exists to pick from and to watch (HTTP only; the logic is
:class:`~dockyard_api.management.catalog.service.CatalogService`). Every call acts as the caller."""

from __future__ import annotations

from fastapi import APIRouter

from dockyard_api.deps import AppName, CatalogDep, NamespaceParam
from dockyard_api.management.schemas import (
    AgentVersionList,
    ModelDeploymentList,
    ModelList,
    ToolDeploymentList,
    ToolList,
)

router = APIRouter(prefix="/api/v1/namespaces/{namespace}", tags=["catalog"])


@router.get(
    "/apps/{app}/agentversions",
    summary="Agent versions to pick from: those in the draft and in any version",
    response_model_exclude_unset=True,
)
async def list_agent_versions(namespace: NamespaceParam, app: AppName, catalog: CatalogDep) -> AgentVersionList:
    return await catalog.list_agent_versions(namespace, app)


@router.get("/tools", summary="Tool versions (Tools) to pick from", response_model_exclude_unset=True)
async def list_tools(namespace: NamespaceParam, catalog: CatalogDep) -> ToolList:
    return await catalog.list_tools(namespace)


@router.get("/models", summary="Models with phase, format and size", response_model_exclude_unset=True)
async def list_models(namespace: NamespaceParam, catalog: CatalogDep) -> ModelList:
    return await catalog.list_models(namespace)


@router.get(
    "/modeldeployments",
    summary="ModelDeployments with device type, replicas and dock status",
    response_model_exclude_unset=True,
)
async def list_model_deployments(namespace: NamespaceParam, catalog: CatalogDep) -> ModelDeploymentList:
    return await catalog.list_model_deployments(namespace)


@router.get(
    "/tooldeployments", summary="ToolDeployments with replicas and dock status", response_model_exclude_unset=True
)
async def list_tool_deployments(namespace: NamespaceParam, catalog: CatalogDep) -> ToolDeploymentList:
    return await catalog.list_tool_deployments(namespace)
