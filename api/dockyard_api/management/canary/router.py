"""Management: an environment's canary (HTTP only; the logic is
:class:`~dockyard_api.management.canary.service.CanaryService`). Every call acts as the calling Kubernetes user."""

from __future__ import annotations

from fastapi import APIRouter, status

from dockyard_api.deps import CanaryDep, EnvName, NamespaceParam
from dockyard_api.management.canary.schemas import CanaryStart, CanaryWeight
from dockyard_api.management.schemas import EnvironmentChange

router = APIRouter(
    prefix="/api/v1/namespaces/{namespace}/environments/{environment}", tags=["environments and API keys"]
)


@router.post(
    "/canary",
    status_code=status.HTTP_202_ACCEPTED,
    summary="Start a canary: a share of new sessions starts on another version (each session keeps its version)",
    description="409 when the version is the active one or another canary runs; 404 when the app has no such "
    "version. The history gets a Canary entry; `kubectl get env` prints it.",
    response_model_exclude_unset=True,
)
async def start_canary(
    namespace: NamespaceParam, environment: EnvName, body: CanaryStart, canary: CanaryDep
) -> EnvironmentChange:
    return await canary.start(namespace, environment, body)


@router.patch(
    "/canary",
    status_code=status.HTTP_202_ACCEPTED,
    summary="Change the running canary's share of new sessions",
    response_model_exclude_unset=True,
)
async def canary_weight(
    namespace: NamespaceParam, environment: EnvName, body: CanaryWeight, canary: CanaryDep
) -> EnvironmentChange:
    return await canary.weight(namespace, environment, body)


@router.post(
    "/canary/promote",
    status_code=status.HTTP_202_ACCEPTED,
    summary="Promote the canary: its version becomes the active one (a history entry with action Promote)",
    response_model_exclude_unset=True,
)
async def promote_canary(namespace: NamespaceParam, environment: EnvName, canary: CanaryDep) -> EnvironmentChange:
    return await canary.promote(namespace, environment)


@router.post(
    "/canary/abort",
    status_code=status.HTTP_202_ACCEPTED,
    summary="Abort the canary: new sessions start on the active version again",
    response_model_exclude_unset=True,
)
async def abort_canary(namespace: NamespaceParam, environment: EnvName, canary: CanaryDep) -> EnvironmentChange:
    return await canary.abort(namespace, environment)
