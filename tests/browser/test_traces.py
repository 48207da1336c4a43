"""One trace per turn, from the widget in Chromium to the model and the tool, in a real tracing backend (Jaeger,
built from its Go module by tests.support.jaeger) that the facade exports to over OTLP/HTTP as the standard OTEL_*
variables say (docs/observability.md, "Traces"). The test reads the trace back from Jaeger's query API: the span
tree, its links to the browser's span and to what the model server and the tool received, the GenAI attributes,
and what must never be in it (the widget token, an API key, the user's e-mail address unredacted). Then the
backend is stopped: turns go on as fast, the spans that cannot be sent are counted, and once it is back the
next turn's trace arrives."""

from __future__ import annotations

import os
import re
import secrets
import statistics
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from kubernetes import client

from tests.browser.conftest import Bot, Facade, Site, Tab, api_key, deploy_bot
from tests.browser.test_widget import snippet_page, stored, widget_spec
from tests.support.cluster import E2ECluster
from tests.support.jaeger import Jaeger, Span, Trace
from tests.support.runners import run_local_runtime
from tests.support.scripted_model import Call, Reply, ScriptedModel
from tests.support.waiting import wait_for

EMAIL = "jane.doe@example.com"
OTEL = {
    "OTEL_BSP_SCHEDULE_DELAY": "100",  # the batch: sent every 100 ms (default 5 s)
    "OTEL_EXPORTER_OTLP_TIMEOUT": "2000",  # an export to a backend that is down gives up after 2 s (default 10 s)
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",  # text only redacted (spec.pii)
}


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jaeger]:
    backend = Jaeger(tmp_path_factory.mktemp("jaeger"))
    backend.start()
    try:
        yield backend
    finally:
        backend.stop()


@pytest.fixture(scope="module")
def facade(
    cluster: E2ECluster, crds: None, jaeger: Jaeger, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Facade]:
    """The operator and the facade (in this process) with tracing on: OTEL_EXPORTER_OTLP_ENDPOINT names Jaeger."""
    env = {**OTEL, "OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp_endpoint}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        with run_local_runtime(tmp_path_factory.mktemp("facade"), widget_config_cache_seconds=0) as (url, running):
            yield Facade(url, running.client)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def trace_with(jaeger: Jaeger, trace_id: str, *names: str) -> Trace:
    """The trace once Jaeger holds a span of each of ``names`` (prefixes) in it."""

    def complete() -> Trace | None:
        found = jaeger.trace(trace_id)
        return found if found is not None and all(found.named(n) for n in names) else None

    return wait_for(complete, timeout=30, what=f"trace {trace_id} with spans {names} in Jaeger")


def parent_of(header: str) -> tuple[str, str]:
    """(trace id, parent span id) of a traceparent header."""
    found = re.fullmatch(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}", header)
    assert found, header
    return found.group(1), found.group(2)


def test_a_widget_turn_is_one_trace_from_the_browser_to_the_model_and_the_tool(
    api: client.ApiClient,
    namespace: str,
    facade: Facade,
    model: ScriptedModel,
    jaeger: Jaeger,
    allowed_site: Site,
    open_tab: Callable[..., Tab],
) -> None:
    bot: Bot = deploy_bot(api, namespace, model, **widget_spec(allowed_site.origin), pii={})
    allowed_site.pages["/"] = snippet_page(bot, "Shop")
    tab = open_tab()
    page = tab.page
    sent: list[dict[str, str]] = []
    page.on("request", lambda r: sent.append(r.headers) if r.url.endswith("/execute") and r.method == "POST" else None)
    page.goto(allowed_site.url("/"))
    page.get_by_role("button", name="Chat", exact=True).click()
    model.script(
        Reply(calls=[Call("weather", {"city": "Oslo"})], usage=(30, 5)),
        Reply(text="It is 12 degrees in Oslo.", usage=(45, 9), pieces=3),
    )
    page.get_by_label("Message", exact=True).fill(f"Weather in Oslo? Write to {EMAIL}")
    page.keyboard.press("Enter")
    page.get_by_text("It is 12 degrees in Oslo.").wait_for()
    session = wait_for(lambda: stored(tab).get("sessionId"), timeout=10, what="the session id stored")
    token = stored(tab)["token"]
    assert len(sent) == 1, sent
    trace_id, browser_span = parent_of(sent[0]["traceparent"])

    trace = trace_with(jaeger, trace_id, "POST /e/", "invoke_agent", "execute_tool weather", "POST weather")
    # the tree: browser -> facade's server span (the turn) -> agent -> chat / tool (by step) -> tool request
    server = trace.one("POST /e/")
    assert server.parent_id == browser_span, (server, browser_span)
    assert server.tags["http.route"] == "/e/{namespace}/{environment}/v1/apps/{app_id}/execute"
    assert server.tags["http.response.status_code"] == 200
    assert server.kind == "server"
    assert server.service == "dockyard-api"
    assert not trace.named("turn bot")  # the request's span is the turn's
    turn = server
    agent = trace.one("invoke_agent helper")
    assert agent.parent_id == server.span_id
    # each step of the tool loop: its model call and the tools it called, children of the agent's span
    chats = sorted(trace.named("chat"), key=lambda s: s.tags["dockyard.agent.step"])
    assert [(c.parent_id, c.tags["dockyard.agent.step"]) for c in chats] == [(agent.span_id, 1), (agent.span_id, 2)]
    tool = trace.one("execute_tool weather")
    assert (tool.parent_id, tool.tags["dockyard.agent.step"]) == (agent.span_id, 1)
    request = trace.one("POST weather")
    assert request.parent_id == tool.span_id
    assert request.kind == "client"
    assert chats[0].kind == "client"

    # the context went on: the model server and the tool were called with the trace's traceparent
    to_model = [parent_of(r.headers["traceparent"]) for r in model.requests]
    assert to_model == [(trace_id, c.span_id) for c in chats], (to_model, chats)
    (to_tool,) = [parent_of(r.headers["traceparent"]) for r in model.tool_requests]
    assert to_tool == (trace_id, request.span_id)

    # attributes: GenAI conventions, app, version, environment, session; tokens of each call and of the turn
    assert turn.tags["gen_ai.conversation.id"] == session
    assert turn.tags["dockyard.app"] == "bot"
    assert turn.tags["dockyard.environment"] == bot.environment
    assert turn.tags["dockyard.environment.namespace"] == namespace
    assert turn.tags["dockyard.app.version"]
    assert (turn.tags["gen_ai.usage.input_tokens"], turn.tags["gen_ai.usage.output_tokens"]) == (75, 14)
    assert turn.tags["gen_ai.agent.name"] == "helper"
    assert [(c.tags["gen_ai.usage.input_tokens"], c.tags["gen_ai.usage.output_tokens"]) for c in chats] == [
        (30, 5),
        (45, 9),
    ]
    assert all(c.tags["gen_ai.operation.name"] == "chat" and c.tags["gen_ai.request.model"] for c in chats)
    assert "tool_calls" in str(chats[0].tags["gen_ai.response.finish_reasons"])
    assert tool.tags["gen_ai.operation.name"] == "execute_tool"
    assert tool.tags["gen_ai.tool.name"] == "weather"
    assert tool.tags["dockyard.tool.ok"] is True
    assert agent.tags["gen_ai.agent.name"] == "helper"

    # text: the message only redacted by the environment's PII settings; no token, no key, no address
    assert "EMAIL_ADDRESS_" in turn.tags["gen_ai.input.messages"], turn.tags["gen_ai.input.messages"]
    everything = trace.text()
    assert EMAIL not in everything
    assert token not in everything
    assert token.split(".")[-1] not in everything
    assert "Bearer" not in everything
    assert "authorization" not in everything.lower()

    # an API caller's own traceparent is the parent of the facade's span; its key is nowhere in the trace
    key = api_key(api, namespace, bot.environment)
    own_trace, own_span = secrets.token_hex(16), secrets.token_hex(8)
    answer = httpx.post(
        f"{facade.url}/e/{namespace}/{bot.environment}/v1/apps/bot/execute",
        json={"message": "hello"},
        headers={"Authorization": f"Bearer {key}", "traceparent": f"00-{own_trace}-{own_span}-01"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    called = trace_with(jaeger, own_trace, "POST /e/", "invoke_agent", "chat")
    assert called.one("POST /e/").parent_id == own_span
    assert key not in called.text()
    assert key.split("_", 2)[2] not in called.text()  # the secret (token_urlsafe: it may hold "_" itself)

    # the operator traced its reconciles of the ModelDeployment (its own service); the operator serves the other
    # tests' namespaces too, and traces their reconciles to the same backend: this namespace's are looked for
    def own_reconcile() -> Span | None:
        for trace in jaeger.traces("dockyard-operator", "reconcile ModelDeployment", limit=500):
            for span in trace.spans.values():
                if span.name == "reconcile ModelDeployment" and span.tags.get("k8s.namespace.name") == namespace:
                    return span
        return None

    span = wait_for(own_reconcile, timeout=30, what="the operator's spans of this namespace's ModelDeployment")
    assert span.service == "dockyard-operator"
    assert span.tags["dockyard.object.name"] == "tiny"


def dropped(facade: Facade) -> float:
    text = facade.http.get("/metrics").text
    return sum(float(v) for v in re.findall(r"^dockyard_api_spans_dropped_total\{[^}]*\} (\S+)$", text, re.M))


def test_with_the_backend_down_turns_are_not_slower_and_lost_spans_are_counted(
    api: client.ApiClient, namespace: str, facade: Facade, model: ScriptedModel, jaeger: Jaeger
) -> None:
    bot = deploy_bot(api, namespace, model)
    key = api_key(api, namespace, bot.environment)
    url = f"{facade.url}/e/{namespace}/{bot.environment}/v1/apps/bot/execute"

    def turns(count: int) -> list[float]:
        took = []
        with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
            for _ in range(count):
                started = time.perf_counter()
                answer = http.post(url, json={"message": "hello"})
                took.append(time.perf_counter() - started)
                assert answer.status_code == 200, answer.text
        return took

    turns(5)  # warm
    up = turns(40)
    before = dropped(facade)
    jaeger.stop()
    try:
        down = turns(40)
        # the exporter gives up after OTEL_EXPORTER_OTLP_TIMEOUT (2 s); meanwhile the turns went on
        lost = wait_for(lambda: dropped(facade) > before and dropped(facade), timeout=30, what="dropped spans counted")
    finally:
        jaeger.start()
    assert lost > before
    up_ms, down_ms = statistics.median(up) * 1000, statistics.median(down) * 1000
    print(f"median turn: backend up {up_ms:.1f} ms, down {down_ms:.1f} ms; spans dropped {lost - before:.0f}")
    # an export that waited for the dead backend would have added seconds to a turn (the exporter's timeout is 2 s);
    # none is slower than noise. The noise: in a clean-clone CI on a slower machine the other workers' tests once made
    # the 40 turns' median 46 ms against 16 ms before (the test alone: well within 1.5 x), hence 50 ms of slack
    assert statistics.median(down) <= statistics.median(up) * 1.5 + 0.05, (
        statistics.median(up),
        statistics.median(down),
    )
    assert max(down) < 2.0, max(down)

    # the backend is back: the next turn's trace arrives
    own_trace = secrets.token_hex(16)
    answer = httpx.post(
        url,
        json={"message": "back?"},
        headers={"Authorization": f"Bearer {key}", "traceparent": f"00-{own_trace}-{secrets.token_hex(8)}-01"},
        timeout=30,
    )
    assert answer.status_code == 200
    trace_with(jaeger, own_trace, "POST /e/", "invoke_agent")
