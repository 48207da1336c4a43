"""What a new AppVersion must hold before it exists (pure: the ``validate-appversion`` webhook gathers the
facts from the API server and the MCP servers, :func:`version_problems` decides).

Each problem names the field it is about (``spec.agents[0].model``), so ``kubectl apply`` and the
management API report it, and the console shows it next to the form field. Only an AppVersion is
checked: an App's draft may be incomplete while it is being written.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from dockyard_core import evaluations
from dockyard_core.guardrails import compile_problems
from dockyard_core.mcp import McpServerRef
from dockyard_core.modelrefs import resolve_model
from dockyard_core.problems import Problem

HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
INVALID_PREFIX = "the version is not valid: "
"""The refusal's message starts with this; the problems follow, ``; ``-separated, each ``<field>: <text>``."""


@dataclass(frozen=True)
class McpAnswer:
    """What an MCP server answered: the names of the tools it lists, or why it did not answer."""

    tools: tuple[str, ...] = ()
    error: str | None = None


def refusal_message(problems: list[Problem]) -> str:
    return INVALID_PREFIX + "; ".join(str(p) for p in problems)


def tool_object(ref: Mapping[str, Any]) -> str:
    """The Tool object a ``toolVersions`` entry pins: ``<name>-<version>``."""
    return f"{ref.get('name')}-{ref.get('version')}"


def _server_config_problems(servers: list[Mapping[str, Any]]) -> list[Problem]:
    problems = []
    names = [s.get("name") for s in servers]
    dupes = sorted({str(n) for n in names if names.count(n) > 1})
    if dupes:
        problems.append(Problem("spec.mcpServers", f"MCP server names must be unique: {', '.join(dupes)}"))
    for i, server in enumerate(servers):
        bad = sorted(h for h in server.get("headers") or {} if not HEADER_NAME.match(h))
        if bad:
            what = f"MCP server {server.get('name')}: invalid header name(s) {', '.join(bad)}"
            problems.append(Problem(f"spec.mcpServers[{i}].headers", what))
        if server.get("headers") and server.get("headersSecretRef"):
            what = f"MCP server {server.get('name')}: set headers or headersSecretRef, not both"
            problems.append(Problem(f"spec.mcpServers[{i}]", what))
    return problems


def mcp_targets(
    spec: Mapping[str, Any],
    tools: Mapping[str, Mapping[str, Any] | None],
    secret_headers: Mapping[str, Mapping[str, str] | None],
    unreadable: Collection[str] = (),
) -> dict[str, McpServerRef]:
    """The MCP servers to ask for their tools, by the field that names each: every well-formed
    ``spec.mcpServers[i]`` (with the headers of its Secret, when it has one that exists) and every agent
    tool ``spec.agents[i].tools[j]`` that is an MCP Tool at an external endpoint (an MCP Tool that Dockyard
    runs from an image is only reachable once an environment deploys it). ``tools``: the pinned Tools by
    object name (None: missing); ``secret_headers``: the headers of each Secret named (None: missing);
    ``unreadable``: Secrets the version's author may not read: their servers are not asked (the values would
    go to a URL the author chose)."""
    targets: dict[str, McpServerRef] = {}
    servers = list(spec.get("mcpServers") or [])
    malformed = {p.field.split("]")[0] + "]" for p in _server_config_problems(servers) if "[" in p.field}
    for i, server in enumerate(servers):
        field = f"spec.mcpServers[{i}]"
        secret = server.get("headersSecretRef")
        if field in malformed or (secret and (secret_headers.get(secret) is None or secret in unreadable)):
            continue
        headers = dict(server.get("headers") or {}) | dict((secret_headers.get(secret) or {}) if secret else {})
        targets[field] = McpServerRef(
            str(server.get("name")),
            str(server.get("url")),
            str(server.get("transport") or "streamable-http"),
            tuple(sorted(headers.items())),
        )
    pinned = {str(t.get("name")): tool_object(t) for t in spec.get("toolVersions") or []}
    for i, agent in enumerate(spec.get("agents") or []):
        for j, name in enumerate(agent.get("tools") or []):
            tool = tools.get(pinned.get(name, ""))
            tool_spec = (tool or {}).get("spec") or {}
            mcp, endpoint = tool_spec.get("mcp"), tool_spec.get("endpoint")
            if tool is None or mcp is None or not endpoint:
                continue
            path = str(mcp.get("path") or "/mcp")
            transport = str(mcp.get("transport") or "streamable-http")
            targets[f"spec.agents[{i}].tools[{j}]"] = McpServerRef(name, str(endpoint).rstrip("/") + path, transport)
    return targets


def _mcp_problem(target: McpServerRef, answer: McpAnswer | None) -> str | None:
    if answer is None or answer.error is not None:
        why = answer.error if answer is not None else "it was not asked"
        return f"MCP server {target.name} at {target.url} does not answer: {why}"
    if not answer.tools:
        return f"MCP server {target.name} at {target.url} lists no tools (tools/list is empty)"
    return None


def version_problems(
    spec: Mapping[str, Any],
    *,
    app_exists: bool,
    tools: Mapping[str, Mapping[str, Any] | None],
    models: Mapping[str, str],
    secret_headers: Mapping[str, Mapping[str, str] | None] | None = None,
    mcp: Mapping[str, McpAnswer] | None = None,
    unreadable: Collection[str] = (),
) -> list[Problem]:
    """What is wrong with a new AppVersion, each with its field (empty: it may be created).

    ``tools``: the pinned Tools by object name (None: it does not exist); ``models``: the namespace's
    ModelDeployments, object name -> display name (an agent's model names either,
    :mod:`dockyard_core.modelrefs`); ``secret_headers``: each ``headersSecretRef`` Secret's headers (None:
    it does not exist); ``mcp``: what each of :func:`mcp_targets` answered, by field; ``unreadable``: the
    ``headersSecretRef`` Secrets the version's author may not read (RBAC ``get``).
    """
    secrets, answers = secret_headers or {}, mcp or {}
    problems: list[Problem] = []

    def add(field: str, message: str) -> None:
        problems.append(Problem(field, message))

    if not app_exists:
        add("spec.appRef", f"app {spec.get('appRef')!r} does not exist")
    agents = list(spec.get("agents") or [])
    if not agents:
        add("spec.agents", "a version needs at least one agent")
    pinned = {str(t.get("name")) for t in spec.get("toolVersions") or []}
    for i, agent in enumerate(agents):
        name, model = agent.get("name"), agent.get("model")
        if not model:
            add(f"spec.agents[{i}].model", f"agent {name} has no model (name its ModelDeployment)")
        else:
            resolved = resolve_model(str(model), models)
            if resolved.problem:
                add(f"spec.agents[{i}].model", f"agent {name}: {resolved.problem}")
        for j, tool in enumerate(agent.get("tools") or []):
            if tool not in pinned:
                add(f"spec.agents[{i}].tools[{j}]", f"agent {name}: tool {tool} has no version in spec.toolVersions")
    for i, ref in enumerate(spec.get("toolVersions") or []):
        if tools.get(tool_object(ref)) is None:
            what = f"tool {ref.get('name')} version {ref.get('version')}"
            add(f"spec.toolVersions[{i}]", f"{what} does not exist (no Tool {tool_object(ref)})")
    servers = list(spec.get("mcpServers") or [])
    problems += _server_config_problems(servers)
    for i, server in enumerate(servers):
        secret = server.get("headersSecretRef")
        if secret and secrets.get(secret) is None:
            add(f"spec.mcpServers[{i}].headersSecretRef", f"MCP server {server.get('name')}: no Secret {secret}")
        elif secret and secret in unreadable:
            add(
                f"spec.mcpServers[{i}].headersSecretRef",
                f"MCP server {server.get('name')}: you may not read Secret {secret}, whose values would be sent "
                "to this server (RBAC: get on secrets)",
            )
    targets = mcp_targets(spec, tools, secrets, unreadable)
    for field, target in targets.items():
        text = _mcp_problem(target, answers.get(field))
        if text is not None:
            add(field, text)
    problems += _named_mcp_tool_problems(spec, tools, targets, answers)
    problems += guardrail_problems(spec.get("guardrails"), models)
    problems += evaluations.compile_problems(spec.get("evaluations"), models)
    return problems


def guardrail_problems(guardrails: Mapping[str, Any] | None, models: Mapping[str, str]) -> list[Problem]:
    """``spec.guardrails`` must compile (a regular expression, a JSON Schema: docs/guardrails.md), and each
    guardModel policy's model must be a ModelDeployment of the namespace (as an agent's model)."""
    problems = compile_problems(guardrails)
    for i, policy in enumerate((guardrails or {}).get("policies") or []):
        if policy.get("type") != "guardModel" or not policy.get("model"):
            continue
        resolved = resolve_model(str(policy["model"]), models)
        if resolved.problem:
            problems.append(
                Problem(
                    f"spec.guardrails.policies[{i}].model",
                    f"guard model of policy {policy.get('name')}: {resolved.problem}",
                )
            )
    return problems


def _named_mcp_tool_problems(
    spec: Mapping[str, Any],
    tools: Mapping[str, Mapping[str, Any] | None],
    targets: Mapping[str, McpServerRef],
    answers: Mapping[str, McpAnswer],
) -> list[Problem]:
    """Each ``spec.agents[i].mcpTools[j]`` (``<server>/<tool>``) names an MCP server of the version (an entry
    of mcpServers, or an MCP Tool the agent lists in ``tools``) that lists the tool. A server that did not
    answer is reported at its own field; an MCP Tool run from an image cannot be asked before an environment
    deploys it, so its tool names are not checked."""
    problems: list[Problem] = []
    server_fields = {str(s.get("name")): f"spec.mcpServers[{i}]" for i, s in enumerate(spec.get("mcpServers") or [])}
    pinned = {str(t.get("name")): tool_object(t) for t in spec.get("toolVersions") or []}
    for i, agent in enumerate(spec.get("agents") or []):
        name = agent.get("name")
        own = {str(t): f"spec.agents[{i}].tools[{j}]" for j, t in enumerate(agent.get("tools") or [])}
        for j, ref in enumerate(agent.get("mcpTools") or []):
            server, _, tool = str(ref).partition("/")
            field = f"spec.agents[{i}].mcpTools[{j}]"
            if server in server_fields:
                where = server_fields[server]
            elif server in own and ((tools.get(pinned.get(server, "")) or {}).get("spec") or {}).get("mcp") is not None:
                where = own[server]
            else:
                problems.append(
                    Problem(
                        field,
                        f"agent {name}: {ref} names no MCP server of this version (an entry of spec.mcpServers, "
                        f"or an MCP Tool the agent lists in tools)",
                    )
                )
                continue
            answer = answers.get(where)
            if where not in targets or answer is None or answer.error is not None or not answer.tools:
                continue  # not asked (an image MCP Tool), or its own problem is reported at its field
            if tool not in answer.tools:
                listed = ", ".join(sorted(answer.tools)[:20])
                problems.append(
                    Problem(
                        field, f"agent {name}: MCP server {server} does not list a tool {tool} (it lists: {listed})"
                    )
                )
    return problems
