"""The runtime's spans (dockyard_api.runtime.tracing) of a turn's agent loop against the REAL scripted model server,
an HTTP tool and an MCP server, kept in memory: the tree, the GenAI attributes, the
traceparent each server received; and with tracing off, nothing (no span, no header)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest

from dockyard_api.runtime import tracing
from dockyard_api.runtime.agent import AgentRunner, AgentSpec
from dockyard_api.runtime.model import ModelClient
from dockyard_core import tracing as core
from dockyard_core.mcp import McpServerRef
from tests.support.scripted_model import Call, Reply, ScriptedModel, mcp_server, scripted_model
from tests.support.tracing_hooks import trace_with
from tests.unit.api.test_runtime_agent import World

pytestmark = pytest.mark.usefixtures("span_type")  # each test with the C span and with the Python one


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedModel]:
    with scripted_model() as running:
        yield running


@pytest.fixture
def model(server: ScriptedModel) -> ScriptedModel:
    server.reset()
    server.tools.clear()
    return server


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[core.Span]]:
    """The spans that end, kept; the hooks in C with the C tracer (``span_type`` c), else in Python."""
    finished: list[core.Span] = []
    trace_with(monkeypatch, core.Tracer(core.sampler({}), finished.append))
    return finished


def run(world: World, agents: list[AgentSpec], message: str = "hi") -> Any:
    async def go() -> Any:
        client = ModelClient()
        world.client = client
        try:
            return await AgentRunner(client).run(agents, world, [], message)
        finally:
            await client.aclose()

    return asyncio.run(go())


def parent(header: str) -> tuple[int, int]:
    found = re.fullmatch(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}", header)
    assert found, header
    return int(found.group(1), 16), int(found.group(2), 16)


def by_name(finished: list[core.Span], name: str) -> core.Span:
    (span,) = [s for s in finished if s.name == name]
    return span


def test_an_agent_turn_is_a_tree_of_spans_and_every_server_gets_the_traceparent(
    model: ScriptedModel, spans: list[core.Span]
) -> None:
    def lookup(city: str) -> str:
        """Forecast for a city."""
        return f"{city}: rain"

    weather = model.tool("weather", lambda args: {"celsius": 12})
    with mcp_server({"forecast": lookup}) as mcp:
        world = World(model.url, http_tools={"weather": weather}, mcp=[McpServerRef("desk", mcp.url)])
        model.script(
            Reply(calls=[Call("weather", {"city": "Oslo"}, id="c1"), Call("desk__forecast", {"city": "Oslo"}, id="c2")],
                  usage=(30, 5)),
            Reply(text="12 degrees and rain.", usage=(45, 9)),
        )  # fmt: skip
        result = run(world, [AgentSpec("helper", "You help.", "tiny", ("weather",))])
    assert result.response == "12 degrees and rain."
    finished = spans
    agent = by_name(finished, "invoke_agent helper")
    assert not [s for s in finished if s.name.startswith("step")]  # a step is its chat span and its tools
    chats = [s for s in finished if s.name == "chat tiny"]
    assert [(c.parent_id, c.all_attributes()["dockyard.agent.step"]) for c in chats] == [
        (agent.span_id, 1),
        (agent.span_id, 2),
    ]
    http_tool, mcp_tool = by_name(finished, "execute_tool weather"), by_name(finished, "execute_tool desk__forecast")
    assert (http_tool.parent_id, mcp_tool.parent_id) == (agent.span_id, agent.span_id)
    assert http_tool.all_attributes()["dockyard.agent.step"] == mcp_tool.all_attributes()["dockyard.agent.step"] == 1
    http_request, mcp_request = by_name(finished, "POST weather"), by_name(finished, "tools/call forecast")
    assert http_request.parent_id == http_tool.span_id
    assert mcp_request.parent_id == mcp_tool.span_id
    assert len({s.trace_id for s in finished}) == 1

    assert chats[0].all_attributes() == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "server.address": "127.0.0.1",
        "server.port": int(model.url.rsplit(":", 1)[1]),
        "gen_ai.request.model": "tiny",
        "gen_ai.request.max_tokens": 64,
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.top_p": 0.9,
        "dockyard.tools_offered": ["weather", "desk__forecast"],
        "dockyard.agent.step": 1,
        "gen_ai.usage.input_tokens": 30,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.response.finish_reasons": ["tool_calls"],
        "dockyard.tool_calls": ["weather", "desk__forecast"],
    }
    assert http_tool.all_attributes()["gen_ai.tool.call.id"] == "c1"
    assert mcp_request.all_attributes()["mcp.method.name"] == "tools/call"

    # what each server received: the traceparent of the span that called it
    trace_id = agent.trace_id
    assert [parent(r.headers["traceparent"]) for r in model.requests] == [(trace_id, c.span_id) for c in chats]
    (to_tool,) = model.tool_requests
    assert parent(to_tool.headers["traceparent"]) == (trace_id, http_request.span_id)
    sent = {parent(h["traceparent"]) for h in mcp.headers if "traceparent" in h}
    assert sent == {(trace_id, mcp_request.span_id)}, mcp.headers


def test_off_no_span_and_no_traceparent(model: ScriptedModel) -> None:
    assert tracing.TRACER is None
    assert tracing.chat("http://m", {}) is None
    assert tracing.tool("t", "c") is tracing.NOOP
    model.script(Reply(text="hello"))
    run(World(model.url), [AgentSpec("solo", "", "tiny")])
    assert "traceparent" not in {k.lower() for k in model.requests[0].headers}


def test_a_trace_the_sampler_leaves_out_records_nothing_and_goes_on_unsampled(
    model: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    finished: list[core.Span] = []
    ratio_0 = core.sampler({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"})
    trace_with(monkeypatch, core.Tracer(ratio_0, finished.append))
    request = tracing.request({"type": "http", "method": "POST", "path": "/e/team/prod/v1/apps/bot/execute"})
    assert request is not None
    assert not request.sampled
    assert tracing.unsampled()
    assert tracing.turn(Env, "v1", "s-1") is None  # type: ignore[arg-type]
    assert tracing.agent("bot", "tiny", None) is tracing.NOOP
    assert tracing.chat("http://m", {}) is None
    assert tracing.tool("t", "c") is tracing.NOOP
    weather = model.tool("weather", lambda args: {"celsius": 12})
    model.script(Reply(calls=[Call("weather", {"city": "Oslo"}, id="c1")]), Reply(text="12 degrees."))
    run(World(model.url, http_tools={"weather": weather}), [AgentSpec("solo", "", "tiny", ("weather",))])
    tracing.request_done(request, "/e/{namespace}/{environment}/v1/apps/{app_id}/execute", 200)

    assert finished == []
    # the engine and the tool still get the trace, marked not sampled, from the request's span
    sent = [r.headers["traceparent"] for r in [*model.requests, *model.tool_requests]]
    assert sent == [request.traceparent()] * 3
    assert request.traceparent().endswith("-00")


class Env:
    app, name, namespace = "bot", "prod", "team"


def test_the_requests_span_is_its_turns_and_a_turn_elsewhere_has_its_own(spans: list[core.Span]) -> None:
    scope = {"type": "http", "method": "POST", "path": "/e/team/prod/v1/apps/bot/execute", "query_string": b"k=v"}
    request = tracing.request(scope)
    assert request is not None
    first = tracing.turn(Env, "v1", "s-1")  # type: ignore[arg-type]
    second = tracing.turn(Env, "v1", "s-2")  # type: ignore[arg-type]  # e.g. a background run started by it
    assert first is not None
    assert second is not None
    assert first is request
    assert (second.name, second.kind) == ("turn bot", core.INTERNAL)
    assert second.parent_id == request.span_id
    tracing.turn_failed(second, "timeout")
    tracing.request_done(request, "/e/{namespace}/{environment}/v1/apps/{app_id}/execute", 200)
    assert [s.name for s in spans] == ["turn bot", "POST /e/{namespace}/{environment}/v1/apps/{app_id}/execute"]
    assert request.all_attributes() == {
        "http.request.method": "POST", "url.path": "/e/team/prod/v1/apps/bot/execute", "url.scheme": "http",
        "url.query": "k=REDACTED", "dockyard.app": "bot", "dockyard.app.version": "v1", "dockyard.environment": "prod",
        "dockyard.environment.namespace": "team", "gen_ai.conversation.id": "s-1",
        "http.route": "/e/{namespace}/{environment}/v1/apps/{app_id}/execute", "http.response.status_code": 200,
    }  # fmt: skip
    assert second.all_attributes()["error.type"] == "timeout"
    assert core.current() is None

    async def background() -> core.Span | None:
        core.detach()
        return core.current()

    with core.Tracer(core.sampler({}), spans.append).start_span("POST /runs", core.SERVER):
        assert asyncio.run(background()) is None  # a task's own context: the request's span is not its parent
