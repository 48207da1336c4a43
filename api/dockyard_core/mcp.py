"""An MCP server as the facade's runtime and the operator's version webhook both reach it (pure)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class McpServerRef:
    """An MCP server an agent may use: its name (an entry of ``spec.mcpServers``, or an MCP Tool), where it
    is, the transport it speaks and the headers it needs."""

    name: str
    url: str
    transport: str = "streamable-http"
    headers: tuple[tuple[str, str], ...] = ()
