"""Management: Environments (create, settings, deploy, rollback, history, delete) (HTTP only; the logic is
:class:`~dockyard_api.management.environments.service.EnvironmentService`). Every call acts as the calling
Kubernetes user."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from dockyard_api.deps import AppName, EnvironmentsDep, EnvName, NamespaceParam
from dockyard_api.management.schemas import (
    DeleteEnvironmentAnswer,
    Deploy,
    EnvironmentChange,
    EnvironmentCreate,
    EnvironmentList,
    EnvironmentSettings,
    EnvironmentView,
    Rollback,
)

router = APIRouter(prefix="/api/v1/namespaces/{namespace}", tags=["environments and API keys"])


@router.post(
    "/apps/{app}/environments",
    status_code=status.HTTP_201_CREATED,
    summary="Create an environment (name, description, app version)",
    response_model_exclude_unset=True,
)
async def create_environment(
    namespace: NamespaceParam, app: AppName, body: EnvironmentCreate, environments: EnvironmentsDep
) -> EnvironmentView:
    return await environments.create_environment(namespace, app, body)


@router.get(
    "/apps/{app}/environments",
    summary="List an App's environments (draft and all created ones)",
    response_model_exclude_unset=True,
)
async def list_environments(namespace: NamespaceParam, app: AppName, environments: EnvironmentsDep) -> EnvironmentList:
    return await environments.list_environments(namespace, app)


@router.get(
    "/environments/{environment}",
    summary="An environment: linked version, URLs, cURL script, deployment history, pre-production checklist",
    response_model_exclude_unset=True,
)
async def get_environment(
    namespace: NamespaceParam, environment: EnvName, environments: EnvironmentsDep
) -> EnvironmentView:
    return await environments.get_environment(namespace, environment)


@router.patch(
    "/environments/{environment}/settings",
    summary="Change the environment's settings: web client access, widget, rate limits, configuration",
    description="A JSON merge patch of the members sent (``null`` removes one). Acts as the calling user: an "
    "update of the Environment, which RBAC decides. Invalid values are refused (422) with the field named; "
    "a change is recorded as an Event SettingsChanged on the Environment (who and what).",
    response_model_exclude_unset=True,
)
async def change_settings(
    namespace: NamespaceParam, environment: EnvName, body: EnvironmentSettings, environments: EnvironmentsDep
) -> EnvironmentView:
    return await environments.change_settings(namespace, environment, body)


@router.post(
    "/environments/{environment}/deploy",
    status_code=status.HTTP_202_ACCEPTED,
    summary="Deploy a version to the environment (recorded in its history)",
    description="202: another version is being deployed (a history entry with action Deploy). 200: the version is "
    "the one already linked: it is deployed again (a history entry with action Redeploy) and `message` says so.",
    responses={200: {"model": EnvironmentChange, "description": "A redeploy of the linked version"}},
    response_model_exclude_unset=True,
)
async def deploy(
    namespace: NamespaceParam, environment: EnvName, body: Deploy, environments: EnvironmentsDep, response: Response
) -> EnvironmentChange:
    done = await environments.deploy(namespace, environment, body)
    if done.redeploy:
        response.status_code = status.HTTP_200_OK
    return done.answer


@router.post(
    "/environments/{environment}/rollback",
    status_code=status.HTTP_202_ACCEPTED,
    summary="Roll back to a previous working version from the history (a new history entry)",
    description="409 when the version is the active one, is not in the history as Previous, or none of its "
    "deployments to this environment became healthy (not a working version).",
    response_model_exclude_unset=True,
)
async def rollback(
    namespace: NamespaceParam, environment: EnvName, body: Rollback, environments: EnvironmentsDep
) -> EnvironmentChange:
    return await environments.rollback(namespace, environment, body)


@router.delete(
    "/environments/{environment}",
    status_code=status.HTTP_202_ACCEPTED,
    summary="Delete an environment (confirm with its name): endpoints off, keys revoked, workloads released",
)
async def delete_environment(
    namespace: NamespaceParam,
    environment: EnvName,
    environments: EnvironmentsDep,
    confirm: Annotated[str | None, Query(description="the environment's name, echoed back to confirm")] = None,
) -> DeleteEnvironmentAnswer:
    return await environments.delete_environment(namespace, environment, confirm)
