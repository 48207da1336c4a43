"""App (an application's mutable draft) and AppVersion (an immutable, deployable snapshot of it)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from dockyard_core.resources.base import DockyardModel, ListMap, ListSet, name_check
from dockyard_core.resources.cel import Rule
from dockyard_core.resources.crdinfo import AGE, CrdInfo, PrinterColumn
from dockyard_core.resources.v1alpha1.common import (
    DNS_LABEL_PATTERN,
    Description,
    DisplayName,
    DnsLabel,
    HttpUrl,
    ObjectName,
    Resource,
    SemVer,
    StatusBase,
)
from dockyard_core.resources.v1alpha1.evaluations import EvaluationSuite, EvaluationSummaries
from dockyard_core.resources.v1alpha1.guardrails import Guardrails
from dockyard_core.resources.v1alpha1.tool import McpTransport

MCP_TOOL_NAME = r"[A-Za-z0-9_.-]{1,128}"
"""A tool name as the MCP specification recommends it (1 to 128 of A-Z, a-z, 0-9, _, - and .)."""
MCP_TOOL_REF_PATTERN = "^" + DNS_LABEL_PATTERN.strip("^$") + "/" + MCP_TOOL_NAME + "$"
"""``<server>/<tool>``: a tool of an MCP server of the app (an entry of mcpServers, or an MCP Tool)."""
TOOL_TEST_PATTERN = "^" + DNS_LABEL_PATTERN.strip("^$") + "(/" + MCP_TOOL_NAME + ")?$"
"""What a tool test call names: an HTTP tool (a DNS label) or ``<server>/<tool>``."""

McpToolRef = Annotated[str, Field(min_length=3, max_length=192, pattern=MCP_TOOL_REF_PATTERN)]


class Agent(DockyardModel):
    """One AI agent of the app."""

    name: DnsLabel
    """The agent's name, unique in the app."""
    version: Annotated[str, Field(min_length=1, max_length=64)]
    """The agent version included (precise agent versions are selected per app version)."""
    instructions: Annotated[str, Field(max_length=32768)] = ""
    """System instructions of the agent."""
    model: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    """The ModelDeployment (in this namespace) the agent calls: its object name, or its display name (the
    deploy call's name, spec.name), which must then be unique among the namespace's ModelDeployments."""
    tools: Annotated[list[DnsLabel], Field(max_length=32), ListSet()] = Field(default_factory=list)
    """Names of the tools the agent may call; toolVersions pins the version of each."""
    mcp_tools: Annotated[list[McpToolRef], Field(max_length=64), ListSet()] | None = None
    """MCP tools the agent may call, each <server>/<tool>: <server> an entry of mcpServers, or an MCP Tool
    (spec.mcp) the agent lists in tools. An agent that names any gets only these MCP tools; one that names
    none (absent or empty) gets every tool of the app's MCP servers and of its MCP Tools (as before mcpTools
    existed).
    Creating a version checks that each server lists the tool it names."""
    knowledge_bases: Annotated[list[DnsLabel], Field(max_length=16), ListSet()] = Field(default_factory=list)
    """Names of the knowledge bases the agent may search (each a tool search_<name> of the agent);
    knowledgeBaseVersions pins the version of each (docs/knowledge-bases.md)."""


class ToolVersionRef(DockyardModel):
    """One tool and the version of it the app uses: the Tool named <name>-<version>."""

    name: DnsLabel
    """The tool's name (Tool spec.name)."""
    version: SemVer
    """The tool version (Tool spec.version)."""


class KnowledgeBaseVersionRef(DockyardModel):
    """One knowledge base and the version of it the app uses: the KnowledgeBase named <name>-<version>."""

    name: DnsLabel
    """The knowledge base's name (KnowledgeBase spec.name)."""
    version: SemVer
    """The version (KnowledgeBase spec.version)."""


class McpServer(DockyardModel):
    """An MCP server the app's agents connect to."""

    name: DnsLabel
    """The server's name, unique in the app."""
    url: HttpUrl
    """URL of the server's MCP endpoint."""
    transport: McpTransport = "streamable-http"
    """MCP transport the server speaks."""
    headers: Annotated[dict[str, Annotated[str, Field(max_length=4096)]], Field(max_length=32)] = Field(
        default_factory=dict
    )
    """Extra HTTP headers sent to the server. Not for credentials: use headersSecretRef."""
    headers_secret_ref: ObjectName | None = None
    """Name of a Secret (in this namespace) whose keys and values are sent as extra HTTP headers."""


class AppContent(DockyardModel):
    """What an app is made of: agents, pinned tool versions, MCP servers and guardrails."""

    description: Description = ""
    """What the app does."""
    agents: Annotated[list[Agent], Field(max_length=32), ListMap("name")] = Field(default_factory=list)
    """The app's agents."""
    tool_versions: Annotated[list[ToolVersionRef], Field(max_length=64), ListMap("name")] = Field(default_factory=list)
    """The version of each tool the agents use (one version per tool)."""
    knowledge_base_versions: Annotated[list[KnowledgeBaseVersionRef], Field(max_length=32), ListMap("name")] = Field(
        default_factory=list
    )
    """The version of each knowledge base the agents search (one version per knowledge base)."""
    mcp_servers: Annotated[list[McpServer], Field(max_length=32), ListMap("name")] = Field(default_factory=list)
    """MCP server configurations."""
    guardrails: Guardrails | None = None
    """Policies the runtime applies to the user's messages, the agents' answers and the tool calls
    (docs/guardrails.md). Absent: no guardrails."""
    evaluations: EvaluationSuite | None = None
    """The evaluation suite of the app (docs/promotion.md): cases run against an environment, whose results
    compute the checklist's Testing items and gate deploys. Absent: no suite."""


class AppSpec(AppContent):
    """The app's draft: freely editable; restoring a version overwrites it whole (Restore)."""

    display_name: DisplayName | None = None
    """Human-readable name of the app."""


def _mcp_servers_named(spec: AppVersionSpec) -> bool:
    servers = {s.name for s in spec.mcp_servers}
    return all(
        ref.split("/", 1)[0] in servers or ref.split("/", 1)[0] in agent.tools
        for agent in spec.agents
        for ref in agent.mcp_tools or []
    )


def _knowledge_bases_pinned(spec: AppVersionSpec) -> bool:
    pinned = {k.name for k in spec.knowledge_base_versions}
    return all(kb in pinned for agent in spec.agents for kb in agent.knowledge_bases)


def _tools_pinned(spec: AppVersionSpec) -> bool:
    pinned = {t.name for t in spec.tool_versions}
    return all(tool in pinned for agent in spec.agents for tool in agent.tools)


class AppVersionSpec(AppContent):
    """A versioned, immutable snapshot of an App: what is deployed to environments.

    Creating one validates it (every tool an agent uses has a pinned version). Rules that need other
    objects are admission webhooks, not schema rules: the pinned Tools and the agents' models must
    exist; a version deployed to an environment can be neither changed nor deleted.
    """

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!has(self.agents) || self.agents.all(a, !has(a.tools) || a.tools.all(t,"
            " has(self.toolVersions) && self.toolVersions.exists(v, v.name == t)))",
            "every tool an agent uses must have a version in toolVersions",
            check=_tools_pinned,
            field_path=".toolVersions",
        ),
        Rule(
            "!has(self.agents) || self.agents.all(a, !has(a.knowledgeBases) || a.knowledgeBases.all(k,"
            " has(self.knowledgeBaseVersions) && self.knowledgeBaseVersions.exists(v, v.name == k)))",
            "every knowledge base an agent searches must have a version in knowledgeBaseVersions",
            check=_knowledge_bases_pinned,
            field_path=".knowledgeBaseVersions",
        ),
        Rule(
            "!has(self.agents) || self.agents.all(a, !has(a.mcpTools) || a.mcpTools.all(m,"
            " (has(self.mcpServers) && self.mcpServers.exists(s, m.startsWith(s.name + '/')))"
            " || (has(a.tools) && a.tools.exists(t, m.startsWith(t + '/')))))",
            "every MCP tool an agent names (mcpTools, <server>/<tool>) must be of one of spec.mcpServers or of an "
            "MCP Tool the agent lists in tools",
            check=_mcp_servers_named,
            field_path=".agents",
        ),
        Rule("self == oldSelf", "an AppVersion is immutable: create a new version instead"),
    )

    app_ref: ObjectName
    """Name of the App (in this namespace) this is a version of."""
    version: SemVer
    """Version number, MAJOR.MINOR.PATCH."""
    display_name: DisplayName
    """Name entered at creation (its "name")."""


TOOL_TESTS_LIMIT = 128
"""At most this many recorded tool test calls per App or AppVersion (the newest per environment and tool)."""


class ToolTest(DockyardModel):
    """One recorded test call of a tool, made by an app owner through Dockyard against the deployment of the
    tool in one environment (docs/apps-environments.md, "Tool test calls"). Written by the facade only."""

    environment: ObjectName
    """The Environment (object name) whose deployment of the tool was called."""
    tool: Annotated[str, Field(min_length=1, max_length=192)]
    """What was called: an HTTP tool's name, or <server>/<tool> for a tool of an MCP server (an entry of
    mcpServers, or a Tool with spec.mcp pinned in toolVersions)."""
    tool_version: Annotated[str, Field(max_length=32)] = ""
    """The pinned tool version called (empty for the tools of mcpServers)."""
    app_version: Annotated[str, Field(min_length=1, max_length=32)]
    """The version the environment served when it was called (draft for the App's draft)."""
    target: Annotated[str, Field(max_length=2048)] = ""
    """What answered: the ToolDeployment's name, or the MCP server's URL."""
    revision: Annotated[str, Field(max_length=128)] = ""
    """The ToolDeployment's <uid>/<generation> when called (empty for mcpServers): a test of another
    deployment of the tool does not count."""
    passed: bool
    """Whether the call succeeded (an HTTP 2xx answer; an MCP result that is not an error)."""
    at: datetime
    """When it was called."""
    by: Annotated[str, Field(max_length=253)] = ""
    """Who called it (the Kubernetes user)."""
    duration_ms: Annotated[int, Field(ge=0)] = 0
    """How long the call took."""
    error: Annotated[str, Field(max_length=512)] = ""
    """Why it failed (empty when it passed), shortened."""


ToolTests = Annotated[list[ToolTest], Field(max_length=TOOL_TESTS_LIMIT)]


class AppStatus(StatusBase):
    """Observed state of an App."""

    tool_tests: ToolTests = Field(default_factory=list)
    """Recorded tool test calls against the draft's deployments (the newest per environment and tool)."""
    evaluations: EvaluationSummaries = Field(default_factory=list)
    """Summaries of the draft's evaluation runs (the newest per environment; docs/promotion.md)."""


class AppVersionStatus(StatusBase):
    """Observed state of an AppVersion."""

    deployed_in: Annotated[list[str], ListSet()] = Field(default_factory=list)
    """Environments where this version is Active (a deployed version cannot be deleted)."""
    tool_tests: ToolTests = Field(default_factory=list)
    """Recorded tool test calls against this version's deployments (the newest per environment and tool):
    the checklist item "Tools deployed and tested" reads them."""
    evaluations: EvaluationSummaries = Field(default_factory=list)
    """Summaries of this version's evaluation runs (the newest per environment, shadow runs included): the
    checklist's Testing items and the environments' promotion gates read them (docs/promotion.md)."""


class App(Resource):
    """An application: its mutable draft of agents, tool versions and MCP servers.

    The draft environment serves the draft; AppVersions are immutable snapshots of it.
    """

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="apps",
        short_names=("app",),
        printer_columns=(PrinterColumn("Display Name", ".spec.displayName", description="Name of the app"), AGE),
    )

    kind: Literal["App"] = "App"
    spec: AppSpec = Field(default_factory=AppSpec)
    status: AppStatus = Field(default_factory=AppStatus)


class AppVersion(Resource):
    """An immutable snapshot of an App (version MAJOR.MINOR.PATCH) that can be deployed to environments.

    The object's name must be <spec.appRef>-<spec.version> (e.g. support-bot-1.2.0), so the API server
    itself keeps version numbers unique per app.
    """

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="appversions",
        short_names=("appv",),
        printer_columns=(
            PrinterColumn("App", ".spec.appRef", description="The App"),
            PrinterColumn("Version", ".spec.version", description="Version number"),
            PrinterColumn("Display Name", ".spec.displayName", description="Name entered at creation"),
            AGE,
        ),
        selectable_fields=(".spec.appRef", ".spec.version"),
    )
    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "self.metadata.name == self.spec.appRef + '-' + self.spec.version",
            "metadata.name must be <spec.appRef>-<spec.version>, e.g. support-bot-1.2.0",
            check=name_check(lambda v: (v.spec.app_ref, v.spec.version)),
        ),
    )

    kind: Literal["AppVersion"] = "AppVersion"
    spec: AppVersionSpec
    status: AppVersionStatus = Field(default_factory=AppVersionStatus)

    @staticmethod
    def object_name(app: str, version: str) -> str:
        """The object name of version ``version`` of App ``app``."""
        return f"{app}-{version}"
