"""Request and response bodies of the management endpoints (apps, versions, environments, API keys,
the catalog, usage).

They are separate from the resource types: the API speaks in the words of docs/apps-environments.md
(name, description, version), the resources in Kubernetes' (metadata.name, spec.displayName, ...).

The answers (:class:`View` and its subclasses) are camelCase on the wire. A view's own fields have no
defaults, so every answer names each of them (``null`` where there is nothing); the resource types
nested in a view (agents, tool versions, history entries, conditions, ...) are answered as stored, with
the fields the object holds and no more: the routes set ``response_model_exclude_unset`` and
:meth:`View.wire` (what the console's templates read) does the same.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dockyard_core.jobs import JobRecord
from dockyard_core.resources.v1alpha1 import Agent, McpServer, ToolVersionRef
from dockyard_core.resources.v1alpha1.canary import CanarySpec, CanaryStatus, SloSpec, SloStatus
from dockyard_core.resources.v1alpha1.common import (
    DNS_LABEL_PATTERN,
    Condition,
    Description,
    DisplayName,
    DnsLabel,
    SemVer,
)
from dockyard_core.resources.v1alpha1.environment import (
    Access,
    AccessPatch,
    ChecklistItem,
    HistoryEntry,
    PiiSettings,
    RateLimits,
    WidgetSettings,
)
from dockyard_core.resources.v1alpha1.guardrails import Guardrails


class Body(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class DraftUpdate(Body):
    """The whole draft: what is not sent is emptied (like a restore, an update replaces the draft)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"description": "v2 draft", "agents": [], "toolVersions": [], "mcpServers": []}]
        }
    )

    display_name: DisplayName | None = None
    description: Description = ""
    agents: Annotated[list[Agent], Field(max_length=32)] = Field(default_factory=list)
    tool_versions: Annotated[list[ToolVersionRef], Field(max_length=64)] = Field(default_factory=list)
    mcp_servers: Annotated[list[McpServer], Field(max_length=32)] = Field(default_factory=list)
    guardrails: Guardrails | None = None
    """The app's guardrails (docs/guardrails.md); absent: none."""


class AppCreate(DraftUpdate):
    """A new App: its name (the app id) and its first draft."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "support-bot",
                    "displayName": "Support bot",
                    "description": "Answers customer questions",
                    "agents": [
                        {
                            "name": "triage",
                            "version": "1.0.0",
                            "instructions": "Route the question.",
                            "model": "llama-3-8b-instruct",
                            "tools": ["weather"],
                        }
                    ],
                    "toolVersions": [{"name": "weather", "version": "1.2.0"}],
                    "mcpServers": [{"name": "docs", "url": "https://mcp.example.com/mcp"}],
                }
            ]
        }
    )

    name: DnsLabel
    """The App's object name (its app id)."""


class VersionCreate(Body):
    """Create a version (docs/apps-environments.md, 'Versions'): name, description and the agent and tool
    versions to include.

    Agents, tool versions and MCP servers default to the App's draft when not sent.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"version": "1.0.0", "name": "First release", "description": "Triage agent with weather tool"}]
        }
    )

    version: SemVer
    name: DisplayName
    description: Description = ""
    agents: Annotated[list[Agent], Field(max_length=32)] | None = None
    tool_versions: Annotated[list[ToolVersionRef], Field(max_length=64)] | None = None
    mcp_servers: Annotated[list[McpServer], Field(max_length=32)] | None = None
    guardrails: Guardrails | None = None
    """The version's guardrails (docs/guardrails.md); absent: the draft's."""


class Restore(Body):
    """Restore a saved version into the draft. It overwrites the whole draft and cannot be undone."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"version": "1.0.0", "confirm": True}]})

    version: SemVer
    confirm: bool
    """Must be true: the draft is overwritten and the restore cannot be undone."""


class EnvironmentCreate(Body):
    """Create an environment (docs/apps-environments.md, 'Environments'): name, description, app version."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"name": "production", "description": "Customers", "appVersion": "1.0.0"}]}
    )

    name: Annotated[str, Field(min_length=1, max_length=40, pattern=DNS_LABEL_PATTERN)]
    """The environment's name; its object name is <app>-<name>."""
    description: Description = ""
    app_version: SemVer | None = None
    """The version to deploy; absent: the App's draft."""
    configuration: dict[str, Any] = Field(default_factory=dict)


class Deploy(Body):
    """Deploy a version to the environment (docs/apps-environments.md, 'Environments')."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"version": "1.1.0"}]})

    version: SemVer


class Rollback(Body):
    """Redeploy a previous version from the history; confirm must be true."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"version": "1.0.0", "confirm": True}]})

    version: SemVer
    confirm: bool


class EnvironmentSettings(Body):
    """A JSON merge patch of the environment's settings (docs/apps-environments.md, 'Settings'): only the
    members sent change; ``null`` removes one (its default applies). Validated like the Environment itself."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"access": {"webClient": "public"}, "widget": {"allowedOrigins": ["https://shop.example.com"]}}
            ]
        }
    )

    access: AccessPatch | None = None
    widget: WidgetSettings | None = None
    rate_limits: RateLimits | None = None
    configuration: dict[str, Any] | None = None
    pii: PiiSettings | None = None

    def spec_patch(self) -> dict[str, Any]:
        """The merge patch of ``spec``: the members (and, inside them, the fields) that were sent."""
        out: dict[str, Any] = {}
        for name in self.model_fields_set:
            value = getattr(self, name)
            key = to_camel(name)
            if isinstance(value, BaseModel):
                out[key] = value.model_dump(mode="json", by_alias=True, exclude_unset=True)
            else:
                out[key] = value
        return out


class KeyCreate(Body):
    model_config = ConfigDict(json_schema_extra={"examples": [{"name": "ci pipeline"}]})

    name: Annotated[str, Field(min_length=1, max_length=128)]
    """A descriptive name."""


# --- answers ----------------------------------------------------------------------------------------


class View(BaseModel):
    """An answer: camelCase on the wire; nested resource types as stored (the module's docstring)."""

    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True, serialize_by_alias=True)

    def wire(self) -> dict[str, Any]:
        """The JSON the API answers, as a dict."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class AppView(View):
    """An App: its name (the app id) and its draft."""

    name: str
    namespace: str
    display_name: str | None
    description: str
    agents: list[Agent]
    tool_versions: list[ToolVersionRef]
    mcp_servers: list[McpServer]
    guardrails: Guardrails | None = None
    restored_from: str | None
    """The version the draft was last restored from."""
    created_at: datetime | None


class AppList(View):
    items: list[AppView]


class VersionView(View):
    """An AppVersion in the API's words: ``name`` is the name entered at creation, ``objectName`` the object's."""

    app: str
    version: str
    name: str
    description: str
    agents: list[Agent]
    tool_versions: list[ToolVersionRef]
    mcp_servers: list[McpServer]
    guardrails: Guardrails | None = None
    deployed_in: list[str]
    """The environments where this version is Active."""
    object_name: str
    created_at: datetime | None


class VersionList(View):
    items: list[VersionView]
    """Oldest version first."""


class EnvironmentView(View):
    """An Environment: its linked version, URLs, cURL script, history and checklist (``name`` is the name
    entered at creation, ``objectName`` the object's: <app>-<name>)."""

    name: str
    object_name: str
    namespace: str
    app: str
    description: str
    app_version: str
    """The linked version; ``draft`` for the App's draft."""
    active_version: str | None
    phase: str | None
    web_client_url: str | None
    api_base_url: str | None
    widget_script_url: str | None
    app_id: str | None
    curl_script: str | None
    embed_code: str | None
    access: Access
    widget: WidgetSettings
    rate_limits: RateLimits | None
    """Limits on calls of the deployed app; null: none."""
    pii: PiiSettings | None = None
    """PII protection (docs/guardrails.md); null: not configured."""
    history: list[HistoryEntry]
    canary: CanarySpec | None = None
    """The canary (docs/promotion.md); null: none running."""
    canary_state: CanaryStatus | None = None
    """The running canary as the operator saw it, or how the last one ended."""
    slo: SloSpec | None = None
    """The SLOs watched during a canary and after a deploy; null: none."""
    slo_state: SloStatus | None = None
    """What the SLO watcher last measured per version."""
    checklist: list[ChecklistItem]
    conditions: list[Condition]
    configuration: dict[str, Any]
    deleting_since: datetime | None
    """Set while the environment is being deleted."""


class EnvironmentChange(EnvironmentView):
    """The environment after a deploy, redeploy or rollback, and what was done in words."""

    message: str


class EnvironmentList(View):
    items: list[EnvironmentView]


class DeleteEnvironmentAnswer(View):
    deleted: str
    """The environment's object name."""
    audit_record: str
    """The ConfigMap that keeps its history and usage (``ConfigMap <namespace>/<name>``)."""
    message: str


class KeyView(View):
    id: str
    name: str
    prefix: str
    environment: str
    created_at: str | None
    created_by: str | None
    last_used_at: str | None


class NewKeyView(KeyView):
    key: str
    """The key itself: shown this once, never again."""


class KeyList(View):
    items: list[KeyView]
    """Oldest key first."""


class AgentVersionView(View):
    """An (agent, version) pair to pick from, with its configuration and where it is found."""

    name: str
    version: str
    agent: Agent
    found_in: list[str]
    """``draft`` and the versions that hold it."""


class AgentVersionList(View):
    items: list[AgentVersionView]


class ToolView(View):
    """A tool version (a Tool) to pick from."""

    tool_id: str
    name: str
    version: str
    description: str
    kind: str
    """``image`` (Dockyard runs it) or ``endpoint`` (it runs elsewhere)."""
    image: str | None
    endpoint: str | None
    mcp: bool
    created_at: datetime | None


class ToolList(View):
    items: list[ToolView]


class ReadyView(View):
    """The Ready condition of an object."""

    status: str
    reason: str
    message: str


class ModelView(View):
    model_id: str
    model_type: str | None
    source: str | None
    """``hub`` or ``upload``."""
    phase: str | None
    format: str | None
    size_bytes: int | None
    job: JobRecord | None
    """The current job record (docs/public-api.md, 'Dock status'); null before the first."""
    ready: ReadyView | None
    is_adapter: bool = False
    base_model: str | None = None
    """For an adapter: the Model it is served on (spec.baseModel; a public deploy sets it)."""
    adapter_base: str | None = None
    """For an adapter: base_model_name_or_path of its adapter_config.json (status.adapter)."""


class ModelList(View):
    items: list[ModelView]


class ModelDeploymentView(View):
    name: str
    """The ModelDeployment object's name (the job record's deploymentName)."""
    display_name: str
    """The name the deploy call gave (spec.name, the served model name), e.g. Llama 3 8B; the object is named
    after it."""
    model_ref: str
    device_type: str
    replicas: int | None
    ready_replicas: int | None
    job: JobRecord | None
    ready: ReadyView | None


class ModelDeploymentList(View):
    items: list[ModelDeploymentView]


class ToolDeploymentView(View):
    name: str
    tool_ref: str
    environment: str | None
    """The environment that deployed it (absent for a direct public deploy)."""
    device_type: str | None
    replicas: int | None
    ready_replicas: int | None
    job: JobRecord | None
    ready: ReadyView | None


class ToolDeploymentList(View):
    items: list[ToolDeploymentView]
