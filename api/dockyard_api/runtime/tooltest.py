"""One tool of an environment's active version, called the way a turn calls it (a tool test call,
docs/apps-environments.md, "Tool test calls").

The tool is found as a turn finds it (:class:`~dockyard_api.runtime.config.AppLookup`: the environment,
its version's content, the pinned Tool, its ToolDeployment's endpoint, an MCP server's headers Secret)
and called with the runtime's own clients (:func:`~dockyard_api.runtime.tools.http_function`,
:meth:`~dockyard_api.runtime.tools.McpClient.call_tool`): same timeout, same answer cap. The arguments
are validated against the tool's JSON Schema first (an HTTP tool's declared ``spec.parameters``, an MCP
tool's listed ``inputSchema``); a call that is refused before it is made raises, a call made is a result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jsonschema

from dockyard_api.runtime.config import AppLookup, EnvironmentView, RunnableContent
from dockyard_api.runtime.tools import (
    Call,
    Limits,
    McpClient,
    ToolResult,
    http_function,
    mcp_reason,
    object_schema,
)
from dockyard_core.errors import InvalidError, NotFoundError
from dockyard_core.mcp import McpServerRef
from dockyard_core.resources.v1alpha1.tool import tool_deployment_name
from dockyard_core.tooltests import revision


@dataclass(frozen=True)
class ToolUnderTest:
    """A tool of the environment's version, ready to be called."""

    tool: str
    """As asked: an HTTP tool's name or <server>/<tool>."""
    tool_version: str
    """The pinned version ('' for the tools of mcpServers)."""
    app_version: str
    target: str
    """The ToolDeployment's name, or the MCP server's URL."""
    revision: str
    """The ToolDeployment's uid ('' for mcpServers)."""
    schema: dict[str, Any]
    """The JSON Schema the arguments must match."""
    call: Call


def _field_error(tool: str, message: str) -> InvalidError:
    return InvalidError(message, [{"field": "body.tool", "message": message, "value": tool}])


def argument_errors(schema: dict[str, Any], arguments: Any) -> list[dict[str, str]]:
    """The arguments' errors against ``schema``, each with its field (``body.arguments.<path>``)."""
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        validator_class.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return [
            {
                "field": "body.arguments",
                "message": f"the tool's declared parameters are not a valid schema: {exc.message}",
            }
        ]
    out = []
    for error in sorted(validator_class(schema).iter_errors(arguments), key=lambda e: list(map(str, e.absolute_path))):
        path = ".".join(["body", "arguments", *(str(p) for p in error.absolute_path)])
        out.append({"field": path, "message": error.message})
    return out


async def tool_under_test(
    lookup: AppLookup, mcp: McpClient, http: Any, limits: Limits, namespace: str, environment: str, tool: str
) -> ToolUnderTest:
    """The tool named ``tool`` of the version active in ``environment`` (a NotFoundError naming body.tool
    when the version has no such tool or its MCP server does not list it). A tool that cannot be reached
    (not deployed, its MCP server down) is still a tool under test: its call fails, as in a turn."""
    env = await lookup.environment(namespace, environment)
    content = await lookup.content(namespace, env.app, env.active_version)
    server, _, mcp_tool = tool.partition("/")
    if mcp_tool:
        return await _mcp(lookup, mcp, limits, env, content, server, mcp_tool)
    version = content.tool_versions.get(tool)
    if version is None:
        raise _not_found(tool, env, content)
    obj = await lookup.informers["tools"].get(namespace, f"{tool}-{version}")
    if obj is None:
        raise NotFoundError(f"Tool {tool}-{version} (pinned by the version) does not exist", {"field": "body.tool"})
    spec = obj.get("spec") or {}
    if spec.get("mcp"):
        raise _field_error(tool, f"{tool} is an MCP tool: test one of its tools as {tool}/<name of the tool>")
    deployment = tool_deployment_name(environment, tool, version)
    url = await lookup.tool_url(namespace, environment, obj)
    function = http_function(
        name=tool,
        description=str(spec.get("description") or ""),
        parameters=spec.get("parameters"),
        url=url,
        http=http,
        limits=limits,
    )
    tdep = await lookup.informers["tooldeployments"].get(namespace, deployment)
    return ToolUnderTest(
        tool, version, env.active_version, deployment, revision(tdep), function.parameters, function.call
    )


async def _mcp(
    lookup: AppLookup,
    mcp: McpClient,
    limits: Limits,
    env: EnvironmentView,
    content: RunnableContent,
    server: str,
    name: str,
) -> ToolUnderTest:
    ref: McpServerRef | None = None
    tool_version, target, rev, down = "", "", "", ""
    for spec in content.mcp_servers:
        if spec.name == server:
            secret = await lookup.headers(env.namespace, spec.headers_secret_ref)
            ref = McpServerRef(spec.name, spec.url, spec.transport, spec.headers + secret)
            target = spec.url
    if ref is None and server in content.tool_versions:
        tool_version = content.tool_versions[server]
        obj = await lookup.informers["tools"].get(env.namespace, f"{server}-{tool_version}")
        mcp_spec = ((obj or {}).get("spec") or {}).get("mcp")
        if obj is not None and mcp_spec:
            url = await lookup.tool_url(env.namespace, env.name, obj)
            if not url:
                down = f"MCP tool {server} is not deployed in this environment (no endpoint)"
            path = str(mcp_spec.get("path") or "/mcp")
            where = (url or "").rstrip("/") + path
            ref = McpServerRef(server, where, str(mcp_spec.get("transport") or "streamable-http"))
            target = tool_deployment_name(env.name, server, tool_version)
            rev = revision(await lookup.informers["tooldeployments"].get(env.namespace, target))
    if ref is None:
        raise _not_found(f"{server}/{name}", env, content)
    listed = []
    if not down:
        try:
            listed = await mcp.list_tools(ref, limits)
        except Exception as exc:  # as in a turn: a server that is down offers nothing
            down = f"MCP server {server} ({ref.url}) cannot list its tools: {mcp_reason(exc)}"
    if down:
        reason = down

        async def fail(arguments: dict[str, Any]) -> ToolResult:
            return ToolResult(False, reason)

        return ToolUnderTest(f"{server}/{name}", tool_version, env.active_version, target, rev, {}, fail)
    found = next((t for t in listed if t.name == name), None)
    if found is None:
        names = ", ".join(sorted(t.name for t in listed)[:20]) or "none"
        raise NotFoundError(
            f"MCP server {server} does not list a tool {name!r} (it lists: {names})",
            {"field": "body.tool", "listed": [t.name for t in listed][:64]},
        )
    server_ref = ref

    async def call(arguments: dict[str, Any]) -> ToolResult:
        return await mcp.call_tool(server_ref, name, arguments, limits)

    return ToolUnderTest(
        f"{server}/{name}", tool_version, env.active_version, target, rev, object_schema(found.input_schema), call
    )


def _not_found(tool: str, env: EnvironmentView, content: RunnableContent) -> NotFoundError:
    http = sorted(content.tool_versions)
    servers = sorted(s.name for s in content.mcp_servers)
    return NotFoundError(
        f"version {env.active_version} of app {env.app!r} (active in {env.name}) has no tool {tool!r}: its tools "
        f"are {', '.join(http) or 'none'}; its MCP servers {', '.join(servers) or 'none'} (name a tool of one as "
        "<server>/<tool>)",
        {"field": "body.tool", "tools": http, "mcpServers": servers},
    )
