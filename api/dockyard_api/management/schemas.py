"""Request and response bodies of the management endpoints (apps, versions, environments, API keys).

They are separate from the resource types: the API speaks in the words of docs/apps-environments.md
(name, description, version), the resources in Kubernetes' (metadata.name, spec.displayName, ...).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dockyard_core.resources.v1alpha1 import Agent, McpServer, ToolVersionRef
from dockyard_core.resources.v1alpha1.common import DNS_LABEL_PATTERN, Description, DisplayName, DnsLabel, SemVer


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


class KeyCreate(Body):
    model_config = ConfigDict(json_schema_extra={"examples": [{"name": "ci pipeline"}]})

    name: Annotated[str, Field(min_length=1, max_length=128)]
    """A descriptive name."""


class KeyView(Body):
    id: str
    name: str
    prefix: str
    environment: str
    created_at: str | None = None
    created_by: str | None = None
    last_used_at: str | None = None


class NewKeyView(KeyView):
    key: str
    """The key itself: shown this once, never again."""
