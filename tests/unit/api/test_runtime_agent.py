"""The agent loop against a REAL OpenAI-compatible HTTP server (the scripted model) and real HTTP and MCP
tool servers: routing, the tool loop, its bound, tool errors fed back, model failures, streaming."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from dockyard_api.runtime.agent import AgentRunner, AgentSpec, ModelTarget, TurnResult
from dockyard_api.runtime.errors import ModelBadResponseError, ModelUnavailableError
from dockyard_api.runtime.model import ModelClient, Usage
from dockyard_api.runtime.tools import Limits, McpClient, Toolbox, http_function
from dockyard_core.mcp import McpServerRef
from tests.support.runners import free_port
from tests.support.scripted_model import Call, Reply, ScriptedModel, mcp_server, scripted_model

PARAMS = {"model": "tiny", "temperature": 0.2, "max_tokens": 64, "top_p": 0.9, "top_k": 40, "stop": ["###"]}


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedModel]:
    with scripted_model() as running:
        yield running


@pytest.fixture
def model(server: ScriptedModel) -> ScriptedModel:
    server.reset()
    server.tools.clear()
    return server


@dataclass
class World:
    """An agent's model (the scripted server) and its tools, as the runtime's TurnWorld provides them."""

    base_url: str
    http_tools: dict[str, str | None] = field(default_factory=dict)
    mcp: list[McpServerRef] = field(default_factory=list)
    limits: Limits = field(default_factory=lambda: Limits(timeout_seconds=2.0, max_bytes=4096))
    schemas: dict[str, Any] = field(default_factory=dict)
    client: ModelClient | None = None
    mcp_client: McpClient = field(default_factory=McpClient)

    async def model(self, agent: AgentSpec) -> ModelTarget:
        return ModelTarget(self.base_url, dict(PARAMS), f"model of {agent.name}")

    async def toolbox(self, agent: AgentSpec) -> Toolbox:
        assert self.client is not None
        box = Toolbox()
        for name in agent.tools:
            if name in self.http_tools:
                box.add(
                    http_function(
                        name=name,
                        description=f"the {name} tool",
                        parameters=self.schemas.get(name),
                        url=self.http_tools[name],
                        http=self.client.http(),
                        limits=self.limits,
                    )
                )
        for ref in self.mcp:
            for function in self.mcp_client.functions(
                ref, await self.mcp_client.list_tools(ref, self.limits), self.limits
            ):
                box.add(function)
        return box


def run(
    world: World,
    agents: list[AgentSpec],
    message: str = "hi",
    *,
    history: list[dict[str, str]] | None = None,
    max_steps: int = 6,
    stream: bool = False,
    events: list[tuple[str, dict[str, Any]]] | None = None,
) -> TurnResult:
    async def go() -> TurnResult:
        client = ModelClient()
        world.client = client

        async def emit(event: str, data: dict[str, Any]) -> None:
            if events is not None:
                events.append((event, data))

        try:
            runner = AgentRunner(client, max_steps=max_steps)
            return await runner.run(agents, world, history or [], message, emit=emit, stream=stream)
        finally:
            await client.aclose()

    return asyncio.run(go())


HELPER = AgentSpec("helper", "You help.", "m", ("weather",))


def test_one_agent_answers_with_its_instructions_history_and_the_deployment_hyper_parameters(
    model: ScriptedModel,
) -> None:
    model.script(Reply(text="Hello there", usage=(21, 4)))
    history = [{"role": "user", "content": "before"}, {"role": "assistant", "content": "earlier answer"}]
    result = run(World(model.url), [AgentSpec("solo", "Be brief.", "m")], "hello", history=history)
    assert (result.response, result.agent, result.tools_used) == ("Hello there", "solo", [])
    assert (result.usage.tokens_in, result.usage.tokens_out) == (21, 4)
    (body,) = model.bodies()
    assert {k: body[k] for k in PARAMS} == PARAMS
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        *history,
        {"role": "user", "content": "hello"},
    ]
    assert "tools" not in body  # an agent without tools is offered none


def test_routing_forces_one_route_call_constrained_to_the_agents_and_sums_tokens(model: ScriptedModel) -> None:
    agents = [
        AgentSpec("sales", "Sells things.\nMore detail.", "m"),
        AgentSpec("billing", "Answers invoice questions.", "m"),
    ]
    model.script(Reply(calls=[Call("route", {"agent": "billing"})], usage=(30, 3)), Reply(text="Paid.", usage=(8, 2)))
    result = run(World(model.url), agents, "where is my invoice?")
    assert (result.agent, result.response) == ("billing", "Paid.")
    assert (result.usage.tokens_in, result.usage.tokens_out, result.usage.calls) == (38, 5, 2)
    routing, answer = model.bodies()
    assert routing["tool_choice"] == "required"  # with route as the only function: forced
    (function,) = routing["tools"]
    assert function["function"]["parameters"]["properties"]["agent"]["enum"] == ["sales", "billing"]
    assert "Sells things." in routing["messages"][0]["content"]
    assert routing["messages"][-1] == {"role": "user", "content": "where is my invoice?"}
    assert answer["messages"][0] == {"role": "system", "content": "Answers invoice questions."}


@pytest.mark.parametrize(
    "routing",
    [
        Reply(calls=[Call("route", {"agent": "nobody"})]),
        Reply(calls=[Call("route", "{not json")]),
        Reply(text="I do not know"),
    ],
    ids=["unknown-agent", "invalid-json", "no-call"],
)
def test_routing_falls_back_to_the_first_agent(model: ScriptedModel, routing: Reply) -> None:
    model.script(routing, Reply(text="from the first"))
    result = run(World(model.url), [AgentSpec("first", "", "m"), AgentSpec("second", "", "m")])
    assert (result.agent, result.response) == ("first", "from the first")


def test_tool_calls_are_executed_and_fed_back_until_the_model_answers(model: ScriptedModel) -> None:
    url = model.tool("weather", lambda args: {"city": args["city"], "celsius": 12})
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    world = World(model.url, {"weather": url}, schemas={"weather": schema})
    model.script(
        Reply(calls=[Call("weather", {"city": "Oslo"}, id="c1")], content_null=True, usage=(50, 10)),
        Reply(calls=[Call("weather", {"city": "Bergen"}, id="c2")], usage=(70, 10)),
        Reply(text="Oslo 12, Bergen 12", usage=(90, 6)),
    )
    events: list[tuple[str, dict[str, Any]]] = []
    result = run(world, [HELPER], "weather?", events=events)
    assert result.response == "Oslo 12, Bergen 12"
    assert result.tools_used == ["weather"]  # called twice, named once
    assert (result.usage.tokens_in, result.usage.tokens_out) == (210, 26)
    assert [r.body for r in model.tool_requests] == [{"city": "Oslo"}, {"city": "Bergen"}]
    first, second, third = model.bodies()
    assert first["tools"][0]["function"] == {"name": "weather", "description": "the weather tool", "parameters": schema}
    assistant = second["messages"][-2]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == ""  # never null: llama.cpp's server refuses null content with tool calls
    assert assistant["tool_calls"][0]["function"] == {"name": "weather", "arguments": '{"city":"Oslo"}'}
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "c1", "content": '{"city":"Oslo","celsius":12}'}
    assert third["messages"][-1]["tool_call_id"] == "c2"
    assert [e for e, _ in events] == ["agent", "tool_call", "tool_result", "tool_call", "tool_result"]
    assert events[2][1] == {"id": "c1", "name": "weather", "ok": True, "content": '{"city":"Oslo","celsius":12}'}


def test_steps_are_bounded_and_the_last_pass_offers_no_tools(model: ScriptedModel) -> None:
    world = World(model.url, {"weather": model.tool("weather", lambda args: "sunny")})
    model.script(
        Reply(calls=[Call("weather", {})]),
        Reply(calls=[Call("weather", {})]),
        Reply(text="Final answer"),
    )
    result = run(world, [HELPER], max_steps=3)
    assert result.response == "Final answer"
    bodies = model.bodies()
    assert len(bodies) == 3
    assert "tools" in bodies[0]
    assert "tools" in bodies[1]
    assert "tools" not in bodies[2]
    assert "tool_choice" not in bodies[2]


def test_a_model_that_still_calls_tools_on_the_last_pass_is_a_502(model: ScriptedModel) -> None:
    world = World(model.url, {"weather": model.tool("weather", lambda args: "sunny")})
    model.respond_with(lambda body: Reply(calls=[Call("weather", {})]))
    with pytest.raises(ModelBadResponseError, match="after 2 steps") as caught:
        run(world, [HELPER], max_steps=2)
    assert caught.value.status_code == 502
    assert len(model.requests) == 2


def test_unknown_tools_and_invalid_arguments_are_fed_back_not_raised(model: ScriptedModel) -> None:
    world = World(model.url, {"weather": model.tool("weather", lambda args: "sunny")})
    model.script(
        Reply(calls=[Call("delete_everything", {"path": "/"}, id="a"), Call("weather", "{oops", id="b")]),
        Reply(calls=[Call("weather", "[1, 2]", id="c")]),
        Reply(text="Sorry, I could not check."),
    )
    result = run(world, [HELPER])
    assert result.response == "Sorry, I could not check."
    assert result.tools_used == []  # nothing was called
    assert model.tool_requests == []
    second = model.bodies()[1]["messages"]
    unknown, invalid = second[-2], second[-1]
    assert unknown["tool_call_id"] == "a"
    assert "no tool named 'delete_everything'" in unknown["content"]
    assert "weather" in unknown["content"]  # the model is told which tools exist
    assert invalid["tool_call_id"] == "b"
    assert "must be a JSON object" in invalid["content"]
    assert "must be a JSON object" in model.bodies()[2]["messages"][-1]["content"]


def test_a_failing_slow_or_unreachable_tool_is_reported_to_the_model_and_the_turn_goes_on(
    model: ScriptedModel,
) -> None:
    def broken(args: dict[str, Any]) -> Any:
        raise RuntimeError("disk on fire")

    async def slow(args: dict[str, Any]) -> Any:
        await asyncio.sleep(3)
        return "late"

    tools = {
        "broken": model.tool("broken", broken),
        "slow": model.tool("slow", slow),
        "gone": f"http://127.0.0.1:{free_port()}/nothing-listens",
        "undeployed": None,
    }
    world = World(model.url, tools, limits=Limits(timeout_seconds=0.5, max_bytes=4096))
    agent = AgentSpec("helper", "", "m", tuple(tools))
    model.script(
        Reply(calls=[Call(name, {}, id=name) for name in tools]),
        Reply(text="Everything is broken today."),
    )
    started = time.monotonic()
    result = run(world, [agent])
    assert time.monotonic() - started < 2.5
    assert result.response == "Everything is broken today."
    assert result.tools_used == ["broken", "slow", "gone", "undeployed"]
    fed = {m["tool_call_id"]: m["content"] for m in model.bodies()[1]["messages"] if m["role"] == "tool"}
    assert "HTTP 500" in fed["broken"]
    assert "disk on fire" in fed["broken"]
    assert "did not answer within 0.5s" in fed["slow"]
    assert "cannot be reached" in fed["gone"]
    assert "not deployed" in fed["undeployed"]


def test_a_tool_answer_is_cut_at_the_size_cap(model: ScriptedModel) -> None:
    world = World(model.url, {"big": model.tool("big", lambda args: "x" * 100_000)}, limits=Limits(2.0, 1024))
    model.script(Reply(calls=[Call("big", {})]), Reply(text="done"))
    run(world, [AgentSpec("helper", "", "m", ("big",))])
    fed = model.bodies()[1]["messages"][-1]["content"]
    assert len(fed) < 1200
    assert "cut at 1024 bytes" in fed


@pytest.mark.parametrize(
    ("reply", "kind", "words"),
    [
        (Reply(status=500), ModelBadResponseError, "HTTP 500"),
        (Reply(status=400), ModelBadResponseError, "HTTP 400"),
        (Reply(raw=b"<html>proxy error</html>"), ModelBadResponseError, "not JSON"),
        (Reply(raw=b'{"object": "list"}'), ModelBadResponseError, "no choices"),
        (Reply(raw=b'{"choices": [{"message": {"content": 7}}]}'), ModelBadResponseError, "not text"),
        (Reply(raw=b'{"error": {"message": "context too long"}}'), ModelBadResponseError, "context too long"),
    ],
    ids=["500", "400", "html", "no-choices", "content-not-text", "error-body"],
)
def test_model_failures_are_errors_that_say_why(
    model: ScriptedModel, reply: Reply, kind: type[Exception], words: str
) -> None:
    model.script(reply)
    with pytest.raises(kind, match=words) as caught:
        run(World(model.url), [AgentSpec("solo", "", "m")])
    assert caught.value.status_code == 502  # type: ignore[attr-defined]


def test_a_model_endpoint_that_is_down_is_a_503() -> None:
    with pytest.raises(ModelUnavailableError, match="cannot be reached") as caught:
        run(World(f"http://127.0.0.1:{free_port()}"), [AgentSpec("solo", "", "m")])
    assert caught.value.status_code == 503


def test_streaming_hands_out_text_deltas_and_assembles_tool_calls_and_usage(model: ScriptedModel) -> None:
    world = World(model.url, {"weather": model.tool("weather", lambda args: {"celsius": 3})})
    model.script(
        Reply(text="Let me check. ", calls=[Call("weather", {"city": "Tromsø"}, id="w1")], usage=(40, 9)),
        Reply(text="It is 3 degrees in Tromsø.", pieces=4, usage=(60, 8)),
    )
    events: list[tuple[str, dict[str, Any]]] = []
    result = run(world, [HELPER], stream=True, events=events)
    assert result.response == "It is 3 degrees in Tromsø."
    assert (result.usage.tokens_in, result.usage.tokens_out) == (100, 17)
    assert model.tool_requests[0].body == {"city": "Tromsø"}
    assert all(b["stream"] and b["stream_options"] == {"include_usage": True} for b in model.bodies())
    kinds = [e for e, _ in events]
    assert kinds[0] == "agent"
    assert kinds.index("tool_call") < kinds.index("tool_result")
    deltas = [d["text"] for e, d in events if e == "delta"]
    assert "".join(deltas) == "Let me check. It is 3 degrees in Tromsø."
    assert len(deltas) >= 5
    call = next(d for e, d in events if e == "tool_call")
    assert call == {"id": "w1", "name": "weather", "arguments": '{"city":"Tromsø"}'}


def test_a_stream_that_ends_early_is_a_502(model: ScriptedModel) -> None:
    model.script(Reply(text="Half an ans", cut_stream=True))
    with pytest.raises(ModelBadResponseError, match="ended its stream"):
        run(World(model.url), [AgentSpec("solo", "", "m")], stream=True)


def test_an_empty_stream_is_a_502_without_tools(model: ScriptedModel) -> None:
    model.script(Reply(text="never sent", empty_stream=True))
    with pytest.raises(ModelBadResponseError, match="empty event stream"):
        run(World(model.url), [AgentSpec("solo", "", "m")], stream=True)


def test_an_engine_that_cannot_stream_with_tools_is_asked_again_without_streaming(model: ScriptedModel) -> None:
    world = World(model.url, {"weather": model.tool("weather", lambda args: {"celsius": 3})})
    model.script(
        Reply(empty_stream=True),
        Reply(calls=[Call("weather", {"city": "Oslo"}, id="w1")], usage=(40, 9)),
        Reply(text="3 degrees.", usage=(60, 8)),
    )
    events: list[tuple[str, dict[str, Any]]] = []
    result = run(world, [HELPER], stream=True, events=events)
    assert (result.response, result.tools_used) == ("3 degrees.", ["weather"])
    assert (result.usage.tokens_in, result.usage.tokens_out) == (100, 17)
    # asked again without streaming; the endpoint is remembered: passes with tools are not streamed again
    assert [(bool(b.get("stream")), "tools" in b) for b in model.bodies()] == [
        (True, True),
        (False, True),
        (False, True),
    ]
    kinds = [e for e, _ in events]
    assert kinds.index("tool_call") < kinds.index("tool_result") < kinds.index("delta")


def test_usage_is_known_when_a_turn_fails_half_way(model: ScriptedModel) -> None:
    model.script(Reply(calls=[Call("route", {"agent": "b"})], usage=(11, 1)), Reply(status=503))
    usage = Usage()

    async def go() -> None:
        client = ModelClient()
        world = World(model.url, client=client)
        try:
            await AgentRunner(client).run(
                [AgentSpec("a", "", "m"), AgentSpec("b", "", "m")], world, [], "x", usage=usage
            )
        finally:
            await client.aclose()

    with pytest.raises(ModelBadResponseError):
        asyncio.run(go())
    assert (usage.tokens_in, usage.tokens_out, usage.calls) == (11, 1, 1)


def test_mcp_tools_are_listed_and_called_through_the_mcp_sdk(model: ScriptedModel) -> None:
    def lookup(city: str, days: int = 1) -> str:
        """Forecast for a city."""
        return f"{city}: rain for {days} days"

    with mcp_server({"forecast": lookup}) as mcp:
        world = World(model.url, mcp=[McpServerRef("weatherdesk", mcp.url)])
        model.script(
            Reply(calls=[Call("weatherdesk__forecast", {"city": "Oslo", "days": 2}, id="m1")]),
            Reply(text="Rain in Oslo."),
        )
        result = run(world, [AgentSpec("helper", "", "m")])
        assert mcp.calls == [("forecast", {"city": "Oslo", "days": 2})]
    assert result.tools_used == ["weatherdesk__forecast"]
    first, second = model.bodies()
    (offered,) = first["tools"]
    assert offered["function"]["name"] == "weatherdesk__forecast"
    assert offered["function"]["description"] == "Forecast for a city."
    assert offered["function"]["parameters"]["properties"]["city"]["type"] == "string"
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "m1", "content": "Oslo: rain for 2 days"}


def test_an_mcp_tool_error_is_fed_back(model: ScriptedModel) -> None:
    def explode(reason: str) -> str:
        """Always fails."""
        raise ValueError(f"exploded: {reason}")

    with mcp_server({"explode": explode}) as mcp:
        world = World(model.url, mcp=[McpServerRef("lab", mcp.url)])
        model.script(Reply(calls=[Call("lab__explode", {"reason": "test"})]), Reply(text="It failed."))
        result = run(world, [AgentSpec("helper", "", "m")])
    assert result.response == "It failed."
    assert "exploded: test" in model.bodies()[1]["messages"][-1]["content"]
