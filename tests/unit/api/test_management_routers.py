"""The management routers (apps, versions, environments) against a fake Kubernetes API at the HTTP
level (tests/support/fakekube.py): fast checks of what each call answers and what it asks of the API
server. Admission webhooks and the operator are not here: the e2e suite runs them on the real one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dockyard_api.app import create_app
from dockyard_api.settings import ApiSettings
from dockyard_core.resources.v1alpha1 import DEPLOY_REQUEST_ANNOTATION
from tests.support.fakekube import FakeKube, fake_kube

NS = "team-a"
MGMT = f"/api/v1/namespaces/{NS}"
CUSTOM = f"/apis/dockyard.dev/v1alpha1/namespaces/{NS}"
ALICE = {"Authorization": "Bearer alice-token"}


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[tuple[FakeKube, TestClient]]:
    with fake_kube(tmp_path) as (state, kubeconfig):
        settings = ApiSettings(
            kubeconfig=kubeconfig, model_store=tmp_path / "store", sweep_interval_seconds=0, watch_models=False
        )
        with TestClient(create_app(settings)) as http:
            yield state, http


def environment(
    state: FakeKube, name: str, app: str = "bot", version: str | None = None, status: dict[str, Any] | None = None
) -> None:
    spec: dict[str, Any] = {"appRef": app, "displayName": name.removeprefix(f"{app}-")}
    if version:
        spec["appVersion"] = version
    state.put(
        f"{CUSTOM}/environments/{name}",
        {"apiVersion": "dockyard.dev/v1alpha1", "kind": "Environment", "spec": spec, "status": status or {}},
    )


def entry(version: str, status: str, healthy: bool | None, at: str = "2026-11-01T10:00:00Z") -> dict[str, Any]:
    out: dict[str, Any] = {"version": version, "deployedAt": at, "deployedBy": "alice", "status": status}
    if healthy is not None:
        out["healthy"] = healthy
    return out


def last_patch(state: FakeKube, path: str) -> Any:
    patches = [body for method, p, body in state.requests if method == "PATCH" and p.split("?")[0] == path]
    assert patches, f"no PATCH of {path}"
    return patches[-1]


# --- the environment list and the version preview -------------------------------------------------


def test_the_environment_list_shows_the_draft_and_every_created_environment_of_the_app(
    kube: tuple[FakeKube, TestClient],
) -> None:
    state, http = kube
    environment(state, "bot-draft")
    environment(state, "bot-staging", version="1.0.0", status={"activeVersion": "1.0.0", "phase": "Active"})
    environment(state, "other-draft", app="other")
    resp = http.get(f"{MGMT}/apps/bot/environments", headers=ALICE)
    assert resp.status_code == 200, resp.text
    items = {e["name"]: e for e in resp.json()["items"]}
    assert set(items) == {"draft", "staging"}
    assert items["draft"]["appVersion"] == "draft"
    assert items["staging"]["activeVersion"] == "1.0.0"
    assert items["staging"]["phase"] == "Active"


def test_version_preview_shows_the_version_and_unknown_ones_are_404(kube: tuple[FakeKube, TestClient]) -> None:
    state, http = kube
    spec = {"appRef": "bot", "version": "1.0.0", "displayName": "First", "description": "d",
            "agents": [{"name": "a", "version": "1.0.0"}],
            "toolVersions": [{"name": "t", "version": "1.0.0"}]}  # fmt: skip
    state.put(f"{CUSTOM}/appversions/bot-1.0.0", {"spec": spec, "status": {"deployedIn": ["bot-production"]}})
    resp = http.get(f"{MGMT}/apps/bot/versions/1.0.0", headers=ALICE)
    assert resp.status_code == 200, resp.text
    view = resp.json()
    assert (view["version"], view["name"], view["deployedIn"]) == ("1.0.0", "First", ["bot-production"])
    assert view["toolVersions"] == [{"name": "t", "version": "1.0.0"}]
    missing = http.get(f"{MGMT}/apps/bot/versions/2.0.0", headers=ALICE)
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "app 'bot' has no version 2.0.0"
    bad = http.get(f"{MGMT}/apps/bot/versions/v1", headers=ALICE)
    assert bad.status_code == 422
    assert bad.json()["error"]["code"] == "invalid_request"


def test_management_calls_need_a_token_and_permission(kube: tuple[FakeKube, TestClient]) -> None:
    state, http = kube
    environment(state, "bot-production", version="1.0.0")
    assert http.get(f"{MGMT}/apps/bot/environments").status_code == 401
    assert http.get(f"{MGMT}/apps/bot/environments", headers={"Authorization": "Bearer nope"}).status_code == 401
    state.denied.add(("alice", "environments/deploy"))
    resp = http.post(f"{MGMT}/environments/bot-production/deploy", json={"version": "1.1.0"}, headers=ALICE)
    assert resp.status_code == 403
    assert "environments/deploy" in resp.json()["error"]["message"]


# --- deploy and redeploy ---------------------------------------------------------------------------


def test_deploying_another_version_is_202_with_a_deploy_request(kube: tuple[FakeKube, TestClient]) -> None:
    state, http = kube
    environment(state, "bot-production", version="1.0.0", status={"activeVersion": "1.0.0", "phase": "Active"})
    resp = http.post(f"{MGMT}/environments/bot-production/deploy", json={"version": "1.1.0"}, headers=ALICE)
    assert resp.status_code == 202, resp.text
    assert "deploying version 1.1.0" in resp.json()["message"]
    patch = last_patch(state, f"{CUSTOM}/environments/bot-production")
    assert patch["spec"] == {"appVersion": "1.1.0"}
    assert patch["metadata"]["annotations"][DEPLOY_REQUEST_ANNOTATION].startswith("Deploy ")


def test_redeploying_the_active_version_is_200_says_so_and_is_a_new_deployment(
    kube: tuple[FakeKube, TestClient],
) -> None:
    state, http = kube
    status = {"activeVersion": "1.0.0", "phase": "Active", "history": [entry("1.0.0", "Active", True)]}
    environment(state, "bot-production", version="1.0.0", status=status)
    resp = http.post(f"{MGMT}/environments/bot-production/deploy", json={"version": "1.0.0"}, headers=ALICE)
    assert resp.status_code == 200, resp.text
    message = resp.json()["message"]
    assert "version 1.0.0 is already the active version of bot-production" in message
    assert "Redeploy" in message
    first = last_patch(state, f"{CUSTOM}/environments/bot-production")["metadata"]["annotations"]
    assert first[DEPLOY_REQUEST_ANNOTATION].startswith("Redeploy ")
    http.post(f"{MGMT}/environments/bot-production/deploy", json={"version": "1.0.0"}, headers=ALICE)
    second = last_patch(state, f"{CUSTOM}/environments/bot-production")["metadata"]["annotations"]
    assert second[DEPLOY_REQUEST_ANNOTATION] != first[DEPLOY_REQUEST_ANNOTATION]  # each one is recorded


# --- rollback --------------------------------------------------------------------------------------


def rollback(http: TestClient, version: str) -> Any:
    return http.post(
        f"{MGMT}/environments/bot-production/rollback", json={"version": version, "confirm": True}, headers=ALICE
    )


def test_rollback_to_the_active_version_is_409_even_when_it_is_also_previous(
    kube: tuple[FakeKube, TestClient],
) -> None:
    state, http = kube
    history = [entry("1.0.0", "Active", True), entry("1.1.0", "Previous", True), entry("1.0.0", "Previous", True)]
    environment(state, "bot-production", version="1.0.0", status={"activeVersion": "1.0.0", "history": history})
    resp = rollback(http, "1.0.0")
    assert resp.status_code == 409, resp.text
    assert "is the active version of bot-production" in resp.json()["error"]["message"]
    assert resp.json()["error"]["details"]["previousWorkingVersions"] == ["1.0.0", "1.1.0"]
    assert not [r for r in state.requests if r[0] == "PATCH"]


def test_rollback_to_a_version_that_never_became_healthy_is_409(kube: tuple[FakeKube, TestClient]) -> None:
    state, http = kube
    history = [entry("1.2.0", "Active", True), entry("1.1.0", "Previous", False), entry("1.0.0", "Previous", True)]
    environment(state, "bot-production", version="1.2.0", status={"activeVersion": "1.2.0", "history": history})
    resp = rollback(http, "1.1.0")
    assert resp.status_code == 409, resp.text
    assert "never became healthy" in resp.json()["error"]["message"]
    assert resp.json()["error"]["details"]["previousWorkingVersions"] == ["1.0.0"]
    ok = rollback(http, "1.0.0")
    assert ok.status_code == 202, ok.text
    assert "rolling back bot-production from 1.2.0 to version 1.0.0" in ok.json()["message"]
    patch = last_patch(state, f"{CUSTOM}/environments/bot-production")
    assert patch["spec"] == {"appVersion": "1.0.0"}
    assert patch["metadata"]["annotations"][DEPLOY_REQUEST_ANNOTATION].startswith("Rollback ")


def test_rollback_only_to_a_version_recorded_healthy(kube: tuple[FakeKube, TestClient]) -> None:
    """A Previous entry whose health was never recorded (not true) is no previous working version."""
    state, http = kube
    history = [entry("1.2.0", "Active", True), entry("1.1.0", "Previous", None)]
    environment(state, "bot-production", version="1.2.0", status={"activeVersion": "1.2.0", "history": history})
    resp = rollback(http, "1.1.0")
    assert resp.status_code == 409, resp.text
    assert "never became healthy" in resp.json()["error"]["message"]
    assert resp.json()["error"]["details"]["previousWorkingVersions"] == []
    assert not [r for r in state.requests if r[0] == "PATCH"]


def test_rollback_to_a_version_not_in_the_history_is_409(kube: tuple[FakeKube, TestClient]) -> None:
    state, http = kube
    environment(state, "bot-production", version="1.0.0", status={"history": [entry("1.0.0", "Active", None)]})
    resp = rollback(http, "0.9.0")
    assert resp.status_code == 409
    assert "not a previous deployment" in resp.json()["error"]["message"]


# --- one policy for bodies -------------------------------------------------------------------------


def test_unknown_fields_of_a_management_body_are_refused_by_name(kube: tuple[FakeKube, TestClient]) -> None:
    _, http = kube
    resp = http.post(
        f"{MGMT}/environments/bot-production/deploy", json={"version": "1.1.0", "force": True}, headers=ALICE
    )
    assert resp.status_code == 422
    assert resp.json()["error"]["details"] == [{"field": "body.force", "message": "Extra inputs are not permitted"}]


# --- create, restore, delete ------------------------------------------------------------------------


def test_creating_an_environment_names_it_after_the_app_and_links_the_version(
    kube: tuple[FakeKube, TestClient],
) -> None:
    state, http = kube
    resp = http.post(
        f"{MGMT}/apps/bot/environments", json={"name": "staging", "description": "QA", "appVersion": "1.0.0"},
        headers=ALICE,
    )  # fmt: skip
    assert resp.status_code == 201, resp.text
    view = resp.json()
    assert (view["name"], view["objectName"], view["appVersion"]) == ("staging", "bot-staging", "1.0.0")
    stored = state.get(f"{CUSTOM}/environments/bot-staging")
    assert stored is not None
    assert stored["spec"] == {"appRef": "bot", "displayName": "staging", "description": "QA", "appVersion": "1.0.0"}
    again = http.post(f"{MGMT}/apps/bot/environments", json={"name": "staging"}, headers=ALICE)
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "conflict"


def test_restore_needs_confirmation_and_overwrites_the_whole_draft(kube: tuple[FakeKube, TestClient]) -> None:
    state, http = kube
    draft = {
        "agents": [{"name": "old", "version": "9.0.0"}],
        "mcpServers": [{"name": "x", "url": "https://x.example.com"}],
    }
    state.put(f"{CUSTOM}/apps/bot", {"spec": draft})
    version = {"appRef": "bot", "version": "1.0.0", "displayName": "First",
               "toolVersions": [{"name": "t", "version": "1.0.0"}]}  # fmt: skip
    state.put(f"{CUSTOM}/appversions/bot-1.0.0", {"spec": version})
    unconfirmed = http.post(f"{MGMT}/apps/bot/restore", json={"version": "1.0.0", "confirm": False}, headers=ALICE)
    assert unconfirmed.status_code == 422
    resp = http.post(f"{MGMT}/apps/bot/restore", json={"version": "1.0.0", "confirm": True}, headers=ALICE)
    assert resp.status_code == 200, resp.text
    draft = resp.json()
    assert (draft["agents"], draft["toolVersions"], draft["mcpServers"]) == (
        [],
        [{"name": "t", "version": "1.0.0"}],
        [],
    )
    assert draft["restoredFrom"] == "1.0.0"


def test_deleting_an_environment_needs_its_name_and_the_draft_cannot_go(kube: tuple[FakeKube, TestClient]) -> None:
    state, http = kube
    environment(state, "bot-production", version="1.0.0")
    environment(state, "bot-draft")
    unconfirmed = http.delete(f"{MGMT}/environments/bot-production", headers=ALICE)
    assert unconfirmed.status_code == 422
    assert "?confirm=bot-production" in unconfirmed.json()["error"]["message"]
    draft = http.delete(f"{MGMT}/environments/bot-draft", params={"confirm": "bot-draft"}, headers=ALICE)
    assert draft.status_code == 409
    resp = http.delete(f"{MGMT}/environments/bot-production", params={"confirm": "production"}, headers=ALICE)
    assert resp.status_code == 202, resp.text
    assert "public API are released" in resp.json()["message"]
    assert state.get(f"{CUSTOM}/environments/bot-production") is None


def test_guardrails_travel_with_versions_and_restores(kube: tuple[FakeKube, TestClient]) -> None:
    """docs/guardrails.md: a version takes the draft's guardrails unless it is given its own, a restore puts
    the version's into the draft (or removes the draft's when it has none), and a draft update without them
    removes them."""
    state, http = kube
    guardrails = {"policies": [{"name": "ids", "type": "pattern", "patterns": ["[0-9]{4}"], "action": "redact"}]}
    state.put(f"{CUSTOM}/apps/bot", {"spec": {"agents": [{"name": "a", "version": "1.0.0"}], "guardrails": guardrails}})
    resp = http.post(f"{MGMT}/apps/bot/versions", json={"version": "1.0.0", "name": "First"}, headers=ALICE)
    assert resp.status_code == 201, resp.text
    assert resp.json()["guardrails"]["policies"][0]["patterns"] == ["[0-9]{4}"]
    own = {"blockMessage": "No.", "policies": [{"name": "inj", "type": "promptInjection"}]}
    resp = http.post(
        f"{MGMT}/apps/bot/versions", json={"version": "1.1.0", "name": "Own", "guardrails": own}, headers=ALICE
    )
    assert resp.status_code == 201, resp.text
    assert resp.json()["guardrails"]["policies"][0]["name"] == "inj"
    bad = {"policies": [{"name": "p", "type": "pattern"}]}  # the schema's rule: a pattern policy needs patterns
    refused = http.post(f"{MGMT}/apps/bot/versions", json={"version": "1.2.0", "name": "Bad", "guardrails": bad},
                        headers=ALICE)  # fmt: skip
    assert refused.status_code == 422, refused.text
    state.put(f"{CUSTOM}/appversions/bot-0.9.0", {"spec": {"appRef": "bot", "version": "0.9.0", "displayName": "Old"}})
    resp = http.post(f"{MGMT}/apps/bot/restore", json={"version": "1.1.0", "confirm": True}, headers=ALICE)
    assert resp.status_code == 200, resp.text
    assert resp.json()["guardrails"]["blockMessage"] == "No."
    assert last_patch(state, f"{CUSTOM}/apps/bot")["spec"]["guardrails"]["policies"][0]["name"] == "inj"
    resp = http.post(f"{MGMT}/apps/bot/restore", json={"version": "0.9.0", "confirm": True}, headers=ALICE)
    assert last_patch(state, f"{CUSTOM}/apps/bot")["spec"]["guardrails"] is None
    assert resp.json().get("guardrails") is None
    resp = http.put(f"{MGMT}/apps/bot/draft", json={"guardrails": own}, headers=ALICE)
    assert resp.status_code == 200, resp.text
    assert last_patch(state, f"{CUSTOM}/apps/bot")["spec"]["guardrails"]["policies"][0]["name"] == "inj"
    resp = http.put(f"{MGMT}/apps/bot/draft", json={"agents": []}, headers=ALICE)
    assert resp.status_code == 200, resp.text
    assert last_patch(state, f"{CUSTOM}/apps/bot")["spec"]["guardrails"] is None
