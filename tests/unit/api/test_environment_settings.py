"""PATCH .../environments/{environment}/settings: a merge patch of the settings members of the
Environment's spec, validated like the Environment, with the field named; an Event SettingsChanged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dockyard_api.app import create_app
from dockyard_api.management.environments.service import changed_members
from dockyard_api.settings import ApiSettings
from dockyard_core.mergepatch import merge_patch
from tests.support.fakekube import FakeKube, fake_kube

NS = "team-a"
MGMT = f"/api/v1/namespaces/{NS}"
CUSTOM = f"/apis/dockyard.dev/v1alpha1/namespaces/{NS}"
ENV = f"{CUSTOM}/environments/bot-production"
SETTINGS = f"{MGMT}/environments/bot-production/settings"
ALICE = {"Authorization": "Bearer alice-token"}


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[tuple[FakeKube, TestClient]]:
    with fake_kube(tmp_path) as (state, kubeconfig):
        settings = ApiSettings(
            kubeconfig=kubeconfig, model_store=tmp_path / "store", sweep_interval_seconds=0, watch_models=False
        )
        with TestClient(create_app(settings)) as http:
            spec: dict[str, Any] = {
                "appRef": "bot",
                "displayName": "production",
                "widget": {"allowedOrigins": ["https://old.example.com"], "tokenTtlSeconds": 600},
                "rateLimits": {"requestsPerMinute": 10},
                "configuration": {"tone": "formal", "lang": "en"},
            }
            state.put(ENV, {"apiVersion": "dockyard.dev/v1alpha1", "kind": "Environment", "spec": spec, "status": {}})
            yield state, http


def events(state: FakeKube) -> list[dict[str, Any]]:
    return [
        body for method, path, body in state.requests if method == "POST" and path.split("?")[0].endswith("/events")
    ]


def test_only_the_members_sent_change_and_an_event_names_who_and_what(kube: tuple[FakeKube, TestClient]) -> None:
    state, http = kube
    body = {
        "access": {"webClient": "public"},
        "widget": {"allowedOrigins": ["https://shop.example.com", "http://localhost:8000"]},
        "rateLimits": {"requestsPerMinute": None, "tokensPerDay": 5000},
        "configuration": {"tone": "friendly", "lang": None},
    }
    resp = http.patch(SETTINGS, json=body, headers=ALICE)
    assert resp.status_code == 200, resp.text
    spec = state.get(ENV)["spec"]  # type: ignore[index]
    assert spec["access"] == {"webClient": "public"}
    # a merge patch: the token lifetime not sent stays
    assert spec["widget"] == {
        "allowedOrigins": ["https://shop.example.com", "http://localhost:8000"],
        "tokenTtlSeconds": 600,
    }
    assert spec["rateLimits"] == {"tokensPerDay": 5000}
    assert spec["configuration"] == {"tone": "friendly"}
    view = resp.json()
    assert view["access"] == {"webClient": "public"}
    assert view["widget"]["allowedOrigins"] == ["https://shop.example.com", "http://localhost:8000"]
    assert view["rateLimits"] == {"tokensPerDay": 5000}
    assert view["configuration"] == {"tone": "friendly"}
    [event] = events(state)
    assert event["reason"] == "SettingsChanged"
    assert event["involvedObject"]["name"] == "bot-production"
    assert event["message"].startswith("settings changed by alice: ")
    for member in ("access.webClient=\"public\"", "widget.allowedOrigins=", "rateLimits.requestsPerMinute=null",
                   "rateLimits.tokensPerDay=5000", "configuration.lang=null"):  # fmt: skip
        assert member in event["message"]


def test_oidc_members_are_merged_into_the_stored_provider(kube: tuple[FakeKube, TestClient]) -> None:
    state, http = kube
    oidc = {"issuer": "https://id.example.com", "clientId": "web", "clientSecretRef": "web-oidc"}
    resp = http.patch(SETTINGS, json={"access": {"webClient": "oidc", "oidc": oidc}}, headers=ALICE)
    assert resp.status_code == 200, resp.text
    resp = http.patch(SETTINGS, json={"access": {"oidc": {"clientSecretRef": None, "clientId": "web2"}}}, headers=ALICE)
    assert resp.status_code == 200, resp.text
    assert state.get(ENV)["spec"]["access"] == {  # type: ignore[index]
        "webClient": "oidc",
        "oidc": {"issuer": "https://id.example.com", "clientId": "web2"},
    }
    assert resp.json()["access"]["oidc"]["clientId"] == "web2"
    # the deprecated signIn is still accepted (stored Environments carry it)
    assert http.patch(SETTINGS, json={"access": {"webClient": "signIn"}}, headers=ALICE).status_code == 200


def test_null_removes_a_member(kube: tuple[FakeKube, TestClient]) -> None:
    state, http = kube
    resp = http.patch(SETTINGS, json={"rateLimits": None}, headers=ALICE)
    assert resp.status_code == 200, resp.text
    assert "rateLimits" not in state.get(ENV)["spec"]  # type: ignore[index]
    assert resp.json()["rateLimits"] is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"widget": {"allowedOrigins": ["https://shop.example.com/"]}}, "body.widget.allowedOrigins.0"),
        ({"widget": {"allowedOrigins": ["ok.example.com"]}}, "body.widget.allowedOrigins.0"),
        ({"widget": {"tokenTtlSeconds": 10}}, "body.widget.tokenTtlSeconds"),
        ({"widget": {"requestsPerMinutePerToken": 0}}, "body.widget.requestsPerMinutePerToken"),
        ({"access": {"webClient": "everyone"}}, "body.access.webClient"),
        ({"rateLimits": {"requestsPerMinute": 0}}, "body.rateLimits.requestsPerMinute"),
        ({"rateLimits": {"perHour": 5}}, "body.rateLimits.perHour"),
        ({"appVersion": "1.0.0"}, "body.appVersion"),
        ({"access": {"webClient": "oidc"}}, "body.access.oidc"),  # the CEL rule's twin, on the merged spec
        ({"access": {"webClient": "oidc", "oidc": {"clientId": "web"}}}, "body.access.oidc.issuer"),
        ({"access": {"oidc": {"issuer": "http://id.example.com"}}}, "body.access.oidc.issuer"),  # http elsewhere
        ({"access": {"oidc": {"issuer": "https://id.example.com", "clientId": "a b"}}}, "body.access.oidc.clientId"),
    ],
)
def test_a_bad_setting_is_refused_with_the_field_named_and_nothing_changes(
    kube: tuple[FakeKube, TestClient], body: dict[str, Any], field: str
) -> None:
    state, http = kube
    before = state.get(ENV)
    resp = http.patch(SETTINGS, json=body, headers=ALICE)
    assert resp.status_code == 422, resp.text
    assert field in [d["field"] for d in resp.json()["error"]["details"]]
    assert state.get(ENV) == before
    assert events(state) == []


def test_an_empty_change_is_refused(kube: tuple[FakeKube, TestClient]) -> None:
    _, http = kube
    resp = http.patch(SETTINGS, json={}, headers=ALICE)
    assert resp.status_code == 422
    assert "nothing to change" in resp.json()["error"]["message"]


def test_settings_need_a_token_and_an_existing_environment(kube: tuple[FakeKube, TestClient]) -> None:
    _, http = kube
    assert http.patch(SETTINGS, json={"access": {"webClient": "public"}}).status_code == 401
    missing = http.patch(f"{MGMT}/environments/nope/settings", json={"access": {"webClient": "public"}}, headers=ALICE)
    assert missing.status_code == 404


def test_merge_patch_and_its_changed_members() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}, "d": 3}, {"a": {"b": None, "e": [1]}, "d": None}) == {
        "a": {"c": 2, "e": [1]}
    }
    assert changed_members({"widget": {"allowedOrigins": ["x"]}, "rateLimits": None, "configuration": {}}) == [
        ("widget.allowedOrigins", ["x"]),
        ("rateLimits", None),
        ("configuration", {}),
    ]
