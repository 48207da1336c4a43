"""``GET /api/public/dock-status/{dockStatusId}``: the job record of an import or a deployment.

The id is a label on the resource the job acts on, so the lookup is one list call per kind, answered
from the API server: it works after facade restarts and from any facade replica.
"""

from __future__ import annotations

import asyncio
import re
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request

from dockyard_api.auth import PublicCaller
from dockyard_api.schemas.public import error_responses, job_responses
from dockyard_core.errors import NotFoundError
from dockyard_core.kubeclient import AsyncKube
from dockyard_core.resources.v1alpha1 import DOCK_STATUS_ID_LABEL

router = APIRouter(prefix="/api/public", tags=["dock status"])

KINDS = (("models", "modelId"), ("modeldeployments", "modelId"), ("tooldeployments", "toolId"))
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")

EXAMPLE = {
    "dockStatusId": "5b0f7c3e-4a53-4a0e-9a39-2b7f0d7e9a11",
    "dock-statusId": "5b0f7c3e-4a53-4a0e-9a39-2b7f0d7e9a11",
    "modelId": "llama-3-8b-instruct",
    "jobType": "MODELS",
    "action": "DEPLOY",
    "status": "FAILED",
    "reason": "NoFittingNode",
    "message": "no g5.48xlarge node has 8 free GPUs",
}


def job_record(obj: dict[str, Any], id_key: str) -> dict[str, Any]:
    """The SPEC job record of an object's current job, with both key spellings, reason and message."""
    job = (obj.get("status") or {}).get("job") or {}
    meta = obj["metadata"]
    target = meta["name"]
    if id_key == "toolId":
        target = (obj.get("spec") or {}).get("toolRef", target)
    elif obj.get("kind") == "ModelDeployment":
        target = (obj.get("spec") or {}).get("modelRef", target)
    record = {
        "dockStatusId": job.get("dockStatusId") or meta.get("labels", {}).get(DOCK_STATUS_ID_LABEL),
        "dock-statusId": job.get("dockStatusId") or meta.get("labels", {}).get(DOCK_STATUS_ID_LABEL),
        id_key: target,
        "jobType": job.get("jobType") or ("TOOLS" if id_key == "toolId" else "MODELS"),
        "action": job.get("action") or ("EXPORT" if obj.get("kind") == "Model" else "DEPLOY"),
        "status": job.get("status") or "IN_PROGRESS",
        "reason": job.get("reason", ""),
        "message": job.get("message", ""),
        "startTime": job.get("startTime"),
        "completionTime": job.get("completionTime"),
    }
    if obj.get("kind") in ("ModelDeployment", "ToolDeployment"):
        record["deploymentName"] = meta["name"]
    return record


def pending_record(obj: dict[str, Any], id_key: str, dock_status_id: str, message: str) -> dict[str, Any]:
    """The job record of a job the facade has just requested on ``obj`` and the operator not yet started."""
    record = job_record(obj, id_key)
    record.update(
        {
            "dockStatusId": dock_status_id,
            "dock-statusId": dock_status_id,
            "status": "IN_PROGRESS",
            "reason": "Pending",
            "message": message,
            "startTime": None,
            "completionTime": None,
        }
    )
    return record


@router.get(
    "/dock-status/{dock_status_id}",
    summary="Get Dock Status: the job record of an import or deployment",
    response_model=None,
    responses={
        **job_responses(
            {"failed": {"summary": "A deployment that failed, with its reason", "value": EXAMPLE}},
            "The job record, with reason and message",
        ),
        **error_responses(401, 403, 404, 422, 503),
    },
)
async def dock_status(
    dock_status_id: Annotated[str, Path(min_length=1, max_length=128)], caller: PublicCaller, request: Request
) -> dict[str, Any]:
    if not _LABEL_VALUE.match(dock_status_id):
        raise NotFoundError(f"no job {dock_status_id!r}")
    kube: AsyncKube = request.app.state.kube
    selector = {"labelSelector": f"{DOCK_STATUS_ID_LABEL}={dock_status_id}"}
    found = await asyncio.gather(
        *(kube.request("GET", kube.custom_path(caller.namespace, plural), params=selector) for plural, _ in KINDS)
    )
    for (_, id_key), listing in zip(KINDS, found, strict=True):
        for obj in listing.get("items", []):
            record = job_record(obj, id_key)
            if record["dockStatusId"] != dock_status_id:
                # the facade labelled the object with the new job; the operator has not started it yet
                record = pending_record(obj, id_key, dock_status_id, "the operator has not picked the job up yet")
            return record
    raise NotFoundError(f"no job {dock_status_id!r} in this environment", {"dockStatusId": dock_status_id})
