"""``GET /api/public/dock-status/{dockStatusId}``: the job record of an import or a deployment
(docs/public-api.md, 'Dock status'). HTTP only: the lookup is
:class:`dockyard_api.public.dock_status.service.DockStatusService`'s.
"""

from __future__ import annotations

from fastapi import APIRouter

from dockyard_api.deps import DockStatus, DockStatusId, PublicCaller
from dockyard_api.public.schemas import JobRecord, error_responses, job_responses

router = APIRouter(prefix="/api/public", tags=["dock status"])

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
    response_model=JobRecord,
    response_model_exclude_unset=True,
    responses={
        **job_responses(
            {"failed": {"summary": "A deployment that failed, with its reason", "value": EXAMPLE}},
            "The job record, with reason and message",
        ),
        **error_responses(401, 403, 404, 422, 503),
    },
)
async def dock_status(dock_status_id: DockStatusId, caller: PublicCaller, lookup: DockStatus) -> JobRecord:
    return await lookup.lookup(caller.namespace, dock_status_id)
