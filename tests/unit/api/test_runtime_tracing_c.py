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
SHOUTED = b" " + CALLER.upper().encode()  # read as it is: spaces around, upper-case hex
LONG_STATE = b"a" * 600  # kept: its first 512 characters


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
        (((b"traceparent", CALLER[:-2].encode() + b"00"),), b"", bodies[0], 2, [], [], 200, None),  # not sampled
        (((b"traceparent", SHOUTED), (b"tracestate", LONG_STATE)), b"", bodies[1], 2, [], [], 200, None),
        (((b"traceparent", b"01-" + CALLER[3:].encode() + b"-later"),), b"", bodies[1], 2, [], [], 200, None),
        (((b"traceparent", b"00-" + b"0" * 32 + CALLER[35:].encode()),), b"", bodies[1], 2, [], [], 200, None),
        (((b"traceparent", b"not a traceparent"),), b"", bodies[1], 2, [], [], 200, None),
    ]
    for headers, query, body, step, tools, guardrails, status, pii in cases:
        request = tracing.request(_scope(*headers, query=query))
        turn = tracing.turn(Env, "v1", "s-1")  # type: ignore[arg-type]
        session = "s-1" if step == 2 else None
        with tracing.agent("bot", "tiny", session):
            chat = tracing.chat("http://m:8000/v1", body, step)
            to_engine: dict[str, str] = {}
            to_tool: dict[str, str] = {}
            tracing.inject(to_engine, chat)  # the model call's traceparent
            tracing.inject(to_tool)  # the current span's (invoke_agent)
            sent += [to_engine, to_tool]
            if step == 1:
                tracing.chat_failed(chat, "model_unavailable")
            else:
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
        caller = (int(CALLER[3:35], 16), int(CALLER[36:52], 16))
        for request, state in ((finished[2], "vendor=1"), (finished[5], ""), (finished[17], "a" * 512)):
            assert ((request.trace_id, request.parent_id), request.tracestate) == (caller, state)
        assert finished[20].trace_id == caller[0]  # a later version's, with more after it: read
        assert caller[0] not in (finished[23].trace_id, finished[26].trace_id)  # a zero trace id, not one: new traces
    assert pictures[0] == pictures[1]
    spans = pictures[0][0]
    assert len(spans) == 9 * 3 + 1
    assert spans[0][-1]["gen_ai.request.temperature"] == 0.2  # the C path made the model call's attributes
    assert spans[5][-1]["error.type"] == "503"
    assert spans[0][5:7] == (core.ERROR, "model_unavailable")  # chat_failed
    assert pictures[0][1][0]["traceparent"].split("-")[2] == str(spans[0][3])  # the engine got the model call's
    assert pictures[0][1][1]["traceparent"].split("-")[2] == str(spans[1][3])  # a tool the agent's
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


def test_the_c_hooks_keep_the_attributes_they_made_by_their_arguments() -> None:
    """The C hooks keep each ``Static`` the module's factory made, by one argument (here the model call's base URL)
    with every argument compared: the same arguments get it again without the factory, others (another step) get their
    own, and the oldest of more than 16 kept under one URL is made again when asked for."""
    from dockyard_core import _spans

    made: list[tuple[Any, ...]] = []

    def chat_static(*args: Any) -> core.Static:
        made.append(args)
        return core.Static({"gen_ai.request.model": args[1], "dockyard.agent.step": args[7]}, name=f"chat {args[1]}")

    finished: list[core.Span] = []
    tracer = core.Tracer(core.sampler({}), finished.append)
    hooks = _spans.Hooks(tracer, tracing._PYTHON_HOOKS, {**tracing._STATICS, "chat": chat_static}, tracing.NOOP, False)
    steps = [*range(1, 21), 1, 1, 2, 20, 2.0]
    with tracer.start_span("invoke_agent bot"):
        for step in steps:
            hooks.chat_done(hooks.chat("http://m:8000/v1", {"model": "tiny"}, step), 1, 1, None, [])
    assert [span.all_attributes()["dockyard.agent.step"] for span in finished[: len(steps)]] == [*steps[:-1], 2]
    # steps 1-20 made; 1 again after 16 others: made again, then kept; 2 made again; 20 kept; 2.0 == 2: kept
    assert [args[7] for args in made] == [*range(1, 21), 1, 2]


def test_c_hooks_of_a_tracer_not_initialised_leave_every_call_to_python() -> None:
    """A tracer made without ``__init__`` (no sampler, no sink): the C hooks make no span of it and hand the call to
    the Python function (off here: nothing)."""
    from dockyard_core import _spans

    hooks = _spans.Hooks(core.Tracer.__new__(core.Tracer), tracing._PYTHON_HOOKS, tracing._STATICS, tracing.NOOP, False)
    assert tracing.TRACER is None
    assert hooks.request(_scope((b"traceparent", CALLER.encode()))) is None
    assert hooks.chat("http://m", {"model": "tiny"}, 1) is None
    assert core.current() is None
