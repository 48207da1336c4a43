"""Public deploy endpoints: ``POST /api/public/models/{modelId}/deploy`` and
``POST /api/public/tools/{toolId}/deploy`` (docs/public-api.md, 'Deploy a model', 'Deploy a tool').

HTTP only: the rules and the Kubernetes writes are :class:`dockyard_api.public.deploy.service.DeployService`'s.
The answer, a :class:`~dockyard_api.public.schemas.JobRecord`, is serialised once with orjson (the model
deploy is the public API's hot path); the OpenAPI document declares the model.
"""

from __future__ import annotations

import logging
from typing import Annotated

import orjson
from fastapi import APIRouter, Body, Query
from fastapi.responses import Response

from dockyard_api import metrics
from dockyard_api.deps import Deploys, ModelId, PublicCaller, ToolId
from dockyard_api.public.schemas import (
    MODEL_DEPLOY_EXAMPLES,
    MODEL_DEPLOY_RESPONSE_EXAMPLES,
    TOOL_DEPLOY_EXAMPLES,
    TOOL_DEPLOY_RESPONSE_EXAMPLES,
    JobRecord,
    ModelDeployBody,
    ToolDeployBody,
    error_responses,
    job_responses,
)
from dockyard_core.resources.v1alpha1 import ModelType

router = APIRouter(prefix="/api/public", tags=["deploy"])

ModelTypeQuery = Annotated[
    ModelType, Query(alias="modelType", description="openSource or fineTune (required)", examples=["openSource"])
]

log = logging.getLogger("dockyard.api.deploy")


def _answer(record: JobRecord) -> Response:
    """The job record as the answer's bytes (and its metric and log line)."""
    kind = "tool" if record.tool_id is not None else "model"
    metrics.deploy_outcome(kind, record.status)
    log.info(
        "%s deploy %s: job %s %s (%s)",
        kind,
        record.tool_id or record.model_id,
        record.dock_status_id,
        record.status,
        record.deployment_name,
        extra={"dock_status_id": record.dock_status_id, "deployment": record.deployment_name},
    )
    return Response(orjson.dumps(record.wire()), media_type="application/json")


@router.post(
    "/models/{modelId}/deploy",
    summary="Deploy a model that is Ready to Deploy",
    description="Creates or updates the ModelDeployment named `name` and starts a new dock job: the answer is "
    "the job record (IN_PROGRESS, action DEPLOY); follow it with `GET {base_url}/api/public/dock-status/"
    "{dockStatusId}`. `isDeployedPreviously` false (default): a new deployment, or an update of this "
    "model's deployment of that name (409 when the name serves another model); true: a redeploy of an "
    "existing deployment (404 when there is none).",
    response_model=JobRecord,
    responses={
        **job_responses(MODEL_DEPLOY_RESPONSE_EXAMPLES, "The deployment job started"),
        **error_responses(401, 403, 404, 409, 422, 503),
    },
)
async def deploy_model(
    model_id: ModelId,
    model_type: ModelTypeQuery,
    body: Annotated[ModelDeployBody, Body(openapi_examples=MODEL_DEPLOY_EXAMPLES)],
    caller: PublicCaller,
    deploys: Deploys,
) -> Response:
    return _answer(await deploys.deploy_model(caller, model_id, model_type, body))


@router.post(
    "/tools/{toolId}/deploy",
    summary="Deploy a tool, synchronously or asynchronously",
    description="Creates or updates the environment's ToolDeployment of this tool version and starts a new dock "
    "job. `isAsync: true` answers at once (IN_PROGRESS). `isAsync: false` waits until the job is SUCCESS or "
    "FAILED and answers with it; when the facade's bound (DOCKYARD_API_SYNC_DEPLOY_TIMEOUT_SECONDS, default "
    "120 s) passes first, it answers with the job still IN_PROGRESS and a message saying so. Either way, "
    "`GET {base_url}/api/public/dock-status/{dockStatusId}` follows the job.",
    response_model=JobRecord,
    responses={
        **job_responses(TOOL_DEPLOY_RESPONSE_EXAMPLES, "The deployment job: finished (isAsync false) or started"),
        **error_responses(401, 403, 404, 409, 422, 503),
    },
)
async def deploy_tool(
    tool_id: ToolId,
    body: Annotated[ToolDeployBody, Body(openapi_examples=TOOL_DEPLOY_EXAMPLES)],
    caller: PublicCaller,
    deploys: Deploys,
) -> Response:
    return _answer(await deploys.deploy_tool(caller, tool_id, body))
