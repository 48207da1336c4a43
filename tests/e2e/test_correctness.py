"""What a careful user hits next (issue 19), on the real control plane with the real operator and facade:
deleting an environment releases what its public API deployed, a draft edit reaches the draft
environment within a second, the tool-deletion guard covers the draft, and ModelDeployment names that
cannot be label values are refused at admission."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from dockyard_api.settings import ApiSettings
from dockyard_core.resources.v1alpha1.tool import tool_deployment_name
from tests.support.cluster import E2ECluster
from tests.support.dockyard import create, get, hub_model, patch
from tests.support.public import environment_with_key, wait_model_ready
from tests.support.runners import RunningFacade, RunningOperator, run_facade, run_operator
from tests.support.waiting import holds_for, wait_for


@pytest.fixture(scope="module")
def operator(cluster: E2ECluster, crds: None) -> Iterator[RunningOperator]:
    with run_operator() as running:
        yield running


@pytest.fixture(scope="module")
def facade(operator: RunningOperator) -> Iterator[RunningFacade]:
    with run_facade(ApiSettings(api_key_cache_seconds=0)) as running:
        yield running


def tool(api: client.ApiClient, namespace: str, name: str, version: str) -> None:
    spec = {"name": name, "version": version,
            "container": {"image": f"registry.example.com/tools/{name}:{version}", "port": 8080}}  # fmt: skip
    create(api, namespace, "tools", "Tool", f"{name}-{version}", spec)


def exists(api: client.ApiClient, namespace: str, plural: str, name: str) -> bool:
    try:
        obj = get(api, namespace, plural, name)
    except client.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return not obj["metadata"].get("deletionTimestamp")


MODEL_BODY: dict[str, Any] = {
    "deviceType": "g5.xlarge",
    "hyperParameters": {"temperature": 0.7, "maxTokens": 256, "topP": 0.9, "topK": 40},
    "scalingParameters": {"minReplicas": 1, "maxReplicas": 1},
}


def test_deleting_an_environment_releases_what_its_public_api_deployed_and_keeps_the_model(
    api: client.ApiClient, namespace: str, facade: RunningFacade
) -> None:
    http = facade.client
    hub_model(api, namespace, "model")
    wait_model_ready(api, namespace, "model")
    tool(api, namespace, "search", "1.0.0")
    staging = environment_with_key(api, namespace, environment="staging")
    production = environment_with_key(api, namespace, environment="production")

    def deploy(env: Any, name: str) -> None:
        response = http.post(f"{env.base}/api/public/models/model/deploy", params={"modelType": "openSource"},
                             json={**MODEL_BODY, "name": name}, headers=env.headers)  # fmt: skip
        assert response.status_code == 200, response.text

    deploy(staging, "staging-only")
    deploy(staging, "shared")
    deploy(production, "shared")  # the same deployment, deployed through a second environment
    tool_response = http.post(f"{staging.base}/api/public/tools/search-1.0.0/deploy", json={"isAsync": True},
                              headers=staging.headers)  # fmt: skip
    assert tool_response.status_code == 200, tool_response.text
    tdep = tool_deployment_name(staging.environment, "search", "1.0.0")
    owners = {o["name"] for o in get(api, namespace, "modeldeployments", "shared")["metadata"]["ownerReferences"]}
    assert owners == {staging.environment, production.environment}

    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "dockyard.dev", "v1alpha1", namespace, "environments", staging.environment
    )
    wait_for(lambda: not exists(api, namespace, "modeldeployments", "staging-only"), timeout=60,
             what="the staging-only deployment to be released")  # fmt: skip
    wait_for(lambda: not exists(api, namespace, "tooldeployments", tdep), timeout=60,
             what="the staging tool deployment to be released")  # fmt: skip

    def kept() -> None:
        assert exists(api, namespace, "modeldeployments", "shared"), "production still deploys it"
        assert exists(api, namespace, "models", "model"), "an imported Model belongs to the namespace"

    holds_for(kept, 3)
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "dockyard.dev", "v1alpha1", namespace, "environments", production.environment
    )
    wait_for(lambda: not exists(api, namespace, "modeldeployments", "shared"), timeout=60,
             what="the shared deployment to go with its last environment")  # fmt: skip
    assert exists(api, namespace, "models", "model")


def test_a_draft_edit_reaches_the_draft_environment_within_a_second(
    api: client.ApiClient, namespace: str, operator: RunningOperator
) -> None:
    tool(api, namespace, "weather", "1.0.0")
    create(api, namespace, "apps", "App", "bot", {})
    wait_for(
        lambda: (
            (get(api, namespace, "environments", "bot-draft").get("status") or {}).get("phase") == "Active"
            if exists(api, namespace, "environments", "bot-draft")
            else None
        ),
        timeout=30,
        what="the draft environment",
    )
    time.sleep(0.5)  # let the draft environment's own events settle: the App's change is what must act
    edited = time.monotonic()
    patch(api, namespace, "apps", "bot", {"spec": {"toolVersions": [{"name": "weather", "version": "1.0.0"}]}})
    name = tool_deployment_name("bot-draft", "weather", "1.0.0")
    wait_for(lambda: exists(api, namespace, "tooldeployments", name), timeout=15, interval=0.05,
             what="the draft's new tool deployment")  # fmt: skip
    took = time.monotonic() - edited
    print(f"\n[correctness] draft edit reached the draft environment in {took:.2f}s")
    assert took < 1.0, f"the draft edit took {took:.2f}s to reach the draft environment"


def test_a_tool_the_draft_uses_cannot_be_deleted(
    api: client.ApiClient, namespace: str, operator: RunningOperator
) -> None:
    tool(api, namespace, "weather", "2.0.0")
    create(api, namespace, "apps", "App", "bot", {"toolVersions": [{"name": "weather", "version": "2.0.0"}]})
    wait_for(lambda: exists(api, namespace, "environments", "bot-draft"), timeout=30, what="the draft environment")
    with pytest.raises(client.ApiException) as refused:
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            "dockyard.dev", "v1alpha1", namespace, "tools", "weather-2.0.0"
        )
    assert refused.value.status == 409, refused.value.body
    assert "draft of app bot" in refused.value.body
    assert "bot-draft" in refused.value.body
    # once the draft no longer uses it, it can go
    patch(api, namespace, "apps", "bot", {"spec": {"toolVersions": []}})
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "dockyard.dev", "v1alpha1", namespace, "tools", "weather-2.0.0"
    )


def test_model_deployment_names_longer_than_63_characters_are_refused_naming_the_limit(
    api: client.ApiClient, namespace: str, crds: None
) -> None:
    spec = {"modelRef": "m", "modelType": "openSource", "name": "m", "deviceType": "g5.xlarge"}
    with pytest.raises(client.ApiException) as refused:
        create(api, namespace, "modeldeployments", "ModelDeployment", "m" * 64, spec)
    assert refused.value.status == 422
    assert "at most 63 characters" in refused.value.body
    create(api, namespace, "modeldeployments", "ModelDeployment", "m" * 63, spec)  # the limit itself is fine
