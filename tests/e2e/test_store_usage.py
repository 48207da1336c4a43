"""Usage statistics and rate limits end to end: the operator and the facade on the real local control
plane, a bot served by the scripted model server, spec.rateLimits enforced with 429 + Retry-After, the
checklist item computed from it, the usage endpoint of the management API (RBAC through a real
Kubernetes token), the summary on the Environment's status (kubectl describe), and the statistics KEPT
after the environment is deleted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from dockyard_api.settings import ApiSettings
from tests.support.cluster import E2ECluster
from tests.support.dockyard import get
from tests.support.runners import RunningFacade, run_facade, run_operator
from tests.support.runtime_app import answered, deploy_bot
from tests.support.scripted_model import Reply, ScriptedModel, scripted_model
from tests.support.waiting import wait_for


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    with scripted_model() as server:
        yield server


@pytest.fixture(scope="module")
def facade(cluster: E2ECluster, crds: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningFacade]:
    state = tmp_path_factory.mktemp("usage")
    settings = ApiSettings(
        api_key_cache_seconds=0,
        token_cache_seconds=0,
        last_used_interval_seconds=0,
        sweep_interval_seconds=0,
        usage_summary_seconds=0.5,
        model_store=state / "model-store",
        endpoint_mode="local",
    )
    with run_operator(env={"DOCKYARD_OPERATOR_ENVIRONMENT_INTERVAL_SECONDS": "1"}), run_facade(settings) as running:
        yield running


def admin_token(api: client.ApiClient, namespace: str) -> str:
    """A real Kubernetes token of a ServiceAccount that may administer the namespace."""
    core = client.CoreV1Api(api)
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="ops")))
    binding = {
        "metadata": {"name": "ops-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "ops", "namespace": namespace}],
    }
    client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(namespace, binding)
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))
    token: str = core.create_namespaced_service_account_token("ops", namespace, request).status.token
    return token


def checklist_state(api: client.ApiClient, namespace: str, env: str) -> str | None:
    items = (get(api, namespace, "environments", env).get("status") or {}).get("checklist") or []
    return next((i["state"] for i in items if i["item"] == "Rate limits set"), None)


def test_rate_limits_usage_statistics_and_their_survival_after_delete(
    api: client.ApiClient, namespace: str, facade: RunningFacade, model: ScriptedModel
) -> None:
    bot = deploy_bot(api, namespace, model, "bot-prod", rateLimits={"requestsPerMinute": 3})
    http = facade.client
    assert wait_for(lambda: checklist_state(api, namespace, "bot-prod") == "Done", timeout=30, what="checklist")
    assert wait_for(lambda: checklist_state(api, namespace, "bot-draft") == "NotDone", timeout=30, what="draft")

    second = datetime.now(UTC).second
    if second > 40:  # one-minute windows: count well inside a minute
        time.sleep(61 - second)
    model.script(*(Reply(text=f"answer {i}", usage=(10, 4)) for i in range(3)))
    answered(http, bot, {"message": "one", "session_id": "s1"})  # may wait for the facade's caches
    answered(http, bot, {"message": "two", "session_id": "s1"})
    third = http.post(bot.execute, headers=bot.headers, json={"message": "three", "session_id": "s1"})
    assert third.status_code == 200, third.text
    limited = http.post(bot.execute, headers=bot.headers, json={"message": "over", "session_id": "s1"})
    assert limited.status_code == 429, limited.text
    assert 1 <= int(limited.headers["Retry-After"]) <= 60
    error: dict[str, Any] = limited.json()["error"]
    assert error["code"] == "rate_limited"
    assert "requestsPerMinute" in error["message"]

    token = admin_token(api, namespace)
    usage_url = f"/api/v1/namespaces/{namespace}/environments/bot-prod/usage"
    answer = http.get(usage_url, headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    totals = answer.json()["totals"]
    answered_calls = totals["requests"]
    assert answered_calls >= 3  # more when the minute turned between the calls (a fresh window)
    assert totals["errors"] == 0
    assert totals["rateLimited"] >= 1
    assert (totals["tokensIn"], totals["tokensOut"]) == (10 * answered_calls, 4 * answered_calls)
    assert http.get(usage_url).status_code == 401
    assert http.get(usage_url, headers={"Authorization": "Bearer not-a-token"}).status_code == 401

    # the summary kubectl describe shows
    def summary() -> dict[str, Any] | None:
        found: dict[str, Any] | None = (get(api, namespace, "environments", "bot-prod").get("status") or {}).get(
            "usage"
        )
        return found if found and found["today"]["requests"] == answered_calls else None

    shown = wait_for(summary, timeout=30, what="status.usage")
    assert set(shown) == {"day", "today", "last30Days", "updatedAt", "versions"}
    assert shown["last30Days"]["tokensIn"] == totals["tokensIn"]

    # delete the environment: the statistics stay
    deleted = http.delete(
        f"/api/v1/namespaces/{namespace}/environments/bot-prod",
        params={"confirm": "bot-prod"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert deleted.status_code == 202, deleted.text
    wait_for(lambda: not _exists(api, namespace, "bot-prod"), timeout=30, what="the environment to go")
    after = http.get(usage_url, headers={"Authorization": f"Bearer {token}"})
    assert after.status_code == 200, after.text
    assert after.json()["totals"] == totals


def _exists(api: client.ApiClient, namespace: str, name: str) -> bool:
    try:
        get(api, namespace, "environments", name)
        return True
    except client.ApiException as exc:
        if exc.status == 404:
            return False
        raise
