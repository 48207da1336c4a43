"""kopf handlers of Environments: every event of one, a periodic re-check, an event of one of its
ToolDeployments, a change of the health of a ModelDeployment its version's agents call (heard from the
operator's own watch of ModelDeployments, ``deployments.py``), and its deletion call the kopf-free
reconcile (``reconcile/environment.py``) and post the Events it returns; the indexes of AppVersions and
Environments it reads."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import kopf

from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import ENVIRONMENT_LABEL, VERSION
from dockyard_operator.context import Context, snapshot
from dockyard_operator.handlers.deployments import on_model_deployment
from dockyard_operator.handlers.events import post_events
from dockyard_operator.reconcile.environment import environment_deleted as forget_environment
from dockyard_operator.reconcile.environment import environments_tested, environments_using, reconcile_environment
from dockyard_operator.settings import operator_settings

SETTINGS = operator_settings()
log = logging.getLogger(__name__)

# --- indexes -----------------------------------------------------------------------------------------


@kopf.index(GROUP, VERSION, "appversions")
def appversions(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> Any:
    return {(namespace or "", name): snapshot(body)}


@kopf.index(GROUP, VERSION, "environments")
def environment_index(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> Any:
    return {(namespace or "", name): snapshot(body)}


async def _reconcile(memo: kopf.Memo, env: dict[str, Any], kw: Mapping[str, Any]) -> None:
    ctx: Context = memo.ctx
    outcome = await reconcile_environment(ctx, env, kw.get("appversions"), kw.get("environment_index"))
    post_events(env, outcome.events)


# --- Environments ------------------------------------------------------------------------------------


@kopf.on.event(GROUP, VERSION, "environments")
async def environment_changed(type: str | None, body: kopf.Body, memo: kopf.Memo, **kw: Any) -> None:
    if type == "DELETED" or body["metadata"].get("deletionTimestamp"):
        return
    await _reconcile(memo, snapshot(body), kw)


@kopf.timer(GROUP, VERSION, "environments", interval=SETTINGS.environment_interval_seconds)
async def environment_timer(body: kopf.Body, memo: kopf.Memo, **kw: Any) -> None:
    if not body["metadata"].get("deletionTimestamp"):
        await _reconcile(memo, snapshot(body), kw)


@kopf.on.event(GROUP, VERSION, "tooldeployments", labels={ENVIRONMENT_LABEL: kopf.PRESENT})
async def environment_tool_changed(namespace: str | None, labels: kopf.Labels, memo: Any, **kw: Any) -> None:
    for env in kw["environment_index"].get((namespace, labels[ENVIRONMENT_LABEL]), []):
        await _reconcile(memo, env, kw)


@on_model_deployment
def environment_model_changed(memo: kopf.Memo, body: Mapping[str, Any], deleted: bool) -> None:
    """A ModelDeployment whose health changes (its job's status or reason, its Ready condition, its
    deletion) reconciles the environments whose version's agents call it at once. Its watch is not kopf's
    (no ``kw``: kopf's indexes as captured on ``ctx.indexes``), and must not wait for the reconciles: each
    runs as a task of its own (serialised per Environment by its lock)."""
    ctx: Context = memo.ctx
    for env in environments_using(ctx, ctx.indexes["environment_index"], body, deleted=deleted):
        name = f"environment {env['metadata']['name']}"
        task = asyncio.create_task(_reconcile_logged(memo, env, ctx.indexes), name=name)
        _RUNNING.add(task)
        task.add_done_callback(_RUNNING.discard)


_RUNNING: set[asyncio.Task[None]] = set()
"""The Environments' reconciles started by ModelDeployment events (held until done: the loop keeps only weak
references to tasks)."""


async def _reconcile_logged(memo: kopf.Memo, env: dict[str, Any], kw: Mapping[str, Any]) -> None:
    """:func:`_reconcile`, its failure logged as kopf logs a failed event handler's (the periodic re-check
    and the Environment's next event try again)."""
    try:
        await _reconcile(memo, env, kw)
    except Exception:
        meta = env["metadata"]
        log.exception("reconciling Environment %s/%s after a ModelDeployment event failed", meta["namespace"],
                      meta["name"])  # fmt: skip


@kopf.on.event(GROUP, VERSION, "apps")
@kopf.on.event(GROUP, VERSION, "appversions")
async def environment_tool_tested(type: str | None, body: kopf.Body, memo: kopf.Memo, **kw: Any) -> None:
    """A tool test call recorded on an App (its draft) or an AppVersion (status.toolTests) reconciles the
    environments of its app at once: their checklist item "Tools deployed and tested" reads it."""
    for env in environments_tested(memo.ctx, kw["environment_index"], snapshot(body), deleted=type == "DELETED"):
        await _reconcile(memo, env, kw)


@kopf.on.delete(GROUP, VERSION, "environments", optional=True)
async def environment_deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Best effort on top of garbage collection: revoke the keys now and stamp the audit record."""
    await forget_environment(memo.ctx, snapshot(body))
