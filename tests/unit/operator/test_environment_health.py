"""An environment's health is its whole app: every ModelDeployment its version's agents call and every
ToolDeployment of its tool versions (docs/apps-environments.md, "Health")."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from dockyard_core.devices import BUILT_IN
from dockyard_operator import environment_health as health
from dockyard_operator import environments as envs
from dockyard_operator.context import Context
from dockyard_operator.reconcile.environment import EnvironmentState, environments_tested, environments_using
from dockyard_operator.runtimes import DEFAULT_CATALOG
from dockyard_operator.settings import OperatorSettings

T0 = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)
CONTENT = {
    "agents": [
        {"name": "triage", "version": "1.0.0", "model": "llama"},
        {"name": "writer", "version": "1.0.0", "model": "llama"},
        {"name": "critic", "version": "1.0.0", "model": "mistral"},
        {"name": "idle", "version": "1.0.0"},
    ]
}


def mdep(job: str | None, reason: str = "", message: str = "", ready: str | None = None, **meta: Any) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if job is not None:
        status["job"] = {"dockStatusId": "d-1", "status": job, "reason": reason, "message": message}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": ready, "reason": "NotReady", "message": "0 of 1 ready"}]
    return {"metadata": {"name": "llama", "namespace": "ns", "uid": "u-llama", **meta}, "status": status}


def judge(models: dict[str, health.ModelState], tool_jobs: dict[str, str | None] | None = None) -> health.Health:
    return health.environment_health(
        version="1.0.0",
        problem=None,
        models=models,
        model_users=health.agent_models(CONTENT),
        tool_jobs=tool_jobs or {},
    )


READY = health.ModelState("Ready", "Available", "")


def test_the_models_of_a_version_are_those_its_agents_call() -> None:
    assert health.agent_models(CONTENT) == {"llama": ["triage", "writer"], "mistral": ["critic"]}
    assert health.agent_models(None) == {}


def test_a_model_deployment_is_ready_only_when_its_job_succeeded_and_it_serves() -> None:
    assert health.model_state(mdep("SUCCESS", "Available")).state == "Ready"
    assert health.model_state(mdep("SUCCESS", "Available", ready="True")).state == "Ready"
    assert health.model_state(mdep("SUCCESS", "Available", ready="False")) == health.ModelState(
        "NotReady", "NotReady", "0 of 1 ready"
    )
    assert health.model_state(mdep("IN_PROGRESS", "Scheduling", "waiting for a node")) == health.ModelState(
        "NotReady", "Scheduling", "waiting for a node"
    )
    assert health.model_state(mdep(None)).state == "NotReady"
    assert health.model_state(mdep("FAILED", "NoFittingNode", "no g5.48xlarge node")) == health.ModelState(
        "Failed", "NoFittingNode", "no g5.48xlarge node"
    )
    assert health.model_state(None).state == "Missing"
    assert health.model_state(mdep("SUCCESS", deletionTimestamp="2026-11-01T10:00:00Z")).state == "Missing"


def test_a_failed_model_fails_the_environment_with_its_reason() -> None:
    failed = health.model_state(mdep("FAILED", "CrashLoop", "container engine keeps crashing"))
    judged = judge({"llama": failed, "mistral": READY}, {"t": "SUCCESS"})
    assert (judged.phase, judged.reason) == ("Failed", "ModelDeploymentFailed")
    assert judged.message == (
        "version 1.0.0: ModelDeployment llama (the model of agents triage, writer) FAILED: "
        "CrashLoop: container engine keeps crashing"
    )


def test_a_missing_model_fails_the_environment() -> None:
    judged = judge({"llama": READY, "mistral": health.model_state(None)})
    assert (judged.phase, judged.reason) == ("Failed", "ModelDeploymentNotFound")
    assert "ModelDeployment mistral (the model of agent critic) does not exist" in judged.message


def test_a_model_not_ready_yet_keeps_the_environment_deploying() -> None:
    waiting = health.model_state(mdep("IN_PROGRESS", "Pulling", "pulling the engine image"))
    judged = judge({"llama": waiting, "mistral": READY}, {"t": "SUCCESS"})
    assert (judged.phase, judged.reason) == ("Deploying", "ModelsDeploying")
    assert "ModelDeployment llama (the model of agents triage, writer) is not ready: Pulling" in judged.message


def test_tools_and_problems_still_count_and_all_ready_is_active() -> None:
    assert judge({"llama": READY, "mistral": READY}, {"t": "FAILED"}).reason == "ToolDeploymentFailed"
    assert judge({"llama": READY, "mistral": READY}, {"t": None}).phase == "Deploying"
    assert judge({"llama": READY, "mistral": READY}, {"t": "SUCCESS"}).phase == "Active"
    gone = health.environment_health(
        version="2.0.0", problem=("VersionNotFound", "no 2.0.0"), models={}, model_users={}, tool_jobs={}
    )
    assert (gone.phase, gone.reason, gone.message) == ("Failed", "VersionNotFound", "no 2.0.0")


def test_the_history_of_a_version_whose_model_failed_is_not_healthy() -> None:
    failed = judge({"llama": health.model_state(mdep("FAILED", "CrashLoop")), "mistral": READY})
    history = envs.record_health(envs.next_history([], "1.0.0", T0, "alice"), "1.0.0", failed.phase)
    assert history[0].healthy is False
    waiting = judge({"llama": health.model_state(mdep("IN_PROGRESS")), "mistral": READY})
    history = envs.record_health(envs.next_history([], "1.0.0", T0, "alice"), "1.0.0", waiting.phase)
    assert history[0].healthy is None


def context() -> Context:
    return Context(settings=OperatorSettings(), kube=cast(Any, None), catalog=DEFAULT_CATALOG, devices=BUILT_IN)


def test_a_model_deployments_health_change_reconciles_the_environments_using_it() -> None:
    ctx = context()
    env = {"metadata": {"name": "bot-prod", "namespace": "ns", "uid": "u-env"}, "spec": {"appRef": "bot"}}
    other = {"metadata": {"name": "x-prod", "namespace": "ns", "uid": "u-x"}, "spec": {"appRef": "x"}}
    index = {("ns", "bot-prod"): [env], ("ns", "x-prod"): [other]}
    ctx.state(EnvironmentState).models.update({"u-env": frozenset({"llama"}), "u-x": frozenset({"mistral"})})
    assert environments_using(ctx, index, mdep("IN_PROGRESS")) == [env]
    assert environments_using(ctx, index, mdep("IN_PROGRESS")) == []  # nothing its health depends on changed
    assert environments_using(ctx, index, mdep("FAILED", "CrashLoop")) == [env]
    assert environments_using(ctx, index, mdep("FAILED", "CrashLoop"), deleted=True) == [env]
    ctx.forget("u-env")
    assert environments_using(ctx, index, mdep("SUCCESS")) == []  # a deleted environment uses nothing


def test_a_recorded_tool_test_call_reconciles_the_environments_of_its_app() -> None:
    """A new status.toolTests of an App (its draft) or an AppVersion reconciles the environments of that app
    at once (their checklist reads it); any other event of it does not."""
    ctx = context()
    env = {"metadata": {"name": "bot-prod", "namespace": "ns", "uid": "u-env"}, "spec": {"appRef": "bot"}}
    other = {"metadata": {"name": "x-prod", "namespace": "ns", "uid": "u-x"}, "spec": {"appRef": "x"}}
    index = {("ns", "bot-prod"): [env], ("ns", "x-prod"): [other]}
    meta = {"name": "bot-1.0.0", "namespace": "ns", "uid": "u-v"}
    version = {"kind": "AppVersion", "metadata": meta, "spec": {"appRef": "bot"}, "status": {}}
    assert environments_tested(ctx, index, version) == []  # no record
    tested = {**version, "status": {"toolTests": [{"tool": "weather", "passed": True}]}}
    assert environments_tested(ctx, index, tested) == [env]
    assert environments_tested(ctx, index, tested) == []  # seen: e.g. deployedIn written
    draft = {"kind": "App", "metadata": {"name": "x", "namespace": "ns", "uid": "u-app"}, "spec": {}}
    assert environments_tested(ctx, index, {**draft, "status": {"toolTests": [{"tool": "t"}]}}) == [other]
    assert environments_tested(ctx, index, tested, deleted=True) == []
