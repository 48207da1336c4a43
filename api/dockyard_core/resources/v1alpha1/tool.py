"""Tool (one version of a tool) and ToolDeployment (a tool made reachable for agents,
docs/public-api.md, 'Deploy a tool')."""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, StrictBool, StrictInt

from dockyard_core.resources.base import DockyardModel, field_rules, name_check
from dockyard_core.resources.cel import Rule, immutable
from dockyard_core.resources.crdinfo import AGE, CrdInfo, PrinterColumn, ScaleSubresource
from dockyard_core.resources.v1alpha1.common import (
    Description,
    DnsLabel,
    HttpUrl,
    ObjectName,
    Resource,
    SemVer,
    StatusBase,
    WorkloadStatus,
)

McpTransport = Literal["streamable-http", "sse"]
"""How an MCP client talks to the server: MCP's Streamable HTTP, or the older HTTP+SSE transport."""


class ToolContainer(DockyardModel):
    """A tool packaged as a container image that Dockyard runs."""

    image: Annotated[str, Field(min_length=1, max_length=1024)]
    """Container image reference, e.g. ghcr.io/acme/weather-tool:1.2.0 (pin a tag or digest)."""
    port: Annotated[StrictInt, Field(ge=1, le=65535)] = 8080
    """Port the container serves HTTP on."""


class ToolMcp(DockyardModel):
    """The tool speaks the Model Context Protocol."""

    transport: McpTransport = "streamable-http"
    """MCP transport the tool serves."""
    path: Annotated[str, Field(max_length=256, pattern=r"^/[^\s]*$")] = "/mcp"
    """HTTP path of the MCP endpoint."""


def _image_xor_endpoint(spec: ToolSpec) -> bool:
    return (spec.container is None) != (spec.endpoint is None)


class ToolSpec(DockyardModel):
    """One version of a tool: a container image Dockyard runs, or an HTTP endpoint that runs elsewhere.

    A Tool never changes (an AppVersion pins it); a new version is a new Tool named
    <name>-<version>. Deleting a Tool that an active AppVersion links is refused (an admission
    webhook, since it depends on other objects).
    """

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.container) != has(self.endpoint)",
            "exactly one of container or endpoint must be set",
            check=_image_xor_endpoint,
        ),
        Rule("self == oldSelf", "a Tool is one immutable tool version: create a new Tool for a new version"),
    )

    name: DnsLabel
    """The tool's name, as agents list it in their tools (same for all its versions)."""
    version: SemVer
    """This tool version, MAJOR.MINOR.PATCH."""
    description: Description = ""
    """What the tool does (shown to agents and people)."""
    container: ToolContainer | None = None
    """Run the tool from a container image."""
    endpoint: HttpUrl | None = None
    """Call the tool at this URL instead (it runs elsewhere)."""
    mcp: ToolMcp | None = None
    """Set when the tool is an MCP server."""
    parameters: dict[str, Any] | None = None
    """JSON Schema (an object schema) of the arguments of an HTTP tool: agents offer it to their model as a
    function's parameters and POST the model's arguments to the tool as a JSON object. An MCP tool lists
    its own schemas (tools/list)."""


class Tool(Resource):
    """One version of a tool (container image or HTTP endpoint, optionally an MCP server).

    The object's name is the public API's toolId and must be <spec.name>-<spec.version> (e.g. weather-1.2.0), so
    the API server itself keeps each version of a tool unique.
    """

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="tools",
        short_names=("tool",),
        printer_columns=(
            PrinterColumn("Tool", ".spec.name", description="The tool's name"),
            PrinterColumn("Version", ".spec.version", description="This tool version"),
            PrinterColumn("Image", ".spec.container.image", priority=1, description="Container image"),
            PrinterColumn("Endpoint", ".spec.endpoint", priority=1, description="External endpoint"),
            AGE,
        ),
        selectable_fields=(".spec.name", ".spec.version"),
    )
    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "self.metadata.name == self.spec.name + '-' + self.spec.version",
            "metadata.name must be <spec.name>-<spec.version>, e.g. weather-1.2.0",
            check=name_check(lambda t: (t.spec.name, t.spec.version)),
        ),
    )

    kind: Literal["Tool"] = "Tool"
    spec: ToolSpec
    status: StatusBase = Field(default_factory=StatusBase)

    @staticmethod
    def object_name(name: str, version: str) -> str:
        """The object name (toolId) of version ``version`` of tool ``name``."""
        return f"{name}-{version}"


class ToolDeploymentSpec(DockyardModel):
    """A tool to make reachable for agents: the body of the tool deploy call (POST /api/public/tools/{toolId}/deploy).

    An image tool runs as pods behind a Service; an endpoint tool is checked for reachability.
    """

    tool_ref: Annotated[ObjectName, field_rules(immutable("toolRef", "deploy another tool with a new ToolDeployment"))]
    """Name of the Tool to deploy (the public API's toolId), in this namespace."""
    is_async: StrictBool = False
    """As sent by the caller: false when the call waited for the deployment to finish, true when it
    returned at once with status IN_PROGRESS."""
    replicas: Annotated[StrictInt, Field(ge=1, le=50)] = 1
    """Pods of an image tool (ignored for an endpoint tool); scale subresource."""


def tool_deployment_name(environment: str, tool: str, version: str) -> str:
    """The ToolDeployment of version ``version`` of tool ``tool`` in an environment: one per tool VERSION (a
    ToolDeployment's toolRef is immutable). Both the environment's reconciler and the public deploy API use
    it, so a tool deployed through the API and later made part of the environment's version is one object."""
    name = f"{environment}-{tool}-{version.replace('.', '-')}"
    return name if len(name) <= 63 else f"{name[:54]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


class ToolDeployment(Resource):
    """A tool made reachable for agents; status.job is the dock job of the deployment."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="tooldeployments",
        short_names=("tdep",),
        printer_columns=(
            PrinterColumn("Tool", ".spec.toolRef", description="The Tool deployed"),
            PrinterColumn("Replicas", ".status.replicas", "integer", "Pods that exist"),
            PrinterColumn("Ready", ".status.readyReplicas", "integer", "Pods that are ready"),
            PrinterColumn("Status", ".status.job.status", description="Dock status of the latest job"),
            PrinterColumn("Endpoint", ".status.endpoint", priority=1, description="Where agents reach it"),
            PrinterColumn("Job", ".status.job.dockStatusId", priority=1, description="dockStatusId"),
            AGE,
        ),
        scale=ScaleSubresource(),
        selectable_fields=(".spec.toolRef",),
    )

    kind: Literal["ToolDeployment"] = "ToolDeployment"
    spec: ToolDeploymentSpec
    status: WorkloadStatus = Field(default_factory=WorkloadStatus)
