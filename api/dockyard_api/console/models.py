"""The console's Models and tools page: Models, ModelDeployments, ToolDeployments with their dock status,
and the tool versions (Tools), read through the catalog service as the signed-in person."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from dockyard_api.console.common import context, page, render
from dockyard_api.deps import NamespaceParam

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
    return render(ctx, "models.html", models=models, modelDeployments=mds, toolDeployments=tds, tools=tools, busy=busy)
