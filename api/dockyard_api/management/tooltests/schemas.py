"""Bodies and answers of the tool test calls (docs/apps-environments.md, "Tool test calls")."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import Field

from dockyard_api.management.schemas import Body, View
from dockyard_core.resources.v1alpha1.app import TOOL_TEST_PATTERN, ToolTest


class ToolTestCall(Body):
    """Call one tool of the version active in the environment, as its agents would."""

    tool: Annotated[str, Field(min_length=1, max_length=192, pattern=TOOL_TEST_PATTERN)]
    """An HTTP tool's name (toolVersions), or <server>/<tool> for a tool of an MCP server (an entry of
    mcpServers, or a Tool with spec.mcp pinned in toolVersions)."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """The call's JSON arguments, validated against the tool's JSON Schema before the call."""


class ToolTestAnswer(View):
    """The call's outcome, as recorded (status.toolTests of the App or AppVersion) plus the tool's answer."""

    environment: str
    app_version: str
    tool: str
    tool_version: str
    target: str
    """The ToolDeployment called, or the MCP server's URL."""
    passed: bool
    result: str
    """The tool's answer (as the model would read it), at most 4096 characters here."""
    error: str
    at: datetime
    by: str
    duration_ms: int
    recorded_on: str
    """Where the record is kept: ``AppVersion <name>`` or ``App <name>`` (the draft)."""


class TestedTool(View):
    """A tool of the version active in the environment and its recorded test calls there."""

    name: str
    """An HTTP tool's name, an MCP Tool's name, or an MCP server's name (test its tools as <name>/<tool>)."""
    kind: str
    """``tool`` (an HTTP tool of toolVersions), ``mcpTool`` (an MCP Tool of toolVersions: test its tools as
    <name>/<tool>) or ``mcpServer`` (an entry of mcpServers)."""
    version: str = ""
    """The pinned tool version (toolVersions)."""
    named_tools: list[str] = Field(default_factory=list)
    """For an MCP server or MCP Tool: the tools its agents name (mcpTools); empty: every tool it lists."""
    tests: list[ToolTest] = Field(default_factory=list)
    """The newest recorded test call per tool under this name, in this environment."""


class TestedTools(View):
    environment: str
    app_version: str
    items: list[TestedTool]
