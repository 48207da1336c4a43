"""Canary by session and automatic rollback (docs/promotion.md) end to end: the operator and the facade on the
real local control plane, an App with two versions told apart by their instructions (the scripted model
answers with the version it was asked as, and plays the faults: errors, a slow engine), real API keys and
users, the conversation database (SQLite file) and the facade's SLO watcher (it holds its Lease)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from kubernetes import client
from typer.testing import CliRunner

from dockyard_api.rollout.lease import Lease
from dockyard_api.runtime.canary import on_canary
from dockyard_client.cli.app import app as cli_app
from dockyard_core import apikeys
from dockyard_core.kubeclient import AsyncKube
from tests.support.cluster import E2ECluster
from tests.support.dockyard import get_or_empty
from tests.support.runners import RunningFacade, run_local_runtime
from tests.support.runtime_app import Bot, deploy_bot
from tests.support.scripted_model import Reply, ScriptedModel, scripted_model
from tests.support.users import Users, kubectl
from tests.support.waiting import wait_for


@dataclass
class Faults:
    """What the scripted model does to the turns of version 2 (its instructions say "v2")."""

    failing: bool = False
    slow: float = 0.0


def _answer(faults: Faults, body: dict[str, Any]) -> Reply:
    system = str(body["messages"][0].get("content") or "")
    version = "v2" if "v2" in system else "v1"
    if version == "v2" and faults.failing:
        return Reply(status=500, raw=b'{"error": "engine fault"}')
    return Reply(text=version, delay=faults.slow if version == "v2" else 0.0)


@pytest.fixture(scope="module")
def faults() -> Faults:
    return Faults()


@pytest.fixture(scope="module")
def model(faults: Faults) -> Iterator[ScriptedModel]:
    with scripted_model() as server:
        server.respond_with(lambda body: _answer(faults, body))
        yield server


@pytest.fixture(scope="module")
def facade(cluster: E2ECluster, crds: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningFacade]:
    with run_local_runtime(
        tmp_path_factory.mktemp("canary"),
        execute_turn_timeout_seconds=10,
        token_cache_seconds=0,
        slo_watch_seconds=0.5,
        slo_lease_namespace="default",
        turn_outcomes_flush_seconds=0.2,
    ) as (_url, running):
        yield running


def mgmt(namespace: str, env: str) -> str:
    return f"/api/v1/namespaces/{namespace}/environments/{env}"


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def refused(response: httpx.Response, status: int, field: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body["error"]) == {"code", "message", "details"}
    if field is not None:
        assert field in str(body["error"]["details"]), body
    return body


def two_versions(api: client.ApiClient, namespace: str, model: ScriptedModel, http: httpx.Client, alice: dict[str, str],
                 env: str, **env_spec: Any) -> Bot:  # fmt: skip
    """The bot's versions 1.0.0 (instructions "v1") and 1.1.0 ("v2"), and environment ``env`` on 1.0.0 with a key."""
    deploy_bot(api, namespace, model)
    base = f"/api/v1/namespaces/{namespace}/apps/bot"
    agent = {"name": "helper", "version": "1.0.0", "model": "tiny"}
    for version, words in (("1.0.0", "You are v1."), ("1.1.0", "You are v2.")):
        ok(http.put(f"{base}/draft", json={"agents": [{**agent, "instructions": words}]}, headers=alice))
        ok(http.post(f"{base}/versions", json={"version": version, "name": words}, headers=alice), 201)
    ok(http.post(f"{base}/environments", json={"name": env.removeprefix("bot-"), "appVersion": "1.0.0"},
                 headers=alice), 201)  # fmt: skip
    if env_spec:
        client.CustomObjectsApi(api).patch_namespaced_custom_object(
            "dockyard.dev", "v1alpha1", namespace, "environments", env, {"spec": env_spec}
        )
    found = wait_for(lambda: active(api, namespace, env, "1.0.0"), timeout=90, what=f"{env} Active on 1.0.0")
    key = apikeys.generate()
    secret = apikeys.key_secret(key=key, name="canary", environment=found, created_by="t", created_at=datetime.now(UTC))
    client.CoreV1Api(api).create_namespaced_secret(namespace, secret)
    return Bot(namespace, env, key.value)


def active(api: client.ApiClient, namespace: str, env: str, version: str) -> dict[str, Any] | None:
    found = get_or_empty(api, namespace, "environments", env)
    status = found.get("status") or {}
    return found if status.get("phase") == "Active" and status.get("activeVersion") == version else None


def turn(http: httpx.Client, bot: Bot, session: str | None = None) -> tuple[str, str, int]:
    """(the version that answered, the session id, the HTTP status)."""
    body: dict[str, Any] = {"message": "hello"}
    if session:
        body["session_id"] = session
    answer = http.post(bot.execute, headers=bot.headers, json=body)
    if answer.status_code != 200:
        return "", session or "", answer.status_code
    data = answer.json()
    return str(data["response"]), str(data["session_id"]), 200


def first_answer(http: httpx.Client, bot: Bot) -> tuple[str, str, int]:
    """A new session's first turn, once the facade knows the environment and its key."""
    return wait_for(lambda: (t := turn(http, bot)) and t[2] == 200 and t, timeout=30, what="a first answer")


def env_obj(api: client.ApiClient, namespace: str, env: str) -> dict[str, Any]:
    return get_or_empty(api, namespace, "environments", env)


def test_canary_by_session_weight_promote_and_abort_from_the_api_and_the_cli(
    api: client.ApiClient, namespace: str, team: Users, facade: RunningFacade, model: ScriptedModel,
    cluster: E2ECluster,
) -> None:  # fmt: skip
    http, alice, vic = facade.client, team.headers("alice"), team.headers("vic")
    bot = two_versions(api, namespace, model, http, alice, "bot-prod")
    canary = f"{mgmt(namespace, 'bot-prod')}/canary"
    # bad input and no right: nothing changes
    refused(http.post(canary, json={"version": "1.1.0", "weight": 101}, headers=alice), 422, "weight")
    refused(http.post(canary, json={"version": "9.9.9", "weight": 10}, headers=alice), 404)
    refused(http.post(canary, json={"version": "1.0.0", "weight": 10}, headers=alice), 409)
    refused(http.patch(canary, json={"weight": 10}, headers=alice), 409)
    refused(http.post(f"{canary}/promote", headers=alice), 409)
    refused(http.post(canary, json={"version": "1.1.0", "weight": 10}, headers=vic), 403)
    first_answer(http, bot)

    started = ok(http.post(canary, json={"version": "1.1.0", "weight": 30}, headers=alice), 202)
    assert started["canary"] == {"appVersion": "1.1.0", "weight": 30}
    wait_for(lambda: "1.1.0 30%" in kubectl(cluster, "-n", namespace, "get", "env", "bot-prod"), timeout=30,
             what="kubectl get env's Canary column")  # fmt: skip
    time.sleep(1.0)  # the facade's informer sees spec.canary (watch-fed)
    sessions: dict[str, str] = {}
    for _ in range(60):
        version, sid, status = turn(http, bot)
        assert status == 200
        sessions[sid] = version
    # the split is the hash's, session by session (the same on every replica), and near the weight
    assert all((v == "v2") == on_canary(sid, 30) for sid, v in sessions.items()), sessions
    assert 5 <= sum(v == "v2" for v in sessions.values()) <= 35
    ok(http.patch(canary, json={"weight": 100}, headers=alice), 202)
    wait_for(lambda: turn(http, bot)[0] == "v2", timeout=30, what="weight 100 seen")
    for sid, version in list(sessions.items())[:20]:  # every turn of a session stays on its version
        assert turn(http, bot, sid)[0] == version
    # usage and errors per version
    usage = wait_for(
        lambda: (u := ok(http.get(f"{mgmt(namespace, 'bot-prod')}/usage", headers=vic)))
        and len(u["versions"]) == 2 and u,
        timeout=20, what="usage per version",
    )  # fmt: skip
    per = {v["version"]: v for v in usage["versions"]}
    assert per["1.1.0"]["requests"] >= sum(v == "v2" for v in sessions.values())
    metrics = http.get("/metrics").text
    assert f'dockyard_execute_version_turns_total{{environment="bot-prod",environment_namespace="{namespace}",' \
           'outcome="ok",version="1.1.0"}' in metrics  # fmt: skip

    promoted = ok(http.post(f"{canary}/promote", headers=alice), 202)
    assert promoted["appVersion"] == "1.1.0"
    assert promoted.get("canary") is None

    def history() -> list[tuple[str, str, str, str | None]] | None:
        found = env_obj(api, namespace, "bot-prod").get("status") or {}
        entries = [(h["version"], h["status"], h["action"], h.get("outcome")) for h in found.get("history") or []]
        return entries if entries and entries[0][:3] == ("1.1.0", "Active", "Promote") else None

    entries = wait_for(history, timeout=60, what="the Promote entry")
    assert ("1.1.0", "Previous", "Canary", "Promoted") in entries
    assert ("1.1.0", "Previous", "Canary", "Reweighted") in entries
    assert "Promoted 1.1.0" in kubectl(cluster, "-n", namespace, "get", "env", "bot-prod")
    v1_session = next(sid for sid, v in sessions.items() if v == "v1")
    assert turn(http, bot, v1_session)[0] == "v1"  # a session keeps the version it started on
    # a canary of the older version from the CLI, its weight changed, then aborted
    cli = {"DOCKYARD_URL": facade.url, "DOCKYARD_NAMESPACE": namespace, "DOCKYARD_TOKEN": team.tokens["alice"],
           "DOCKYARD_CONFIG": "/nonexistent"}  # fmt: skip
    done = CliRunner().invoke(cli_app, ["env", "canary", "start", "bot-prod", "1.0.0", "--weight", "20"], env=cli)
    assert done.exit_code == 0, done.output
    assert "20% of new sessions" in done.output
    done = CliRunner().invoke(cli_app, ["env", "canary", "weight", "bot-prod", "50"], env=cli)
    assert done.exit_code == 0, done.output
    wait_for(lambda: "1.0.0 50%" in kubectl(cluster, "-n", namespace, "get", "env", "bot-prod"), timeout=30,
             what="the second canary running")  # fmt: skip
    done = CliRunner().invoke(cli_app, ["env", "canary", "show", "bot-prod", "--json"], env=cli)
    assert done.exit_code == 0, done.output
    assert '"weight": 50' in done.output
    done = CliRunner().invoke(cli_app, ["env", "canary", "weight", "bot-prod", "10"],
                              env={**cli, "DOCKYARD_TOKEN": team.tokens["vic"]})  # fmt: skip
    assert done.exit_code != 0  # a viewer may not
    done = CliRunner().invoke(cli_app, ["env", "canary", "abort", "bot-prod", "--yes"], env=cli)
    assert done.exit_code == 0, done.output
    wait_for(
        lambda: ((env_obj(api, namespace, "bot-prod").get("status") or {}).get("canary") or {}).get("phase")
        == "Aborted",
        timeout=30, what="the canary aborted",
    )  # fmt: skip
    time.sleep(1.0)
    assert {turn(http, bot)[0] for _ in range(10)} == {"v2"}


def test_a_failing_canary_is_rolled_back_on_its_own(
    api: client.ApiClient, namespace: str, team: Users, facade: RunningFacade, model: ScriptedModel,
    faults: Faults, cluster: E2ECluster,
) -> None:  # fmt: skip
    http, alice = facade.client, team.headers("alice")
    slo = {"maxErrorRate": 0.2, "windowSeconds": 30, "minTurns": 5}
    bot = two_versions(api, namespace, model, http, alice, "bot-live", slo=slo)
    first_answer(http, bot)
    ok(http.post(f"{mgmt(namespace, 'bot-live')}/canary", json={"version": "1.1.0", "weight": 50}, headers=alice), 202)
    wait_for(lambda: turn(http, bot)[0] == "v2", timeout=30, what="a canary session")
    faults.failing = True
    try:
        breach_began = time.monotonic()
        back = None
        while time.monotonic() - breach_began < 60:
            turn(http, bot)
            spec = env_obj(api, namespace, "bot-live")["spec"]
            if "canary" not in spec:
                back = time.monotonic() - breach_began
                break
        assert back is not None, "no rollback within 60 s"
        assert back <= 30
    finally:
        faults.failing = False
    status = wait_for(
        lambda: (s := env_obj(api, namespace, "bot-live").get("status") or {}).get("canary", {}).get("phase")
        == "RolledBack" and s,
        timeout=30, what="status.canary RolledBack",
    )  # fmt: skip
    entry = next(h for h in status["history"] if h["action"] == "Canary")
    assert entry["outcome"] == "RolledBack"
    assert "error rate" in entry["reason"]
    assert entry["figures"]["errorRate"] > 0.2
    assert "error rate" in status["slo"]["lastBreach"]
    events = kubectl(cluster, "-n", namespace, "get", "events", "--field-selector", "involvedObject.name=bot-live")
    assert "CanaryRolledBack" in events
    assert 'dockyard_automatic_rollbacks_total{environment="bot-live"' in http.get("/metrics").text
    assert {turn(http, bot)[0] for _ in range(10)} == {"v1"}  # new sessions are back on 1.0.0


def test_a_slow_deploy_is_rolled_back_to_the_previous_working_version(
    api: client.ApiClient, namespace: str, team: Users, facade: RunningFacade, model: ScriptedModel,
    faults: Faults, cluster: E2ECluster,
) -> None:  # fmt: skip
    http, alice = facade.client, team.headers("alice")
    slo = {"maxP95LatencySeconds": 0.5, "windowSeconds": 30, "minTurns": 5, "watchSeconds": 300}
    bot = two_versions(api, namespace, model, http, alice, "bot-slow", slo=slo)
    first_answer(http, bot)
    faults.slow = 1.0
    try:
        ok(http.post(f"{mgmt(namespace, 'bot-slow')}/deploy", json={"version": "1.1.0"}, headers=alice), 202)
        wait_for(lambda: active(api, namespace, "bot-slow", "1.1.0"), timeout=60, what="1.1.0 Active")
        began = time.monotonic()
        rolled = None
        while time.monotonic() - began < 60:
            turn(http, bot)
            if env_obj(api, namespace, "bot-slow")["spec"]["appVersion"] == "1.0.0":
                rolled = time.monotonic() - began
                break
        assert rolled is not None, "no automatic rollback within 60 s"
    finally:
        faults.slow = 0.0

    def top() -> dict[str, Any] | None:
        history = (env_obj(api, namespace, "bot-slow").get("status") or {}).get("history") or []
        return history[0] if history and history[0]["action"] == "AutoRollback" else None

    entry = wait_for(top, timeout=60, what="the AutoRollback entry")
    assert entry["version"] == "1.0.0"
    assert "p95 latency" in entry["reason"]
    assert entry["figures"]["p95LatencySeconds"] > 0.5
    events = kubectl(cluster, "-n", namespace, "get", "events", "--field-selector", "involvedObject.name=bot-slow")
    assert "AutomaticRollback" in events


def test_one_facade_replica_at_a_time_holds_the_watchers_lease(cluster: E2ECluster, namespace: str) -> None:
    """The Lease on the real API server: the first replica takes it and keeps it while it renews it, a
    second one does not get it until the holder stops renewing for the Lease's duration."""

    async def main() -> None:
        kube = AsyncKube(str(cluster.kubeconfig))
        try:
            first = Lease(kube, namespace, "dockyard-slo-watcher", "replica-a", duration=2)
            second = Lease(kube, namespace, "dockyard-slo-watcher", "replica-b", duration=2)
            assert await first.hold()
            assert not await second.hold()
            await asyncio.sleep(1.0)
            assert await first.hold()  # renewed
            assert not await second.hold()
            await asyncio.sleep(3.0)  # replica a went silent for longer than the Lease's duration
            assert await second.hold()
            assert not await first.hold()
            held = await kube.request(
                "GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/dockyard-slo-watcher"
            )
            assert held["spec"]["holderIdentity"] == "replica-b"
            assert held["spec"]["leaseTransitions"] == 1
        finally:
            await kube.aclose()

    asyncio.run(main())


def test_a_gated_environment_refuses_a_canary_of_a_version_without_a_passing_run(
    api: client.ApiClient, namespace: str, team: Users, facade: RunningFacade, model: ScriptedModel,
) -> None:  # fmt: skip
    """spec.promotion gates a canary's version as it gates a deploy: the API server's admission refuses it,
    and the facade answers 422 with the webhook's reason; nothing changes."""
    http, alice = facade.client, team.headers("alice")
    gate = {"requireEvaluation": {"minPassRate": 1.0}}
    two_versions(api, namespace, model, http, alice, "bot-gated", promotion=gate)
    body = refused(
        http.post(f"{mgmt(namespace, 'bot-gated')}/canary", json={"version": "1.1.0", "weight": 10}, headers=alice),
        422,
    )
    assert "spec.canary" in body["error"]["message"]
    assert "has no evaluation run" in body["error"]["message"]
    assert "canary" not in env_obj(api, namespace, "bot-gated")["spec"]
