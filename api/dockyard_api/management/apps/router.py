"""Management: Apps (the draft), their versions, restore (HTTP only; the logic is
:class:`~dockyard_api.management.apps.service.AppService`). Every call acts as the calling Kubernetes user."""

from __future__ import annotations

from fastapi import APIRouter, status

from dockyard_api.deps import AppName, AppsDep, NamespaceParam, VersionParam
from dockyard_api.management.schemas import (
    AppCreate,
    AppList,
    AppView,
    DraftUpdate,
    Restore,
    VersionCreate,
    VersionList,
    VersionView,
)

router = APIRouter(prefix="/api/v1/namespaces/{namespace}", tags=["apps and versions"])


@router.post(
    "/apps",
    status_code=status.HTTP_201_CREATED,
    summary="Create an App (its draft environment follows)",
    response_model_exclude_unset=True,
)
async def create_new_app(namespace: NamespaceParam, body: AppCreate, apps: AppsDep) -> AppView:
    return await apps.create(namespace, body)


@router.get("/apps", summary="List Apps", response_model_exclude_unset=True)
async def list_apps(namespace: NamespaceParam, apps: AppsDep) -> AppList:
    return await apps.list_apps(namespace)


@router.get("/apps/{app}", summary="Get an App's draft", response_model_exclude_unset=True)
async def get_app(namespace: NamespaceParam, app: AppName, apps: AppsDep) -> AppView:
    return await apps.get_app(namespace, app)


@router.put("/apps/{app}/draft", summary="Replace the App's draft", response_model_exclude_unset=True)
async def update_draft(namespace: NamespaceParam, app: AppName, body: DraftUpdate, apps: AppsDep) -> AppView:
    return await apps.update_draft(namespace, app, body)


@router.post(
    "/apps/{app}/restore",
    summary="Restore a version into the draft (overwrites the whole draft; cannot be undone)",
    response_model_exclude_unset=True,
)
async def restore(namespace: NamespaceParam, app: AppName, body: Restore, apps: AppsDep) -> AppView:
    return await apps.restore(namespace, app, body)


@router.post(
    "/apps/{app}/versions",
    status_code=status.HTTP_201_CREATED,
    summary="Create a version (validated first: tools, models, MCP configurations)",
    response_model_exclude_unset=True,
)
async def create_version(namespace: NamespaceParam, app: AppName, body: VersionCreate, apps: AppsDep) -> VersionView:
    return await apps.create_version(namespace, app, body)


@router.get(
    "/apps/{app}/versions",
    summary="List an App's versions (the full history is kept)",
    response_model_exclude_unset=True,
)
async def list_versions(namespace: NamespaceParam, app: AppName, apps: AppsDep) -> VersionList:
    return await apps.list_versions(namespace, app)


@router.get("/apps/{app}/versions/{version}", summary="Preview a version", response_model_exclude_unset=True)
async def get_version(namespace: NamespaceParam, app: AppName, version: VersionParam, apps: AppsDep) -> VersionView:
    return await apps.get_version(namespace, app, version)


@router.delete(
    "/apps/{app}/versions/{version}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a version (refused while an environment deploys it)",
)
async def delete_version(namespace: NamespaceParam, app: AppName, version: VersionParam, apps: AppsDep) -> None:
    await apps.delete_version(namespace, app, version)
