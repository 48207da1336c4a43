"""kopf handlers of Apps: the draft Environment when an App appears (``reconcile/app.py``), and a change of
the App (its draft edited or restored) reconciles the environments serving the draft at once."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import VERSION
from dockyard_operator.context import Context
from dockyard_operator.handlers.events import post_events
from dockyard_operator.reconcile.app import ensure_draft_environment as ensure_draft
from dockyard_operator.reconcile.app import environments_serving_draft
from dockyard_operator.reconcile.environment import reconcile_environment

log = logging.getLogger(__name__)


@kopf.on.create(GROUP, VERSION, "apps")
@kopf.on.resume(GROUP, VERSION, "apps")
async def ensure_draft_environment(name: str, namespace: str | None, body: kopf.Body, memo: Any, **_: Any) -> None:
    """Every App has a default environment named draft, for development and testing."""
    ctx: Context = memo.ctx
    outcome = await ensure_draft(ctx.kube, namespace or "", name, body["metadata"]["uid"])
    post_events(body, outcome.events)


@kopf.on.event(GROUP, VERSION, "apps")
async def app_changed(type: str | None, namespace: str | None, name: str, memo: kopf.Memo, **kw: Any) -> None:
    """An edited or restored draft reaches the environments that serve the draft at once (the watch
    event), not at their next periodic re-check."""
    if type not in ("MODIFIED", "ADDED"):
        return  # the initial listing: every environment is reconciled by its own events anyway
    ctx: Context = memo.ctx
    for env_name, env in environments_serving_draft(kw["environment_index"], namespace or "", name):
        log.debug("app %s/%s changed: reconciling %s", namespace, name, env_name)
        outcome = await reconcile_environment(ctx, env, kw.get("appversions"), kw.get("environment_index"))
        post_events(env, outcome.events)
