"""The facade's traces (docs/observability.md, "Traces"): one trace per turn, with the GenAI semantic
conventions of OpenTelemetry.

The span tree of a turn::

    POST /e/{namespace}/{environment}/v1/apps/{app_id}/execute     SERVER  (FastAPI's own span; the caller's
    └─ turn {app}                                                           traceparent is its parent)
       ├─ chat {model}                  CLIENT  routing call (apps with several agents) and guard-model calls
       └─ invoke_agent {agent}
          └─ step {n}                   one per model call of the agent's tool loop
             ├─ chat {model}            CLIENT  traceparent sent to the engine (vLLM joins its own spans)
             └─ execute_tool {tool}
                └─ POST {tool} | tools/call {tool}   CLIENT  traceparent sent to the tool (HTTP, MCP)

Attributes: the app, its version, the environment, the session (``gen_ai.conversation.id``), the agent, the
model, tokens, tool names. Never an API key, never a URL's query; message text only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` AND the environment has PII settings, redacted
by them (:func:`content`).

Off costs nothing: :data:`TRACER` is None and every hook answers at its first line (a shared null context
manager, no SDK object).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson
from fastapi.telemetry import TelemetryConfig
from prometheus_client import Counter

from dockyard_api import __version__
from dockyard_api.metrics import REGISTRY
from dockyard_core import tracing

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

    from dockyard_api.runtime.config import EnvironmentView
    from dockyard_core.pii import PiiPolicy

SPANS_DROPPED = Counter(
    "dockyard_api_spans_dropped",
    "Spans that never reached the tracing backend: queue_full (its bounded queue was full), export_failed "
    "(the backend refused them or could not be reached), already_shutdown",
    ["reason"],
    registry=REGISTRY,
)
for _reason in ("queue_full", "export_failed"):
    SPANS_DROPPED.labels(_reason)

TRACER: Tracer | None = None
"""The facade's tracer while tracing is on; None when off (every hook tests it first)."""
CAPTURE_CONTENT = False
_RUNNING: tracing.Tracing | None = None
NOOP: contextlib.nullcontext[None] = contextlib.nullcontext()


def _dropped(reason: str, count: int) -> None:
    SPANS_DROPPED.labels(reason).inc(count)


def start(environ: Mapping[str, str] | None = None) -> Any:
    """Tracing for this facade when the OTEL_* variables ask for it: the SDK provider (for FastAPI's server
    spans) or None."""
    global TRACER, CAPTURE_CONTENT, _RUNNING
    stop()
    running = tracing.start("dockyard-api", __version__, _dropped, environ)
    if running is None:
        return None
    _RUNNING, TRACER, CAPTURE_CONTENT = running, running.tracer, running.settings.capture_content
    return running.provider


def stop() -> None:
    global TRACER, _RUNNING
    running, _RUNNING, TRACER = _RUNNING, None, None
    if running is not None:
        running.stop()


def fastapi_telemetry(provider: Any) -> TelemetryConfig:
    """FastAPI's own telemetry: its HTTP server spans (the caller's ``traceparent`` is their parent) on the
    given provider; nothing at all when it is None (tracing off)."""
    if provider is None:
        return TelemetryConfig(tracing=False, metrics=False, logs=False, operation_spans=False)
    return TelemetryConfig(tracer_provider=provider, metrics=False, logs=False, operation_spans=False)


# --- hooks of a turn ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """The span of a turn in progress, current until it ends (:func:`turn_done`, :func:`turn_failed`)."""

    span: Span
    token: Token[Context]


def turn(env: EnvironmentView, version: str, session: str) -> Turn | None:
    """Start the turn's span and make it current (None when tracing is off)."""
    if TRACER is None:
        return None
    from opentelemetry import context, trace

    span = TRACER.start_span(
        f"turn {env.app}",
        attributes={
            "gen_ai.conversation.id": session,
            "dockyard.app": env.app,
            "dockyard.app.version": version,
            "dockyard.environment": env.name,
            "dockyard.environment.namespace": env.namespace,
        },
    )
    return Turn(span, context.attach(trace.set_span_in_context(span)))


def turn_done(
    traced: Turn, body: Mapping[str, Any], pii: PiiPolicy | None, key: bytes, message: str, answer: str
) -> None:
    """The turn answered ``body``: its agent, tokens, tools and guardrail actions; the message and the answer
    only as :func:`content` allows."""
    traced.span.set_attributes(
        {
            "gen_ai.agent.name": body["agent"],
            "gen_ai.usage.input_tokens": body["tokens"]["input"],
            "gen_ai.usage.output_tokens": body["tokens"]["output"],
            "dockyard.tools_used": list(body["tools_used"]),
            "dockyard.guardrails": [f"{g['action']}={g['stage']}:{g['policy']}" for g in body["guardrails"]],
        }
    )
    content(traced.span, pii, key, str(body["session_id"]), message, answer)
    _end(traced)


def turn_failed(traced: Turn | None, code: str) -> None:
    if traced is not None:
        failed(traced.span, code)
        _end(traced)


def _end(traced: Turn) -> None:
    from opentelemetry import context

    context.detach(traced.token)
    traced.span.end()


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


def failed(span: Span | None, code: str) -> None:
    """The turn failed with ``code`` (the error's code: no message, which may quote what a model wrote)."""
    if span is None:
        return
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", code)
    span.set_status(Status(StatusCode.ERROR, code))


def agent(name: str, model: str | None, session: str | None) -> contextlib.AbstractContextManager[Span | None]:
    if TRACER is None:
        return NOOP
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
    if model:
        attributes["gen_ai.request.model"] = model
    if session:
        attributes["gen_ai.conversation.id"] = session
    return _start(TRACER, f"invoke_agent {name}", attributes=attributes)


def step(number: int) -> contextlib.AbstractContextManager[Span | None]:
    if TRACER is None:
        return NOOP
    return _start(TRACER, f"step {number}", attributes={"dockyard.agent.step": number})


def chat(base_url: str, body: Mapping[str, Any]) -> contextlib.AbstractContextManager[Span | None]:
    if TRACER is None:
        return NOOP
    from opentelemetry.trace import SpanKind

    model = str(body.get("model") or "")
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai"}
    attributes.update(_server(base_url))
    if model:
        attributes["gen_ai.request.model"] = model
    for name, key in (("max_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p")):
        if isinstance(body.get(key), int | float):
            attributes[f"gen_ai.request.{name}"] = body[key]
    if body.get("stream"):
        attributes["gen_ai.request.stream"] = True
    if body.get("tools"):
        attributes["dockyard.tools_offered"] = [str(t.get("function", {}).get("name")) for t in body["tools"]]
    return _start(TRACER, f"chat {model}".strip(), kind=SpanKind.CLIENT, attributes=attributes)


def chat_done(span: Span | None, tokens_in: int, tokens_out: int, finish: str | None, calls: list[str]) -> None:
    if span is None:
        return
    span.set_attributes({"gen_ai.usage.input_tokens": tokens_in, "gen_ai.usage.output_tokens": tokens_out})
    if finish:
        span.set_attribute("gen_ai.response.finish_reasons", [finish])
    if calls:
        span.set_attribute("dockyard.tool_calls", calls)


def tool(name: str, call_id: str) -> contextlib.AbstractContextManager[Span | None]:
    if TRACER is None:
        return NOOP
    return _start(
        TRACER,
        f"execute_tool {name}",
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
        },
    )


def tool_done(span: Span | None, ok: bool) -> None:
    if span is None:
        return
    span.set_attribute("dockyard.tool.ok", ok)
    if not ok:
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("error.type", "tool_error")
        span.set_status(Status(StatusCode.ERROR, "the tool call failed"))


def tool_request(
    kind: str, name: str, url: str, headers: dict[str, str]
) -> contextlib.AbstractContextManager[Span | None]:
    """The CLIENT span of a request to a tool (``kind`` http or mcp); the span's traceparent is added to
    ``headers`` (so the tool's own spans join the trace)."""
    if TRACER is None:
        return NOOP
    from opentelemetry.trace import SpanKind

    attributes: dict[str, Any] = {"dockyard.tool.kind": kind, "gen_ai.tool.name": name, **_server(url)}
    if kind == "mcp":
        attributes["mcp.method.name"] = "tools/call"
        span_name = f"tools/call {name}"
    else:
        attributes["http.request.method"] = "POST"
        span_name = f"POST {name}"
    return _injecting(TRACER, span_name, SpanKind.CLIENT, attributes, headers)


@contextlib.contextmanager
def _injecting(tracer: Tracer, name: str, kind: Any, attributes: dict[str, Any], headers: dict[str, str]) -> Any:
    with _start(tracer, name, kind=kind, attributes=attributes) as span:
        tracing.inject(headers)
        yield span


def _start(tracer: Tracer, name: str, **kwargs: Any) -> contextlib.AbstractContextManager[Span]:
    """A span made current; an exception escaping it is neither recorded nor described (its message may
    quote a model's or a tool's text): :func:`failed` and :func:`tool_done` set the status by code."""
    return tracer.start_as_current_span(name, record_exception=False, set_status_on_exception=False, **kwargs)


def inject(headers: dict[str, str]) -> None:
    """The current span's traceparent on an outgoing request (tracing on)."""
    if TRACER is not None:
        tracing.inject(headers)


def _server(url: str) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of a URL (never its path, user or query)."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return {}
    return {"server.address": parts.hostname or "", "server.port": port}
