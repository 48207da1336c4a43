"""Apps, versions, environments, history, API keys and RBAC, through the facade AND kubectl, against the
real local control plane with the operator (and its admission webhooks) running."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client
from typer.testing import CliRunner

from dockyard_api.settings import ApiSettings
from dockyard_client.cli.app import app as cli_app
from dockyard_localcluster.demo import ensure_demo
from tests.support.cluster import E2ECluster
from tests.support.dockyard import create, hub_model, model_deployment, patch, wait_job
from tests.support.dockyard import get_or_empty as get
from tests.support.runners import RunningFacade, RunningOperator, run_facade, run_operator
from tests.support.scripted_model import RunningMcp, ScriptedModel, mcp_server, scripted_model
from tests.support.users import Users, kubectl
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def operator(cluster: E2ECluster, crds: None) -> Iterator[RunningOperator]:
    with run_operator(env={"DOCKYARD_OPERATOR_ENVIRONMENT_INTERVAL_SECONDS": "1"}) as running:
        yield running


@pytest.fixture(scope="module")
def facade(cluster: E2ECluster, operator: RunningOperator) -> Iterator[RunningFacade]:
    settings = ApiSettings(api_key_cache_seconds=0, token_cache_seconds=0, last_used_interval_seconds=0)
    with run_facade(settings) as running:
        yield running


def tool(api: client.ApiClient, namespace: str, name: str, version: str) -> None:
    spec = {
        "name": name,
        "version": version,
        "container": {"image": f"registry.example.com/tools/{name}:{version}", "port": 8080},
    }
    create(api, namespace, "tools", "Tool", f"{name}-{version}", spec)


def mgmt(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}"


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json() if response.content else None


def refused(response: httpx.Response, status: int, *words: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body["error"]) == {"code", "message", "details"}
    for word in words:
        assert word in body["error"]["message"], body
    return body


APP = {
    "name": "bot",
    "displayName": "Support bot",
    "description": "answers questions",
    "agents": [{"name": "triage", "version": "1.0.0", "instructions": "route", "model": "llama", "tools": ["weather"]}],
    "toolVersions": [{"name": "weather", "version": "1.0.0"}],
}
"""An App whose draft makes a valid version once :func:`llama` exists and the ``docs`` MCP server is added
(:func:`app_body`)."""
AGENT = {"name": "triage", "version": "1.0.0", "model": "llama"}


def search_docs(query: str) -> str:
    """Search the docs."""
    return f"nothing about {query}"


@pytest.fixture(scope="module")
def docs() -> Iterator[RunningMcp]:
    """The MCP server of the App's "docs" configuration: a version's MCP servers must answer and list tools."""
    with mcp_server({"search": search_docs}, name="docs") as running:
        yield running


def app_body(docs: RunningMcp) -> dict[str, Any]:
    """:data:`APP` with its MCP server configuration ``docs``."""
    return {**APP, "mcpServers": [{"name": "docs", "url": docs.url}]}


def llama(api: client.ApiClient, namespace: str) -> None:
    """The ModelDeployment ``llama`` that the agents call (a version's agents need models that exist)."""
    hub_model(api, namespace, "llama")
    model_deployment(api, namespace, "llama")


def tool_refs(api: client.ApiClient, namespace: str, env: str) -> list[str]:
    found = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "dockyard.dev", "v1alpha1", namespace, "tooldeployments", label_selector=f"dockyard.dev/environment={env}"
    )
    return sorted(t["spec"]["toolRef"] for t in found["items"] if not t["metadata"].get("deletionTimestamp"))


def servers(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """MCP server configs without the defaults the API server fills in."""
    return [{k: c[k] for k in ("name", "url")} for c in configs]


def environment(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return get(api, namespace, "environments", name)


def history(api: client.ApiClient, namespace: str, name: str) -> list[tuple[str, str, str]]:
    entries = (environment(api, namespace, name).get("status") or {}).get("history") or []
    return [(e["version"], e["status"], e.get("deployedBy", "")) for e in entries]


def test_app_versions_environments_history_and_rollback(
    api: client.ApiClient, namespace: str, team: Users, facade: RunningFacade, cluster: E2ECluster, docs: RunningMcp
) -> None:
    http, alice = facade.client, team.headers("alice")
    tool(api, namespace, "weather", "1.0.0")
    tool(api, namespace, "weather", "1.1.0")
    llama(api, namespace)
    app = app_body(docs)
    ok(http.post(f"{mgmt(namespace)}/apps", json=app, headers=alice), 201)

    # the draft environment appears by itself, with URLs, a cURL script and its first history entry
    wait_for(lambda: history(api, namespace, "bot-draft"), timeout=30, what="the draft environment's history")
    draft = ok(http.get(f"{mgmt(namespace)}/environments/bot-draft", headers=alice))
    assert draft["name"] == "draft"
    assert draft["appVersion"] == "draft"
    assert draft["apiBaseUrl"].endswith(f"/e/{namespace}/bot-draft")
    assert draft["webClientUrl"]
    assert "curl" in draft["curlScript"]
    assert "/v1/apps/bot/execute" in draft["curlScript"]

    # creating a version validates it first, naming what is wrong
    bad_tool = {"version": "0.9.0", "name": "broken", "toolVersions": [{"name": "weather", "version": "9.9.9"}]}
    refused(http.post(f"{mgmt(namespace)}/apps/bot/versions", json=bad_tool, headers=alice), 422, "weather", "9.9.9")
    bad_model = {
        "version": "0.9.1",
        "name": "broken",
        "agents": [{"name": "triage", "version": "1.0.0", "model": "no-such-model"}],
        "toolVersions": [],
    }
    refused(http.post(f"{mgmt(namespace)}/apps/bot/versions", json=bad_model, headers=alice), 422, "no-such-model")
    bad_mcp = {
        "version": "0.9.2",
        "name": "broken",
        "mcpServers": [{"name": "docs", "url": "https://mcp.example.com", "headers": {"bad header": "x"}}],
    }
    refused(http.post(f"{mgmt(namespace)}/apps/bot/versions", json=bad_mcp, headers=alice), 422, "bad header")

    v1 = ok(
        http.post(f"{mgmt(namespace)}/apps/bot/versions", json={"version": "1.0.0", "name": "First"}, headers=alice),
        201,
    )
    assert v1["toolVersions"] == app["toolVersions"]
    assert servers(v1["mcpServers"]) == app["mcpServers"]
    second = {"version": "1.1.0", "name": "Second", "toolVersions": [{"name": "weather", "version": "1.1.0"}]}
    ok(http.post(f"{mgmt(namespace)}/apps/bot/versions", json=second, headers=alice), 201)
    refused(
        http.post(f"{mgmt(namespace)}/apps/bot/versions", json={"version": "1.0.0", "name": "again"}, headers=alice),
        409,
    )
    # versions are immutable
    changed = kubectl(
        cluster,
        "-n",
        namespace,
        "patch",
        "appversion",
        "bot-1.0.0",
        "--type=merge",
        "-p",
        '{"spec":{"description":"changed"}}',
        check=False,
    )
    assert "immutable" in changed

    env = ok(
        http.post(
            f"{mgmt(namespace)}/apps/bot/environments",
            json={"name": "production", "description": "customers", "appVersion": "1.0.0"},
            headers=alice,
        ),
        201,
    )
    assert env["objectName"] == "bot-production"
    refused(
        http.post(f"{mgmt(namespace)}/apps/bot/environments", json={"name": "x", "appVersion": "7.7.7"}, headers=alice),
        422,
        "7.7.7",
    )
    alice_name = team.name("alice")
    wait_for(
        lambda: history(api, namespace, "bot-production") == [("1.0.0", "Active", alice_name)],
        timeout=30,
        what="the first deployment in the history",
    )
    # the environment deploys the version's tools
    wait_for(
        lambda: (
            get(api, namespace, "tooldeployments", "bot-production-weather-1-0-0").get("spec", {}).get("toolRef")
            == "weather-1.0.0"
        ),
        timeout=30,
        what="the environment's tool deployment",
    )
    wait_for(
        lambda: (
            get(api, namespace, "appversions", "bot-1.0.0").get("status", {}).get("deployedIn") == ["bot-production"]
        ),
        timeout=30,
        what="deployedIn of 1.0.0",
    )
    # the deployment became healthy (its tools SUCCESS): the history entry records it
    wait_for(
        lambda: (
            (environment(api, namespace, "bot-production").get("status") or {}).get("history", [{}])[0].get("healthy")
        ),
        timeout=60,
        what="1.0.0 healthy in the history",
    )

    ok(
        http.post(f"{mgmt(namespace)}/environments/bot-production/deploy", json={"version": "1.1.0"}, headers=alice),
        202,
    )
    wait_for(
        lambda: (
            history(api, namespace, "bot-production")
            == [("1.1.0", "Active", alice_name), ("1.0.0", "Previous", alice_name)]
        ),
        timeout=30,
        what="the second deployment",
    )
    wait_for(
        lambda: tool_refs(api, namespace, "bot-production") == ["weather-1.1.0"],
        timeout=30,
        what="the tool deployment to follow the version",
    )

    # rollback: only to a previous version, only when confirmed, and it is a new history entry
    refused(
        http.post(
            f"{mgmt(namespace)}/environments/bot-production/rollback",
            json={"version": "1.0.0", "confirm": False},
            headers=alice,
        ),
        422,
        "confirm",
    )
    refused(
        http.post(
            f"{mgmt(namespace)}/environments/bot-production/rollback",
            json={"version": "1.1.0", "confirm": True},
            headers=alice,
        ),
        409,
        "is the active version",
    )
    ok(
        http.post(
            f"{mgmt(namespace)}/environments/bot-production/rollback",
            json={"version": "1.0.0", "confirm": True},
            headers=alice,
        ),
        202,
    )
    wait_for(
        lambda: [v for v, _, _ in history(api, namespace, "bot-production")] == ["1.0.0", "1.1.0", "1.0.0"],
        timeout=30,
        what="the rollback entry",
    )
    assert [s for _, s, _ in history(api, namespace, "bot-production")] == ["Active", "Previous", "Previous"]

    # a deployed version cannot be deleted; the message names the environment
    wait_for(
        lambda: (
            get(api, namespace, "appversions", "bot-1.0.0").get("status", {}).get("deployedIn") == ["bot-production"]
        ),
        timeout=30,
        what="deployedIn after the rollback",
    )
    refused(http.delete(f"{mgmt(namespace)}/apps/bot/versions/1.0.0", headers=alice), 409, "bot-production")
    kubectl_delete = kubectl(cluster, "-n", namespace, "delete", "appversion", "bot-1.0.0", check=False)
    assert "bot-production" in kubectl_delete
    assert "denied" in kubectl_delete
    # a tool of an active version cannot be deleted; the message names version and environment
    tool_delete = kubectl(cluster, "-n", namespace, "delete", "tool", "weather-1.0.0", check=False)
    assert "bot-1.0.0" in tool_delete
    assert "bot-production" in tool_delete
    assert "denied" in tool_delete
    # ... while a version no environment deploys can go, with its now unused tool
    wait_for(
        lambda: not get(api, namespace, "appversions", "bot-1.1.0").get("status", {}).get("deployedIn"),
        timeout=30,
        what="1.1.0 to be no longer deployed",
    )
    ok(http.delete(f"{mgmt(namespace)}/apps/bot/versions/1.1.0", headers=alice), 204)
    kubectl(cluster, "-n", namespace, "delete", "tool", "weather-1.1.0")
    listed = ok(http.get(f"{mgmt(namespace)}/apps/bot/versions", headers=alice))
    assert [v["version"] for v in listed["items"]] == ["1.0.0"]


def test_kubectl_deploy_records_the_admission_user_and_cannot_be_spoofed(
    api: client.ApiClient, namespace: str, team: Users, facade: RunningFacade, cluster: E2ECluster
) -> None:
    create(api, namespace, "apps", "App", "bot", {})
    llama(api, namespace)
    for version in ("1.0.0", "2.0.0"):
        create(
            api,
            namespace,
            "appversions",
            "AppVersion",
            f"bot-{version}",
            {"appRef": "bot", "version": version, "displayName": version, "agents": [AGENT]},
        )
    alice = team.name("alice")
    env = {
        "apiVersion": "dockyard.dev/v1alpha1",
        "kind": "Environment",
        "metadata": {"name": "bot-staging"},
        "spec": {"appRef": "bot", "appVersion": "1.0.0"},
    }
    kubectl(cluster, "-n", namespace, "--as", alice, "apply", "-f", "-", input_=json.dumps(env))
    wait_for(
        lambda: history(api, namespace, "bot-staging") == [("1.0.0", "Active", alice)],
        timeout=30,
        what="alice's deployment",
    )
    # a client cannot write who deployed
    kubectl(
        cluster,
        "-n",
        namespace,
        "--as",
        alice,
        "annotate",
        "--overwrite",
        "environment",
        "bot-staging",
        "dockyard.dev/deployed-by=somebody-else",
    )
    notes = environment(api, namespace, "bot-staging")["metadata"]["annotations"]
    assert notes["dockyard.dev/deployed-by"] == alice
    # the cluster admin deploys 2.0.0 with kubectl: the history names the admin's user
    kubectl(
        cluster,
        "-n",
        namespace,
        "patch",
        "environment",
        "bot-staging",
        "--type=merge",
        "-p",
        '{"spec":{"appVersion":"2.0.0"}}',
    )
    wait_for(lambda: len(history(api, namespace, "bot-staging")) == 2, timeout=30, what="the admin's deployment")
    newest = history(api, namespace, "bot-staging")[0]
    assert newest[:2] == ("2.0.0", "Active")
    assert newest[2] not in ("", alice)
    assert "unknown" not in newest[2]
    # linking a version that does not exist is refused by the API server, naming the field
    out = kubectl(
        cluster,
        "-n",
        namespace,
        "patch",
        "environment",
        "bot-staging",
        "--type=merge",
        "-p",
        '{"spec":{"appVersion":"3.0.0"}}',
        check=False,
    )
    assert "spec.appVersion" in out
    assert "3.0.0" in out


def test_api_keys_are_shown_once_hashed_isolated_and_revocable(
    api: client.ApiClient, namespace: str, team: Users, facade: RunningFacade
) -> None:
    http, alice = facade.client, team.headers("alice")
    ok(http.post(f"{mgmt(namespace)}/apps", json={"name": "bot"}, headers=alice), 201)
    ok(http.post(f"{mgmt(namespace)}/apps/bot/environments", json={"name": "staging"}, headers=alice), 201)
    wait_for(lambda: environment(api, namespace, "bot-draft"), timeout=30, what="the draft environment")

    made = ok(http.post(f"{mgmt(namespace)}/environments/bot-staging/apikeys", json={"name": "ci"}, headers=alice), 201)
    key_a = made["key"]
    assert key_a.startswith(made["prefix"])
    assert made["name"] == "ci"
    assert made["createdBy"] == team.name("alice")
    listed = ok(http.get(f"{mgmt(namespace)}/environments/bot-staging/apikeys", headers=alice))["items"]
    assert [(k["id"], k["name"], k["prefix"]) for k in listed] == [(made["id"], "ci", made["prefix"])]
    assert key_a not in json.dumps(listed)
    # only a hash is stored
    secret = client.CoreV1Api(api).read_namespaced_secret(f"dockyard-apikey-{made['id']}", namespace)
    assert key_a not in json.dumps(secret.data)
    assert len(list(secret.data)) == 1
    other = ok(http.post(f"{mgmt(namespace)}/environments/bot-draft/apikeys", json={"name": "dev"}, headers=alice), 201)

    probe = f"/e/{namespace}/bot-staging/api/public/dock-status/{uuid.uuid4()}"
    refused(http.get(probe), 401, "API key is required")
    refused(http.get(probe, headers={"x-api-key": "nonsense"}), 401)
    refused(http.get(probe, headers={"x-api-key": key_a[:-2] + "xx"}), 401)
    refused(http.get(probe, headers={"x-api-key": other["key"]}), 403, "bot-draft")  # a key of environment B
    refused(http.get(probe, headers={"x-api-key": key_a}), 404, "no job")  # authenticated: the job is unknown
    wait_for(
        lambda: ok(http.get(f"{mgmt(namespace)}/environments/bot-staging/apikeys", headers=alice))["items"][0][
            "lastUsedAt"
        ],
        timeout=10,
        what="last-used to be recorded",
    )
    # the checklist knows keys were generated
    wait_for(
        lambda: _check(api, namespace, "bot-staging", "API keys generated") == "Done", timeout=30, what="checklist"
    )

    ok(http.delete(f"{mgmt(namespace)}/environments/bot-staging/apikeys/{made['id']}", headers=alice), 204)
    refused(http.get(probe, headers={"x-api-key": key_a}), 401, "not valid")
    refused(http.delete(f"{mgmt(namespace)}/environments/bot-staging/apikeys/{other['id']}", headers=alice), 404)
    assert ok(http.get(f"{mgmt(namespace)}/environments/bot-staging/apikeys", headers=alice))["items"] == []


def _check(api: client.ApiClient, namespace: str, env: str, item: str) -> str | None:
    items = (environment(api, namespace, env).get("status") or {}).get("checklist") or []
    return next((c["state"] for c in items if c["item"] == item), None)


def _detail(api: client.ApiClient, namespace: str, env: str, item: str) -> str:
    items = (environment(api, namespace, env).get("status") or {}).get("checklist") or []
    return str(next((c.get("detail", "") for c in items if c["item"] == item), ""))


def _ready(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    conditions = (environment(api, namespace, name).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Ready"), {})


def test_an_agents_failed_model_fails_the_environment_and_its_version_is_no_rollback_target(
    api: client.ApiClient, namespace: str, team: Users, facade: RunningFacade, cluster: E2ECluster
) -> None:
    """Health is the whole app (docs/apps-environments.md, "Health"): a version whose agent's ModelDeployment
    FAILED is not Active, its history entry is not healthy, and a rollback to it is refused."""
    http, alice = facade.client, team.headers("alice")
    hub_model(api, namespace, "llama")
    model_deployment(api, namespace, "llama")
    # a Model that never becomes ReadyToDeploy (an upload not completed): its ModelDeployment FAILS
    upload = {"fileContext": "model", "fileName": "m", "fileExtension": "tar", "fileSize": 10, "totalChunks": 1}
    create(api, namespace, "models", "Model", "importing", {"source": {"upload": upload}})
    model_deployment(api, namespace, "broken", model="importing")
    agent = {"name": "triage", "version": "1.0.0", "instructions": "route", "model": "llama"}
    ok(http.post(f"{mgmt(namespace)}/apps", json={"name": "bot", "agents": [agent]}, headers=alice), 201)
    ok(http.post(f"{mgmt(namespace)}/apps/bot/versions", json={"version": "1.0.0", "name": "good"}, headers=alice), 201)
    bad = {"version": "2.0.0", "name": "bad", "agents": [{**agent, "model": "broken"}]}
    ok(http.post(f"{mgmt(namespace)}/apps/bot/versions", json=bad, headers=alice), 201)
    wait_job(api, namespace, "modeldeployments", "broken", "FAILED", timeout=60)

    body = {"name": "production", "appVersion": "1.0.0"}
    ok(http.post(f"{mgmt(namespace)}/apps/bot/environments", json=body, headers=alice), 201)
    wait_job(api, namespace, "modeldeployments", "llama", "SUCCESS", timeout=90)
    wait_for(
        lambda: (environment(api, namespace, "bot-production").get("status") or {}).get("phase") == "Active",
        timeout=60,
        what="production Active with 1.0.0 (its model SUCCESS)",
    )
    assert environment(api, namespace, "bot-production")["status"]["history"][0]["healthy"] is True

    ok(
        http.post(f"{mgmt(namespace)}/environments/bot-production/deploy", json={"version": "2.0.0"}, headers=alice),
        202,
    )
    wait_for(
        lambda: _ready(api, namespace, "bot-production").get("reason") == "ModelDeploymentFailed",
        timeout=60,
        what="production Failed by the model of 2.0.0",
    )
    status = environment(api, namespace, "bot-production")["status"]
    assert status["phase"] == "Failed"
    assert status["activeVersion"] == "2.0.0"
    message = _ready(api, namespace, "bot-production")["message"]
    assert "ModelDeployment broken (the model of agent triage) FAILED: ModelNotReady" in message, message
    assert (status["history"][0]["version"], status["history"][0].get("healthy")) == ("2.0.0", False)
    view = ok(http.get(f"{mgmt(namespace)}/environments/bot-production", headers=alice))
    assert view["phase"] == "Failed"
    described = kubectl(cluster, "-n", namespace, "describe", "environment", "bot-production")
    assert "ModelDeploymentFailed" in described
    assert "ModelDeployment broken" in described

    # back to the working version: 2.0.0 is Previous but never became healthy, so no rollback target
    ok(
        http.post(f"{mgmt(namespace)}/environments/bot-production/deploy", json={"version": "1.0.0"}, headers=alice),
        202,
    )
    wait_for(
        lambda: (environment(api, namespace, "bot-production").get("status") or {}).get("phase") == "Active",
        timeout=60,
        what="production Active again with 1.0.0",
    )
    entries = environment(api, namespace, "bot-production")["status"]["history"]
    assert [(e["version"], e["status"], e.get("healthy")) for e in entries] == [
        ("1.0.0", "Active", True),
        ("2.0.0", "Previous", False),
        ("1.0.0", "Previous", True),
    ]
    rollback = {"version": "2.0.0", "confirm": True}
    answer = refused(
        http.post(f"{mgmt(namespace)}/environments/bot-production/rollback", json=rollback, headers=alice),
        409,
        "never became healthy",
    )
    assert answer["error"]["details"]["previousWorkingVersions"] == ["1.0.0"]
    assert environment(api, namespace, "bot-production")["spec"]["appVersion"] == "1.0.0"


def test_checklist_reports_what_the_cluster_knows_and_marks_the_rest_manual(
    api: client.ApiClient, namespace: str, team: Users, facade: RunningFacade
) -> None:
    create(api, namespace, "apps", "App", "bot", {})
    wait_for(
        lambda: (environment(api, namespace, "bot-draft").get("status") or {}).get("checklist"),
        timeout=30,
        what="the checklist",
    )
    checklist = environment(api, namespace, "bot-draft")["status"]["checklist"]
    assert {c["category"] for c in checklist} == {"Configuration", "Testing", "Security", "Monitoring"}
    states = {c["item"]: c["state"] for c in checklist}
    assert states["API keys generated"] == "NotDone"
    assert states["Diagnostics pass"] == "NotDone"  # no evaluation suite (docs/promotion.md)
    assert states["Alerts"] == "NotDone"  # no alert rules installed (docs/observability.md)
    assert states["Access controls"] == "Manual"
    assert states["Tools deployed and tested"] == "Done"  # the draft uses no tools
    tool(api, namespace, "search", "1.0.0")
    patch(api, namespace, "apps", "bot", {"spec": {"toolVersions": [{"name": "search", "version": "1.0.0"}]}})
    # the item counts the tool (not SUCCESS yet, then SUCCESS: the draft edit reaches the environment
    # within a second and kwok runs the tool's pods at once, so the NotDone phase may be too short to see)
    wait_for(
        lambda: _detail(api, namespace, "bot-draft", "Tools deployed and tested") != "the version uses no tools",
        timeout=30,
        what="the tool to count",
    )
    # kwok runs the tool's pods: the tool deployment reaches SUCCESS; deployed is not tested: the item stays
    # NotDone, naming the untested tool and how to test it
    wait_for(
        lambda: _detail(api, namespace, "bot-draft", "Tools deployed and tested").startswith(
            "no passing test call against the current deployment: search 1.0.0"
        ),
        timeout=60,
        what="the tool deployment to succeed",
    )
    assert _check(api, namespace, "bot-draft", "Tools deployed and tested") == "NotDone"
    assert "dockyard tool test" in _detail(api, namespace, "bot-draft", "Tools deployed and tested")
    # what users type is stored as typed (no spec.pii): sensitive data is not protected, and the draft has no
    # guardrails; guardrails that block on input and output make their item Done (safeguards.py)
    assert _check(api, namespace, "bot-draft", "Sensitive data protected") == "NotDone"
    assert _detail(api, namespace, "bot-draft", "Sensitive data protected").startswith(
        "personal data is stored as typed"
    )
    assert _check(api, namespace, "bot-draft", "Guardrails enabled") == "NotDone"
    terms = {"name": "no-competitors", "type": "deniedTerms", "terms": ["acme"]}
    patch(api, namespace, "apps", "bot", {"spec": {"guardrails": {"policies": [terms]}}})
    wait_for(
        lambda: _check(api, namespace, "bot-draft", "Guardrails enabled") == "Done",
        timeout=30,
        what="the guardrails to count",
    )
    assert _detail(api, namespace, "bot-draft", "Guardrails enabled") == (
        "1 policy; input: no-competitors (block); output: no-competitors (block)"
    )


WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.fixture(scope="module")
def tools_server() -> Iterator[ScriptedModel]:
    """A real HTTP server for the HTTP tools (127.0.0.1)."""
    with scripted_model() as server:
        yield server


def _weather(arguments: dict[str, Any]) -> dict[str, Any]:
    if arguments.get("city") == "nowhere":
        raise ValueError("no such city")
    return {"city": arguments.get("city"), "celsius": 12}


def _tested(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    return list((get(api, namespace, "apps", "bot").get("status") or {}).get("toolTests") or [])


def test_tool_test_calls_are_recorded_and_make_the_checklist_item_done(
    api: client.ApiClient, namespace: str, team: Users, facade: RunningFacade, docs: RunningMcp,
    tools_server: ScriptedModel, cluster: E2ECluster,
) -> None:  # fmt: skip
    """An app owner test-calls each tool of the draft in its environment (an HTTP tool at its deployment, an
    MCP server's tool through the SDK); the calls are recorded in the App's status and the checklist item is
    Done once each has passed against the current deployment; a recreated ToolDeployment needs a new test."""
    http, alice, vic = facade.client, team.headers("alice"), team.headers("vic")
    url = tools_server.tool("weather", _weather)
    spec = {"name": "weather", "version": "1.0.0", "endpoint": url, "parameters": WEATHER_SCHEMA}
    create(api, namespace, "tools", "Tool", "weather-1.0.0", spec)
    draft = {**app_body(docs), "agents": [{**AGENT, "tools": ["weather"]}]}
    create(api, namespace, "apps", "App", "bot", {k: v for k, v in draft.items() if k != "name"})
    item = "Tools deployed and tested"
    wait_for(
        lambda: _detail(api, namespace, "bot-draft", item).startswith(
            "no passing test call against the current deployment: weather 1.0.0, MCP server docs (any of its tools)"
        ),
        timeout=60,
        what="the untested tools named",
    )
    tests = f"{mgmt(namespace)}/environments/bot-draft/tooltests"
    refused(http.post(tests, json={"tool": "weather", "arguments": {"city": "Oslo"}}, headers=vic), 403, "tooltests")
    body = refused(http.post(tests, json={"tool": "weather", "arguments": {}}, headers=alice), 422, "city")
    assert body["error"]["details"][0]["field"] == "body.arguments"
    body = refused(http.post(tests, json={"tool": "weather", "arguments": {"city": 5}}, headers=alice), 422)
    assert body["error"]["details"][0]["field"] == "body.arguments.city"
    body = refused(http.post(tests, json={"tool": "nope", "arguments": {}}, headers=alice), 404, "no tool 'nope'")
    assert body["error"]["details"]["field"] == "body.tool"
    refused(http.post(tests, json={"tool": "docs/nope"}, headers=alice), 404, "does not list a tool 'nope'")
    assert _tested(api, namespace) == []  # refused before the call: nothing recorded
    failed = ok(http.post(tests, json={"tool": "weather", "arguments": {"city": "nowhere"}}, headers=alice))
    assert (failed["passed"], failed["recordedOn"]) == (False, "App bot")
    assert "HTTP 500" in failed["error"]
    assert [(t["tool"], t["passed"]) for t in _tested(api, namespace)] == [("weather", False)]
    passed = ok(http.post(tests, json={"tool": "weather", "arguments": {"city": "Oslo"}}, headers=alice))
    assert passed["passed"] is True
    assert '"celsius":12' in passed["result"].replace(" ", "")
    assert tools_server.tool_requests[-1].body == {"city": "Oslo"}
    tdep = get(api, namespace, "tooldeployments", "bot-draft-weather-1-0-0")
    [record] = _tested(api, namespace)  # the newest per environment and tool
    assert (record["tool"], record["passed"], record["by"]) == ("weather", True, team.name("alice"))
    assert record["revision"] == tdep["metadata"]["uid"]
    assert (record["environment"], record["appVersion"], record["toolVersion"]) == ("bot-draft", "draft", "1.0.0")
    assert _check(api, namespace, "bot-draft", item) == "NotDone"  # the MCP server is untested
    mcp = ok(http.post(tests, json={"tool": "docs/search", "arguments": {"query": "tls"}}, headers=alice))
    assert (mcp["passed"], mcp["result"]) == (True, "nothing about tls")
    assert docs.calls[-1] == ("search", {"query": "tls"})
    wait_for(lambda: _check(api, namespace, "bot-draft", item) == "Done", timeout=30, what="the item Done")
    # the CLI makes the same call: exit 0 when it passed, 1 when it failed, 2 when refused (field named)
    cli = {"DOCKYARD_URL": facade.url, "DOCKYARD_NAMESPACE": namespace, "DOCKYARD_TOKEN": team.tokens["alice"],
           "DOCKYARD_CONFIG": "/nonexistent"}  # fmt: skip
    done = CliRunner().invoke(
        cli_app, ["tool", "test", "bot-draft", "docs/search", "--args", '{"query": "x"}', "--json"], env=cli
    )
    assert (done.exit_code, json.loads(done.stdout)["result"]) == (0, "nothing about x"), done.output
    done = CliRunner().invoke(cli_app, ["tool", "test", "bot-draft", "weather"], env=cli)
    assert (done.exit_code, "body.arguments" in done.stderr) == (2, True), done.output
    done = CliRunner().invoke(cli_app, ["tool", "test", "bot-draft", "weather", "--args", '{"city": "Oslo"}'], env=cli)
    assert (done.exit_code, "celsius" in done.stdout) == (0, True), done.output
    described = " ".join(kubectl(cluster, "describe", "environment", "bot-draft", "-n", namespace).split())
    assert "ToolTested" in described
    assert f"weather 1.0.0 in bot-draft (version draft) by {team.name('alice')}: passed" in described
    # a new deployment of the tool (another uid) is untested until it is called again
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "dockyard.dev", "v1alpha1", namespace, "tooldeployments", "bot-draft-weather-1-0-0"
    )
    wait_for(
        lambda: _detail(api, namespace, "bot-draft", item).endswith(
            "no passing test call against the current deployment: weather 1.0.0 (test-call each: dockyard tool "
            "test, POST .../environments/{env}/tooltests or the console's Test)"
        ),
        timeout=60,
        what="the recreated deployment to be untested",
    )

    wait_for(
        lambda: get(api, namespace, "tooldeployments", "bot-draft-weather-1-0-0").get("status", {}).get("endpoint"),
        timeout=60,
        what="the recreated deployment's endpoint",
    )
    ok(http.post(tests, json={"tool": "weather", "arguments": {"city": "Oslo"}}, headers=alice))
    wait_for(lambda: _check(api, namespace, "bot-draft", item) == "Done", timeout=30, what="the item Done again")
    # scaling it (a new generation of the same deployment, the same immutable tool) keeps it tested
    patch(api, namespace, "tooldeployments", "bot-draft-weather-1-0-0", {"spec": {"replicas": 2}})
    generation = get(api, namespace, "tooldeployments", "bot-draft-weather-1-0-0")["metadata"]["generation"]
    wait_for(
        lambda: (
            get(api, namespace, "tooldeployments", "bot-draft-weather-1-0-0")["status"].get("observedGeneration")
            == generation
        ),
        timeout=60,
        what="the operator to see the scaled deployment",
    )
    assert _check(api, namespace, "bot-draft", item) == "Done"

    # a version deployed to another environment: untested there (the draft's calls were elsewhere), and its
    # calls are recorded on the AppVersion
    llama(api, namespace)
    ok(http.post(f"{mgmt(namespace)}/apps/bot/versions", json={"version": "1.0.0", "name": "v1"}, headers=alice), 201)
    env_body = {"name": "prod", "appVersion": "1.0.0"}
    ok(http.post(f"{mgmt(namespace)}/apps/bot/environments", json=env_body, headers=alice), 201)
    wait_for(
        lambda: _detail(api, namespace, "bot-prod", item).startswith(
            "no passing test call against the current deployment: weather 1.0.0, MCP server docs (any of its tools)"
        ),
        timeout=60,
        what="the version's tools untested in bot-prod",
    )
    prod = f"{mgmt(namespace)}/environments/bot-prod/tooltests"
    answer = ok(http.post(prod, json={"tool": "weather", "arguments": {"city": "Bergen"}}, headers=alice))
    assert (answer["passed"], answer["recordedOn"], answer["appVersion"]) == (True, "AppVersion bot-1.0.0", "1.0.0")
    ok(http.post(prod, json={"tool": "docs/search", "arguments": {"query": "x"}}, headers=alice))
    recorded = get(api, namespace, "appversions", "bot-1.0.0")["status"]["toolTests"]
    assert sorted((t["environment"], t["tool"]) for t in recorded) == [
        ("bot-prod", "docs/search"),
        ("bot-prod", "weather"),
    ]
    wait_for(lambda: _check(api, namespace, "bot-prod", item) == "Done", timeout=30, what="the item Done in bot-prod")


def test_an_mcp_tool_is_test_called_through_its_deployment(
    api: client.ApiClient, namespace: str, team: Users, facade: RunningFacade, docs: RunningMcp
) -> None:
    """A Tool with spec.mcp pinned in toolVersions: its tools are test-called as <tool>/<name> at the
    environment's ToolDeployment of it (here an external endpoint) through the MCP SDK; the Tool alone is no
    tool to call; the agent's named MCP tool is listed, and a passing call makes the item Done."""
    http, alice = facade.client, team.headers("alice")
    spec = {"name": "lookup", "version": "1.0.0", "endpoint": docs.url.removesuffix("/mcp"), "mcp": {}}
    create(api, namespace, "tools", "Tool", "lookup-1.0.0", spec)
    agent = {**AGENT, "tools": ["lookup"], "mcpTools": ["lookup/search"]}
    create(
        api,
        namespace,
        "apps",
        "App",
        "bot",
        {"agents": [agent], "toolVersions": [{"name": "lookup", "version": "1.0.0"}]},
    )
    item = "Tools deployed and tested"
    wait_for(
        lambda: _detail(api, namespace, "bot-draft", item).startswith(
            "no passing test call against the current deployment: lookup 1.0.0"
        ),
        timeout=60,
        what="the MCP tool deployed and untested",
    )
    tests = f"{mgmt(namespace)}/environments/bot-draft/tooltests"
    [listed] = ok(http.get(tests, headers=alice))["items"]
    assert (listed["name"], listed["kind"], listed["namedTools"]) == ("lookup", "mcpTool", ["search"])
    body = refused(http.post(tests, json={"tool": "lookup", "arguments": {}}, headers=alice), 422, "lookup/<name")
    assert body["error"]["details"][0]["field"] == "body.tool"
    answer = ok(http.post(tests, json={"tool": "lookup/search", "arguments": {"query": "tls"}}, headers=alice))
    assert (answer["passed"], answer["result"], answer["target"]) == (
        True,
        "nothing about tls",
        "bot-draft-lookup-1-0-0",
    )
    assert docs.calls[-1] == ("search", {"query": "tls"})
    wait_for(lambda: _check(api, namespace, "bot-draft", item) == "Done", timeout=30, what="the item Done")


def test_restore_overwrites_the_draft_and_is_recorded(
    api: client.ApiClient, namespace: str, team: Users, facade: RunningFacade, docs: RunningMcp
) -> None:
    http, alice = facade.client, team.headers("alice")
    tool(api, namespace, "weather", "1.0.0")
    llama(api, namespace)
    app = app_body(docs)
    ok(http.post(f"{mgmt(namespace)}/apps", json=app, headers=alice), 201)
    ok(
        http.post(f"{mgmt(namespace)}/apps/bot/versions", json={"version": "1.0.0", "name": "First"}, headers=alice),
        201,
    )
    ok(http.put(f"{mgmt(namespace)}/apps/bot/draft", json={"description": "rewritten", "agents": []}, headers=alice))
    assert ok(http.get(f"{mgmt(namespace)}/apps/bot", headers=alice))["mcpServers"] == []
    refused(
        http.post(f"{mgmt(namespace)}/apps/bot/restore", json={"version": "1.0.0", "confirm": False}, headers=alice),
        422,
        "cannot be undone",
    )
    refused(
        http.post(f"{mgmt(namespace)}/apps/bot/restore", json={"version": "5.0.0", "confirm": True}, headers=alice), 404
    )
    restored = ok(
        http.post(f"{mgmt(namespace)}/apps/bot/restore", json={"version": "1.0.0", "confirm": True}, headers=alice)
    )
    assert restored["restoredFrom"] == "1.0.0"
    assert restored["toolVersions"] == app["toolVersions"]
    # the agents as created, with the members the answer spells out at their defaults
    assert restored["agents"] == [{"knowledgeBases": [], **agent} for agent in app["agents"]]
    assert restored["description"] == "rewritten"  # the app's own description is not version content
    assert servers(restored["mcpServers"]) == app["mcpServers"]
    events = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector="involvedObject.name=bot").items
    assert any(e.reason == "DraftRestored" and "1 MCP server" in e.message for e in events)


def test_deleting_an_environment_needs_confirmation_revokes_keys_and_keeps_an_audit_record(
    api: client.ApiClient, namespace: str, team: Users, facade: RunningFacade, docs: RunningMcp
) -> None:
    http, alice = facade.client, team.headers("alice")
    tool(api, namespace, "weather", "1.0.0")
    llama(api, namespace)
    ok(http.post(f"{mgmt(namespace)}/apps", json=app_body(docs), headers=alice), 201)
    ok(
        http.post(f"{mgmt(namespace)}/apps/bot/versions", json={"version": "1.0.0", "name": "First"}, headers=alice),
        201,
    )
    ok(
        http.post(
            f"{mgmt(namespace)}/apps/bot/environments", json={"name": "prod", "appVersion": "1.0.0"}, headers=alice
        ),
        201,
    )
    key = ok(http.post(f"{mgmt(namespace)}/environments/bot-prod/apikeys", json={"name": "ci"}, headers=alice), 201)
    wait_for(
        lambda: get(api, namespace, "tooldeployments", "bot-prod-weather-1-0-0"), timeout=30, what="the tool deployment"
    )
    wait_for(lambda: history(api, namespace, "bot-prod"), timeout=30, what="the history")

    refused(http.delete(f"{mgmt(namespace)}/environments/bot-prod", headers=alice), 422, "confirm")
    refused(http.delete(f"{mgmt(namespace)}/environments/bot-prod?confirm=bot-staging", headers=alice), 422)
    refused(http.delete(f"{mgmt(namespace)}/environments/bot-draft?confirm=draft", headers=alice), 409, "draft")
    gone = ok(http.delete(f"{mgmt(namespace)}/environments/bot-prod?confirm=prod", headers=alice), 202)
    core = client.CoreV1Api(api)
    wait_for(
        lambda: not core.list_namespaced_secret(namespace, label_selector="dockyard.dev/environment=bot-prod").items,
        timeout=30,
        what="the keys to be revoked",
    )
    probe = f"/e/{namespace}/bot-prod/api/public/dock-status/{uuid.uuid4()}"
    refused(http.get(probe, headers={"x-api-key": key["key"]}), 401)
    objects = client.CustomObjectsApi(api)
    wait_for(
        lambda: (
            not objects.list_namespaced_custom_object(
                "dockyard.dev",
                "v1alpha1",
                namespace,
                "tooldeployments",
                label_selector="dockyard.dev/environment=bot-prod",
            )["items"]
        ),
        timeout=30,
        what="the workloads to be released",
    )
    records = core.list_namespaced_config_map(namespace, label_selector="dockyard.dev/environment=bot-prod").items
    assert len(records) == 1
    assert gone["auditRecord"].endswith(records[0].metadata.name)
    kept = json.loads(records[0].data["history.json"])
    assert kept[0]["version"] == "1.0.0"
    assert kept[0]["deployedBy"] == team.name("alice")
    usage = json.loads(records[0].data["usage.json"])
    assert usage["apiKeys"][0]["name"] == "ci"

    deletion = json.loads(records[0].data["deletion.json"])
    assert deletion["deletedBy"] == team.name("alice")
    assert deletion["deletedAt"]


def test_rbac_decides_through_the_facade_and_through_kubectl(
    api: client.ApiClient, namespace: str, team: Users, facade: RunningFacade, cluster: E2ECluster
) -> None:
    http = facade.client
    refused(http.get(f"{mgmt(namespace)}/apps"), 401, "token")
    refused(http.get(f"{mgmt(namespace)}/apps", headers={"Authorization": "Bearer not-a-token"}), 401)
    # mallory has no Dockyard role: refused on both paths
    refused(
        http.post(f"{mgmt(namespace)}/apps", json={"name": "bot"}, headers=team.headers("mallory")), 403, "forbidden"
    )
    out = kubectl(cluster, "-n", namespace, "--as", team.name("mallory"), "get", "apps.dockyard.dev", check=False)
    assert "Forbidden" in out
    # alice (editor) may, on both paths
    ok(http.post(f"{mgmt(namespace)}/apps", json={"name": "bot"}, headers=team.headers("alice")), 201)
    assert "bot" in kubectl(cluster, "-n", namespace, "--as", team.name("alice"), "get", "apps.dockyard.dev")
    wait_for(lambda: environment(api, namespace, "bot-draft"), timeout=30, what="the draft environment")
    # vic (viewer) reads but cannot deploy, create versions or manage keys
    vic = team.headers("vic")
    assert ok(http.get(f"{mgmt(namespace)}/apps/bot", headers=vic))["name"] == "bot"
    refused(http.post(f"{mgmt(namespace)}/apps/bot/versions", json={"version": "1.0.0", "name": "x"}, headers=vic), 403)
    refused(
        http.post(f"{mgmt(namespace)}/environments/bot-draft/apikeys", json={"name": "x"}, headers=vic),
        403,
        "environments/apikeys",
    )
    refused(http.get(f"{mgmt(namespace)}/environments/bot-draft/apikeys", headers=vic), 403)
    deploy = http.post(f"{mgmt(namespace)}/environments/bot-draft/deploy", json={"version": "1.0.0"}, headers=vic)
    refused(deploy, 403, "environments/deploy")
    out = kubectl(cluster, "-n", namespace, "--as", team.name("vic"), "delete", "environment", "bot-draft", check=False)
    assert "Forbidden" in out


def test_first_run_creates_the_demo_app_once_and_a_key_that_works(
    api: client.ApiClient, namespace: str, facade: RunningFacade, tmp_path: Path
) -> None:
    first = ensure_demo(api, tmp_path, facade.url, namespace=namespace)
    assert first.new_key
    assert first.key_file.read_text().strip() == first.new_key
    assert first.key_file.stat().st_mode & 0o777 == 0o600
    again = ensure_demo(api, tmp_path, facade.url, namespace=namespace)
    assert again.new_key is None  # idempotent: the App exists and the key in the file still works
    apps = client.CustomObjectsApi(api).list_namespaced_custom_object("dockyard.dev", "v1alpha1", namespace, "apps")
    assert [a["metadata"]["name"] for a in apps["items"]] == ["demo"]
    probe = f"{first.base_url.removeprefix(facade.url)}/api/public/dock-status/{uuid.uuid4()}"
    refused(facade.client.get(probe, headers={"x-api-key": first.new_key}), 404, "no job")
    first.key_file.write_text("dky_revokedorlost_xxxxxxxxxxxxxxxxxxxxxxxx\n")
    fresh = ensure_demo(api, tmp_path, facade.url, namespace=namespace)
    assert fresh.new_key
    assert fresh.new_key != first.new_key
