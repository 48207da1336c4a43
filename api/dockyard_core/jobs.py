"""The job record (docs/public-api.md, 'Dock status'): ONE model, :class:`DockJob`, kept in the status of the object a
job acts on, and its public view.

The operator writes ``status.job`` (a DockJob) as the job runs; the facade answers every call that starts
work (import completion, model deploy, tool deploy) and the dock-status lookup with :func:`record` /
:func:`pending` / :func:`import_record`, all rendered from the same DockJob.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dockyard_core.clock import kube_time
from dockyard_core.resources.v1alpha1 import DOCK_STATUS_ID_LABEL, DockJob

PENDING = "Pending"
"""Reason of a job the facade has requested and the operator not yet started."""
NOT_REPORTED = "the job has not been reported on yet"
"""Message of a job whose object's status does not have it yet: the operator has not started it, or holds
back the first status of a new object's rollout while it goes as it should (docs/operator.md)."""


def current_job(obj: Mapping[str, Any]) -> DockJob | None:
    """The object's current job (``status.job``), or None before its first."""
    raw = (obj.get("status") or {}).get("job")
    return DockJob.model_validate(raw) if raw else None


def _ids(dock_status_id: str | None) -> dict[str, Any]:
    """The id's two spellings (docs/public-api.md, 'Deploy a model')."""
    return {"dockStatusId": dock_status_id, "dock-statusId": dock_status_id}


def import_record(job: DockJob | Mapping[str, Any], model_id: str) -> dict[str, Any]:
    """The answer to an import completion: the job record with both spellings of the id."""
    job = job if isinstance(job, DockJob) else DockJob.model_validate(job)
    return {
        **_ids(job.dock_status_id),
        "modelId": model_id,
        "jobType": job.job_type,
        "action": job.action,
        "status": job.status,
    }


def record(obj: Mapping[str, Any], id_key: str) -> dict[str, Any]:
    """The job record of an object's current job, with both key spellings, reason and message."""
    job = current_job(obj)
    meta = obj["metadata"]
    target = meta["name"]
    if id_key == "toolId":
        target = (obj.get("spec") or {}).get("toolRef", target)
    elif obj.get("kind") == "ModelDeployment":
        target = (obj.get("spec") or {}).get("modelRef", target)
    labelled = (meta.get("labels") or {}).get(DOCK_STATUS_ID_LABEL)
    out = {
        **_ids((job.dock_status_id if job else None) or labelled),
        id_key: target,
        "jobType": job.job_type if job else ("TOOLS" if id_key == "toolId" else "MODELS"),
        "action": job.action if job else ("EXPORT" if obj.get("kind") == "Model" else "DEPLOY"),
        "status": job.status if job else "IN_PROGRESS",
        "reason": job.reason if job else PENDING,
        "message": job.message if job else NOT_REPORTED,
        "startTime": kube_time(job.start_time) if job and job.start_time else None,
        "completionTime": kube_time(job.completion_time) if job and job.completion_time else None,
    }
    if obj.get("kind") in ("ModelDeployment", "ToolDeployment"):
        out["deploymentName"] = meta["name"]
    return out


def pending(obj: Mapping[str, Any], id_key: str, dock_status_id: str, message: str) -> dict[str, Any]:
    """The job record of a job the facade has just requested on ``obj`` and the operator not yet started."""
    out = record(obj, id_key)
    out.update(
        {
            **_ids(dock_status_id),
            "status": "IN_PROGRESS",
            "reason": PENDING,
            "message": message,
            "startTime": None,
            "completionTime": None,
        }
    )
    return out
