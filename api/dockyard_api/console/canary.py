"""The console's canary actions (the environment's Canary tab, docs/promotion.md): start a canary, change its
weight, promote or abort it. Each calls the canary service as the signed-in person and comes back to the tab,
which shows the canary, how the last one ended (an automatic rollback with its reason and figures) and the
SLO watcher's figures per version."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from dockyard_api.console.common import Ctx, page
from dockyard_api.console.environments import env_action
from dockyard_api.deps import EnvName, NamespaceParam
from dockyard_api.management.canary.schemas import CanaryStart, CanaryWeight
from dockyard_api.management.schemas import EnvironmentChange

routes = APIRouter(include_in_schema=False)


def _weight(sent: dict[str, Any]) -> int | str:
    raw = str(sent.get("weight") or "").strip()
    return int(raw) if raw.isdigit() else raw


Change = Callable[[Ctx, dict[str, Any]], Awaitable[EnvironmentChange]]


async def _canary_action(request: Request, namespace: str, environment: str, change: Change) -> Response:
    """One canary action from the tab's form (``change``: the service call with what was sent), then back to
    the tab with its message (errors as :func:`env_action` shows them)."""

    async def act(ctx: Ctx, sent: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        done = await change(ctx, sent)
        return f"{ctx.base}/environments/{environment}?tab=canary", {"ok": done.message}

    return await env_action(request, namespace, environment, "canary", "canary", act)


@routes.post("/ns/{namespace}/environments/{environment}/canary", response_class=HTMLResponse)
@page
async def canary_start(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    async def start(ctx: Ctx, sent: dict[str, Any]) -> EnvironmentChange:
        body = CanaryStart.model_validate({"version": str(sent.get("version") or ""), "weight": _weight(sent)})
        return await ctx.services.canary.start(namespace, environment, body)

    return await _canary_action(request, namespace, environment, start)


@routes.post("/ns/{namespace}/environments/{environment}/canary/weight", response_class=HTMLResponse)
@page
async def canary_weight(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    async def weight(ctx: Ctx, sent: dict[str, Any]) -> EnvironmentChange:
        body = CanaryWeight.model_validate({"weight": _weight(sent)})
        return await ctx.services.canary.weight(namespace, environment, body)

    return await _canary_action(request, namespace, environment, weight)


@routes.post("/ns/{namespace}/environments/{environment}/canary/promote", response_class=HTMLResponse)
@page
async def canary_promote(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    return await _canary_action(
        request, namespace, environment, lambda ctx, _: ctx.services.canary.promote(namespace, environment)
    )


@routes.post("/ns/{namespace}/environments/{environment}/canary/abort", response_class=HTMLResponse)
@page
async def canary_abort(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    return await _canary_action(
        request, namespace, environment, lambda ctx, _: ctx.services.canary.abort(namespace, environment)
    )
