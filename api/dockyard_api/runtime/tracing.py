"""The facade's traces (docs/observability.md, "Traces"): one trace per turn, with the GenAI semantic
conventions of OpenTelemetry.

The span tree of a turn::

    POST /e/{namespace}/{environment}/v1/apps/{app_id}/execute     SERVER  the request's span (its caller's
    │                                                                      traceparent is its parent), which
    │                                                                      carries the turn's attributes
    ├─ chat {model}                     CLIENT  routing call (apps with several agents) and guard-model calls
    └─ invoke_agent {agent}
       ├─ chat {model}                  CLIENT  step 1: the model call (traceparent sent to the engine: vLLM
       │                                        joins its own spans), dockyard.agent.step=1
       ├─ execute_tool {tool}                   the tools that step called, dockyard.agent.step=1
       │  └─ POST {tool} | tools/call {tool}   CLIENT  traceparent sent to the tool (HTTP, MCP)
       └─ chat {model}                  CLIENT  step 2 ...

A turn run outside a request (an evaluation's, a shadow run's) gets its own ``turn {app}`` span instead.
Attributes: the app, its version, the environment, the session (``gen_ai.conversation.id``), the agent, the
model, tokens, tool names. Never an API key, never a URL's query; message text only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` AND the environment has PII settings, redacted
by them (:func:`content`).

Off costs nothing: :data:`TRACER` is None and every hook answers at its first line (a shared null context
manager).

With the C tracer (``dockyard_core._spans``, where it was built), :func:`use` binds the C form of the hooks of a
turn (``_spans.Hooks``: request, request_done, turn, turn_done, agent, chat, chat_done, inject) in place of the
Python functions below while tracing is on: the same spans and attributes on the common path, any other case
handed to the Python function as it is (docs/benchmarks.md, "Tracing: the hooks of a turn in C"). Callers reach the
hooks through the module (``tracing.chat(...)``), so that they get the form in use.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson
from prometheus_client import Counter

from dockyard_api import __version__
from dockyard_api.metrics import REGISTRY
from dockyard_core import tracing
from dockyard_core.tracing import CLIENT, SERVER, Span, Static, Tracer

try:  # the C form of the hooks of a turn, where the extension was built
    from dockyard_core import _spans
except ImportError:  # pragma: no cover - a machine without a C compiler: the Python hooks
    _spans = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from dockyard_api.runtime.config import EnvironmentView
    from dockyard_core.pii import PiiPolicy

SPANS_DROPPED = Counter(
    "dockyard_api_spans_dropped",
    "Spans that never reached the tracing backend: queue_full (its bounded queue was full), export_failed "
    "(the backend refused them or could not be reached)",
    ["reason"],
    registry=REGISTRY,
)
for _reason in ("queue_full", "export_failed"):
    SPANS_DROPPED.labels(_reason)

TRACER: Tracer | None = None
"""The facade's tracer while tracing is on; None when off (every hook tests it first)."""
CAPTURE_CONTENT = False
_RUNNING: tracing.Tracing | None = None
_HOOKS: Any = None
"""The C hooks in use (``_spans.Hooks``), or None."""
NOOP: contextlib.nullcontext[None] = contextlib.nullcontext()
_current = tracing.current


def _dropped(reason: str, count: int) -> None:
    SPANS_DROPPED.labels(reason).inc(count)


def start(environ: Mapping[str, str] | None = None) -> tracing.Tracing | None:
    """Tracing for this facade when the OTEL_* variables ask for it (None: off)."""
    global _RUNNING
    stop()
    running = tracing.start("dockyard-api", __version__, _dropped, environ)
    if running is None:
        return None
    _RUNNING = running
    use(running.tracer, running.settings.capture_content)
    return running


def stop() -> None:
    global _RUNNING
    running, _RUNNING = _RUNNING, None
    use(None)
    if running is not None:
        running.stop()


def use(tracer: Tracer | None, capture_content: bool = False) -> None:
    """Trace with ``tracer`` (None: off) from now on: the hooks of a turn in C where ``tracer`` is the C one, else
    the Python functions of this module. Hooks bound earlier (a middleware's) keep working: the C ones, once
    replaced, hand every call to the Python function, which reads the tracer of the moment."""
    global TRACER, CAPTURE_CONTENT, _HOOKS
    if _HOOKS is not None:
        _HOOKS.off = True
    TRACER, CAPTURE_CONTENT, _HOOKS = tracer, capture_content, None
    hooks: dict[str, Any] = _PYTHON_HOOKS
    if tracer is not None and _spans is not None and isinstance(tracer, _spans.Tracer):
        _HOOKS = _spans.Hooks(tracer, _PYTHON_HOOKS, _STATICS, NOOP, capture_content)
        hooks = {name: getattr(_HOOKS, name) for name in _PYTHON_HOOKS}
    globals().update(hooks)


# --- the request's span ------------------------------------------------------------------------------


def request(scope: Mapping[str, Any]) -> Span | None:
    """The SERVER span of an HTTP request (None when tracing is off), current until :func:`request_done`:
    its parent is the caller's ``traceparent``; its name and ``http.route`` are set when the route is known."""
    if TRACER is None:
        return None
    parent, state = None, None
    for name, value in scope.get("headers") or ():
        if name == b"traceparent":
            parent = value.decode("latin-1")
        elif name == b"tracestate":
            state = value.decode("latin-1")
    method = scope.get("method", "")
    static = _request_static(method, scope.get("path", ""), scope.get("scheme", "http"))
    query = scope.get("query_string")
    attributes = {"url.query": tracing.query_names(query.decode("latin-1"))} if query else None
    span = TRACER.start_span(
        method, SERVER, attributes, parent=tracing.extract(parent, state), use_current=False, static=static
    )
    span.activate()
    return span


@functools.lru_cache(maxsize=1024)
def _request_static(method: str, path: str, scheme: str) -> Static:
    return Static({"http.request.method": method, "url.path": path, "url.scheme": scheme})


def request_done(span: Span, route: str, status: int) -> None:
    if span.recording:
        static = _response_static(span.name, route, status)
        span.name = static.name
        span.add_static(static)
        if status >= 500:
            span.set_error(str(status))
    span.finish()


@functools.lru_cache(maxsize=1024)
def _response_static(method: str, route: str, status: int) -> Static:
    """The route's attributes, and the request span's name with its route (``POST /v1/...``)."""
    return Static({"http.route": route, "http.response.status_code": status}, name=f"{method} {route}")


# --- hooks of a turn ---------------------------------------------------------------------------------


def turn(env: EnvironmentView, version: str, session: str) -> Span | None:
    """The span that carries the turn (None when tracing is off or the request's trace is not sampled): the
    request's SERVER span, which gets the turn's attributes; or, for a turn outside a request (or a second turn in
    one), a ``turn {app}`` span of its own (INTERNAL), current from here, which :func:`turn_done` or
    :func:`turn_failed` ends."""
    if TRACER is None:
        return None
    span = _current()
    if span is not None and not span.sampled:
        return None
    static = _turn_static(env.app, version, env.name, env.namespace)
    if span is not None and span.kind == SERVER and span.recording and "gen_ai.conversation.id" not in span.attributes:
        span.add_static(static)  # the request's span is its (one) turn's
        span.set_attribute("gen_ai.conversation.id", session)
        return span
    span = TRACER.start_span(f"turn {env.app}", attributes={"gen_ai.conversation.id": session}, static=static)
    span.activate()
    return span


@functools.lru_cache(maxsize=1024)
def _turn_static(app: str, version: str, environment: str, namespace: str) -> Static:
    return Static(
        {
            "dockyard.app": app,
            "dockyard.app.version": version,
            "dockyard.environment": environment,
            "dockyard.environment.namespace": namespace,
        }
    )


def turn_done(
    traced: Span, body: Mapping[str, Any], pii: PiiPolicy | None, key: bytes, message: str, answer: str
) -> None:
    """The turn answered ``body``: its agent, tokens, tools and guardrail actions; the message and the answer
    only as :func:`content` allows."""
    attributes: dict[str, Any] = {
        "gen_ai.agent.name": body["agent"],
        "gen_ai.usage.input_tokens": body["tokens"]["input"],
        "gen_ai.usage.output_tokens": body["tokens"]["output"],
    }
    if body["tools_used"]:
        attributes["dockyard.tools_used"] = list(body["tools_used"])
    if body["guardrails"]:
        attributes["dockyard.guardrails"] = [f"{g['action']}={g['stage']}:{g['policy']}" for g in body["guardrails"]]
    traced.set_attributes(attributes)
    content(traced, pii, key, str(body["session_id"]), message, answer)
    if traced.kind != SERVER:  # a turn span of its own (turn)
        traced.finish()


def turn_failed(traced: Span | None, code: str) -> None:
    if traced is not None:
        traced.set_error(code)
        if traced.kind != SERVER:  # a turn span of its own (turn)
            traced.finish()


def content(span: Span | None, pii: PiiPolicy | None, key: bytes, session: str, message: str, answer: str) -> None:
    """The turn's message and answer as ``gen_ai.input.messages`` / ``gen_ai.output.messages``: only when
    content capture is on and the environment has PII settings, and then redacted by them (whatever
    ``redact`` says for storage, the model or the answer)."""
    if span is None or not CAPTURE_CONTENT or pii is None:
        return
    asked = pii.redact(message, key=key, session=session).text
    said = pii.redact(answer, key=key, session=session).text
    span.set_attribute("gen_ai.input.messages", _messages("user", asked))
    span.set_attribute("gen_ai.output.messages", _messages("assistant", said))


def _messages(role: str, text: str) -> str:
    return orjson.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}]).decode()


def unsampled() -> bool:
    """Whether the current trace is one the sampler left out: then no span of it is recorded, and the hooks
    make none (a local child's sampling decision is always its parent's, with each of the six samplers:
    the parent-based ones follow a local parent, and the others decide by the trace id, which the child
    shares). What is sent on (``traceparent``, flag 00) is the current span's. Tracing on thus costs a turn
    it does not sample the request's span and these tests, not four spans that record nothing."""
    span = _current()
    return span is not None and not span.sampled


def agent(name: str, model: str | None, session: str | None) -> contextlib.AbstractContextManager[Span | None]:
    if TRACER is None or unsampled():
        return NOOP
    attributes = {"gen_ai.conversation.id": session} if session else None
    static = _agent_static(name, model)
    return TRACER.start_span(static.name, attributes=attributes, static=static)


@functools.lru_cache(maxsize=1024)
def _agent_static(name: str, model: str | None) -> Static:
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
    if model:
        attributes["gen_ai.request.model"] = model
    return Static(attributes, name=f"invoke_agent {name}")


def chat(base_url: str, body: Mapping[str, Any], step: int = 0) -> Span | None:
    """The CLIENT span of a model call (``step``: the agent's step it is, 1, 2, ..., as ``dockyard.agent.step``;
    0 outside an agent's tool loop), None when off or not sampled; ended by :func:`chat_done` or
    :func:`chat_failed`. As the GenAI conventions have it, the model calls and the tool calls of an agent are
    children of its ``invoke_agent`` span: a step is not a span of its own. It is not made the current span (nothing
    of Dockyard's runs under it): its traceparent goes to the engine through :func:`inject`'s ``span``."""
    if TRACER is None or unsampled():
        return None
    get = body.get
    tools = get("tools")
    offered = tuple(str(t.get("function", {}).get("name")) for t in tools) if tools else ()
    static = _chat_static(
        base_url, get("model"), get("max_tokens"), get("temperature"), get("top_p"), get("stream"), offered, step
    )
    return TRACER.start_span(static.name, CLIENT, static=static)


@functools.lru_cache(maxsize=1024)
def _chat_static(
    base_url: str, model: Any, max_tokens: Any, temperature: Any, top_p: Any, stream: Any, offered: tuple[str, ...],
    step: int,
) -> Static:  # fmt: skip
    """A model call's attributes: they repeat from turn to turn of an app (its model, its settings)."""
    model = str(model or "")
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai"}
    attributes.update(_server(base_url))
    if model:
        attributes["gen_ai.request.model"] = model
    for name, value in (("max_tokens", max_tokens), ("temperature", temperature), ("top_p", top_p)):
        if isinstance(value, int | float) and not isinstance(value, bool):
            attributes[f"gen_ai.request.{name}"] = value
    if stream:
        attributes["gen_ai.request.stream"] = True
    if offered:
        attributes["dockyard.tools_offered"] = list(offered)
    if step:
        attributes["dockyard.agent.step"] = step
    return Static(attributes, name=f"chat {model}".strip())


def chat_done(span: Span | None, tokens_in: int, tokens_out: int, finish: str | None, calls: list[str]) -> None:
    """The model call answered: its tokens, finish reason and the tools it called; the span ends."""
    if span is None:
        return
    attributes: dict[str, Any] = {"gen_ai.usage.input_tokens": tokens_in, "gen_ai.usage.output_tokens": tokens_out}
    if finish:
        attributes["gen_ai.response.finish_reasons"] = [finish]
    if calls:
        attributes["dockyard.tool_calls"] = calls
    span.set_attributes(attributes)
    span.end()


def chat_failed(span: Span | None, code: str | None) -> None:
    """The model call failed (``code``: the error's code, None for an unexpected error or a cancellation, which set
    no error); the span ends."""
    if span is not None:
        if code is not None:
            span.set_error(code)
        span.end()


def tool(name: str, call_id: str, step: int = 0) -> contextlib.AbstractContextManager[Span | None]:
    """The span of a tool call (``step``: the agent's step that called it, as ``dockyard.agent.step``)."""
    if TRACER is None or unsampled():
        return NOOP
    return TRACER.start_span(
        f"execute_tool {name}", attributes={"gen_ai.tool.call.id": call_id}, static=_tool_static(name, step)
    )


@functools.lru_cache(maxsize=1024)
def _tool_static(name: str, step: int) -> Static:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.type": "function",
    }
    if step:
        attributes["dockyard.agent.step"] = step
    return Static(attributes)


def tool_done(span: Span | None, ok: bool) -> None:
    if span is None:
        return
    span.set_attribute("dockyard.tool.ok", ok)
    if not ok:
        span.set_error("tool_error")


def tool_request(
    kind: str, name: str, url: str, headers: dict[str, str]
) -> contextlib.AbstractContextManager[Span | None]:
    """The CLIENT span of a request to a tool (``kind`` http or mcp); the span's traceparent is added to
    ``headers`` (so the tool's own spans join the trace)."""
    if TRACER is None:
        return NOOP
    if unsampled():
        tracing.inject(headers)  # the trace goes on, not sampled
        return NOOP
    attributes: dict[str, Any] = {"dockyard.tool.kind": kind, "gen_ai.tool.name": name, **_server(url)}
    if kind == "mcp":
        attributes["mcp.method.name"] = "tools/call"
        span_name = f"tools/call {name}"
    else:
        attributes["http.request.method"] = "POST"
        span_name = f"POST {name}"
    span = TRACER.start_span(span_name, CLIENT, attributes)
    tracing.inject(headers, span)
    return span


def inject(headers: dict[str, str], span: Span | None = None) -> None:
    """The traceparent of ``span`` (a model call's), or else of the current span, on an outgoing request (tracing
    on)."""
    if TRACER is not None:
        tracing.inject(headers, span)


@functools.lru_cache(maxsize=256)
def _server(url: str) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of a URL (never its path, user or query); kept per URL (a
    turn's model and tools repeat), so never changed by its callers."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return {}
    return {"server.address": parts.hostname or "", "server.port": port}


_PYTHON_HOOKS: dict[str, Any] = {
    "request": request,
    "request_done": request_done,
    "turn": turn,
    "turn_done": turn_done,
    "agent": agent,
    "chat": chat,
    "chat_done": chat_done,
    "inject": inject,
}
"""The hooks of a turn in Python: what :func:`use` binds when off or with the Python tracer, and what the C hooks
hand the cases they leave to."""
_STATICS: dict[str, Any] = {
    "request": _request_static,
    "response": _response_static,
    "turn": _turn_static,
    "agent": _agent_static,
    "chat": _chat_static,
}
"""The cached ``Static`` factories the C hooks call, with the arguments the Python hooks give them."""
