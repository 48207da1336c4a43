"""Tools an agent may call, offered to the model as functions.

- HTTP tool (a Tool with ``spec.endpoint``, or an image tool reached through its ToolDeployment): one
  function named after the tool, with the JSON Schema of ``spec.parameters``; a call POSTs the arguments
  as JSON to the tool's URL and the answer (JSON or text) goes back to the model.
- MCP tool (a Tool with ``spec.mcp``) and the app's ``mcpServers``: every tool the server lists
  (``tools/list``, cached for a minute) is one function named ``<server>__<tool>``; a call goes through the
  official MCP Python SDK client (Streamable HTTP, or the older HTTP+SSE transport).

Only the functions built here can be called, and their URLs come from the cluster's objects, never from
what a model wrote. Every call has a timeout and a cap on the size of its answer; a failing call is a
result with ``ok=False`` that the model reads, never an exception that ends the turn.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import aiohttp
import anyio
import httpx
import orjson
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from dockyard_api.runtime import tracing
from dockyard_core.mcp import McpServerRef

log = logging.getLogger(__name__)

FUNCTION_NAME = re.compile(r"[^A-Za-z0-9_-]+")
EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ToolResult:
    ok: bool
    content: str


Call = Callable[[dict[str, Any]], Awaitable[ToolResult]]


@dataclass(frozen=True)
class Function:
    """One function offered to the model and how to call it."""

    name: str
    description: str
    parameters: dict[str, Any]
    call: Call

    def openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass
class Toolbox:
    """The functions of one agent for one turn."""

    functions: dict[str, Function] = field(default_factory=dict)

    def add(self, function: Function) -> None:
        if function.name in self.functions:
            log.warning("two tools offer the function %s: the first one is kept", function.name)
            return
        self.functions[function.name] = function

    def openai(self) -> list[dict[str, Any]]:
        return [f.openai() for f in self.functions.values()]


@dataclass(frozen=True)
class Limits:
    timeout_seconds: float
    max_bytes: int


def function_name(*parts: str) -> str:
    """A name the OpenAI function-calling API accepts: [A-Za-z0-9_-], at most 64 characters."""
    return FUNCTION_NAME.sub("_", "__".join(parts))[:64]


def object_schema(parameters: Any) -> dict[str, Any]:
    """The declared JSON Schema, as an object schema (what function calling expects)."""
    if isinstance(parameters, dict) and parameters.get("type", "object") == "object":
        return {"type": "object", **parameters}
    if isinstance(parameters, dict) and parameters:
        return {"type": "object", "properties": {"input": parameters}, "required": ["input"]}
    return dict(EMPTY_OBJECT_SCHEMA)


def _cut(text: str, max_bytes: int) -> str:
    raw = text.encode()
    if len(raw) <= max_bytes:
        return text
    return raw[:max_bytes].decode("utf-8", "ignore") + f"\n[the tool's answer was cut at {max_bytes} bytes]"


# --- HTTP tools ------------------------------------------------------------------------------------


def http_function(
    *, name: str, description: str, parameters: Any, url: str | None, http: aiohttp.ClientSession, limits: Limits
) -> Function:
    """The function of an HTTP tool: arguments POSTed as JSON to ``url`` (None: the tool is not reachable)."""

    async def call(arguments: dict[str, Any]) -> ToolResult:
        if not url:
            return ToolResult(False, f"tool {name} is not deployed in this environment (no endpoint)")
        headers = {"Content-Type": "application/json"}
        try:
            async with asyncio.timeout(limits.timeout_seconds):
                with tracing.tool_request("http", name, url, headers):  # traceparent: the tool joins the trace
                    raw, status = await _post(http, url, arguments, headers, limits.max_bytes)
        except TimeoutError:
            return ToolResult(False, f"tool {name} did not answer within {limits.timeout_seconds:g}s")
        except aiohttp.ClientError as exc:
            return ToolResult(False, f"tool {name} cannot be reached: {exc.__class__.__name__}: {exc}")
        text = _cut(raw.decode("utf-8", "replace"), limits.max_bytes)
        if status >= 300:
            return ToolResult(False, f"tool {name} answered HTTP {status}: {text}")
        return ToolResult(True, text)

    return Function(name, description or f"the {name} tool", object_schema(parameters), call)


async def _post(
    http: aiohttp.ClientSession, url: str, arguments: dict[str, Any], headers: dict[str, str], max_bytes: int
) -> tuple[bytes, int]:
    """POST the arguments as JSON: the answer's first ``max_bytes`` + 1 bytes and its status."""
    async with http.post(url, data=orjson.dumps(arguments), headers=headers) as response:
        raw = await response.content.read(max_bytes + 1)
        more = b""
        while raw and len(raw) + len(more) <= max_bytes:
            piece = await response.content.read(max_bytes + 1 - len(raw) - len(more))
            if not piece:
                break
            more += piece
        raw += more
        status = response.status
        return raw, status


# --- MCP tools -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class McpTool:
    name: str
    description: str
    input_schema: dict[str, Any]


class McpClient:
    """Lists and calls the tools of MCP servers with the MCP Python SDK; listings are cached briefly."""

    def __init__(self, *, list_ttl_seconds: float = 60.0) -> None:
        self.list_ttl_seconds = list_ttl_seconds
        self._listings: dict[McpServerRef, tuple[float, list[McpTool]]] = {}

    def _connect(self, server: McpServerRef, timeout: float, extra: dict[str, str] | None = None) -> Any:
        headers = {**dict(server.headers), **(extra or {})}
        if server.transport == "sse":
            return sse_client(server.url, headers=headers, timeout=timeout, sse_read_timeout=timeout)
        client = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(timeout))
        return _with_client(client, streamable_http_client(server.url, http_client=client))

    async def list_tools(self, server: McpServerRef, limits: Limits) -> list[McpTool]:
        hit = self._listings.get(server)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        tools: list[McpTool] = []
        with anyio.fail_after(limits.timeout_seconds):
            async with (
                self._connect(server, limits.timeout_seconds) as streams,
                ClientSession(streams[0], streams[1]) as session,
            ):
                await session.initialize()
                cursor = None
                while True:
                    page = await session.list_tools(cursor)
                    for tool in page.tools:
                        tools.append(McpTool(tool.name, tool.description or "", dict(tool.inputSchema or {})))
                    cursor = page.nextCursor
                    if not cursor or len(tools) >= 256:
                        break
        self._listings[server] = (time.monotonic() + self.list_ttl_seconds, tools)
        return tools

    async def call_tool(self, server: McpServerRef, tool: str, arguments: dict[str, Any], limits: Limits) -> ToolResult:
        headers: dict[str, str] = {}
        try:
            with (
                anyio.fail_after(limits.timeout_seconds),
                tracing.tool_request("mcp", tool, server.url, headers),  # traceparent: the server joins the trace
            ):
                async with (
                    self._connect(server, limits.timeout_seconds, headers) as streams,
                    ClientSession(
                        streams[0], streams[1], read_timeout_seconds=timedelta(seconds=limits.timeout_seconds)
                    ) as session,
                ):
                    await session.initialize()
                    result = await session.call_tool(tool, arguments)
        except TimeoutError:
            return ToolResult(
                False, f"MCP tool {tool} of {server.name} did not answer within {limits.timeout_seconds:g}s"
            )
        except Exception as exc:  # the SDK raises many kinds (McpError, httpx errors, ExceptionGroup)
            return ToolResult(False, f"MCP tool {tool} of {server.name} failed: {mcp_reason(exc)}")
        parts = []
        for item in result.content:
            text = getattr(item, "text", None)
            parts.append(text if isinstance(text, str) else f"[{getattr(item, 'type', 'content')}]")
        if not parts and result.structuredContent is not None:
            parts.append(orjson.dumps(result.structuredContent).decode())
        return ToolResult(not result.isError, _cut("\n".join(parts), limits.max_bytes))

    def functions(self, server: McpServerRef, tools: list[McpTool], limits: Limits) -> list[Function]:
        out = []
        for tool in tools:

            async def call(arguments: dict[str, Any], _tool: str = tool.name) -> ToolResult:
                return await self.call_tool(server, _tool, arguments, limits)

            name = function_name(server.name, tool.name)
            out.append(Function(name, tool.description or tool.name, object_schema(tool.input_schema), call))
        return out


def mcp_reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc)
    return f"{exc.__class__.__name__}: {text}" if text else exc.__class__.__name__


class _with_client:
    """Enter an httpx client and the SDK's transport on it; leave both."""

    def __init__(self, client: httpx.AsyncClient, transport: Any) -> None:
        self.client = client
        self.transport = transport

    async def __aenter__(self) -> Any:
        await self.client.__aenter__()
        try:
            return await self.transport.__aenter__()
        except BaseException:
            await self.client.__aexit__(None, None, None)
            raise

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.transport.__aexit__(*exc)
        finally:
            await self.client.__aexit__(None, None, None)
