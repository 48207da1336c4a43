"""Recorded tool test calls (docs/apps-environments.md, "Tool test calls"): how a new record joins the
list an App or AppVersion keeps, and which of a version's tools have a passing test against their
current deployment in one environment. Pure: the facade records, the operator's checklist reads.

A tool of a version, as the checklist asks for it (a :class:`Wanted`):

- each entry of ``toolVersions`` (an HTTP tool, or a Tool with ``spec.mcp``): tested by a passing call of
  the tool itself or of one of its MCP tools (``<tool>/<name>``) against the environment's ToolDeployment
  of that version as it is now (its uid: ``revision``; a recreated ToolDeployment needs a new call, a scaled
  one does not, since its tool is immutable and only replicas and isAsync can change);
- each MCP tool an agent names (``mcpTools``, ``<server>/<tool>``): a passing call of it against the
  server's URL;
- an MCP server of ``mcpServers`` none of whose tools an agent names (its agents get every tool it lists):
  a passing call of any of its tools against its URL.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dockyard_core.resources.v1alpha1.app import TOOL_TESTS_LIMIT
from dockyard_core.resources.v1alpha1.tool import tool_deployment_name

ERROR_LIMIT = 512


@dataclass(frozen=True)
class Wanted:
    """One thing the checklist wants a passing test of."""

    label: str
    """How the checklist names it: ``weather 1.0.0``, ``docs/search``, ``MCP server docs``."""
    tool: str
    """The exact tool a test must name, or a prefix ``<name>/`` when any tool under it counts."""
    target: str
    """The ToolDeployment name or the MCP server URL the test must have called."""
    revision: str
    """The ToolDeployment's uid (empty for MCP servers)."""

    def met_by(self, test: Mapping[str, Any], environment: str, version: str) -> bool:
        if not test.get("passed") or test.get("environment") != environment or test.get("appVersion") != version:
            return False
        if test.get("target") != self.target or _uid(str(test.get("revision") or "")) != _uid(self.revision):
            return False
        name = str(test.get("tool") or "")
        if self.tool.endswith("/"):
            return name.startswith(self.tool)
        return name == self.tool or (bool(self.revision) and name.startswith(self.tool + "/"))


def revision(tool_deployment: Mapping[str, Any] | None) -> str:
    """The uid of a ToolDeployment (empty when there is none). Not its generation: its toolRef is immutable
    (another tool is another ToolDeployment), so a new generation only scales it or changes isAsync, and
    the tool answers the same."""
    meta = (tool_deployment or {}).get("metadata") or {}
    return str(meta.get("uid") or "")


def _uid(revision: str) -> str:
    """The uid part of a revision (records made before 2026-11-26 carry ``<uid>/<generation>``)."""
    return revision.partition("/")[0]


def wanted(content: Mapping[str, Any], environment: str, revisions: Mapping[str, str]) -> list[Wanted]:
    """What the checklist of ``environment`` wants tested for ``content`` (an App's draft or an AppVersion's
    spec); ``revisions``: ToolDeployment name -> its :func:`revision`."""
    out: list[Wanted] = []
    for ref in content.get("toolVersions") or []:
        name, version = str(ref.get("name")), str(ref.get("version"))
        deployment = tool_deployment_name(environment, name, version)
        out.append(Wanted(f"{name} {version}", name, deployment, revisions.get(deployment, "")))
    named: dict[str, list[str]] = {}
    for agent in content.get("agents") or []:
        for entry in agent.get("mcpTools") or []:
            server, _, tool = str(entry).partition("/")
            if tool and tool not in named.setdefault(server, []):
                named[server].append(tool)
    for server in content.get("mcpServers") or []:
        sname, url = str(server.get("name")), str(server.get("url"))
        if named.get(sname):
            out.extend(Wanted(f"{sname}/{t}", f"{sname}/{t}", url, "") for t in named[sname])
        else:
            out.append(Wanted(f"MCP server {sname} (any of its tools)", f"{sname}/", url, ""))
    return out


def untested(wants: Sequence[Wanted], tests: Iterable[Mapping[str, Any]], environment: str, version: str) -> list[str]:
    """The labels of what has no passing test against its current deployment in ``environment``."""
    recorded = list(tests)
    return [w.label for w in wants if not any(w.met_by(t, environment, version) for t in recorded)]


def with_record(
    tests: Sequence[Mapping[str, Any]], record: Mapping[str, Any], limit: int = TOOL_TESTS_LIMIT
) -> list[dict[str, Any]]:
    """The list after ``record``: it replaces the earlier record of the same environment and tool, comes
    first, and the oldest records beyond ``limit`` go."""
    key = (record.get("environment"), record.get("tool"))
    kept = [dict(t) for t in tests if (t.get("environment"), t.get("tool")) != key]
    return [dict(record), *kept][:limit]


def short_error(text: str, limit: int = ERROR_LIMIT) -> str:
    """An error shortened to what a record keeps."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
