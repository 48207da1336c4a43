"""Ask MCP servers for their tools (``initialize`` + ``tools/list``, MCP Python SDK), bounded in time: the
``validate-appversion`` webhook asks every server of a new version at once, and the API server waits
for the webhook at most ``timeoutSeconds`` (10 s by default), so each server has
:data:`PROBE_SECONDS`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import httpx
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from dockyard_core.mcp import McpServerRef
from dockyard_operator.version_rules import McpAnswer

PROBE_SECONDS = 5.0
"""How long one MCP server has to answer the handshake and list its tools."""
MAX_PAGES = 16


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).replace(";", ",").split())  # one line, no "; " (it separates the problems)
    return f"{exc.__class__.__name__}: {text}" if text else exc.__class__.__name__


@contextlib.asynccontextmanager
async def _streams(target: McpServerRef, timeout: float) -> AsyncIterator[Any]:
    headers = dict(target.headers)
    if target.transport == "sse":
        async with sse_client(target.url, headers=headers, timeout=timeout, sse_read_timeout=timeout) as streams:
            yield streams
        return
    async with (
        httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(timeout)) as client,
        streamable_http_client(target.url, http_client=client) as streams,
    ):
        yield streams


async def list_tools(target: McpServerRef, timeout: float = PROBE_SECONDS) -> McpAnswer:
    """The names of the tools ``target`` lists, or why it did not answer within ``timeout`` seconds."""
    names: list[str] = []
    try:
        with anyio.fail_after(timeout):
            async with _streams(target, timeout) as streams, ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                cursor = None
                for _ in range(MAX_PAGES):
                    page = await session.list_tools(cursor)
                    names += [tool.name for tool in page.tools]
                    cursor = page.nextCursor
                    if not cursor:
                        break
    except TimeoutError:
        return McpAnswer(error=f"no answer within {timeout:g}s")
    except Exception as exc:  # the SDK raises many kinds (McpError, httpx errors, ExceptionGroup)
        return McpAnswer(error=_reason(exc))
    return McpAnswer(tools=tuple(names))


async def list_all(targets: Mapping[str, McpServerRef], timeout: float = PROBE_SECONDS) -> dict[str, McpAnswer]:
    """What each target answered, all asked at once (the whole takes at most about ``timeout``)."""
    keys = list(targets)
    answers = await asyncio.gather(*(list_tools(targets[k], timeout) for k in keys))
    return dict(zip(keys, answers, strict=True))
