"""The deployed-app API against a REAL engine on CPU, end to end (issue #12, "Tests").

Nothing is scripted here: the tiny random-weight GGUF model is imported through the PUBLIC import API
with a key of the App's draft environment, deployed through the public deploy API, and the local engine
runner (in a thread, as in ``test_local_engines.py``) starts llama.cpp's server for its pod and
annotates it (Contract 1). The facade runs with ``endpoint_mode="local"``; the demo's HTTP tool server
(``dockyard_localcluster.toolserver``, the tool ``clock``) listens on loopback and is registered as a
Tool with its JSON-Schema ``parameters``. The App's agent uses that model and that tool.

The tiny model always calls an offered tool in ``auto`` mode, and the runtime's last pass offers no
tools, so with ``execute_max_steps=2`` a turn is: one real tool call, then a text answer. Token counts
come from llama.cpp's ``usage``; the test only checks that they are positive and consistent.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest
from kubernetes import client

from dockyard_api.settings import ApiSettings
from dockyard_core import apikeys
from dockyard_localcluster import toolserver
from dockyard_localcluster.engines import LOCAL_ENDPOINT_ANNOTATION, EngineRunner
from tests.support.cluster import E2ECluster
from tests.support.dockyard import create, get, patch, wait_job
from tests.support.engines import engine_runner
from tests.support.publicapi import ImportClient
from tests.support.runners import RunningFacade, run_facade, run_operator
from tests.support.waiting import wait_for

from .test_local_engines import import_tiny_model, pods_of, ready

APP = "timebot"
ENVIRONMENT = f"{APP}-draft"
AGENT = "assistant"
MDEP = "tiny-agent"
DEPLOY_BODY: dict[str, Any] = {
    "name": MDEP,
    "deviceType": "g5.xlarge",
    "hyperParameters": {"temperature": 0.0, "maxTokens": 24, "topP": 1.0, "topK": 40},
    "scalingParameters": {"maxBatchSize": 2, "minReplicas": 1},
    "optimizationInfo": {"optimizationType": "", "quantizationType": ""},
}
QUESTION = "What time is it in Tokyo right now? Use the clock tool."


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("model-store")


@pytest.fixture(scope="module")
def tool_url() -> Iterator[str]:
    """The demo's clock tool on a free loopback port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), toolserver.Handler)
    thread = threading.Thread(target=server.serve_forever, name="clock-tool", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/time"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def facade(
    cluster: E2ECluster, crds: None, store: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningFacade]:
    state = tmp_path_factory.mktemp("facade")
    settings = ApiSettings(
        model_store=store,
        sweep_interval_seconds=0,
        usage_summary_seconds=0,
        api_key_cache_seconds=0,
        database_url=f"sqlite+aiosqlite:///{state}/conversations.db",
        endpoint_mode="local",
        execute_max_steps=2,
        execute_turn_timeout_seconds=120,
        execute_tool_timeout_seconds=10,
    )
    with run_facade(settings) as running:
        yield running


@pytest.fixture(scope="module")
def operator(cluster: E2ECluster, crds: None, store: Path, facade: RunningFacade) -> Iterator[None]:
    env = {
        "DOCKYARD_OPERATOR_MODEL_STORE": str(store),
        "DOCKYARD_OPERATOR_LOCAL_ENGINES": "true",
        "DOCKYARD_OPERATOR_PUBLIC_URL": facade.url,
    }
    with run_operator(env=env):
        yield


@pytest.fixture(scope="module")
def runner(api: client.ApiClient, store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineRunner]:
    with engine_runner(api, store, tmp_path_factory.mktemp("engines"), max_engines=1) as engines:
        yield engines


def _environment_key(api: client.ApiClient, namespace: str) -> str:
    """A key of the App's draft environment (the Environment the operator created), stored as the
    facade stores keys."""

    def environment() -> dict[str, Any] | None:
        try:
            return get(api, namespace, "environments", ENVIRONMENT)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    env = wait_for(environment, timeout=30, what=f"Environment {ENVIRONMENT}")
    key = apikeys.generate()
    secret = apikeys.key_secret(key=key, name="e2e", environment=env, created_by="e2e", created_at=datetime.now(UTC))
    client.CoreV1Api(api).create_namespaced_secret(namespace, secret)
    return key.value


def deploy_timebot(
    api: client.ApiClient, namespace: str, facade: RunningFacade, tool_url: str, directory: Path
) -> tuple[str, dict[str, str]]:
    """App ``timebot`` whose agent answers with the tiny GGUF model served by llama.cpp and the clock
    tool; returns the execute path and the auth headers."""
    create(api, namespace, "apps", "App", APP, {"displayName": "Time bot"})
    key = _environment_key(api, namespace)
    imports = ImportClient(facade.client, namespace, ENVIRONMENT, key)
    model_id = import_tiny_model(imports, directory)
    resp = facade.client.post(
        f"{imports.root}/models/{model_id}/deploy",
        params={"modelType": "openSource"},
        json=DEPLOY_BODY,
        headers=imports.headers,
    )
    assert resp.status_code == 200, resp.text
    wait_job(api, namespace, "modeldeployments", MDEP, "SUCCESS", timeout=180)
    [pod] = pods_of(api, namespace, MDEP)
    assert ready(pod)
    assert pod["metadata"]["annotations"][LOCAL_ENDPOINT_ANNOTATION].startswith("http://127.0.0.1:")

    tool = {
        "name": "clock",
        "version": "1.0.0",
        "description": toolserver.DESCRIPTION,
        "endpoint": tool_url,
        "parameters": toolserver.PARAMETERS,
    }
    create(api, namespace, "tools", "Tool", "clock-1.0.0", tool)
    agent = {
        "name": AGENT,
        "version": "1.0.0",
        "instructions": "You answer questions about time. Call the clock tool for the current time.",
        "model": MDEP,
        "tools": ["clock"],
    }
    patch(
        api,
        namespace,
        "apps",
        APP,
        {"spec": {"agents": [agent], "toolVersions": [{"name": "clock", "version": "1.0.0"}]}},
    )
    return f"/e/{namespace}/{ENVIRONMENT}/v1/apps/{APP}/execute", {"Authorization": f"Bearer {key}"}


pytestmark = pytest.mark.usefixtures("operator", "runner")


def test_a_real_engine_answers_a_question_that_needs_a_tool_blocking_and_streamed(
    api: client.ApiClient, namespace: str, facade: RunningFacade, tool_url: str, tmp_path: Path
) -> None:
    path, headers = deploy_timebot(api, namespace, facade, tool_url, tmp_path)
    resp = facade.client.post(path, headers=headers, json={"message": QUESTION}, timeout=150)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["agent"] == AGENT
    assert body["tools_used"] == ["clock"]
    assert isinstance(body["response"], str)
    assert body["response"].strip()
    tokens = body["tokens"]
    # two model calls (tool call, then the answer): the prompt of each is at least the question, the
    # second also carries the tool's answer, so input clearly exceeds a single short prompt
    assert isinstance(tokens["input"], int)
    assert isinstance(tokens["output"], int)
    assert tokens["input"] > 20, tokens
    assert 0 < tokens["output"] <= 2 * DEPLOY_BODY["hyperParameters"]["maxTokens"], tokens
    assert body["session_id"]
    assert body["message_id"]

    # the same session goes on; the history makes the prompt longer, so the counts really come from
    # the engine (they differ from the first turn's)
    again = facade.client.post(
        path, headers=headers, json={"message": "And in Paris?", "session_id": body["session_id"]}, timeout=150
    )
    assert again.status_code == 200, again.text
    second = again.json()
    assert second["session_id"] == body["session_id"]
    assert second["tools_used"] == ["clock"]
    assert second["tokens"]["input"] > tokens["input"], (tokens, second["tokens"])

    # streamed: agent, tool_call, tool_result, (deltas), done with the same body as the blocking answer
    with facade.client.stream(
        "POST", path, headers=headers, json={"message": QUESTION, "stream": True}, timeout=150
    ) as resp:
        resp.read()
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/event-stream")
    events = sse(resp.text)
    names = [name for name, _ in events]
    assert events[0] == ("agent", {"agent": AGENT}), events
    assert {"tool_call", "tool_result"} <= set(names), events
    assert names.index("tool_call") < names.index("tool_result") < names.index("done"), names
    call = next(data for name, data in events if name == "tool_call")
    assert call["name"] == "clock"
    arguments = orjson.loads(call["arguments"]) if isinstance(call["arguments"], str) else call["arguments"]
    assert arguments["timezone"] in toolserver.ZONES
    result = next(data for name, data in events if name == "tool_result")
    assert (result["name"], result["id"], result["ok"]) == ("clock", call["id"], True), result
    assert '"time"' in result["content"]
    assert names[-1] == "done"
    done = events[-1][1]
    assert (done["agent"], done["tools_used"]) == (AGENT, ["clock"])
    assert done["response"].strip()
    assert done["tokens"]["input"] > 0
    assert done["tokens"]["output"] > 0
    assert "".join(data["text"] for name, data in events if name == "delta") == done["response"]


def sse(text: str) -> list[tuple[str, Any]]:
    events = []
    for block in text.split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        name = next(line[7:] for line in lines if line.startswith("event: "))
        data = next(line[6:] for line in lines if line.startswith("data: "))
        events.append((name, orjson.loads(data)))
    return events
