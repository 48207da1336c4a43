"""The console's canary actions (the environment's Canary tab, docs/promotion.md): start a canary, change its
weight, promote or abort it. Each calls the canary service as the signed-in person and comes back to the tab,
which shows the canary, how the last one ended (an automatic rollback with its reason and figures) and the
SLO watcher's figures per version."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from dockyard_api.console.common import Ctx, page
from dockyard_api.console.environments import env_action
from dockyard_api.deps import EnvName, NamespaceParam
from dockyard_api.management.canary.schemas import CanaryStart, CanaryWeight

routes = APIRouter(include_in_schema=False)


def _weight(sent: dict[str, Any]) -> int | str:
    raw = str(sent.get("weight") or "").strip()
    return int(raw) if raw.isdigit() else raw


@routes.post("/ns/{namespace}/environments/{environment}/canary", response_class=HTMLResponse)
@page
async def canary_start(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    async def act(ctx: Ctx, sent: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        body = CanaryStart.model_validate({"version": str(sent.get("version") or ""), "weight": _weight(sent)})
        done = await ctx.services.canary.start(namespace, environment, body)
        return f"{ctx.base}/environments/{environment}?tab=canary", {"ok": done.message}

    return await env_action(request, namespace, environment, "canary", "canary", act)


@routes.post("/ns/{namespace}/environments/{environment}/canary/weight", response_class=HTMLResponse)
@page
async def canary_weight(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    async def act(ctx: Ctx, sent: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        body = CanaryWeight.model_validate({"weight": _weight(sent)})
        done = await ctx.services.canary.weight(namespace, environment, body)
        return f"{ctx.base}/environments/{environment}?tab=canary", {"ok": done.message}

    return await env_action(request, namespace, environment, "canary", "canary", act)


@routes.post("/ns/{namespace}/environments/{environment}/canary/promote", response_class=HTMLResponse)
@page
async def canary_promote(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    async def act(ctx: Ctx, sent: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        done = await ctx.services.canary.promote(namespace, environment)
        return f"{ctx.base}/environments/{environment}?tab=canary", {"ok": done.message}

    return await env_action(request, namespace, environment, "canary", "canary", act)


@routes.post("/ns/{namespace}/environments/{environment}/canary/abort", response_class=HTMLResponse)
@page
async def canary_abort(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    async def act(ctx: Ctx, sent: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        done = await ctx.services.canary.abort(namespace, environment)
        return f"{ctx.base}/environments/{environment}?tab=canary", {"ok": done.message}

    return await env_action(request, namespace, environment, "canary", "canary", act)
