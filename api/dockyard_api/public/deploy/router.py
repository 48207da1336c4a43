"""Public deploy endpoints: ``POST /api/public/models/{modelId}/deploy`` and
``POST /api/public/tools/{toolId}/deploy`` (docs/public-api.md, 'Deploy a model', 'Deploy a tool').

Each call starts a NEW dock job: the facade writes a new ``dockyard.dev/dock-status-id`` label on the
ModelDeployment / ToolDeployment it creates or updates, the operator starts the job with that id
(status.job), and ``GET /api/public/dock-status/{id}`` follows it. Nothing is kept in the facade.

Model deploy, per call: one read of the Model (from a watch-fed cache when it shows the Model
ReadyToDeploy, else from the API server) and one create (or, for an existing deployment, one read and
one patch) of the ModelDeployment. The ModelDeployment is owned by the caller's Environment (its uid
comes with the API key), so deleting the environment releases it; the Model stays (it belongs to the
namespace).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Body, Query
from fastapi.responses import Response

from dockyard_api import metrics
from dockyard_api.auth import EnvironmentCaller
from dockyard_api.cache import Informer
from dockyard_api.deps import Kube, ModelCache, ModelId, PublicCaller, Settings, ToolId
from dockyard_api.public.schemas import (
    MODEL_DEPLOY_EXAMPLES,
    MODEL_DEPLOY_RESPONSE_EXAMPLES,
    TOOL_DEPLOY_EXAMPLES,
    TOOL_DEPLOY_RESPONSE_EXAMPLES,
    ModelDeployBody,
    ToolDeployBody,
    error_responses,
    job_responses,
)
from dockyard_api.settings import ApiSettings
from dockyard_core import apikeys, jobs, requestid
from dockyard_core.errors import ConflictError, InvalidRequestError, NotFoundError
from dockyard_core.kubeclient import AsyncKube, KubeError
from dockyard_core.modelformats import Refusal, engine_for
from dockyard_core.resources.v1alpha1 import (
    API_VERSION,
    APP_LABEL,
    DOCK_STATUS_ID_LABEL,
    ModelType,
    OptimizationInfo,
)
from dockyard_core.resources.v1alpha1.tool import tool_deployment_name

router = APIRouter(prefix="/api/public", tags=["deploy"])

REQUESTED_BY_ANNOTATION = "dockyard.dev/requested-by"
"""Who asked for the latest deployment through the public API: the API key's prefix and its environment."""
READY_TO_DEPLOY = "ReadyToDeploy"
PENDING_MESSAGE = "deployment requested; poll GET {base_url}/api/public/dock-status/{dockStatusId}"

ModelTypeQuery = Annotated[
    ModelType, Query(alias="modelType", description="openSource or fineTune (required)", examples=["openSource"])
]


log = logging.getLogger("dockyard.api.deploy")


def _json_response(record: dict[str, Any]) -> Response:
    kind = "tool" if "toolId" in record else "model"
    metrics.deploy_outcome(kind, str(record.get("status")))
    log.info(
        "%s deploy %s: job %s %s (%s)",
        kind,
        record.get("toolId") or record.get("modelId"),
        record.get("dockStatusId"),
        record.get("status"),
        record.get("deploymentName"),
        extra={"dock_status_id": record.get("dockStatusId"), "deployment": record.get("deploymentName")},
    )
    return Response(orjson.dumps(record), media_type="application/json")


def _requested_by(caller: EnvironmentCaller) -> str:
    return f"{apikeys.display_prefix(caller.key_id)} (environment {caller.environment})"


# --- model deploy -------------------------------------------------------------------------------------


@router.post(
    "/models/{modelId}/deploy",
    summary="Deploy a model that is Ready to Deploy",
    description="Creates or updates the ModelDeployment named `name` and starts a new dock job: the answer is "
    "the job record (IN_PROGRESS, action DEPLOY); follow it with `GET {base_url}/api/public/dock-status/"
    "{dockStatusId}`. `isDeployedPreviously` false (default): a new deployment, or an update of this "
    "model's deployment of that name (409 when the name serves another model); true: a redeploy of an "
    "existing deployment (404 when there is none).",
    response_model=None,
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
    kube: Kube,
    models: ModelCache,
) -> Response:
    namespace = caller.namespace
    model = await _check_model(kube, models, namespace, model_id, model_type)
    _check_runtime(model, body.optimization_info)
    spec = body.to_spec(model_id, model_type)
    job_id = str(uuid.uuid4())
    metadata: dict[str, Any] = {
        "labels": {DOCK_STATUS_ID_LABEL: job_id},
        "annotations": {REQUESTED_BY_ANNOTATION: _requested_by(caller), **requestid.as_annotation()},
    }
    collection = kube.custom_path(namespace, "modeldeployments")
    owner = await _owner(kube, caller)
    if not body.is_deployed_previously:
        manifest = {
            "apiVersion": API_VERSION,
            "kind": "ModelDeployment",
            "metadata": {"name": body.name, **metadata, "ownerReferences": [owner]},
            "spec": spec.model_dump(mode="json", by_alias=True, exclude_none=True),
        }
        try:
            created = await kube.request("POST", collection, json=manifest)
            return _json_response(jobs.pending(created, "modelId", job_id, PENDING_MESSAGE))
        except KubeError as exc:
            if exc.status != 409:
                raise
    # an existing deployment: check it serves this model, then replace its spec (spec.replicas, which the
    # autoscaler and kubectl scale own, stays)
    path = kube.custom_path(namespace, "modeldeployments", body.name)
    try:
        existing = await kube.request("GET", path)
    except KubeError as exc:
        if exc.status != 404:
            raise
        if body.is_deployed_previously:
            raise NotFoundError(
                f"no model deployment {body.name!r} to redeploy (isDeployedPreviously is true); "
                "send isDeployedPreviously: false to create it",
                {"name": body.name},
            ) from exc
        raise ConflictError(f"model deployment {body.name!r} was deleted meanwhile; retry") from exc
    current_model = (existing.get("spec") or {}).get("modelRef")
    if current_model != model_id:
        raise ConflictError(
            f"the name {body.name!r} is taken by the deployment of model {current_model!r}: choose another name "
            f"for model {model_id!r}",
            {"name": body.name, "modelId": current_model},
        )
    if existing["metadata"].get("deletionTimestamp"):
        raise ConflictError(f"model deployment {body.name!r} is being deleted; retry when it is gone")
    owners = existing["metadata"].get("ownerReferences") or []
    if all(o.get("uid") != owner["uid"] for o in owners):  # deployed through one more environment
        metadata = {**metadata, "ownerReferences": [*owners, owner]}
    patch = {"metadata": metadata, "spec": spec.model_dump(mode="json", by_alias=True, exclude={"replicas"})}
    try:
        patched = await kube.request("PATCH", path, json=patch, content_type="application/merge-patch+json")
    except KubeError as exc:
        if exc.status == 404:
            raise ConflictError(f"model deployment {body.name!r} was deleted meanwhile; retry") from exc
        raise
    return _json_response(jobs.pending(patched, "modelId", job_id, PENDING_MESSAGE))


async def _owner(kube: AsyncKube, caller: EnvironmentCaller) -> dict[str, Any]:
    """The caller's Environment as an owner: deleting the environment releases (garbage-collects) what
    its public API deployed. A deployment made through several environments goes with the last of them."""
    uid = caller.environment_uid
    if not uid:  # a key Secret that names no owner: read the environment
        try:
            env = await kube.request("GET", kube.custom_path(caller.namespace, "environments", caller.environment))
        except KubeError as exc:
            if exc.status == 404:
                raise NotFoundError(f"environment {caller.environment!r} no longer exists") from exc
            raise
        uid = env["metadata"]["uid"]
    return {"apiVersion": API_VERSION, "kind": "Environment", "name": caller.environment, "uid": uid,
            "blockOwnerDeletion": False}  # fmt: skip


async def _check_model(
    kube: AsyncKube, cache: Informer | None, namespace: str, model_id: str, model_type: str
) -> dict[str, Any]:
    """404 for an unknown model, 409 unless it is ReadyToDeploy, 422 when modelType contradicts it."""
    model = cache.cached(namespace, model_id) if cache is not None else None
    if model is None or _phase(model) != READY_TO_DEPLOY:
        try:
            model = await kube.request("GET", AsyncKube.custom_path(namespace, "models", model_id))
        except KubeError as exc:
            if exc.status == 404:
                raise NotFoundError(f"model {model_id!r} not found", {"modelId": model_id}) from exc
            raise
    phase = _phase(model)
    if phase != READY_TO_DEPLOY:
        shown = phase or "not assessed yet"
        raise ConflictError(
            f"model {model_id!r} is {shown}, not ReadyToDeploy: only a model in the Ready to Deploy state can be "
            "deployed",
            {"modelId": model_id, "phase": phase},
        )
    declared = (model.get("spec") or {}).get("modelType")
    if declared and declared != model_type:
        why = f"must be {declared}: model {model_id!r} is {declared}"
        raise InvalidRequestError(
            f"the request is not valid: query.modelType: {why}", [{"field": "query.modelType", "message": why}]
        )
    return model


def _check_runtime(model: dict[str, Any], info: OptimizationInfo | None) -> None:
    """422 naming the field when no engine can serve the model's format with this optimizationInfo
    (e.g. a GGUF model with optimizationType ctranslate2; docs/runtimes.md)."""
    model_format = ((model.get("status") or {}).get("storage") or {}).get("format")
    try:
        engine_for(model_format, info.optimization_type if info else "", info.quantization_type if info else "")
    except Refusal as exc:
        field = f"body.{exc.field}"
        raise InvalidRequestError(
            f"the request is not valid: {field}: {exc.message}",
            [{"field": field, "message": exc.message, "modelFormat": model_format}],
        ) from exc


def _phase(model: dict[str, Any]) -> str | None:
    phase: str | None = (model.get("status") or {}).get("phase")
    return phase


# --- tool deploy --------------------------------------------------------------------------------------


@router.post(
    "/tools/{toolId}/deploy",
    summary="Deploy a tool, synchronously or asynchronously",
    description="Creates or updates the environment's ToolDeployment of this tool version and starts a new dock "
    "job. `isAsync: true` answers at once (IN_PROGRESS). `isAsync: false` waits until the job is SUCCESS or "
    "FAILED and answers with it; when the facade's bound (DOCKYARD_API_SYNC_DEPLOY_TIMEOUT_SECONDS, default "
    "120 s) passes first, it answers with the job still IN_PROGRESS and a message saying so. Either way, "
    "`GET {base_url}/api/public/dock-status/{dockStatusId}` follows the job.",
    response_model=None,
    responses={
        **job_responses(TOOL_DEPLOY_RESPONSE_EXAMPLES, "The deployment job: finished (isAsync false) or started"),
        **error_responses(401, 403, 404, 409, 422, 503),
    },
)
async def deploy_tool(
    tool_id: ToolId,
    body: Annotated[ToolDeployBody, Body(openapi_examples=TOOL_DEPLOY_EXAMPLES)],
    caller: PublicCaller,
    kube: Kube,
    settings: Settings,
) -> Response:
    namespace = caller.namespace
    try:
        tool = await kube.request("GET", kube.custom_path(namespace, "tools", tool_id))
    except KubeError as exc:
        if exc.status == 404:
            raise NotFoundError(f"tool {tool_id!r} not found", {"toolId": tool_id}) from exc
        raise
    name = tool_deployment_name(caller.environment, tool["spec"]["name"], tool["spec"]["version"])
    job_id = str(uuid.uuid4())
    metadata = {
        "labels": {DOCK_STATUS_ID_LABEL: job_id},
        "annotations": {REQUESTED_BY_ANNOTATION: _requested_by(caller), **requestid.as_annotation()},
    }
    obj = await _update_tool_deployment(kube, namespace, name, metadata, body.is_async)
    if obj is None:
        obj = await _create_tool_deployment(kube, caller, name, tool_id, metadata, body.is_async)
    if (obj.get("spec") or {}).get("toolRef") != tool_id:
        raise ConflictError(
            f"tool deployment {name!r} deploys {obj['spec'].get('toolRef')!r}, not {tool_id!r}", {"name": name}
        )
    if body.is_async:
        return _json_response(jobs.pending(obj, "toolId", job_id, PENDING_MESSAGE))
    return _json_response(await _wait_for_job(kube, obj, job_id, settings))


async def _update_tool_deployment(
    kube: AsyncKube, namespace: str, name: str, metadata: dict[str, Any], is_async: bool
) -> dict[str, Any] | None:
    patch = {"metadata": metadata, "spec": {"isAsync": is_async}}
    try:
        return await kube.request(
            "PATCH",
            kube.custom_path(namespace, "tooldeployments", name),
            json=patch,
            content_type="application/merge-patch+json",
        )
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise


async def _create_tool_deployment(
    kube: AsyncKube, caller: EnvironmentCaller, name: str, tool_id: str, metadata: dict[str, Any], is_async: bool
) -> dict[str, Any]:
    """A ToolDeployment owned by the caller's Environment (deleted with it). It does not carry the
    environment label: the environment's own reconciler manages only the tools of its deployed version,
    and adopts this object (same name) if a later version includes the tool."""
    owner = await _owner(kube, caller)
    labels = {**metadata["labels"], APP_LABEL: caller.app, "app.kubernetes.io/managed-by": "dockyard"}
    manifest = {
        "apiVersion": API_VERSION,
        "kind": "ToolDeployment",
        "metadata": {**metadata, "name": name, "labels": labels, "ownerReferences": [owner]},
        "spec": {"toolRef": tool_id, "isAsync": is_async},
    }
    try:
        created: dict[str, Any] = await kube.request(
            "POST", kube.custom_path(caller.namespace, "tooldeployments"), json=manifest
        )
        return created
    except KubeError as exc:
        if exc.status != 409:
            raise
    # created by someone else in between (another call, the environment): label that one
    again = await _update_tool_deployment(kube, caller.namespace, name, metadata, is_async)
    if again is None:
        raise ConflictError(f"tool deployment {name!r} changed concurrently; retry")
    return again


async def _wait_for_job(kube: AsyncKube, obj: dict[str, Any], job_id: str, settings: ApiSettings) -> dict[str, Any]:
    """Poll the object until its job ``job_id`` is SUCCESS or FAILED, at most the sync deploy timeout."""
    meta = obj["metadata"]
    path = kube.custom_path(meta["namespace"], "tooldeployments", meta["name"])
    deadline = time.monotonic() + settings.sync_deploy_timeout_seconds
    while True:
        job = (obj.get("status") or {}).get("job") or {}
        started = job.get("dockStatusId") == job_id
        superseded = (obj["metadata"].get("labels") or {}).get(DOCK_STATUS_ID_LABEL) != job_id and not started
        if superseded:
            return jobs.pending(
                obj, "toolId", job_id, "a newer deployment of this tool replaced this job before it started"
            )
        if started and job.get("status") in ("SUCCESS", "FAILED"):
            return jobs.record(obj, "toolId")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            waited = f"still IN_PROGRESS after {settings.sync_deploy_timeout_seconds:g}s (the synchronous bound)"
            hint = "poll GET {base_url}/api/public/dock-status/{dockStatusId}"
            if started:
                record = jobs.record(obj, "toolId")
                record["message"] = f"{waited}: {job.get('message', '')}; {hint}"
                return record
            return jobs.pending(obj, "toolId", job_id, f"{waited}: {jobs.NOT_REPORTED}; {hint}")
        await asyncio.sleep(min(settings.sync_deploy_poll_seconds, remaining))
        try:
            obj = await kube.request("GET", path)
        except KubeError as exc:
            if exc.status == 404:
                raise ConflictError(f"tool deployment {meta['name']!r} was deleted while deploying") from exc
            raise
