"""The runtime's pure parts: where a model answers (Contract 1), the sampling body of a ModelDeployment,
the app content of a draft or version, and the execute request body (docs/deployed-app-api.md, 'Request')."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import ValidationError

from dockyard_api.cache import Informer
from dockyard_api.runtime.agent import AgentSpec
from dockyard_api.runtime.config import AppLookup, EnvironmentView, TurnWorld, model_params, parse_content
from dockyard_api.runtime.endpoints import LOCAL_ENDPOINT_ANNOTATION, EndpointResolver, local_endpoints
from dockyard_api.runtime.errors import ModelUnavailableError
from dockyard_api.runtime.model import ModelClient
from dockyard_api.runtime.schemas import ExecuteBody
from dockyard_api.runtime.service import KINDS
from dockyard_api.runtime.tools import Limits, McpClient
from dockyard_core.kubeclient import AsyncKube
from tests.support.scripted_model import mcp_server


def pod(name: str, *, ready: bool = True, url: str | None = None, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "labels": {"dockyard.dev/model-deployment": "tiny"}}
    if url:
        meta["annotations"] = {LOCAL_ENDPOINT_ANNOTATION: url}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_local_endpoints_are_the_ready_annotated_pods_that_are_not_going_away() -> None:
    pods = [
        pod("b", url="http://127.0.0.1:2/"),
        pod("a", url="http://127.0.0.1:1"),
        pod("c", url="http://127.0.0.1:3", ready=False),
        pod("d"),
        pod("e", url="http://127.0.0.1:5", deleting=True),
    ]
    assert local_endpoints(pods) == ["http://127.0.0.1:1", "http://127.0.0.1:2"]


def resolver(kubeconfig: str, mode: str, mdeps: list[dict[str, Any]], pods: list[dict[str, Any]]) -> EndpointResolver:
    kube = AsyncKube(kubeconfig)
    deployments = Informer(kube, "modeldeployments")
    deployments.replace(mdeps)
    pod_informer = Informer(kube, "pods", index_label="dockyard.dev/model-deployment")
    pod_informer.replace(pods)
    return EndpointResolver(mode, deployments, pod_informer)  # type: ignore[arg-type]


def test_local_mode_round_robins_over_the_engines_and_says_when_none_serves(unreachable_kubeconfig: str) -> None:
    pods = [pod("a", url="http://127.0.0.1:1"), pod("b", url="http://127.0.0.1:2")]
    found = resolver(unreachable_kubeconfig, "local", [], pods)

    async def go() -> list[str]:
        return [await found.base_url("ns", "tiny") for _ in range(4)]

    assert asyncio.run(go()) == ["http://127.0.0.1:1", "http://127.0.0.1:2"] * 2
    with pytest.raises(ModelUnavailableError, match="no local engine serves other") as caught:
        asyncio.run(found.base_url("ns", "other"))
    assert caught.value.status_code == 503


def test_cluster_mode_uses_the_status_endpoint_and_explains_a_missing_one(unreachable_kubeconfig: str) -> None:
    ready = {"metadata": {"name": "tiny", "namespace": "ns"}, "status": {"endpoint": "http://tiny.ns.svc/"}}
    pending = {
        "metadata": {"name": "big", "namespace": "ns"},
        "status": {"job": {"status": "FAILED", "message": "no g5.48xlarge node with 8 free GPUs"}},
    }
    found = resolver(unreachable_kubeconfig, "cluster", [ready, pending], [])
    assert asyncio.run(found.base_url("ns", "tiny")) == "http://tiny.ns.svc"
    with pytest.raises(ModelUnavailableError, match=r"no endpoint yet.*FAILED: no g5\.48xlarge"):
        asyncio.run(found.base_url("ns", "big"))


def test_the_deployment_hyper_parameters_become_the_sampling_body() -> None:
    mdep = {
        "metadata": {"name": "tiny"},
        "spec": {
            "name": "tiny-chat",
            "hyperParameters": {"temperature": 0.3, "maxTokens": 128, "topP": 0.8, "topK": 20, "stopSequence": ["##"]},
        },
    }
    assert model_params(mdep) == {
        "model": "tiny-chat",
        "temperature": 0.3,
        "max_tokens": 128,
        "top_p": 0.8,
        "top_k": 20,
        "stop": ["##"],
    }
    zero = {
        "metadata": {"name": "x"},
        "spec": {"hyperParameters": {"temperature": 0, "maxTokens": 0, "topP": 1, "topK": 1}},
    }
    assert "max_tokens" not in model_params(zero)  # 0: the engine's default
    assert model_params({"metadata": {"name": "bare"}, "spec": {}}) == {"model": "bare"}


def test_app_content_is_read_from_a_draft_or_version_spec() -> None:
    spec = {
        "appRef": "bot",
        "version": "1.0.0",
        "agents": [{"name": "helper", "version": "1", "instructions": "Help.", "model": "tiny", "tools": ["weather"]}],
        "toolVersions": [{"name": "weather", "version": "1.2.0"}],
        "mcpServers": [{"name": "docs", "url": "http://mcp/mcp", "headers": {"X-Team": "a"}, "headersSecretRef": "s"}],
    }
    content = parse_content(spec, "1.0.0")
    (agent,) = content.agents
    assert (agent.name, agent.instructions, agent.model, agent.tools) == ("helper", "Help.", "tiny", ("weather",))
    assert content.tool_versions == {"weather": "1.2.0"}
    (server,) = content.mcp_servers
    assert (server.transport, server.headers, server.headers_secret_ref) == ("streamable-http", (("X-Team", "a"),), "s")
    assert parse_content({}, "draft").agents == ()


def test_the_execute_body_is_spec_shaped_and_strict() -> None:
    body = ExecuteBody.model_validate(
        {"message": "Hello!", "session_id": "session-1", "metadata": {"user_id": "user-1"}}
    )
    assert (body.message, body.session_id, body.metadata and body.metadata.user_id, body.stream) == (
        "Hello!",
        "session-1",
        "user-1",
        False,
    )
    for bad in (
        {},
        {"message": ""},
        {"message": "x" * 32_769},
        {"message": 5},
        {"message": "hi", "sesion_id": "typo"},
        {"message": "hi", "metadata": {"user": "x"}},
        {"message": "hi", "stream": "yes"},
        {"message": "hi", "session_id": 12},
    ):
        with pytest.raises(ValidationError):
            ExecuteBody.model_validate(bad)


def test_the_execute_endpoint_is_documented_with_its_errors_and_stream() -> None:
    from fastapi.testclient import TestClient

    from dockyard_api.app import ENVIRONMENT_PREFIX, create_app

    document = TestClient(create_app()).get("/openapi.json").json()  # no lifespan: no cluster needed
    operation = document["paths"][f"{ENVIRONMENT_PREFIX}/v1/apps/{{app_id}}/execute"]["post"]
    assert operation["summary"]
    assert "authorization" in {p["name"].lower() for p in operation["parameters"]}
    assert {"401", "403", "404", "409", "422", "429", "502", "503", "504"} <= set(operation["responses"])
    assert set(operation["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
    schema = document["components"]["schemas"]["ExecuteBody"]
    assert schema["required"] == ["message"]
    assert schema["additionalProperties"] is False


def _lookup(kubeconfig: str, mdeps: list[dict[str, Any]]) -> AppLookup:
    kube = AsyncKube(kubeconfig)
    informers = {plural: Informer(kube, plural) for plural in KINDS}
    for plural, informer in informers.items():
        informer.replace(mdeps if plural == "modeldeployments" else [])
    return AppLookup(kube, informers, EndpointResolver("cluster", informers["modeldeployments"], None))


def test_an_agents_model_is_the_object_or_its_unique_display_name(unreachable_kubeconfig: str) -> None:
    def mdep(name: str, display: str) -> dict[str, Any]:
        meta = {"name": name, "namespace": "ns"}
        return {"metadata": meta, "spec": {"name": display}, "status": {"endpoint": f"http://{name}/"}}

    lookup = _lookup(unreachable_kubeconfig, [mdep("llama-3-8b-0a1b2c3d", "Llama 3 8B"), mdep("tiny", "tiny")])
    target = asyncio.run(lookup.model_target("ns", AgentSpec("helper", model="Llama 3 8B")))
    assert (target.base_url, target.what) == ("http://llama-3-8b-0a1b2c3d", "ModelDeployment 'llama-3-8b-0a1b2c3d'")
    assert asyncio.run(lookup.model_target("ns", AgentSpec("helper", model="tiny"))).base_url == "http://tiny"
    twice = _lookup(unreachable_kubeconfig, [mdep("a-1", "Llama 3 8B"), mdep("b-2", "Llama 3 8B")])
    with pytest.raises(ModelUnavailableError, match="ambiguous"):
        asyncio.run(twice.model_target("ns", AgentSpec("helper", model="Llama 3 8B")))
    with pytest.raises(ModelUnavailableError, match="unknown model 'Gone model'"):
        asyncio.run(lookup.model_target("ns", AgentSpec("helper", model="Gone model")))


def test_an_agent_that_names_mcp_tools_is_offered_only_those(unreachable_kubeconfig: str) -> None:
    """An agent with mcpTools gets only the MCP tools it names; one that names none gets every tool of the
    app's MCP servers (the behaviour before mcpTools, kept for stored versions)."""

    def search(query: str) -> str:
        """Search."""
        return query

    def fetch(url: str) -> str:
        """Fetch."""
        return url

    with mcp_server({"search": search, "fetch": fetch}) as server:
        spec = {
            "agents": [{"name": "narrow", "mcpTools": ["docs/search"]}, {"name": "wide"}],
            "mcpServers": [{"name": "docs", "url": server.url}],
        }
        content = parse_content(spec, "draft")
        env = EnvironmentView("ns", "bot-draft", "bot", "draft", {})
        models = ModelClient()
        world = TurnWorld(_lookup(unreachable_kubeconfig, []), models, McpClient(), env, content, Limits(5, 4096))

        async def offered(agent: AgentSpec) -> list[str]:
            return sorted((await world.toolbox(agent)).functions)

        narrow, wide = content.agents
        assert narrow.mcp_tools == frozenset({"docs/search"})
        assert asyncio.run(offered(narrow)) == ["docs__search"]
        assert asyncio.run(offered(wide)) == ["docs__fetch", "docs__search"]
        asyncio.run(models.aclose())
