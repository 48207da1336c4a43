"""One turn of an app: pick the agent, then run its bounded tool loop against its model.

- Routing (more than one agent): one model call with a single function ``route(agent)`` whose argument
  is constrained to the agents' names (an enum), forced with ``tool_choice: "required"``; an answer that
  names no agent falls back to the first agent.
- Tool loop: the agent's tools are offered as functions; every tool call the model returns is executed
  and its result fed back; unknown function names and arguments that are not a JSON object are fed back
  as tool errors. At most ``max_steps`` model calls; the last one offers no tools, so the model answers.
- Usage: the tokens of every model call of the turn (routing included) are summed.
- Guard (optional, :mod:`~dockyard_api.runtime.guard`): screens each tool call's arguments before the tool
  is called and its answer before the model reads it; raising :class:`Blocked` ends the turn with its
  message as the answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from dockyard_api.runtime import tracing
from dockyard_api.runtime.errors import ModelBadResponseError
from dockyard_api.runtime.model import Completion, ModelClient, OnDelta, ToolCall, Usage
from dockyard_api.runtime.tools import Toolbox, ToolResult

Emit = Callable[[str, dict[str, Any]], Awaitable[None]]
"""Receives the turn's events: agent, tool_call, tool_result, delta (streaming only)."""

ROUTE_FUNCTION = "route"


class Blocked(Exception):
    """A guardrail blocked the turn: ``message`` is its answer (``stored``: the user's message to keep, when
    the input itself was blocked)."""

    def __init__(self, message: str, stored: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.stored = stored


class ToolGuard(Protocol):
    """Screens what goes to a tool and what comes back (raises :class:`Blocked`)."""

    async def tool_arguments(self, tool: str, text: str) -> str: ...

    async def tool_result(self, tool: str, text: str) -> str: ...


@dataclass(frozen=True)
class AgentSpec:
    name: str
    instructions: str = ""
    model: str | None = None
    """The ModelDeployment the agent calls: its object name or its display name."""
    tools: tuple[str, ...] = ()
    mcp_tools: frozenset[str] = frozenset()
    """The MCP tools (<server>/<tool>) the agent names: when any, it is offered only these MCP tools; when
    none, every tool of the app's MCP servers and of its MCP Tools."""


@dataclass(frozen=True)
class ModelTarget:
    """Where and how to call an agent's model: base URL, the sampling body, a name for errors."""

    base_url: str
    params: dict[str, Any]
    what: str


class AgentEnvironment(Protocol):
    """What the loop needs from the world: an agent's model and its tools."""

    async def model(self, agent: AgentSpec) -> ModelTarget: ...

    async def toolbox(self, agent: AgentSpec) -> Toolbox: ...


@dataclass
class TurnResult:
    response: str
    agent: str
    tools_used: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    blocked: bool = False
    """A guardrail blocked the turn: ``response`` is the block message."""


async def _no_events(event: str, data: dict[str, Any]) -> None:
    return None


class AgentRunner:
    def __init__(self, models: ModelClient, *, max_steps: int = 6) -> None:
        self.models = models
        self.max_steps = max(1, max_steps)

    async def run(
        self,
        agents: list[AgentSpec],
        world: AgentEnvironment,
        history: list[dict[str, str]],
        message: str,
        *,
        emit: Emit | None = None,
        stream: bool = False,
        usage: Usage | None = None,
        guard: ToolGuard | None = None,
    ) -> TurnResult:
        """The turn's answer. ``usage`` (optional) receives the tokens as they are spent, so that a caller
        still knows them when the turn fails half way."""
        emit = emit or _no_events
        usage = usage if usage is not None else Usage()
        agent = await self.route(agents, world, history, message, usage)
        await emit("agent", {"agent": agent.name})
        used: list[str] = []
        try:
            with tracing.agent(agent.name, agent.model, None):
                result = await self._loop(agent, world, history, message, emit, stream, usage, guard, used)
        except Blocked as blocked:
            result = TurnResult(blocked.message, agent.name, used, blocked=True)
        result.usage = usage
        return result

    async def route(
        self,
        agents: list[AgentSpec],
        world: AgentEnvironment,
        history: list[dict[str, str]],
        message: str,
        usage: Usage,
    ) -> AgentSpec:
        if len(agents) == 1:
            return agents[0]
        router = next((a for a in agents if a.model), agents[0])
        target = await world.model(router)
        names = [a.name for a in agents]
        roster = "\n".join(f"- {a.name}: {_first_line(a.instructions) or 'no description'}" for a in agents)
        system = (
            "You route the user's message to the agent best suited to answer it. Call the route function "
            f"with the name of one agent. The agents:\n{roster}"
        )
        function = {
            "type": "function",
            "function": {
                "name": ROUTE_FUNCTION,
                "description": "Hand the user's message to one agent.",
                "parameters": {
                    "type": "object",
                    "properties": {"agent": {"type": "string", "enum": names, "description": "the agent's name"}},
                    "required": ["agent"],
                },
            },
        }
        body = {
            **target.params,
            "messages": [{"role": "system", "content": system}, *history[-4:], {"role": "user", "content": message}],
            "tools": [function],
            # "required" with route as the only function forces it; llama.cpp's server accepts only the
            # string forms of tool_choice (it reads an object as "auto")
            "tool_choice": "required",
        }
        completion = await self.models.complete(target.base_url, body, what=target.what)
        usage.add(completion)
        chosen = _routed_name(completion, names)
        return next((a for a in agents if a.name == chosen), agents[0])

    async def _loop(
        self,
        agent: AgentSpec,
        world: AgentEnvironment,
        history: list[dict[str, str]],
        message: str,
        emit: Emit,
        stream: bool,
        usage: Usage,
        guard: ToolGuard | None,
        used: list[str],
    ) -> TurnResult:
        target = await world.model(agent)
        toolbox = await world.toolbox(agent)
        messages: list[dict[str, Any]] = []
        if agent.instructions:
            messages.append({"role": "system", "content": agent.instructions})
        messages += [*history, {"role": "user", "content": message}]
        on_delta: OnDelta | None = None
        if stream:

            async def on_delta(text: str) -> None:
                await emit("delta", {"text": text})

        completion: Completion | None = None
        for step in range(1, self.max_steps + 1):
            last = step == self.max_steps
            body: dict[str, Any] = {**target.params, "messages": messages}
            if toolbox.functions and not last:
                body["tools"] = toolbox.openai()
                body["tool_choice"] = "auto"
            completion = await self.models.complete(
                target.base_url, body, what=target.what, on_delta=on_delta, step=step
            )
            usage.add(completion)
            if not completion.tool_calls or last:
                break
            # llama.cpp's server refuses an assistant tool-call message whose content is null: send "".
            messages.append(
                {
                    "role": "assistant",
                    "content": completion.content or "",
                    "tool_calls": [
                        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                        for c in completion.tool_calls
                    ],
                }
            )
            for call in completion.tool_calls:
                result = await self._call(call, toolbox, emit, used, guard, step)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result.content})
        assert completion is not None
        if completion.tool_calls and not completion.content:
            raise ModelBadResponseError(
                f"the model of {target.what} still called tools after {self.max_steps} steps instead of answering",
                {"maxSteps": self.max_steps},
            )
        return TurnResult(completion.content, agent.name, used)

    async def _call(
        self, call: ToolCall, toolbox: Toolbox, emit: Emit, used: list[str], guard: ToolGuard | None, step: int
    ) -> ToolResult:
        arguments: Any = None
        function = toolbox.functions.get(call.name)
        if guard is not None and function is not None:  # the arguments the tool gets (and the events show)
            screened = await guard.tool_arguments(call.name, call.arguments)
            if screened != call.arguments:
                call = ToolCall(call.id, call.name, screened)
        try:
            arguments = orjson.loads(call.arguments) if call.arguments.strip() else {}
        except orjson.JSONDecodeError:
            arguments = None
        await emit("tool_call", {"id": call.id, "name": call.name, "arguments": call.arguments})
        if function is None:
            known = ", ".join(toolbox.functions) or "none"
            result = ToolResult(False, f"error: there is no tool named {call.name!r} (tools: {known})")
        elif not isinstance(arguments, dict):
            result = ToolResult(
                False, f"error: the arguments of {call.name} must be a JSON object, got {call.arguments[:200]!r}"
            )
        else:
            if call.name not in used:
                used.append(call.name)
            with tracing.tool(call.name, call.id, step) as span:
                result = await function.call(arguments)
                tracing.tool_done(span, result.ok)
            if guard is not None:  # what the model reads of the tool's answer
                result = ToolResult(result.ok, await guard.tool_result(call.name, result.content))
        await emit("tool_result", {"id": call.id, "name": call.name, "ok": result.ok, "content": result.content})
        return result


def _first_line(text: str, limit: int = 200) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:limit]


def _routed_name(completion: Completion, names: list[str]) -> str | None:
    for call in completion.tool_calls:
        if call.name != ROUTE_FUNCTION:
            continue
        try:
            arguments = orjson.loads(call.arguments)
        except orjson.JSONDecodeError:
            continue
        if isinstance(arguments, dict) and arguments.get("agent") in names:
            return str(arguments["agent"])
    text = completion.content.strip()
    return text if text in names else None
