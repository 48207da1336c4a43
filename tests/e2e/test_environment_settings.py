"""An environment's settings changed through the management API, as the calling user, against the real
local control plane with the operator (and its admission webhooks) running: the change lands in the
Environment, an Event SettingsChanged names who changed what (``kubectl describe`` shows it), a bad value
is refused with the field named, and RBAC decides."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kubernetes import client

from dockyard_api.settings import ApiSettings
from tests.support.cluster import E2ECluster
from tests.support.dockyard import get_or_empty as get
from tests.support.runners import RunningFacade, RunningOperator, run_facade, run_operator
from tests.support.users import Users, kubectl
from tests.support.waiting import wait_for


@pytest.fixture(scope="module")
def operator(cluster: E2ECluster, crds: None) -> Iterator[RunningOperator]:
    with run_operator(env={"DOCKYARD_OPERATOR_ENVIRONMENT_INTERVAL_SECONDS": "1"}) as running:
        yield running


@pytest.fixture(scope="module")
def facade(cluster: E2ECluster, operator: RunningOperator) -> Iterator[RunningFacade]:
    with run_facade(ApiSettings(token_cache_seconds=0)) as running:
        yield running


def answer(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def test_settings_change_through_the_api_are_recorded_and_validated(
    api: client.ApiClient, namespace: str, team: Users, facade: RunningFacade, cluster: E2ECluster
) -> None:
    http, alice = facade.client, team.headers("alice")
    mgmt = f"/api/v1/namespaces/{namespace}"
    answer(http.post(f"{mgmt}/apps", json={"name": "bot"}, headers=alice), 201)
    wait_for(lambda: get(api, namespace, "environments", "bot-draft"), timeout=30, what="the draft environment")
    settings = f"{mgmt}/environments/bot-draft/settings"

    body = {
        "access": {"webClient": "public"},
        "widget": {"allowedOrigins": ["https://shop.example.com"], "tokenTtlSeconds": 300},
        "rateLimits": {"requestsPerMinute": 30},
        "configuration": {"greeting": "Hello"},
    }
    view = answer(http.patch(settings, json=body, headers=alice))
    assert view["access"] == {"webClient": "public"}
    assert view["widget"]["allowedOrigins"] == ["https://shop.example.com"]
    assert view["rateLimits"] == {"requestsPerMinute": 30}
    spec = get(api, namespace, "environments", "bot-draft")["spec"]
    assert spec["access"] == {"webClient": "public"}
    widget = spec["widget"]  # with the CRD's defaults of the limits not sent
    assert (widget["allowedOrigins"], widget["tokenTtlSeconds"]) == (["https://shop.example.com"], 300)
    assert spec["rateLimits"] == {"requestsPerMinute": 30}
    assert spec["configuration"] == {"greeting": "Hello"}

    # a merge patch: another origin list, the token lifetime stays
    answer(http.patch(settings, json={"widget": {"allowedOrigins": ["http://localhost:8000"]}}, headers=alice))
    widget = get(api, namespace, "environments", "bot-draft")["spec"]["widget"]
    assert (widget["allowedOrigins"], widget["tokenTtlSeconds"]) == (["http://localhost:8000"], 300)

    who = team.name("alice")
    events = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector="involvedObject.name=bot-draft")
    changed = [e.message for e in events.items if e.reason == "SettingsChanged"]
    assert len(changed) == 2, changed
    assert any(f"by {who}" in m and 'access.webClient="public"' in m for m in changed), changed
    described = kubectl(cluster, "-n", namespace, "describe", "environment", "bot-draft")
    assert "SettingsChanged" in described
    assert "widget.allowedOrigins" in described

    # a bad origin (a path) is refused naming the field; nothing changes
    bad = http.patch(settings, json={"widget": {"allowedOrigins": ["https://shop.example.com/page"]}}, headers=alice)
    refused = answer(bad, 422)
    assert "body.widget.allowedOrigins.0" in [d["field"] for d in refused["error"]["details"]]
    assert "body.widget.allowedOrigins.0" in refused["error"]["message"]
    assert get(api, namespace, "environments", "bot-draft")["spec"]["widget"]["allowedOrigins"] == [
        "http://localhost:8000"
    ]

    # RBAC decides: a viewer may not update the Environment
    vic = http.patch(settings, json={"access": {"webClient": "disabled"}}, headers=team.headers("vic"))
    assert answer(vic, 403)["error"]["code"] == "forbidden"
    assert get(api, namespace, "environments", "bot-draft")["spec"]["access"] == {"webClient": "public"}
