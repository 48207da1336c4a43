"""``GET /api/public/dock-status/{dockStatusId}``: the job record of an import or a deployment.

The id is a label on the resource the job acts on, so the lookup is one list call per kind, answered
from the API server: it works after facade restarts and from any facade replica.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from fastapi import APIRouter

from dockyard_api.deps import DockStatusId, Kube, PublicCaller
from dockyard_api.public.schemas import error_responses, job_responses
from dockyard_core import jobs
from dockyard_core.errors import NotFoundError
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
async def dock_status(dock_status_id: DockStatusId, caller: PublicCaller, kube: Kube) -> dict[str, Any]:
    if not _LABEL_VALUE.match(dock_status_id):
        raise NotFoundError(f"no job {dock_status_id!r}")
    selector = {"labelSelector": f"{DOCK_STATUS_ID_LABEL}={dock_status_id}"}
    found = await asyncio.gather(
        *(kube.request("GET", kube.custom_path(caller.namespace, plural), params=selector) for plural, _ in KINDS)
    )
    for (_, id_key), listing in zip(KINDS, found, strict=True):
        for obj in listing.get("items", []):
            record = jobs.record(obj, id_key)
            if record["dockStatusId"] != dock_status_id:
                # the facade labelled the object with the new job; its status does not have it yet (the operator
                # has not started it, or holds back the first status of a new object's fast rollout)
                record = jobs.pending(obj, id_key, dock_status_id, jobs.NOT_REPORTED)
            return record
    raise NotFoundError(f"no job {dock_status_id!r} in this environment", {"dockStatusId": dock_status_id})
