"""What a turn runs: the environment, the app content ACTIVE in it, the agents' models and tools.

An Environment serves the AppVersion ``<appRef>-<spec.appVersion>``, or the App's draft when
``spec.appVersion`` is absent (the draft environment). A session is pinned to the version it started
with (the conversation store keeps it), so a turn may run an older version than the active one.

Objects come from informers (watch-fed, no API call per turn) as the plain dicts they hold: a turn
validates no resource model (the hot path ``bench.execute`` measures), and a parsed app content is cached
by (namespace, name, resourceVersion): an AppVersion never changes, a draft edit is a new resourceVersion.
An environment's ``spec.configuration`` fills the ``{{name}}`` placeholders of the agents' instructions
(:mod:`~dockyard_api.runtime.variables`); the rendered agents are cached per (content, environment
resourceVersion), so a turn renders nothing unless the content or the environment changed.
The Secret of an MCP server's headers is read through core's :class:`~dockyard_core.repository.Objects`.
"""

from __future__ import annotations

import base64
import logging
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any

from dockyard_api.cache import Informer
from dockyard_api.runtime.agent import AgentSpec, ModelTarget
from dockyard_api.runtime.canary import Canary, LiveEvaluation, read_canary, read_live_evaluation
from dockyard_api.runtime.endpoints import EndpointResolver
from dockyard_api.runtime.errors import AppNotRunnableError, ModelUnavailableError
from dockyard_api.runtime.model import ModelClient
from dockyard_api.runtime.retrieval import KnowledgeSearch
from dockyard_api.runtime.tools import Limits, McpClient, Toolbox, http_function
from dockyard_api.runtime.variables import render, variables
from dockyard_core.errors import DockyardError, NotFoundError
from dockyard_core.guardrails import Guardrails, GuardrailsError, compile_guardrails
from dockyard_core.kubeclient import AsyncKube
from dockyard_core.mcp import McpServerRef
from dockyard_core.modelrefs import resolve_model
from dockyard_core.pii import PiiPolicy
from dockyard_core.repository import Objects
from dockyard_core.resources.v1alpha1.common import DNS_SUBDOMAIN_PATTERN
from dockyard_core.resources.v1alpha1.tool import tool_deployment_name

log = logging.getLogger(__name__)

DRAFT = "draft"
OBJECT_NAME = re.compile(DNS_SUBDOMAIN_PATTERN)


@dataclass(frozen=True)
class EnvironmentView:
    namespace: str
    name: str
    app: str
    active_version: str
    """The version the environment serves: spec.appVersion, or "draft"."""
    rate_limits: dict[str, Any]
    """spec.rateLimits (requestsPerMinute, tokensPerDay), {} when none are set."""
    variables: dict[str, str] = field(default_factory=dict)
    """spec.configuration as the text of each value: the agents' instruction variables."""
    resource_version: str = ""
    pii: PiiPolicy | None = None
    """spec.pii compiled (None: no PII protection)."""
    pii_error: str = ""
    """Why spec.pii does not compile (the turn is refused: 503)."""
    canary: Canary | None = None
    """spec.canary: the version a share of new sessions starts on (docs/promotion.md)."""
    live: LiveEvaluation | None = None
    """spec.slo's sampling of live turns for the evaluation pass rate (None: not watched)."""


@dataclass(frozen=True)
class McpServerSpec:
    name: str
    url: str
    transport: str
    headers: tuple[tuple[str, str], ...]
    headers_secret_ref: str | None


@dataclass(frozen=True)
class RunnableContent:
    """The runnable part of an App's draft or of an AppVersion."""

    version: str
    agents: tuple[AgentSpec, ...]
    tool_versions: dict[str, str]
    mcp_servers: tuple[McpServerSpec, ...]
    guardrails: Guardrails | None = None
    """spec.guardrails compiled once with the content (None: no policies)."""
    guardrails_error: GuardrailsError | None = None
    """Why spec.guardrails does not compile (a draft may hold what a version is refused for)."""
    knowledge_bases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The knowledge bases each agent searches (spec.agents[].knowledgeBases), by agent name."""
    knowledge_base_versions: dict[str, str] = field(default_factory=dict)
    """spec.knowledgeBaseVersions: the pinned version of each knowledge base."""


def parse_content(spec: dict[str, Any], version: str) -> RunnableContent:
    agents = tuple(
        AgentSpec(
            name=str(a.get("name", "")),
            instructions=str(a.get("instructions") or ""),
            model=a.get("model") or None,
            tools=tuple(str(t) for t in a.get("tools") or ()),
            mcp_tools=frozenset(str(t) for t in a.get("mcpTools") or ()),
        )
        for a in spec.get("agents") or ()
    )
    tools = {str(t["name"]): str(t["version"]) for t in spec.get("toolVersions") or () if "name" in t}
    servers = tuple(
        McpServerSpec(
            name=str(s.get("name", "")),
            url=str(s.get("url", "")),
            transport=str(s.get("transport") or "streamable-http"),
            headers=tuple(sorted((str(k), str(v)) for k, v in (s.get("headers") or {}).items())),
            headers_secret_ref=s.get("headersSecretRef") or None,
        )
        for s in spec.get("mcpServers") or ()
    )
    try:
        guardrails, error = compile_guardrails(spec.get("guardrails")), None
    except GuardrailsError as exc:
        guardrails, error = None, exc
    knowledge = {str(a.get("name", "")): tuple(str(k) for k in a.get("knowledgeBases") or ())
                 for a in spec.get("agents") or () if a.get("knowledgeBases")}  # fmt: skip
    pinned = {str(k["name"]): str(k["version"]) for k in spec.get("knowledgeBaseVersions") or () if "name" in k}
    return RunnableContent(version, agents, tools, servers, guardrails, error, knowledge, pinned)


def model_params(mdep: dict[str, Any]) -> dict[str, Any]:
    """The chat-completion body fields a ModelDeployment sets: its served name and hyperParameters."""
    spec = mdep.get("spec") or {}
    params: dict[str, Any] = {"model": spec.get("name") or mdep["metadata"]["name"]}
    hyper = spec.get("hyperParameters") or {}
    if "temperature" in hyper:
        params["temperature"] = hyper["temperature"]
    if hyper.get("maxTokens"):  # 0 leaves the engine's default (docs/deployed-app-api.md)
        params["max_tokens"] = hyper["maxTokens"]
    if "topP" in hyper:
        params["top_p"] = hyper["topP"]
    if "topK" in hyper:
        params["top_k"] = hyper["topK"]
    if hyper.get("stopSequence"):
        params["stop"] = list(hyper["stopSequence"])
    return params


def _pii(spec: Any) -> tuple[PiiPolicy | None, str]:
    try:
        return PiiPolicy.compile(spec), ""
    except Exception as exc:  # the webhook refuses what cannot compile; an older object may still hold it
        return None, str(exc) or exc.__class__.__name__


class AppLookup:
    """Reads environments, app contents, model deployments, tools and the Secrets MCP servers need."""

    def __init__(self, kube: AsyncKube, informers: dict[str, Informer], resolver: EndpointResolver) -> None:
        self.secrets = Objects(kube, "secrets", "Secret")
        self.informers = informers
        self.resolver = resolver
        self._contents: dict[tuple[str, str], tuple[str, RunnableContent]] = {}
        self._headers: dict[tuple[str, str], tuple[float, tuple[tuple[str, str], ...]]] = {}
        self._variables: dict[tuple[str, str], tuple[str, dict[str, str], PiiPolicy | None, str]] = {}
        self._agents: dict[tuple[str, str, str], tuple[RunnableContent, str, tuple[AgentSpec, ...]]] = {}
        self.knowledge: KnowledgeSearch | None = None
        """The knowledge index's reader (None: agents are offered no knowledge-base search)."""

    async def environment(self, namespace: str, name: str) -> EnvironmentView:
        env = await self.informers["environments"].get(namespace, name)
        if env is None or (env.get("metadata") or {}).get("deletionTimestamp"):
            raise NotFoundError(f"environment {name!r} does not exist in namespace {namespace!r}")
        spec = env.get("spec") or {}
        rv = str(env["metadata"].get("resourceVersion", ""))
        hit = self._variables.get((namespace, name))
        if hit is None or hit[0] != rv:
            if len(self._variables) > 10_000:
                self._variables.clear()
            pii, pii_error = _pii(spec.get("pii"))
            hit = self._variables[(namespace, name)] = (rv, variables(spec.get("configuration")), pii, pii_error)
        return EnvironmentView(
            namespace,
            name,
            str(spec.get("appRef", "")),
            str(spec.get("appVersion") or DRAFT),
            dict(spec.get("rateLimits") or {}),
            hit[1],
            rv,
            hit[2],
            hit[3],
            read_canary(spec),
            read_live_evaluation(spec) if "slo" in spec else None,
        )

    def agents(self, env: EnvironmentView, content: RunnableContent) -> tuple[AgentSpec, ...]:
        """``content``'s agents with ``env``'s configuration in their instructions (cached per content
        and environment resourceVersion; the content's own agents when nothing is substituted)."""
        if not env.variables:
            return content.agents
        key = (env.namespace, env.name, content.version)
        hit = self._agents.get(key)
        if hit is not None and hit[0] is content and hit[1] == env.resource_version:
            return hit[2]
        agents = tuple(replace(a, instructions=render(a.instructions, env.variables)) for a in content.agents)
        if len(self._agents) > 10_000:
            self._agents.clear()
        self._agents[key] = (content, env.resource_version, agents)
        return agents

    async def content(self, namespace: str, app: str, version: str) -> RunnableContent:
        """The app content of ``version`` ("draft": the App's draft)."""
        if version == DRAFT:
            obj = await self.informers["apps"].get(namespace, app)
            what = f"App {app!r}"
        else:
            obj = await self.informers["appversions"].get(namespace, f"{app}-{version}")
            what = f"version {version} of app {app!r} (AppVersion {app}-{version})"
        if obj is None:
            raise AppNotRunnableError(f"{what} does not exist any more", {"app": app, "version": version})
        meta = obj["metadata"]
        key = (namespace, meta["name"])
        rv = str(meta.get("resourceVersion", ""))
        hit = self._contents.get(key)
        if hit is not None and hit[0] == rv:
            return hit[1]
        content = parse_content(obj.get("spec") or {}, version)
        if len(self._contents) > 10_000:
            self._contents.clear()
        self._contents[key] = (rv, content)
        return content

    async def model_target(self, namespace: str, agent: AgentSpec) -> ModelTarget:
        if not agent.model:
            raise AppNotRunnableError(f"agent {agent.name!r} has no model", {"agent": agent.name})
        deployments = self.informers["modeldeployments"]
        # an object name is read (the cache may lag behind a new object); a display name is not a name to read
        named = len(agent.model) <= 253 and OBJECT_NAME.match(agent.model) is not None
        mdep = await deployments.get(namespace, agent.model) if named else None
        if mdep is None:  # the agent may name the ModelDeployment's display name (dockyard_core.modelrefs)
            listed = await deployments.in_namespace(namespace)
            names = {m["metadata"]["name"]: str((m.get("spec") or {}).get("name") or "") for m in listed}
            resolved = resolve_model(agent.model, names)
            mdep = next((m for m in listed if m["metadata"]["name"] == resolved.name), None)
            if mdep is None:
                raise ModelUnavailableError(
                    f"the model of agent {agent.name!r}: {resolved.problem}",
                    {"agent": agent.name, "modelDeployment": agent.model},
                )
        name = str(mdep["metadata"]["name"])
        base = await self.resolver.base_url(namespace, name)
        return ModelTarget(base, model_params(mdep), f"ModelDeployment {name!r}")

    async def tool_url(self, namespace: str, environment: str, tool: dict[str, Any]) -> str | None:
        spec = tool.get("spec") or {}
        if spec.get("endpoint"):
            return str(spec["endpoint"])
        tdep = await self.informers["tooldeployments"].get(
            namespace, tool_deployment_name(environment, spec["name"], spec["version"])
        )
        endpoint = ((tdep or {}).get("status") or {}).get("endpoint")
        return str(endpoint) if endpoint else None

    async def headers(self, namespace: str, secret: str | None) -> tuple[tuple[str, str], ...]:
        """The keys and values of Secret ``secret`` as HTTP headers (cached 30 s)."""
        if not secret:
            return ()
        hit = self._headers.get((namespace, secret))
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        try:
            obj = await self.secrets.get(namespace, secret)
        except DockyardError as exc:  # missing, or not readable: the server gets no extra headers
            log.warning("MCP headers Secret %s/%s cannot be read: %s", namespace, secret, exc.message)
            return ()
        found = tuple(
            sorted((k, base64.b64decode(v).decode("utf-8", "replace")) for k, v in (obj.get("data") or {}).items())
        )
        self._headers[(namespace, secret)] = (time.monotonic() + 30.0, found)
        return found


class TurnWorld:
    """An agent's model and tools inside one environment (the loop's :class:`AgentEnvironment`)."""

    def __init__(
        self,
        lookup: AppLookup,
        models: ModelClient,
        mcp: McpClient,
        env: EnvironmentView,
        content: RunnableContent,
        limits: Limits,
    ) -> None:
        self.lookup = lookup
        self.models = models
        self.mcp = mcp
        self.env = env
        self.content = content
        self.limits = limits

    async def model(self, agent: AgentSpec) -> ModelTarget:
        return await self.lookup.model_target(self.env.namespace, agent)

    async def toolbox(self, agent: AgentSpec) -> Toolbox:
        box = Toolbox()
        namespace = self.env.namespace
        servers: list[McpServerRef] = []
        for name in agent.tools:
            version = self.content.tool_versions.get(name)
            tool = await self.lookup.informers["tools"].get(namespace, f"{name}-{version}") if version else None
            if tool is None:
                log.warning("tool %s-%s of agent %s does not exist: not offered", name, version, agent.name)
                continue
            spec = tool.get("spec") or {}
            url = await self.lookup.tool_url(namespace, self.env.name, tool)
            if spec.get("mcp"):
                if url:
                    path = str((spec["mcp"] or {}).get("path") or "/mcp")
                    transport = str((spec["mcp"] or {}).get("transport") or "streamable-http")
                    servers.append(McpServerRef(name, url.rstrip("/") + path, transport))
                continue
            box.add(
                http_function(
                    name=name,
                    description=str(spec.get("description") or ""),
                    parameters=spec.get("parameters"),
                    url=url,
                    http=self.models.http(),
                    limits=self.limits,
                )
            )
        for server in self.content.mcp_servers:
            secret_headers = await self.lookup.headers(namespace, server.headers_secret_ref)
            servers.append(McpServerRef(server.name, server.url, server.transport, server.headers + secret_headers))
        for ref in servers:
            try:
                listed = await self.mcp.list_tools(ref, self.limits)
            except Exception as exc:  # an MCP server that is down: its tools are not offered this turn
                log.warning("MCP server %s (%s) cannot list its tools: %r", ref.name, ref.url, exc)
                continue
            if agent.mcp_tools:  # an agent that names MCP tools gets only those
                listed = [t for t in listed if f"{ref.name}/{t.name}" in agent.mcp_tools]
            for function in self.mcp.functions(ref, listed, self.limits):
                box.add(function)
        await self._knowledge(box, agent)
        return box

    async def _knowledge(self, box: Toolbox, agent: AgentSpec) -> None:
        """The search function of each knowledge base the agent lists (:mod:`~dockyard_api.runtime.retrieval`)."""
        search, namespace = self.lookup.knowledge, self.env.namespace
        for name in self.content.knowledge_bases.get(agent.name, ()):
            version = self.content.knowledge_base_versions.get(name)
            kb = await self.lookup.informers["knowledgebases"].get(namespace, f"{name}-{version}") if version else None
            if kb is None or search is None:
                log.warning(
                    "knowledge base %s-%s of agent %s is not searchable: not offered", name, version, agent.name
                )
                continue
            model = ((kb.get("spec") or {}).get("embedding") or {}).get("modelDeployment")
            url = None
            if model:
                try:
                    url = await self.lookup.resolver.base_url(namespace, str(model))
                except ModelUnavailableError as exc:  # keywords only while the embedding model is away
                    log.warning("embedding model of knowledge base %s: %s", name, exc.message)
            box.add(search.function(kb, url))
