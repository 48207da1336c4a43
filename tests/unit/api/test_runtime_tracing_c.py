"""The C form of the facade's hooks of a turn (``dockyard_core._spans.Hooks``, bound by
``dockyard_api.runtime.tracing.use`` with the C tracer) against the Python functions: the same spans, attributes,
parents and headers sent on."""

from __future__ import annotations

from typing import Any

import pytest

from dockyard_api.runtime import tracing
from dockyard_core import tracing as core
from tests.support.tracing_hooks import trace_with

pytestmark = pytest.mark.skipif(core.Tracer is core.PyTracer, reason="the C extension was not built")


class Env:
    app, name, namespace = "bot", "prod", "team"


ROUTE = "/e/{namespace}/{environment}/v1/apps/{app_id}/execute"
CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _scope(*headers: tuple[bytes, bytes], query: bytes = b"") -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": "/e/team/prod/v1/apps/bot/execute", "scheme": "https",
            "query_string": query, "headers": [(b"host", b"x"), *headers]}  # fmt: skip


def _answer(tools: list[str], guardrails: list[dict[str, str]]) -> dict[str, Any]:
    return {"agent": "bot", "tokens": {"input": 12, "output": 7}, "tools_used": tools, "guardrails": guardrails,
            "session_id": "s-1"}  # fmt: skip


def _turns() -> list[dict[str, str]]:
    """Turns through every hook of a turn, on each path the C hooks take and on each they leave to Python: what each
    sent on (traceparent headers, with the ids replaced by their order of appearance)."""
    from dockyard_core.pii import PiiPolicy

    sent: list[dict[str, str]] = []
    bodies: list[dict[str, Any]] = [
        {"model": "tiny", "messages": [], "max_tokens": 64, "temperature": 0.2, "top_p": 0.9},
        {"model": "tiny", "messages": [], "stream": True},
        {"model": "tiny", "tools": [{"type": "function", "function": {"name": "clock"}}]},  # offers tools: Python
        {},
    ]
    cases = [  # (headers, query, body, step, tools used, guardrails, status, PII settings)
        (((b"traceparent", CALLER.encode()), (b"tracestate", b"vendor=1")), b"", bodies[0], 1, [], [], 200, None),
        (((b"traceparent", CALLER.encode()),), b"", bodies[1], 2, ["clock"], [], 503, None),
        ((), b"k=v", bodies[2], 0, [], [{"action": "redact", "stage": "input", "policy": "pii"}], 200, None),
        ((), b"", bodies[3], 1, [], [], 200, PiiPolicy()),
    ]
    for headers, query, body, step, tools, guardrails, status, pii in cases:
        request = tracing.request(_scope(*headers, query=query))
        turn = tracing.turn(Env, "v1", "s-1")  # type: ignore[arg-type]
        session = "s-1" if step == 2 else None
        with tracing.agent("bot", "tiny", session), tracing.chat("http://m:8000/v1", body, step) as chat:
            headers_out: dict[str, str] = {}
            tracing.inject(headers_out)
            sent.append(headers_out)
            tracing.chat_done(chat, 12, 7, "stop" if step else None, ["clock"] if tools else [])
        assert turn is not None
        tracing.turn_done(turn, _answer(tools, guardrails), pii, b"k" * 32, "mail a@b.example", "ok")
        tracing.request_done(request, ROUTE, status)
    # a turn outside a request (its own span), then one left out by the sampler is in test_..._unsampled
    own = tracing.turn(Env, "v2", "s-2")  # type: ignore[arg-type]
    assert own is not None
    tracing.turn_done(own, _answer([], []), None, b"", "hi", "ok")
    return sent


def _picture(finished: list[core.Span], sent: list[dict[str, str]]) -> list[Any]:
    """The spans (name, kind, parent, status, every attribute) and what was sent on, ids replaced by their order."""
    ids: dict[int, int] = {}

    def number(value: int) -> int:
        return ids.setdefault(value, len(ids))

    def header(value: str) -> str:
        version, trace, span, flags = value.split("-")
        return f"{version}-{number(int(trace, 16))}-{number(int(span, 16))}-{flags}"

    spans = [
        (s.name, s.kind, number(s.trace_id), number(s.span_id), number(s.parent_id), s.status_code, s.status_message,
         s.tracestate, s.all_attributes())
        for s in finished
    ]  # fmt: skip
    return [spans, [{k: header(v) if k == "traceparent" else v for k, v in h.items()} for h in sent]]


def test_the_hooks_in_c_trace_as_the_python_hooks_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """The C hooks of a turn (``_spans.Hooks``) against the Python functions, both with the C tracer: the same spans,
    attributes, parents and headers sent on, on the paths the C hooks take and on those they hand to Python (a query,
    a model call that offers tools, guardrail actions, captured content, a turn outside a request)."""
    pictures = []
    for form in ("c", "python"):
        finished: list[core.Span] = []
        trace_with(monkeypatch, core.Tracer(core.sampler({}), finished.append), capture_content=True)
        if form == "python":
            for name, hook in tracing._PYTHON_HOOKS.items():
                monkeypatch.setattr(tracing, name, hook)
        else:
            assert type(tracing.chat).__name__ == "builtin_function_or_method"  # the C form is in use
        pictures.append(_picture(finished, _turns()))
        assert core.current() is None
    assert pictures[0] == pictures[1]
    spans = pictures[0][0]
    assert len(spans) == 4 * 3 + 1
    assert spans[0][-1]["gen_ai.request.temperature"] == 0.2  # the C path made the model call's attributes
    assert spans[5][-1]["error.type"] == "503"
    assert "gen_ai.input.messages" in spans[11][-1]  # captured (PII settings): in Python


def test_c_hooks_bound_before_tracing_stopped_or_changed_follow_the_tracer_of_the_moment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A middleware keeps the hook it was given: once tracing is off (or another tracer is in use) the C hook hands
    the call to the Python function, which reads the module's tracer then."""
    first: list[core.Span] = []
    trace_with(monkeypatch, core.Tracer(core.sampler({}), first.append))
    request, request_done = tracing.request, tracing.request_done
    tracing.use(None)
    assert request(_scope()) is None
    second: list[core.Span] = []
    tracing.use(core.Tracer(core.sampler({}), second.append))
    span = request(_scope())
    request_done(span, ROUTE, 200)
    assert (first, [s.name for s in second]) == ([], [f"POST {ROUTE}"])
