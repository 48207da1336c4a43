"""Creating a version validates what it claims (docs/apps-environments.md, "Versions"), through the management
API and kubectl, against the real local control plane with the operator's admission webhooks running and
real MCP servers (the MCP SDK's FastMCP)."""

from __future__ import annotations

import json
import socket
from typing import Any

from kubernetes import client

from dockyard_core.resources.v1alpha1.modeldeployment import model_deployment_name
from tests.e2e.test_apps_environments import (  # noqa: F401 - fixtures
    AGENT,
    app_body,
    docs,
    facade,
    llama,
    mgmt,
    ok,
    operator,
    refused,
    tool,
)
from tests.support.cluster import E2ECluster
from tests.support.dockyard import create
from tests.support.runners import RunningFacade
from tests.support.scripted_model import RunningMcp, mcp_server
from tests.support.users import Users, kubectl


def test_creating_a_version_validates_what_it_claims(
    api: client.ApiClient,
    namespace: str,
    team: Users,
    facade: RunningFacade,  # noqa: F811
    cluster: E2ECluster,
    docs: RunningMcp,  # noqa: F811
) -> None:
    """docs/apps-environments.md, "Versions": a version without agents, an agent without a model or with one
    that does not exist, a tool that is not pinned or does not exist, an MCP server that does not answer or
    lists no tools: each refused at creation, naming its field, through the management API (one cause per
    field) and kubectl."""
    http, alice = facade.client, team.headers("alice")
    tool(api, namespace, "weather", "1.0.0")
    llama(api, namespace)
    ok(http.post(f"{mgmt(namespace)}/apps", json=app_body(docs), headers=alice), 201)
    versions = f"{mgmt(namespace)}/apps/bot/versions"

    def causes(body: dict[str, Any], *words: str) -> dict[str, str]:
        answer = refused(http.post(versions, json={"name": "broken", **body}, headers=alice), 422, *words)
        return {c["field"]: c["message"] for c in answer["error"]["details"]}

    assert causes({"version": "0.1.0", "agents": []}, "spec.agents") == {
        "spec.agents": "a version needs at least one agent"
    }
    no_model = [{"name": "triage", "version": "1.0.0"}, {"name": "writer", "version": "1.0.0", "model": "gone"}]
    assert causes({"version": "0.1.1", "agents": no_model, "toolVersions": []}, "spec.agents[0].model") == {
        "spec.agents[0].model": "agent triage has no model (name its ModelDeployment)",
        "spec.agents[1].model": "agent writer: unknown model 'gone' (no ModelDeployment of that name or display name)",
    }
    # the draft's agent uses weather: a version that does not pin it is refused by the schema's own rule
    unpinned = causes({"version": "0.1.2", "toolVersions": []}, "toolVersions")
    assert "spec.toolVersions" in unpinned, unpinned
    assert causes({"version": "0.1.3", "toolVersions": [{"name": "weather", "version": "9.9.9"}]}) == {
        "spec.toolVersions[0]": "tool weather version 9.9.9 does not exist (no Tool weather-9.9.9)"
    }
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with mcp_server({}, name="empty") as empty:
        servers_ = [{"name": "gone", "url": f"{closed}/mcp"}, {"name": "empty", "url": empty.url}]
        found = causes({"version": "0.1.4", "mcpServers": servers_}, "spec.mcpServers[0]")
    assert set(found) == {"spec.mcpServers[0]", "spec.mcpServers[1]"}
    assert found["spec.mcpServers[0]"].startswith(f"MCP server gone at {closed}/mcp does not answer: "), found
    assert found["spec.mcpServers[1]"] == f"MCP server empty at {empty.url} lists no tools (tools/list is empty)"
    # an agent's MCP tool at an external endpoint must answer too; one that lists tools is fine
    for name, endpoint in (("search", closed), ("lookup", docs.url.removesuffix("/mcp"))):
        spec = {"name": name, "version": "1.0.0", "endpoint": endpoint, "mcp": {}}
        create(api, namespace, "tools", "Tool", f"{name}-1.0.0", spec)
    mcp_tool = {"agents": [{**AGENT, "tools": ["search"]}], "toolVersions": [{"name": "search", "version": "1.0.0"}]}
    found = causes({"version": "0.1.5", **mcp_tool})
    assert list(found) == ["spec.agents[0].tools[0]"]
    assert found["spec.agents[0].tools[0]"].startswith(f"MCP server search at {closed}/mcp does not answer")
    working = {"agents": [{**AGENT, "tools": ["lookup"]}], "toolVersions": [{"name": "lookup", "version": "1.0.0"}]}
    ok(http.post(versions, json={"name": "MCP tool", "version": "0.2.0", **working}, headers=alice), 201)

    # an agent's mcpTools: each <server>/<tool> must name a server of the version that lists the tool
    named = {"agents": [{**AGENT, "tools": ["weather"], "mcpTools": ["docs/search", "docs/nope"]}]}
    assert causes({"version": "0.2.1", **named}, "spec.agents[0].mcpTools[1]") == {
        "spec.agents[0].mcpTools[1]": "agent triage: MCP server docs does not list a tool nope (it lists: search)",
    }
    # a server that is none of the version's: the schema's CEL rule refuses it (the API server, before the webhook)
    unknown = {"agents": [{**AGENT, "tools": ["weather"], "mcpTools": ["wiki/x"]}]}
    assert causes({"version": "0.2.2", **unknown}, "mcpTools") == {
        "spec.agents": "Invalid value: every MCP tool an agent names (mcpTools, <server>/<tool>) must "
        "be of one of spec.mcpServers or of an MCP Tool the agent lists in tools"
    }
    bad_name = refused(http.post(versions, json={"name": "x", "version": "0.2.6", "agents": [
        {**AGENT, "tools": ["weather"], "mcpTools": ["docs"]}]}, headers=alice), 422)  # fmt: skip
    assert "agents.0.mcpTools.0" in json.dumps(bad_name), bad_name  # the schema's pattern: <server>/<tool>
    listed = {"agents": [{**AGENT, "tools": ["weather"], "mcpTools": ["docs/search"]}]}
    ok(http.post(versions, json={"name": "named MCP tools", "version": "0.2.3", **listed}, headers=alice), 201)
    # an agent's model may be the ModelDeployment's display name (the deploy call's name), when unique
    display = "Llama 3 8B"
    spec = {"modelRef": "llama", "modelType": "openSource", "name": display, "deviceType": "g5.xlarge"}
    create(api, namespace, "modeldeployments", "ModelDeployment", model_deployment_name(display), spec)
    by_display = {"agents": [{**AGENT, "model": display, "tools": ["weather"]}]}
    ok(http.post(versions, json={"name": "by display name", "version": "0.2.4", **by_display}, headers=alice), 201)
    create(api, namespace, "modeldeployments", "ModelDeployment", "llama-again", spec)
    assert causes({"version": "0.2.5", **by_display}, "ambiguous") == {
        "spec.agents[0].model": f"agent triage: model {display!r} is ambiguous: the display name of ModelDeployments "
        f"{model_deployment_name(display)}, llama-again (name the object instead)"
    }

    # kubectl gets the same refusal from the API server
    manifest = {
        "apiVersion": "dockyard.dev/v1alpha1",
        "kind": "AppVersion",
        "metadata": {"name": "bot-0.3.0"},
        "spec": {"appRef": "bot", "version": "0.3.0", "displayName": "x", "agents": [{"name": "a", "version": "1"}]},
    }
    out = kubectl(cluster, "-n", namespace, "apply", "-f", "-", input_=json.dumps(manifest), check=False)
    assert "denied" in out, out
    assert "spec.agents[0].model: agent a has no model" in out, out
    # the draft as it is makes a valid version
    ok(http.post(versions, json={"version": "1.0.0", "name": "complete"}, headers=alice), 201)
