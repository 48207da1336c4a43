"""The console's Models and tools page: Models, ModelDeployments, ToolDeployments with their dock status,
and the tool versions (Tools), read through the catalog service as the signed-in person; and its action:
choose the base model of an adapter that has none (the catalog service's choose_base_model)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from dockyard_api.console.common import context, form, page, redirect, render
from dockyard_api.deps import ModelId, NamespaceParam
from dockyard_core.errors import DockyardError

routes = APIRouter(include_in_schema=False)


@routes.get("/ns/{namespace}/models", response_class=HTMLResponse)
@page
async def models_page(request: Request, namespace: NamespaceParam) -> Response:
    ctx = await context(request, namespace)
    catalog = ctx.services.catalog
    models = (await catalog.list_models(namespace)).wire()["items"]
    mds = (await catalog.list_model_deployments(namespace)).wire()["items"]
    tds = (await catalog.list_tool_deployments(namespace)).wire()["items"]
    tools = (await catalog.list_tools(namespace)).wire()["items"]
    busy = any((d["job"] or {}).get("status") == "IN_PROGRESS" for d in [*mds, *tds, *models])
    bases = [m["modelId"] for m in models if not m["isAdapter"] and m["phase"] != "Failed"]
    return render(
        ctx, "models.html", models=models, modelDeployments=mds, toolDeployments=tds, tools=tools, busy=busy,
        bases=bases,
    )  # fmt: skip


@routes.post("/ns/{namespace}/models/{modelId}/base", response_class=HTMLResponse)
@page
async def choose_base(request: Request, namespace: NamespaceParam, model_id: ModelId) -> Response:
    ctx = await context(request, namespace)
    base = str((await form(ctx)).get("baseModel") or "")
    try:
        chosen = await ctx.services.catalog.choose_base_model(namespace, model_id, base)
    except DockyardError as error:
        return redirect(ctx, f"{ctx.base}/models", {"error": f"{model_id}: {error.message}"})
    return redirect(ctx, f"{ctx.base}/models", {"ok": f"Adapter {model_id} is served on {chosen.base_model}."})
