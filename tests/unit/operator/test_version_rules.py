"""The rules of a new AppVersion (every problem names its field) and the bounded MCP probe, against a real
MCP server (the MCP SDK's FastMCP) and a port where nothing listens."""

from __future__ import annotations

import asyncio
import base64
import socket
from typing import Any

from dockyard_core.mcp import McpServerRef
from dockyard_operator import admission, mcp_probe
from dockyard_operator.version_rules import McpAnswer, mcp_targets, refusal_message, version_problems
from tests.support.scripted_model import mcp_server

WEATHER = {"spec": {"name": "weather", "version": "1.2.0", "endpoint": "http://weather.example/"}}
SEARCH = {"spec": {"name": "search", "version": "1.0.0", "endpoint": "http://search.example/", "mcp": {}}}


def valid() -> dict[str, Any]:
    return {
        "appRef": "bot",
        "agents": [{"name": "triage", "model": "llama", "tools": ["weather"]}],
        "toolVersions": [{"name": "weather", "version": "1.2.0"}],
    }


def problems(spec: dict[str, Any], **facts: Any) -> dict[str, str]:
    """field -> message of each problem (one per field in these tests)."""
    given: dict[str, Any] = {
        "app_exists": True,
        "tools": {"weather-1.2.0": WEATHER, "search-1.0.0": SEARCH},
        "models": {"llama": "llama", "llama-3-8b-0a1b2c3d": "Llama 3 8B"},
    }
    found = version_problems(spec, **(given | facts))
    return {p.field: p.message for p in found}


def test_a_complete_version_has_no_problem() -> None:
    assert problems(valid()) == {}


def test_a_version_needs_an_agent() -> None:
    assert problems({**valid(), "agents": []}) == {"spec.agents": "a version needs at least one agent"}
    assert "spec.agents" in problems({"appRef": "bot"})


def test_every_agent_needs_a_model_that_exists() -> None:
    spec = valid()
    spec["agents"] = [spec["agents"][0], {"name": "writer"}, {"name": "critic", "model": "gone"}]
    found = problems(spec)
    assert found == {
        "spec.agents[1].model": "agent writer has no model (name its ModelDeployment)",
        "spec.agents[2].model": "agent critic: unknown model 'gone' (no ModelDeployment of that name or display name)",
    }


def test_an_agents_model_may_be_the_display_name_when_it_is_unique() -> None:
    spec = valid()
    spec["agents"][0]["model"] = "Llama 3 8B"  # the deploy call's name; the object is llama-3-8b-0a1b2c3d
    assert problems(spec) == {}
    twice = {"llama": "llama", "a-1": "Llama 3 8B", "b-2": "Llama 3 8B"}
    assert problems(spec, models=twice) == {
        "spec.agents[0].model": "agent triage: model 'Llama 3 8B' is ambiguous: the display name of "
        "ModelDeployments a-1, b-2 (name the object instead)"
    }
    spec["agents"][0]["model"] = "a-1"  # the object name wins over display names
    assert problems(spec, models=twice) == {}
    spec["agents"][0]["model"] = "llama 3 8b"  # display names match exactly
    assert "unknown model" in problems(spec)["spec.agents[0].model"]


def test_an_agents_mcp_tools_must_be_listed_by_their_server() -> None:
    spec = valid()
    spec["mcpServers"] = [{"name": "docs", "url": "https://docs/mcp"}, {"name": "down", "url": "https://down/mcp"}]
    spec["agents"][0]["tools"] = ["weather", "search"]
    spec["toolVersions"].append({"name": "search", "version": "1.0.0"})
    spec["agents"][0]["mcpTools"] = ["docs/search", "docs/nope", "wiki/x", "weather/x", "search/now", "search/then",
                                     "down/any"]  # fmt: skip
    answers = {
        "spec.mcpServers[0]": McpAnswer(tools=("search", "fetch")),
        "spec.mcpServers[1]": McpAnswer(error="ConnectError: refused"),
        "spec.agents[0].tools[1]": McpAnswer(tools=("now",)),
    }
    found = problems(spec, mcp=answers)
    assert found == {
        "spec.agents[0].mcpTools[1]": "agent triage: MCP server docs does not list a tool nope (it lists: fetch, "
        "search)",
        "spec.agents[0].mcpTools[2]": "agent triage: wiki/x names no MCP server of this version (an entry of "
        "spec.mcpServers, or an MCP Tool the agent lists in tools)",
        "spec.agents[0].mcpTools[3]": "agent triage: weather/x names no MCP server of this version (an entry of "
        "spec.mcpServers, or an MCP Tool the agent lists in tools)",  # weather is an HTTP tool
        "spec.agents[0].mcpTools[5]": "agent triage: MCP server search does not list a tool then (it lists: now)",
        "spec.mcpServers[1]": "MCP server down at https://down/mcp does not answer: ConnectError: refused",
    }


def test_an_agent_tool_must_be_pinned_and_a_pinned_tool_must_exist() -> None:
    spec = valid()
    spec["agents"][0]["tools"] = ["weather", "clock"]
    spec["toolVersions"] = [{"name": "weather", "version": "9.9.9"}]
    assert problems(spec) == {
        "spec.agents[0].tools[1]": "agent triage: tool clock has no version in spec.toolVersions",
        "spec.toolVersions[0]": "tool weather version 9.9.9 does not exist (no Tool weather-9.9.9)",
    }


def test_the_app_must_exist() -> None:
    assert problems(valid(), app_exists=False) == {"spec.appRef": "app 'bot' does not exist"}


def test_mcp_server_configs_must_be_well_formed() -> None:
    spec = valid()
    spec["mcpServers"] = [
        {"name": "docs", "url": "https://x/mcp", "headers": {"bad header": "v"}},
        {"name": "docs", "url": "https://y/mcp", "headers": {"X": "1"}, "headersSecretRef": "s"},
        {"name": "wiki", "url": "https://z/mcp", "headersSecretRef": "missing"},
    ]
    found = problems(spec, secret_headers={"s": {"Authorization": "Bearer t"}})
    assert found["spec.mcpServers"] == "MCP server names must be unique: docs"
    assert found["spec.mcpServers[0].headers"] == "MCP server docs: invalid header name(s) bad header"
    assert found["spec.mcpServers[1]"] == "MCP server docs: set headers or headersSecretRef, not both"
    assert found["spec.mcpServers[2].headersSecretRef"] == "MCP server wiki: no Secret missing"
    # none of the malformed ones is asked for its tools
    assert mcp_targets(spec, {}, {"s": {}}) == {}


def test_mcp_servers_must_answer_and_list_tools() -> None:
    spec = valid()
    spec["mcpServers"] = [
        {"name": "docs", "url": "https://docs/mcp"},
        {"name": "wiki", "url": "https://wiki/mcp", "headersSecretRef": "token", "transport": "sse"},
        {"name": "empty", "url": "https://empty/mcp"},
    ]
    secrets = {"token": {"Authorization": "Bearer t"}}
    targets = mcp_targets(spec, {}, secrets)
    assert targets == {
        "spec.mcpServers[0]": McpServerRef("docs", "https://docs/mcp"),
        "spec.mcpServers[1]": McpServerRef("wiki", "https://wiki/mcp", "sse", (("Authorization", "Bearer t"),)),
        "spec.mcpServers[2]": McpServerRef("empty", "https://empty/mcp"),
    }
    answers = {
        "spec.mcpServers[0]": McpAnswer(tools=("search",)),
        "spec.mcpServers[1]": McpAnswer(error="ConnectError: refused"),
        "spec.mcpServers[2]": McpAnswer(tools=()),
    }
    found = problems(spec, secret_headers=secrets, mcp=answers)
    assert found == {
        "spec.mcpServers[1]": "MCP server wiki at https://wiki/mcp does not answer: ConnectError: refused",
        "spec.mcpServers[2]": "MCP server empty at https://empty/mcp lists no tools (tools/list is empty)",
    }
    # a server nobody asked is no pass
    assert "does not answer" in problems(spec, secret_headers=secrets)["spec.mcpServers[0]"]


def test_an_agents_external_mcp_tool_must_answer() -> None:
    spec = valid()
    spec["agents"][0]["tools"] = ["weather", "search"]
    spec["toolVersions"].append({"name": "search", "version": "1.0.0"})
    tools = {"weather-1.2.0": WEATHER, "search-1.0.0": SEARCH}
    targets = mcp_targets(spec, tools, {})
    assert targets == {"spec.agents[0].tools[1]": McpServerRef("search", "http://search.example/mcp")}
    found = problems(spec, mcp={"spec.agents[0].tools[1]": McpAnswer(error="no answer within 5s")})
    assert found == {
        "spec.agents[0].tools[1]": "MCP server search at http://search.example/mcp does not answer: no answer within 5s"
    }
    assert problems(spec, mcp={"spec.agents[0].tools[1]": McpAnswer(tools=("now",))}) == {}


def test_the_refusal_names_every_field() -> None:
    spec = {"appRef": "bot", "agents": [{"name": "a"}], "toolVersions": [{"name": "t", "version": "1.0.0"}]}
    found = version_problems(spec, app_exists=True, tools={}, models={})
    assert refusal_message(found) == (
        "the version is not valid: spec.agents[0].model: agent a has no model (name its ModelDeployment); "
        "spec.toolVersions[0]: tool t version 1.0.0 does not exist (no Tool t-1.0.0)"
    )


def test_the_probe_lists_a_real_servers_tools_and_names_why_another_does_not_answer() -> None:
    def search(query: str) -> str:
        """Search the docs."""
        return query

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    with mcp_server({"search": search, "fetch": search}) as server:
        answers = asyncio.run(
            mcp_probe.list_all(
                {
                    "up": McpServerRef("docs", server.url),
                    "down": McpServerRef("gone", f"http://127.0.0.1:{closed}/mcp"),
                },
                timeout=5,
            )
        )
    assert sorted(answers["up"].tools) == ["fetch", "search"]
    assert answers["up"].error is None
    assert answers["down"].tools == ()
    assert answers["down"].error


def test_the_probe_gives_up_in_time() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()  # accepts connections, never answers
        port = listener.getsockname()[1]
        answer = asyncio.run(mcp_probe.list_tools(McpServerRef("slow", f"http://127.0.0.1:{port}/mcp"), timeout=0.5))
    assert answer.error == "no answer within 0.5s"


def test_the_probes_reason_is_one_line_without_the_problem_separator() -> None:
    group = ExceptionGroup("unhandled errors in a TaskGroup", [ValueError("refused; try\nlater")])
    assert mcp_probe._reason(group) == "ValueError: refused, try later"


class FakeKube:
    """The reads of the webhook's check: objects by (plural, name); SubjectAccessReviews answered from
    ``readers`` (user → the Secrets they may get)."""

    def __init__(
        self, objects: dict[tuple[str, str], dict[str, Any]], readers: dict[str, set[str]] | None = None
    ) -> None:
        self.objects = objects
        self.readers = readers or {}
        self.http = self
        self.reviews: list[dict[str, Any]] = []

    async def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((plural, name))

    async def list_objects(self, plural: str, namespace: str) -> list[dict[str, Any]]:
        return [{"metadata": {"name": n}, **o} for (p, n), o in self.objects.items() if p == plural]

    async def request(self, method: str, path: str, *, json: Any = None, **_: Any) -> dict[str, Any]:
        assert (method, path) == ("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews")
        self.reviews.append(json)
        spec = json["spec"]
        attributes = spec["resourceAttributes"]
        assert (attributes["verb"], attributes["resource"]) == ("get", "secrets")
        return {"status": {"allowed": attributes["name"] in self.readers.get(spec["user"], set())}}


def test_the_webhook_check_reads_the_facts_and_asks_the_servers() -> None:
    def search(query: str) -> str:
        """Search the docs."""
        return query

    token = {"data": {"Authorization": base64.b64encode(b"Bearer t").decode()}}
    kube = FakeKube(
        {
            ("apps", "bot"): {},
            ("modeldeployments", "llama"): {"spec": {"name": "llama"}},
            ("tools", "weather-1.2.0"): WEATHER,
            ("secrets", "token"): token,
        },
        readers={"alice": {"token"}},
    )
    alice = {"username": "alice", "groups": ["team"]}
    with mcp_server({"search": search}) as server:
        spec = {**valid(), "mcpServers": [{"name": "docs", "url": server.url, "headersSecretRef": "token"}]}
        body = {"metadata": {"namespace": "team"}, "spec": spec}
        accepted = asyncio.run(admission.appversion_create_refusal(kube, body, alice))  # type: ignore[arg-type]
        # bob may not read the Secret: his version is refused, and its values are sent nowhere
        bob = asyncio.run(admission.appversion_create_refusal(kube, body, {"username": "bob"}))  # type: ignore[arg-type]
        spec["mcpServers"][0]["headersSecretRef"] = "gone"
        missing = asyncio.run(admission.appversion_create_refusal(kube, body, alice))  # type: ignore[arg-type]
    assert accepted is None
    assert missing is not None
    assert missing.code == 422
    assert missing.message == (
        "the version is not valid: spec.mcpServers[0].headersSecretRef: MCP server docs: no Secret gone"
    )
    assert bob is not None
    assert bob.message == (
        "the version is not valid: spec.mcpServers[0].headersSecretRef: MCP server docs: you may not read Secret "
        "token, whose values would be sent to this server (RBAC: get on secrets)"
    )
    assert [(r["spec"]["user"], r["spec"]["groups"]) for r in kube.reviews] == [("alice", ["team"]), ("bob", [])]
    spec["mcpServers"][0]["headersSecretRef"] = "token"
    down = asyncio.run(admission.appversion_create_refusal(kube, body, alice))  # type: ignore[arg-type]
    assert down is not None
    assert down.message.startswith(
        f"the version is not valid: spec.mcpServers[0]: MCP server docs at {server.url} does not answer: "
    )


def test_an_environment_names_an_oidc_client_secret_only_for_a_user_who_may_read_it() -> None:
    kube = FakeKube({}, readers={"alice": {"oidc-client"}})
    oidc = {"issuer": "https://id.example.com", "clientId": "web", "clientSecretRef": "oidc-client"}
    body = {"metadata": {"namespace": "team"}, "spec": {"access": {"webClient": "oidc", "oidc": oidc}}}

    def refusal(user: str, old: dict[str, Any] | None = None) -> admission.Refusal | None:
        check = admission.environment_oidc_secret_refusal(kube, body, old, {"username": user})  # type: ignore[arg-type]
        return asyncio.run(check)

    assert refusal("alice") is None
    bob = refusal("bob")
    assert bob is not None
    assert bob.code == 403
    assert bob.message.startswith(
        "spec.access.oidc.clientSecretRef: bob may not get Secret team/oidc-client, whose clientSecret the facade "
        "would send to the issuer https://id.example.com"
    )
    # an unchanged Secret and issuer are not asked again (bob may change the scopes or the origins)
    assert refusal("bob", old={"spec": {"access": {"oidc": {**oidc, "scopes": ["email"]}}}}) is None
    # the same Secret pointed at another issuer is a new decision
    assert refusal("bob", old={"spec": {"access": {"oidc": {**oidc, "issuer": "https://other.example"}}}}) is not None
    # no Secret (a public client) asks nothing
    del oidc["clientSecretRef"]
    reviews = len(kube.reviews)
    assert refusal("bob") is None
    assert len(kube.reviews) == reviews


def test_guardrails_must_compile_and_a_guard_model_must_exist() -> None:
    """docs/guardrails.md: a pattern that is not a regular expression and a guard model that is no
    ModelDeployment of the namespace are refused at their fields; a guard model named by display name is fine."""
    guardrails = {
        "policies": [
            {"name": "ids", "type": "pattern", "patterns": ["[0-9]{4}", "([a-z"]},
            {"name": "judge", "type": "guardModel", "model": "nobody"},
            {"name": "judge2", "type": "guardModel", "model": "Llama 3 8B"},
        ]
    }
    found = problems({**valid(), "guardrails": guardrails})
    assert set(found) == {"spec.guardrails.policies[0].patterns[1]", "spec.guardrails.policies[1].model"}
    assert found["spec.guardrails.policies[0].patterns[1]"].startswith("not a valid regular expression: ")
    assert found["spec.guardrails.policies[1].model"] == (
        "guard model of policy judge: unknown model 'nobody' (no ModelDeployment of that name or display name)"
    )
    assert problems({**valid(), "guardrails": {"policies": guardrails["policies"][2:]}}) == {}
