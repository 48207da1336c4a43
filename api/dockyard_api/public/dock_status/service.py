"""The dock-status lookup (docs/public-api.md, 'Dock status'): the job record of an import or a deployment.

The id is a label (``dockyard.dev/dock-status-id``) on the resource the job acts on, so the lookup is one
list call per kind (through core's typed repositories), answered from the API server: it works after
facade restarts and from any facade replica.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

from dockyard_core.errors import NotFoundError
from dockyard_core.jobs import NOT_REPORTED, JobRecord, JobTarget
from dockyard_core.kubeclient import AsyncKube
from dockyard_core.repository import Repository
from dockyard_core.resources.v1alpha1 import DOCK_STATUS_ID_LABEL, Model, ModelDeployment, ToolDeployment

_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
"""A label value: an id that is not one cannot name a job."""


class DockStatusService:
    def __init__(self, kube: AsyncKube) -> None:
        self.models = Repository(kube, Model)
        self.model_deployments = Repository(kube, ModelDeployment)
        self.tool_deployments = Repository(kube, ToolDeployment)

    async def lookup(self, namespace: str, dock_status_id: str) -> JobRecord:
        """The job ``dock_status_id`` of ``namespace`` (an import's Model, a ModelDeployment or a
        ToolDeployment carries its label); 404 when no object does."""
        if not _LABEL_VALUE.match(dock_status_id):
            raise NotFoundError(f"no job {dock_status_id!r}")
        labels = {DOCK_STATUS_ID_LABEL: dock_status_id}
        found: tuple[list[Model], list[ModelDeployment], list[ToolDeployment]] = await asyncio.gather(
            self.models.select(namespace, labels=labels),
            self.model_deployments.select(namespace, labels=labels),
            self.tool_deployments.select(namespace, labels=labels),
        )
        objects: Sequence[JobTarget]
        for objects in found:
            for obj in objects:
                record = JobRecord.of(obj)
                if record.dock_status_id != dock_status_id:
                    # the facade labelled the object with the new job; its status does not have it yet (the
                    # operator has not started it, or holds back the first status of a new object's fast rollout)
                    record = record.pending(dock_status_id, NOT_REPORTED)
                return record
        raise NotFoundError(f"no job {dock_status_id!r} in this environment", {"dockStatusId": dock_status_id})
