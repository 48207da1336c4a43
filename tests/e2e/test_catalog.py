"""The list endpoints the console's pickers and its Models and tools page read, over HTTP, as the caller:
agent versions of an App, tool versions, Models, ModelDeployments and ToolDeployments."""

from __future__ import annotations

from kubernetes import client

from tests.e2e.test_apps_environments import (  # noqa: F401 - fixtures
    APP,
    facade,
    mgmt,
    ok,
    operator,
    refused,
    tool,
)
from tests.support.dockyard import create, hub_model, model_deployment
from tests.support.runners import RunningFacade
from tests.support.users import Users
from tests.support.waiting import wait_for


def test_catalog_lists_as_the_caller(
    api: client.ApiClient,
    namespace: str,
    team: Users,
    facade: RunningFacade,  # noqa: F811
) -> None:
    http, alice, mallory = facade.client, team.headers("alice"), team.headers("mallory")
    tool(api, namespace, "weather", "1.0.0")
    tool(api, namespace, "weather", "1.10.0")
    tool(api, namespace, "weather", "1.2.0")
    hub_model(api, namespace, "tiny")
    model_deployment(api, namespace, "tiny")
    ok(http.post(f"{mgmt(namespace)}/apps", json=APP, headers=alice), 201)
    # a version's agents need a model that exists (the draft's may name one that does not, yet)
    agent = {**APP["agents"][0], "version": "0.9.0", "model": "tiny"}
    version = {"version": "1.0.0", "name": "First", "agents": [agent]}
    ok(http.post(f"{mgmt(namespace)}/apps/bot/versions", json=version, headers=alice), 201)

    tools = ok(http.get(f"{mgmt(namespace)}/tools", headers=alice))["items"]
    assert [(t["toolId"], t["kind"]) for t in tools] == [
        ("weather-1.0.0", "image"),
        ("weather-1.2.0", "image"),
        ("weather-1.10.0", "image"),
    ]  # versions in numeric order
    agents = ok(http.get(f"{mgmt(namespace)}/apps/bot/agentversions", headers=alice))["items"]
    assert [(a["name"], a["version"], a["foundIn"]) for a in agents] == [
        ("triage", "0.9.0", ["1.0.0"]),
        ("triage", "1.0.0", ["draft"]),
    ]
    assert agents[0]["agent"]["instructions"] == "route"

    models = wait_for(
        lambda: [m for m in ok(http.get(f"{mgmt(namespace)}/models", headers=alice))["items"] if m["phase"]],
        timeout=30,
        what="the model's phase",
    )
    assert models[0]["modelId"] == "tiny"
    assert models[0]["source"] == "hub"
    assert (models[0]["isAdapter"], models[0]["baseModel"]) == (False, None)
    lora = {"source": {"hub": {"id": "dockyard-dev/tiny-lora"}}, "isAdapter": True, "baseModel": "tiny"}
    create(api, namespace, "models", "Model", "tiny-lora", lora)
    listed = {m["modelId"]: m for m in ok(http.get(f"{mgmt(namespace)}/models", headers=alice))["items"]}
    assert (listed["tiny-lora"]["isAdapter"], listed["tiny-lora"]["baseModel"]) == (True, "tiny")  # the adapter's base
    deployments = ok(http.get(f"{mgmt(namespace)}/modeldeployments", headers=alice))["items"]
    assert [(d["name"], d["modelRef"]) for d in deployments] == [("tiny", "tiny")]
    assert deployments[0]["deviceType"]
    create(api, namespace, "tooldeployments", "ToolDeployment", "weather", {"toolRef": "weather-1.0.0"})
    tds = ok(http.get(f"{mgmt(namespace)}/tooldeployments", headers=alice))["items"]
    assert [(t["name"], t["toolRef"], t["environment"]) for t in tds] == [
        ("bot-draft-weather-1-0-0", "weather-1.0.0", "bot-draft"),  # the draft environment's own
        ("weather", "weather-1.0.0", None),
    ]

    # RBAC decides: mallory has no Dockyard role in this namespace
    for path in ("tools", "apps/bot/agentversions", "models", "modeldeployments", "tooldeployments"):
        refused(http.get(f"{mgmt(namespace)}/{path}", headers=mallory), 403, "forbidden")
