"""Whether an environment's deployed version works as a whole (docs/apps-environments.md, "Health"): its
phase, with the reason and message of its ``Ready`` condition, from every ModelDeployment the version's
agents call and every ToolDeployment of its tool versions. Pure: the reconcile (``reconcile/environment.py``)
reads the objects and the handlers (``handlers/environments.py``) trigger it when a model's health changes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MESSAGE_LIMIT = 4096
"""At most this many characters of a phase message (a condition message holds 32768)."""


@dataclass(frozen=True)
class Health:
    """An environment's phase (Deploying, Active or Failed), with the reason and message of its Ready condition."""

    phase: str
    reason: str
    message: str


@dataclass(frozen=True)
class ModelState:
    """What one ModelDeployment says of itself: ``state`` Ready (its latest job is SUCCESS and it serves),
    NotReady (deploying, or not serving right now), Failed (its latest job FAILED) or Missing (no such
    ModelDeployment, or it is being deleted); ``reason`` and ``message`` explain it."""

    state: str
    reason: str
    message: str


def agent_models(content: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """The ModelDeployments the content's agents call: name -> the agents calling it (sorted)."""
    users: dict[str, list[str]] = {}
    for agent in (content or {}).get("agents") or []:
        model = agent.get("model")
        if model:
            users.setdefault(str(model), []).append(str(agent.get("name")))
    return {model: sorted(agents) for model, agents in sorted(users.items())}


def model_state(mdep: Mapping[str, Any] | None) -> ModelState:
    """The state of a ModelDeployment (as the API server returns it; None when there is none)."""
    if mdep is None:
        return ModelState("Missing", "ModelDeploymentNotFound", "does not exist")
    if (mdep.get("metadata") or {}).get("deletionTimestamp"):
        return ModelState("Missing", "ModelDeploymentDeleted", "is being deleted")
    status = mdep.get("status") or {}
    job = status.get("job") or {}
    reason, message = str(job.get("reason") or ""), str(job.get("message") or "")
    if job.get("status") == "FAILED":
        return ModelState("Failed", reason or "Failed", message)
    if job.get("status") != "SUCCESS":
        return ModelState("NotReady", reason or "NoJob", message or "its deployment has not started yet")
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") == "False":
        return ModelState("NotReady", str(ready.get("reason") or "NotReady"), str(ready.get("message") or ""))
    return ModelState("Ready", reason or "Available", message)


def model_signal(mdep: Mapping[str, Any] | None) -> tuple[str, str]:
    """What of a ModelDeployment the environments' health depends on (its state and reason): a change of
    it triggers the reconcile of the environments using it."""
    state = model_state(mdep)
    return state.state, state.reason


def _describe(model: str, agents: list[str], state: ModelState) -> str:
    verb = {"Failed": "FAILED", "Missing": "", "NotReady": "is not ready"}.get(state.state, "")
    what = f"ModelDeployment {model} (the model of agent{'s' if len(agents) > 1 else ''} {', '.join(agents)})"
    detail = f"{state.reason}: {state.message}" if state.message else state.reason
    if state.state == "Missing":
        return f"{what} {state.message}"
    return f"{what} {verb}: {detail}"


def environment_health(
    *,
    version: str,
    problem: tuple[str, str] | None,
    models: Mapping[str, ModelState],
    model_users: Mapping[str, list[str]],
    tool_jobs: Mapping[str, str | None],
) -> Health:
    """The phase of an environment deploying ``version``: Failed when its content cannot be deployed
    (``problem``), a model it calls is Missing or FAILED, or a ToolDeployment FAILED; Deploying while a
    model or tool is not ready yet; else Active. Every failing (or waiting) model is named with its reason.

    ``models``: ModelDeployment name -> its state (every model of ``model_users``);
    ``model_users``: ModelDeployment name -> the agents calling it (:func:`agent_models`);
    ``tool_jobs``: ToolDeployment name -> the dock status of its latest job (None: none yet).
    """
    if problem:
        return Health("Failed", problem[0], _cap(problem[1]))

    def named(*states: str) -> list[str]:
        return [_describe(m, model_users.get(m, []), s) for m, s in sorted(models.items()) if s.state in states]

    missing, failed = named("Missing"), named("Failed")
    failed_tools = sorted(n for n, s in tool_jobs.items() if s == "FAILED")
    if missing or failed or failed_tools:
        reason = "ModelDeploymentFailed" if failed else "ModelDeploymentNotFound" if missing else "ToolDeploymentFailed"
        tools = [f"ToolDeployment {n} FAILED (see its dock status)" for n in failed_tools]
        return Health("Failed", reason, _cap(f"version {version}: " + "; ".join([*failed, *missing, *tools])))
    waiting = named("NotReady")
    if waiting:
        return Health("Deploying", "ModelsDeploying", _cap(f"version {version}: " + "; ".join(waiting)))
    if any(s != "SUCCESS" for s in tool_jobs.values()):
        return Health("Deploying", "ToolsDeploying", f"version {version}: tools are being deployed")
    return Health("Active", "Deployed", f"version {version} is deployed")


def _cap(message: str) -> str:
    return message if len(message) <= MESSAGE_LIMIT else message[: MESSAGE_LIMIT - 1] + "…"
