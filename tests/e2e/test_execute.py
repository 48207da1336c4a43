"""The deployed-app API (docs/deployed-app-api.md) end to end: the operator and the facade on the real local control
plane, an App with an agent whose ModelDeployment is served by the scripted model server (this test plays
the local engine runner: it annotates the Ready model pods with the server's address, Contract 1), an
HTTP tool, a real API key, and the conversation database (SQLite file)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
import pytest
from kubernetes import client

from dockyard_api.runtime.endpoints import LOCAL_ENDPOINT_ANNOTATION, MODEL_DEPLOYMENT_LABEL
from dockyard_core import apikeys
from tests.support.cluster import E2ECluster
from tests.support.dockyard import create, get_or_empty, hub_model, model_deployment, patch
from tests.support.runners import run_local_runtime
from tests.support.scripted_model import Call, Reply, ScriptedModel, mcp_server, scripted_model
from tests.support.waiting import wait_for

TURN_DEADLINE = 3.0
HYPER = {"temperature": 0.4, "maxTokens": 200, "topP": 0.9, "topK": 30, "stopSequence": ["<END>"]}
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@dataclass
class Facade:
    url: str
    http: httpx.Client


@pytest.fixture(scope="module")
def model_server() -> Iterator[ScriptedModel]:
    with scripted_model() as server:
        yield server


@pytest.fixture(scope="module")
def facade(cluster: E2ECluster, crds: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Facade]:
    """The operator (its generated URLs name this facade) and the facade in local endpoint mode."""
    with run_local_runtime(tmp_path_factory.mktemp("facade"), execute_turn_timeout_seconds=TURN_DEADLINE) as (
        url,
        running,
    ):
        yield Facade(url, running.client)


@pytest.fixture
def model(model_server: ScriptedModel) -> ScriptedModel:
    model_server.reset()
    return model_server


@dataclass
class Deployed:
    namespace: str
    environment: str
    key: str

    @property
    def execute(self) -> str:
        return f"/e/{self.namespace}/{self.environment}/v1/apps/bot/execute"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


def _key(api: client.ApiClient, namespace: str, environment: str) -> str:
    env = wait_for(lambda: get_or_empty(api, namespace, "environments", environment), timeout=30, what=environment)
    key = apikeys.generate()
    secret = apikeys.key_secret(key=key, name="e2e", environment=env, created_by="e2e", created_at=datetime.now(UTC))
    client.CoreV1Api(api).create_namespaced_secret(namespace, secret)
    return key.value


def serve_model(api: client.ApiClient, namespace: str, url: str | None, name: str = "tiny") -> None:
    """Play the local engine runner: annotate the Ready pods of ModelDeployment ``name`` with ``url``
    (None: remove the annotation, as the runner does when its engine stops)."""
    core = client.CoreV1Api(api)

    def ready_pods() -> list[Any]:
        pods = core.list_namespaced_pod(namespace, label_selector=f"{MODEL_DEPLOYMENT_LABEL}={name}").items
        return [
            p
            for p in pods
            if any(c.type == "Ready" and c.status == "True" for c in (p.status.conditions or []))
            and not p.metadata.deletion_timestamp
        ]

    pods = wait_for(ready_pods, timeout=90, what=f"a Ready pod of ModelDeployment {name}")
    for found in pods:
        core.patch_namespaced_pod(
            found.metadata.name, namespace, {"metadata": {"annotations": {LOCAL_ENDPOINT_ANNOTATION: url}}}
        )


def deploy_bot(api: client.ApiClient, namespace: str, model: ScriptedModel) -> Deployed:
    hub_model(api, namespace, "tiny")
    model_deployment(api, namespace, "tiny", hyperParameters=HYPER)
    weather = model.tool("weather", lambda args: {"city": args.get("city"), "celsius": 12})
    spec = {"name": "weather", "version": "1.0.0", "endpoint": weather, "parameters": WEATHER_SCHEMA}
    create(api, namespace, "tools", "Tool", "weather-1.0.0", spec)
    agent = {"name": "helper", "version": "1.0.0", "instructions": "You are helpful.", "model": "tiny"}
    app = {
        "displayName": "Bot",
        "agents": [{**agent, "tools": ["weather"]}],
        "toolVersions": [{"name": "weather", "version": "1.0.0"}],
    }
    create(api, namespace, "apps", "App", "bot", app)
    serve_model(api, namespace, model.url)
    return Deployed(namespace, "bot-draft", _key(api, namespace, "bot-draft"))


def ok(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def refused(response: httpx.Response, status: int, *words: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body["error"]) == {"code", "message", "details"}, body
    for word in words:
        assert word in body["error"]["message"], body
    return body


def test_execute_answers_with_tools_and_tokens_keeps_sessions_per_user_and_checks_keys(
    api: client.ApiClient, namespace: str, facade: Facade, model: ScriptedModel
) -> None:
    bot = deploy_bot(api, namespace, model)
    http = facade.http
    model.script(
        Reply(calls=[Call("weather", {"city": "Oslo"})], usage=(30, 5)),
        Reply(text="It is 12 degrees in Oslo.", usage=(45, 9)),
    )
    first = ok(
        http.post(
            bot.execute, headers=bot.headers, json={"message": "Weather in Oslo?", "metadata": {"user_id": "alice"}}
        )
    )
    assert set(first) >= {"response", "session_id", "agent", "tools_used", "tokens"}
    assert first["response"] == "It is 12 degrees in Oslo."
    assert (first["agent"], first["tools_used"]) == ("helper", ["weather"])
    assert first["tokens"] == {"input": 75, "output": 14}
    assert first["session_id"]
    assert [r.body for r in model.tool_requests] == [{"city": "Oslo"}]
    call = model.bodies()[0]
    assert (call["model"], call["temperature"], call["max_tokens"], call["top_p"], call["top_k"], call["stop"]) == (
        "tiny", 0.4, 200, 0.9, 30, ["<END>"]
    )  # fmt: skip
    assert call["messages"][0] == {"role": "system", "content": "You are helpful."}
    assert call["tools"][0]["function"]["parameters"] == WEATHER_SCHEMA

    # the same session goes on with its history; another user's session is a 404 that says so
    model.reset()
    model.script(Reply(text="You asked about Oslo.", usage=(60, 5)))
    again = {"message": "What did I ask?", "session_id": first["session_id"], "metadata": {"user_id": "alice"}}
    second = ok(http.post(bot.execute, headers=bot.headers, json=again))
    assert (second["session_id"], second["tools_used"]) == (first["session_id"], [])
    sent = model.bodies()[0]["messages"]
    assert {"role": "user", "content": "Weather in Oslo?"} in sent
    assert {"role": "assistant", "content": "It is 12 degrees in Oslo."} in sent
    assert sent[-1] == {"role": "user", "content": "What did I ask?"}
    theft = {**again, "metadata": {"user_id": "mallory"}}
    refused(http.post(bot.execute, headers=bot.headers, json=theft), 404, "another user")

    # keys: missing/unknown 401, another environment's 403; another app's id 404; bad bodies 422
    body = {"message": "hi"}
    missing = refused(http.post(bot.execute, json=body), 401, "Authorization: Bearer")
    assert missing["error"]["details"] == {"header": "Authorization"}
    # the public API's header is not this call's: the answer names the one it takes
    refused(http.post(bot.execute, json=body, headers={"x-api-key": bot.key}), 401, "Authorization: Bearer")
    refused(http.post(bot.execute, json=body, headers={"Authorization": "Bearer dk_nope_nope"}), 401)
    create(api, namespace, "environments", "Environment", "bot-staging", {"appRef": "bot"})
    other = _key(api, namespace, "bot-staging")
    refused(http.post(bot.execute, json=body, headers={"Authorization": f"Bearer {other}"}), 403)
    wrong_app = bot.execute.replace("/apps/bot/", "/apps/not-bot/")
    refused(http.post(wrong_app, json=body, headers=bot.headers), 404, "not-bot")
    refused(http.post(bot.execute, json={"message": "hi", "user": "x"}, headers=bot.headers), 422, "user")
    refused(http.post(bot.execute, json={"message": ""}, headers=bot.headers), 422, "message")
    refused(http.post(bot.execute, json={"message": "x" * 40_000}, headers=bot.headers), 422, "message")


def test_the_environment_curl_script_works_verbatim(
    api: client.ApiClient, namespace: str, facade: Facade, model: ScriptedModel
) -> None:
    bot = deploy_bot(api, namespace, model)
    script = wait_for(
        lambda: (get_or_empty(api, namespace, "environments", "bot-draft").get("status") or {}).get("curlScript"),
        timeout=30,
        what="the cURL script",
    )
    assert facade.url in script
    model.script(Reply(text="Hello from the bot!", usage=(7, 4)))
    env = {**os.environ, "DOCKYARD_API_KEY": bot.key}
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    answer = orjson.loads(done.stdout)
    assert answer["response"] == "Hello from the bot!"
    assert answer["session_id"] == "session-1"  # the id the script sends is created
    again = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert orjson.loads(again.stdout)["session_id"] == "session-1"  # and continued


def sse(response: httpx.Response) -> list[tuple[str, Any]]:
    events = []
    for block in response.text.split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        name = next(line[7:] for line in lines if line.startswith("event: "))
        data = next(line[6:] for line in lines if line.startswith("data: "))
        events.append((name, orjson.loads(data)))
    return events


def test_streaming_sends_agent_tool_and_text_events_then_the_answer(
    api: client.ApiClient, namespace: str, facade: Facade, model: ScriptedModel
) -> None:
    bot = deploy_bot(api, namespace, model)
    model.script(
        Reply(calls=[Call("weather", {"city": "Bergen"}, id="w1")], usage=(20, 4)),
        Reply(text="Bergen: 12 degrees and rain.", pieces=5, usage=(30, 8)),
    )
    with facade.http.stream(
        "POST", bot.execute, headers=bot.headers, json={"message": "Bergen?", "stream": True}
    ) as resp:
        resp.read()
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers["x-accel-buffering"] == "no"
    events = sse(resp)
    names = [e for e, _ in events]
    assert names[0] == "agent"
    assert events[0][1] == {"agent": "helper"}
    assert names.index("tool_call") < names.index("tool_result") < names.index("delta")
    assert next(d for e, d in events if e == "tool_call") == {
        "id": "w1",
        "name": "weather",
        "arguments": '{"city":"Bergen"}',
    }
    result = next(d for e, d in events if e == "tool_result")
    assert result["ok"]
    assert '"celsius":12' in result["content"]
    assert "".join(d["text"] for e, d in events if e == "delta") == "Bergen: 12 degrees and rain."
    assert names[-1] == "done"
    done = events[-1][1]
    assert (done["response"], done["tools_used"], done["tokens"]) == (
        "Bergen: 12 degrees and rain.", ["weather"], {"input": 50, "output": 12}
    )  # fmt: skip
    # Accept: text/event-stream streams too; a model failure mid-stream is an error event
    model.script(Reply(status=500))
    headers = {**bot.headers, "Accept": "text/event-stream"}
    failed = facade.http.post(bot.execute, headers=headers, json={"message": "again", "session_id": done["session_id"]})
    (last_name, last) = sse(failed)[-1]
    assert last_name == "error"
    assert last["error"]["code"] == "model_bad_response"
    assert last["status"] == 502


def test_model_failures_are_answers_within_the_deadline_and_free_the_session(
    api: client.ApiClient, namespace: str, facade: Facade, model: ScriptedModel
) -> None:
    bot = deploy_bot(api, namespace, model)
    http = facade.http
    session = {"message": "hello", "session_id": "s-fail"}
    model.script(Reply(text="too late", delay=TURN_DEADLINE + 5))
    started = time.monotonic()
    refused(http.post(bot.execute, headers=bot.headers, json=session), 504, "deadline")
    assert time.monotonic() - started < TURN_DEADLINE + 2
    model.script(Reply(raw=b"<html>Bad gateway</html>", status=200))
    refused(http.post(bot.execute, headers=bot.headers, json=session), 502, "not JSON")
    serve_model(api, namespace, None)  # the engine stopped: the runner removed the annotation
    wait_for(
        lambda: http.post(bot.execute, headers=bot.headers, json=session).status_code == 503,
        timeout=10,
        what="503 once no engine serves the model",
    )
    refused(http.post(bot.execute, headers=bot.headers, json=session), 503, "no local engine serves tiny")
    serve_model(api, namespace, model.url)
    model.reset()
    model.script(Reply(text="back again"))
    answer = wait_for(
        lambda: (r := http.post(bot.execute, headers=bot.headers, json=session)).status_code == 200 and r.json(),
        timeout=10,
        what="an answer once the engine is back",
    )
    assert answer["response"] == "back again"
    # nothing of the failed turns was kept: the model sees no earlier messages
    assert [m["role"] for m in model.bodies()[-1]["messages"]] == ["system", "user"]


def test_a_session_stays_on_the_version_it_started_with(
    api: client.ApiClient, namespace: str, facade: Facade, model: ScriptedModel
) -> None:
    bot = deploy_bot(api, namespace, model)
    del bot
    agent = {"name": "helper", "version": "1.0.0", "model": "tiny"}
    for version in ("1.0.0", "1.1.0"):
        spec = {
            "appRef": "bot",
            "version": version,
            "displayName": f"v{version}",
            "agents": [{**agent, "instructions": f"You are version {version}."}],
        }
        create(api, namespace, "appversions", "AppVersion", f"bot-{version}", spec)
    create(api, namespace, "environments", "Environment", "bot-production", {"appRef": "bot", "appVersion": "1.0.0"})
    prod = Deployed(namespace, "bot-production", _key(api, namespace, "bot-production"))
    http = facade.http

    def instructions(body: dict[str, Any]) -> str:
        response = http.post(prod.execute, headers=prod.headers, json=body)
        ok(response)
        return str(model.bodies()[-1]["messages"][0]["content"])

    assert instructions({"message": "hi", "session_id": "old"}) == "You are version 1.0.0."
    patch(api, namespace, "environments", "bot-production", {"spec": {"appVersion": "1.1.0"}})
    wait_for(
        lambda: instructions({"message": "hi"}) == "You are version 1.1.0.",
        timeout=15,
        what="new sessions on 1.1.0",
    )
    assert instructions({"message": "still there?", "session_id": "old"}) == "You are version 1.0.0."


def test_each_environment_fills_the_instructions_placeholders_with_its_configuration(
    api: client.ApiClient, namespace: str, facade: Facade, model: ScriptedModel
) -> None:
    deploy_bot(api, namespace, model)
    instructions = "Support: {{ supportEmail }}. Region {{region}}, retries {{retries}}. Unknown {{tone}}."
    spec = {
        "appRef": "bot",
        "version": "1.0.0",
        "displayName": "v1",
        "agents": [{"name": "helper", "version": "1.0.0", "model": "tiny", "instructions": instructions}],
    }
    create(api, namespace, "appversions", "AppVersion", "bot-1.0.0", spec)
    settings = {
        "bot-eu": {"supportEmail": "eu@shop.example", "region": "eu-west", "retries": 2},
        "bot-us": {"supportEmail": "us@shop.example", "region": "us-east", "retries": 3},
    }
    for name, configuration in settings.items():
        create(
            api, namespace, "environments", "Environment", name,
            {"appRef": "bot", "appVersion": "1.0.0", "configuration": configuration},
        )  # fmt: skip
    keys = {name: Deployed(namespace, name, _key(api, namespace, name)) for name in settings}

    def system(name: str) -> str:
        ok(facade.http.post(keys[name].execute, headers=keys[name].headers, json={"message": "hi"}))
        message = model.bodies()[-1]["messages"][0]
        assert message["role"] == "system"
        return str(message["content"])

    assert system("bot-eu") == "Support: eu@shop.example. Region eu-west, retries 2. Unknown {{tone}}."
    assert system("bot-us") == "Support: us@shop.example. Region us-east, retries 3. Unknown {{tone}}."
    patch(api, namespace, "environments", "bot-eu", {"spec": {"configuration": {"tone": "warm"}}})
    wait_for(lambda: system("bot-eu").endswith("Unknown warm."), timeout=15, what="the new configuration")


def test_an_agent_calls_its_model_by_display_name_and_only_the_mcp_tools_it_names(
    api: client.ApiClient, namespace: str, facade: Facade, model: ScriptedModel
) -> None:
    """The agent's model is the ModelDeployment's display name (spec.name, the deploy call's name): the turn
    reaches that ModelDeployment; the agent names one tool of an MCP server that lists two, and the model is
    offered that one (and the HTTP tool) only, and the call goes through to the server."""

    def forecast(city: str) -> str:
        """The forecast of a city."""
        return f"sunny in {city}"

    def secrets(path: str) -> str:
        """Not for this agent."""
        return path

    bot = deploy_bot(api, namespace, model)
    patch(api, namespace, "modeldeployments", "tiny", {"spec": {"name": "Tiny Chat"}})
    core = client.CoreV1Api(api)

    def renamed() -> bool:  # the engine's served name is in its pod's arguments: a new pod replaces the old one
        pods = core.list_namespaced_pod(namespace, label_selector=f"{MODEL_DEPLOYMENT_LABEL}=tiny").items
        return bool(pods) and all(
            not p.metadata.deletion_timestamp
            and any("--served-model-name=Tiny Chat" in (c.args or []) for c in p.spec.containers)
            for p in pods
        )

    wait_for(renamed, timeout=60, what="the model's pods serving it as Tiny Chat")
    serve_model(api, namespace, model.url)  # the local engine runner's part for the new pod
    with mcp_server({"forecast": forecast, "secrets": secrets}, name="docs") as docs:
        agent = {"name": "helper", "version": "1.0.0", "instructions": "You are helpful.", "model": "Tiny Chat",
                 "tools": ["weather"], "mcpTools": ["docs/forecast"]}  # fmt: skip
        draft = {"agents": [agent], "mcpServers": [{"name": "docs", "url": docs.url}]}
        patch(api, namespace, "apps", "bot", {"spec": draft})

        def sees_the_draft() -> bool:
            model.reset()
            model.script(Reply(text="ok", usage=(1, 1)))
            http.post(bot.execute, headers=bot.headers, json={"message": "ping"})
            bodies = model.bodies()
            return bool(bodies) and any(t["function"]["name"] == "docs__forecast" for t in bodies[0].get("tools", []))

        http = facade.http
        wait_for(sees_the_draft, timeout=30, what="the turn to use the edited draft")
        model.reset()
        model.script(
            Reply(calls=[Call("docs__forecast", {"city": "Oslo"})], usage=(30, 5)),
            Reply(text="Sunny in Oslo.", usage=(45, 9)),
        )
        answer = ok(http.post(bot.execute, headers=bot.headers, json={"message": "Forecast for Oslo?"}))
    assert (answer["response"], answer["tools_used"]) == ("Sunny in Oslo.", ["docs__forecast"])
    first = model.bodies()[0]
    assert first["model"] == "Tiny Chat"  # the ModelDeployment's served name: the turn reached it
    assert sorted(t["function"]["name"] for t in first["tools"]) == ["docs__forecast", "weather"]
    assert docs.calls == [("forecast", {"city": "Oslo"})]

    # the environment's health follows the ModelDeployment the display name resolves to (once it reconciled
    # the edited draft: its checklist names the MCP tool the agent names); the ModelDeployment made above may
    # still be rolling out (Deploying), but Active comes only through it: unresolved, the phase is Failed
    def reconciled() -> dict[str, Any] | None:
        env = get_or_empty(api, namespace, "environments", "bot-draft")
        status = env.get("status") or {}
        assert status.get("phase") != "Failed", status
        return env if "docs/forecast" in json.dumps(status.get("checklist")) and status["phase"] == "Active" else None

    env = wait_for(reconciled, timeout=60, what="the environment to reconcile the edited draft and be Active")
    assert "Tiny Chat" not in json.dumps(env["status"].get("conditions"))
