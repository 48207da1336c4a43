"""Environment: a deployment target of an App (draft, staging, production, ...)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from dockyard_api.resources.base import DockyardModel, field_rules
from dockyard_api.resources.cel import immutable
from dockyard_api.resources.crdinfo import AGE, CrdInfo, PrinterColumn
from dockyard_api.resources.v1alpha1.common import (
    Description,
    DisplayName,
    ObjectName,
    Resource,
    SemVer,
    StatusBase,
)

EnvironmentPhase = Literal["Pending", "Deploying", "Active", "Failed"]
HistoryStatus = Literal["Active", "Previous"]
ChecklistCategory = Literal["Configuration", "Testing", "Security", "Monitoring"]
ChecklistState = Literal["Done", "NotDone", "Manual"]


class EnvironmentSpec(DockyardModel):
    """An isolated deployment target of an App, with its own configuration, URLs, API keys and history.

    Deploying a version, and rolling back from the history, both mean setting appVersion. Deleting the
    environment deactivates its endpoints and releases its resources; audit logs and usage statistics
    are kept.
    """

    app_ref: Annotated[ObjectName, field_rules(immutable("appRef"))]
    """Name of the App (in this namespace) this environment deploys; immutable."""
    display_name: DisplayName | None = None
    """Name entered at creation (SPEC's "name"); the object's name when absent."""
    description: Description = ""
    """What the environment is for."""
    app_version: SemVer | None = None
    """The linked version (the AppVersion of appRef with this spec.version) to deploy. Change it to
    deploy another version or to roll back. Absent: the environment serves the App's draft (the draft
    environment)."""
    configuration: dict[str, Any] = Field(default_factory=dict)
    """Environment-specific configuration, free-form; independent of other environments."""


class HistoryEntry(DockyardModel):
    """One deployment of a version to the environment (SPEC "Deployment history entry")."""

    version: Annotated[str, Field(min_length=1, max_length=32)]
    """The app version deployed (draft for the App's draft)."""
    deployed_at: datetime
    """When it was deployed."""
    deployed_by: Annotated[str, Field(max_length=253)] = ""
    """Who deployed it (from the dockyard.dev/deployed-by annotation)."""
    status: HistoryStatus
    """Active for the version deployed now, Previous for earlier ones."""


class EnvironmentUrls(DockyardModel):
    """Where the deployed app is reached."""

    web_client_url: str | None = None
    """The web client URL generated for the environment."""
    api_base_url: str | None = None
    """Base URL of the deployed-app API (POST {apiBaseUrl}/v1/apps/{appId}/execute)."""
    widget_script_url: str | None = None
    """The embeddable widget's loader script ({widget_url}/v1/loader.js)."""


class ChecklistItem(DockyardModel):
    """One item of SPEC.md's pre-production checklist."""

    category: ChecklistCategory
    """Configuration, Testing, Security or Monitoring."""
    item: Annotated[str, Field(min_length=1, max_length=128)]
    """What is checked, e.g. "API keys generated"."""
    state: ChecklistState
    """Done or NotDone where Dockyard can tell from the cluster's state; Manual where a person must."""
    detail: Annotated[str, Field(max_length=1024)] = ""
    """How the state was computed, or what to check by hand."""


class EnvironmentStatus(StatusBase):
    """Observed state of an Environment."""

    phase: EnvironmentPhase | None = None
    """Pending, Deploying, Active or Failed."""
    active_version: str | None = None
    """The version serving now (draft for the App's draft)."""
    app_id: str | None = None
    """The app identifier of the deployed-app API and of the widget's data-app-id."""
    urls: EnvironmentUrls | None = None
    """Generated URLs."""
    curl_script: str | None = None
    """A cURL command calling the deployed app by API (the API key left as a placeholder)."""
    history: Annotated[list[HistoryEntry], Field(max_length=100)] = Field(default_factory=list)
    """Deployments, newest first: one Active entry, then Previous ones."""
    checklist: Annotated[list[ChecklistItem], Field(max_length=64)] = Field(default_factory=list)
    """The pre-production checklist (SPEC.md), recomputed on every reconcile."""


class Environment(Resource):
    """A deployment target of an App (draft, staging, production, ...) and the version it serves."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="environments",
        short_names=("env",),
        printer_columns=(
            PrinterColumn("App", ".spec.appRef", description="The App"),
            PrinterColumn("Version", ".spec.appVersion", description="The linked app version"),
            PrinterColumn("Active", ".status.activeVersion", description="The version serving now"),
            PrinterColumn("Status", ".status.phase", description="Pending, Deploying, Active or Failed"),
            PrinterColumn("URL", ".status.urls.webClientUrl", priority=1, description="Web client URL"),
            AGE,
        ),
        selectable_fields=(".spec.appRef",),
    )

    kind: Literal["Environment"] = "Environment"
    spec: EnvironmentSpec
    status: EnvironmentStatus = Field(default_factory=EnvironmentStatus)
