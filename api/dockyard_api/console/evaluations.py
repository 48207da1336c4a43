"""The console's Evaluations page of an environment (docs/promotion.md, docs/console.md): the environment's
runs, a form that runs a version's suite against it (the active version, or another one in a shadow of
the environment), and each run's per-case results with the diff against the previous run; a running run's
page reloads itself every second until it ends. Through the evaluation service, as the signed-in person."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from dockyard_api.console import views
from dockyard_api.console.common import Ctx, context, form, page, redirect, render
from dockyard_api.deps import EnvName, NamespaceParam
from dockyard_api.management.evaluations.schemas import EvaluationStart
from dockyard_core.errors import DockyardError

routes = APIRouter(include_in_schema=False)
CHANGES = {
    "fixed": ("fixed", "tone-ok"),
    "broke": ("broke", "tone-bad"),
    "still-failing": ("still failing", "tone-bad"),
    "still-passing": ("still passing", ""),
    "new": ("new", ""),
    "removed": ("removed", ""),
}


async def _runs_view(
    ctx: Ctx, environment: str, status_code: int = 200, *, version: str = "", errors: views.FormErrors | None = None
) -> Response:
    env = (await ctx.services.environments.get_environment(ctx.namespace, environment)).wire()
    runs = (await ctx.services.evaluations.list(ctx.namespace, environment)).wire()["items"]
    return render(
        ctx, "evaluations.html", status_code, env=env, runs=runs, version=version, errors=errors or views.FormErrors()
    )


@routes.get("/ns/{namespace}/environments/{environment}/evaluations", response_class=HTMLResponse)
@page
async def runs_page(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    ctx = await context(request, namespace)
    return await _runs_view(ctx, environment)


@routes.post("/ns/{namespace}/environments/{environment}/evaluations/run", response_class=HTMLResponse)
@page
async def start_run(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    ctx = await context(request, namespace)
    given = await form(ctx)
    version = str(given.get("version") or "").strip()
    errors = views.FormErrors()
    try:
        body = EvaluationStart(version=version or None)
    except ValidationError as exc:
        for err in exc.errors():
            errors.add("version", str(err["msg"]))
        return await _runs_view(ctx, environment, 422, version=version, errors=errors)
    try:
        started = await ctx.services.evaluations.start(namespace, environment, body)
    except DockyardError as error:
        errors.add("version" if version and error.status_code == 404 else None, error.message)
        return await _runs_view(ctx, environment, error.status_code, version=version, errors=errors)
    return redirect(ctx, f"{ctx.base}/environments/{environment}/evaluations/{started.id}")


@routes.get("/ns/{namespace}/environments/{environment}/evaluations/{run}", response_class=HTMLResponse)
@page
async def run_page(request: Request, namespace: NamespaceParam, environment: EnvName, run: str) -> Response:
    ctx = await context(request, namespace)
    env = (await ctx.services.environments.get_environment(ctx.namespace, environment)).wire()
    shown = (await ctx.services.evaluations.get(namespace, environment, run)).wire()
    changes = {d["case"]: CHANGES.get(d["change"], (d["change"], "")) for d in shown.get("diff") or []}
    return render(ctx, "evaluation_run.html", env=env, run=shown, changes=changes)
