"""Types shared by the kinds of ``dockyard.dev/v1alpha1``: field types, status building blocks, labels."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from dockyard_core.devices import DEVICE_TYPES
from dockyard_core.resources import GROUP
from dockyard_core.resources.base import DockyardModel, KubeObject, ListMap

VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# --- labels -----------------------------------------------------------------------------------------

DOCK_STATUS_ID_LABEL = f"{GROUP}/dock-status-id"
"""Label carrying the ``dockStatusId`` of the resource's current job, so a lookup is one list call."""

DEPLOYED_BY_ANNOTATION = f"{GROUP}/deployed-by"
"""Annotation naming the user who last changed an Environment's appVersion. The facade (acting as the
calling user) or an admission webhook sets it; the operator copies it into the deployment history."""

DEPLOYED_AT_ANNOTATION = f"{GROUP}/deployed-at"
"""Annotation with the time (RFC 3339) an Environment's appVersion was last changed; set by the
Environment mutating webhook together with deployed-by. It identifies one deployment in the history."""

DEPLOY_REQUEST_ANNOTATION = f"{GROUP}/deploy-request"
"""Annotation the facade sets with every deploy, redeploy or rollback: ``<Deploy|Redeploy|Rollback> <nonce>``.
A new value is a new deployment even when appVersion stays the same (a redeploy)."""

DEPLOY_ACTION_ANNOTATION = f"{GROUP}/deploy-action"
"""Annotation with what the latest deployment was (Deploy, Redeploy or Rollback); set by the Environment
mutating webhook with deployed-by/-at, copied by the operator into the history entry."""

RESTORED_FROM_ANNOTATION = f"{GROUP}/restored-from"
"""Annotation on an App: the version its draft was last restored from (with restored-by/-at)."""

APP_LABEL = f"{GROUP}/app"
"""Label naming the App an object belongs to (API-key Secrets, audit records, tool deployments)."""

ENVIRONMENT_LABEL = f"{GROUP}/environment"
"""Label naming the Environment an object belongs to (API-key Secrets, audit records, tool deployments)."""

API_KEY_LABEL = f"{GROUP}/api-key"
"""Label (value "true") on the Secrets that hold an environment's API-key hashes."""

AUDIT_LABEL = f"{GROUP}/audit-record"
"""Label (value "true") on the ConfigMaps that keep a deleted environment's history and usage."""

# --- field types ------------------------------------------------------------------------------------

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
SEMVER_PATTERN = r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$"
HTTP_URL_PATTERN = r"^https?://[^\s]+$"
DNS_LABEL_MAX_LENGTH = 63
DNS_SUBDOMAIN_MAX_LENGTH = 253

DnsLabel = Annotated[str, Field(min_length=1, max_length=DNS_LABEL_MAX_LENGTH, pattern=DNS_LABEL_PATTERN)]
"""A Kubernetes DNS-1123 label: lower-case letters, digits and '-', at most 63 characters."""
ObjectName = Annotated[str, Field(min_length=1, max_length=DNS_SUBDOMAIN_MAX_LENGTH, pattern=DNS_SUBDOMAIN_PATTERN)]
"""The name of another object in the same namespace (a DNS-1123 subdomain)."""
SemVer = Annotated[str, Field(min_length=5, max_length=32, pattern=SEMVER_PATTERN)]
"""A version number MAJOR.MINOR.PATCH, e.g. 1.4.0 (no leading zeros, no pre-release suffix)."""


def semver_key(version: str) -> tuple[int, ...]:
    """Sort key of a :data:`SemVer`: 1.10.0 after 1.9.0."""
    return tuple(int(p) for p in version.split("."))


HttpUrl = Annotated[str, Field(min_length=8, max_length=2048, pattern=HTTP_URL_PATTERN)]
"""An absolute http:// or https:// URL."""
DisplayName = Annotated[str, Field(min_length=1, max_length=253)]
Description = Annotated[str, Field(max_length=4096)]

ModelType = Literal["openSource", "fineTune"]
"""``modelType`` of the model deploy call (docs/public-api.md, 'Deploy a model')."""

if TYPE_CHECKING:
    DeviceType = str
else:
    DeviceType = Literal[DEVICE_TYPES]
"""``deviceType`` (docs/public-api.md, 'Deploy a model'): one of the eight GPU instance types of the device catalog."""

JobType = Literal["MODELS", "TOOLS"]
JobAction = Literal["EXPORT", "DEPLOY"]
JobStatus = Literal["IN_PROGRESS", "SUCCESS", "FAILED"]

# --- status building blocks -------------------------------------------------------------------------

READY = "Ready"
PROGRESSING = "Progressing"
FAILED = "Failed"
"""The condition types Dockyard writes."""


class Condition(DockyardModel):
    """One observation of the object's state (the shape of Kubernetes metav1.Condition)."""

    type: Annotated[
        str,
        Field(
            max_length=316,
            pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        ),
    ]
    """Condition type: Ready, Progressing or Failed."""
    status: Literal["True", "False", "Unknown"]
    """Whether the condition holds."""
    observed_generation: Annotated[int, Field(ge=0)] | None = None
    """The metadata.generation the condition was computed from."""
    last_transition_time: datetime
    """When status last changed."""
    reason: Annotated[str, Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")]
    """CamelCase machine-readable reason, e.g. ImagePullBackOff or Unschedulable."""
    message: Annotated[str, Field(max_length=32768)] = ""
    """Human-readable details."""


Conditions = Annotated[list[Condition], Field(max_length=16), ListMap("type")]


class DockJob(DockyardModel):
    """The job record (docs/public-api.md, 'Dock status') of the latest public call that started work on this object.

    Every import completion, model deployment or tool deployment starts a NEW job with a new
    dockStatusId; the facade's dock-status lookup finds the object by the dockyard.dev/dock-status-id
    label and returns this record. SUCCESS means the workload really serves; FAILED carries a terminal,
    explained reason.
    """

    dock_status_id: Annotated[str, Field(min_length=1, max_length=128)]
    """Identifier of the job, returned to the caller and used to look its status up."""
    job_type: JobType
    """MODELS for model jobs, TOOLS for tool jobs."""
    action: JobAction
    """EXPORT for an import completion, DEPLOY for a deployment."""
    status: JobStatus
    """IN_PROGRESS, then SUCCESS or FAILED."""
    reason: str = ""
    """CamelCase reason of the current status, e.g. Available, ImagePullBackOff, NoFittingNode."""
    message: str = ""
    """Human-readable explanation, e.g. "no g5.48xlarge node with 8 free GPUs"."""
    start_time: datetime | None = None
    """When the job started."""
    completion_time: datetime | None = None
    """When the job reached SUCCESS or FAILED."""
    generation: Annotated[int, Field(ge=0)] | None = None
    """The metadata.generation of the object the job acts on."""
    template_hash: Annotated[str, Field(max_length=64)] | None = None
    """Hash of the workload (pod template and configuration) this job rolls out: a spec change that
    alters it starts a new job, a change that does not (replicas, informational fields) does not."""


class StatusBase(DockyardModel):
    """Fields of every Dockyard status."""

    observed_generation: Annotated[int, Field(ge=0)] | None = None
    """The metadata.generation the operator last reconciled."""
    conditions: Conditions = Field(default_factory=list)
    """Ready, Progressing and Failed, with reason and message."""


class WorkloadStatus(StatusBase):
    """Status of a resource served by pods (model and tool deployments)."""

    job: DockJob | None = None
    """The job record of the latest deployment."""
    replicas: Annotated[int, Field(ge=0)] | None = None
    """Pods that exist now (read by the scale subresource)."""
    ready_replicas: Annotated[int, Field(ge=0)] | None = None
    """Pods that are ready."""
    selector: str | None = None
    """Label selector of the pods, as a string (read by the scale subresource)."""
    service_name: str | None = None
    """The Service in front of the pods."""
    endpoint: str | None = None
    """Base URL the workload is reachable at inside the cluster."""


class Resource(KubeObject):
    """A ``dockyard.dev/v1alpha1`` custom resource."""

    api_version: Literal["dockyard.dev/v1alpha1"] = "dockyard.dev/v1alpha1"
    """dockyard.dev/v1alpha1."""
