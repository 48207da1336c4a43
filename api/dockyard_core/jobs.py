"""The job record (docs/public-api.md, 'Dock status'): what a job is, :class:`DockJob`, kept in the status of the
object a job acts on, and ONE answer model for it, :class:`JobRecord`.

The operator writes ``status.job`` (a DockJob) as the job runs; the facade answers every call that starts
work (import completion, model deploy, tool deploy) and the dock-status lookup with a :class:`JobRecord`
built from that DockJob: :meth:`JobRecord.of` (an object's current job), :meth:`JobRecord.pending` (a
job just requested, not yet started) and :meth:`JobRecord.imported` (an import completion's answer).

A record carries only the members its answer has (an import completion's answer has no reason, a Model's
no deploymentName, only a ModelDeployment's has ``name``): :meth:`JobRecord.wire` and the routes
(``response_model_exclude_unset``) leave the unset ones out, so that every answer keeps its exact JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dockyard_core.clock import kube_time
from dockyard_core.resources.v1alpha1 import (
    DOCK_STATUS_ID_LABEL,
    DockJob,
    Model,
    ModelDeployment,
    ToolDeployment,
)
from dockyard_core.resources.v1alpha1.common import JobAction, JobStatus, JobType

PENDING = "Pending"
"""Reason of a job the facade has requested and the operator not yet started."""
NOT_REPORTED = "the job has not been reported on yet"
"""Message of a job whose object's status does not have it yet: the operator has not started it, or holds
back the first status of a new object's rollout while it goes as it should (docs/operator.md)."""

JobTarget = Model | ModelDeployment | ToolDeployment
"""The objects a job acts on: a Model (its import), a ModelDeployment or a ToolDeployment (a deployment)."""

_ID_FIELDS = {"modelId": "model_id", "toolId": "tool_id"}
_SPELLINGS = ("dockStatusId", "dock-statusId", "dock_status_id", "dock_status_id_sample_spelling")


class JobRecord(BaseModel):
    """The job record of an import or a deployment, with the id under both spellings (docs/public-api.md,
    'Deploy a model': the published samples spell it ``dock-statusId``)."""

    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)

    dock_status_id: str = Field(alias="dockStatusId", description="identifier of the job")
    dock_status_id_sample_spelling: str = Field(
        alias="dock-statusId", description="the same identifier, spelt as the published sample responses spell it"
    )
    model_id: str | None = Field(default=None, alias="modelId", description="present for model jobs")
    tool_id: str | None = Field(default=None, alias="toolId", description="present for tool jobs")
    job_type: JobType = Field(alias="jobType", description="MODELS or TOOLS")
    action: JobAction = Field(description="DEPLOY for deployments, EXPORT for an import completion")
    status: JobStatus = Field(description="IN_PROGRESS, SUCCESS or FAILED")
    reason: str = Field(default="", description="CamelCase reason of the status, e.g. Available, NoFittingNode")
    message: str = Field(default="", description="human explanation of the status")
    start_time: str | None = Field(default=None, alias="startTime")
    completion_time: str | None = Field(default=None, alias="completionTime")
    deployment_name: str | None = Field(
        default=None, alias="deploymentName", description="the ModelDeployment / ToolDeployment the job acts on"
    )
    name: str | None = Field(
        default=None,
        description="a model deployment's name as the deploy call gave it (spec.name, e.g. Llama 3 8B); "
        "deploymentName is the object named after it",
    )

    @model_validator(mode="before")
    @classmethod
    def _both_spellings(cls, data: Any) -> Any:
        """Either spelling of the id gives both."""
        if isinstance(data, Mapping):
            given = next((data[k] for k in _SPELLINGS if data.get(k) is not None), None)
            if given is not None:
                data = {**data, "dockStatusId": given, "dock-statusId": given}
                for name in ("dock_status_id", "dock_status_id_sample_spelling"):
                    data.pop(name, None)
        return data

    # --- the answers -------------------------------------------------------------------------------------

    @classmethod
    def of(cls, obj: JobTarget) -> JobRecord:
        """The record of the object's current job (``status.job``); before its first, the job its
        dock-status-id label names, pending."""
        meta = obj.metadata
        name = meta.name or ""
        if isinstance(obj, Model):
            return _build(obj.status.job, meta.labels, "modelId", name, "Model", None)
        if isinstance(obj, ModelDeployment):
            spec = obj.spec
            return _build(obj.status.job, meta.labels, "modelId", spec.model_ref, obj.kind, name, spec.name)
        return _build(obj.status.job, meta.labels, "toolId", obj.spec.tool_ref, obj.kind, name)

    @classmethod
    def pending_on(cls, obj: JobTarget, dock_status_id: str, message: str) -> JobRecord:
        """The record of a job the facade has just requested on ``obj`` and the operator not yet started."""
        return cls.of(obj).pending(dock_status_id, message)

    def pending(self, dock_status_id: str, message: str) -> JobRecord:
        """This record as the job ``dock_status_id``, requested and not started yet."""
        return self.model_copy(
            update={
                "dock_status_id": dock_status_id,
                "dock_status_id_sample_spelling": dock_status_id,
                "status": "IN_PROGRESS",
                "reason": PENDING,
                "message": message,
                "start_time": None,
                "completion_time": None,
            }
        )

    @classmethod
    def imported(cls, job: DockJob, model_id: str) -> JobRecord:
        """The answer to an import completion: the id (both spellings), modelId, jobType, action, status."""
        return cls.model_construct(  # from a validated DockJob: nothing to check again
            dock_status_id=job.dock_status_id,
            dock_status_id_sample_spelling=job.dock_status_id,
            model_id=model_id,
            job_type=job.job_type,
            action=job.action,
            status=job.status,
        )

    def wire(self) -> dict[str, Any]:
        """The answer's JSON object: the members this record has, by their wire names."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


def _build(
    job: DockJob | None,
    labels: Mapping[str, str] | None,
    id_key: str,
    target: str,
    kind: str | None,
    deployment: str | None,
    display_name: str | None = None,
) -> JobRecord:
    labelled = (labels or {}).get(DOCK_STATUS_ID_LABEL)
    dock_status_id = (job.dock_status_id if job else None) or labelled or ""
    fields: dict[str, Any] = {
        "dock_status_id": dock_status_id,
        "dock_status_id_sample_spelling": dock_status_id,
        _ID_FIELDS[id_key]: target,
        "job_type": job.job_type if job else ("TOOLS" if id_key == "toolId" else "MODELS"),
        "action": job.action if job else ("EXPORT" if kind == "Model" else "DEPLOY"),
        "status": job.status if job else "IN_PROGRESS",
        "reason": job.reason if job else PENDING,
        "message": job.message if job else NOT_REPORTED,
        "start_time": kube_time(job.start_time) if job and job.start_time else None,
        "completion_time": kube_time(job.completion_time) if job and job.completion_time else None,
    }
    if deployment is not None:
        fields["deployment_name"] = deployment
    if display_name is not None:
        fields["name"] = display_name
    # from a validated DockJob and the object's own names: nothing to check again (the deploy's hot path)
    return JobRecord.model_construct(**fields)
