"""The console's Apps pages: the App list, an App (its draft, versions and environments), the draft's
editor, and versions (create, preview, restore into the draft, delete). Each calls the management
services as the signed-in person (:mod:`.common`)."""

from __future__ import annotations

from typing import Any

import yaml
from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from dockyard_api.console import views
from dockyard_api.console.common import Ctx, context, form, page, redirect, render
from dockyard_api.deps import AppName, NamespaceParam, VersionParam
from dockyard_api.management.schemas import DraftUpdate, Restore, VersionCreate
from dockyard_core.errors import DockyardError

routes = APIRouter(include_in_schema=False)


@routes.get("/ns/{namespace}/apps", response_class=HTMLResponse)
@page
async def apps_page(request: Request, namespace: NamespaceParam) -> Response:
    ctx = await context(request, namespace)
    found = await ctx.services.apps.list_apps(namespace)
    return render(ctx, "apps.html", apps=found.wire()["items"])


async def _app_data(ctx: Ctx, app: str) -> dict[str, Any]:
    services, namespace = ctx.services, ctx.namespace
    draft = (await services.apps.get_app(namespace, app)).wire()
    versions = (await services.apps.list_versions(namespace, app)).wire()["items"]
    envs = (await services.environments.list_environments(namespace, app)).wire()["items"]
    tds = (await services.catalog.list_tool_deployments(namespace)).wire()["items"]
    rows = []
    for env in views.environment_rows(envs):
        jobs = [t["job"] for t in tds if t["environment"] == env["objectName"]]
        rows.append({**env, "health": views.health(env), "dock": views.dock_status(jobs)})
    return {"app": draft, "versions": versions, "environments": rows}


@routes.get("/ns/{namespace}/apps/{app}", response_class=HTMLResponse)
@page
async def app_page(request: Request, namespace: NamespaceParam, app: AppName) -> Response:
    ctx = await context(request, namespace)
    return render(ctx, "app.html", **await _app_data(ctx, app))


def _draft_values(draft: dict[str, Any]) -> dict[str, Any]:
    content: dict[str, Any] = {k: draft.get(k) or [] for k in ("agents", "toolVersions", "mcpServers")}
    if draft.get("guardrails"):  # saving replaces the whole draft: what is not in the form would be removed
        content["guardrails"] = draft["guardrails"]
    return {
        "displayName": draft.get("displayName") or "",
        "description": draft.get("description") or "",
        "content": yaml.safe_dump(content, sort_keys=False, allow_unicode=True),
    }


@routes.get("/ns/{namespace}/apps/{app}/draft", response_class=HTMLResponse)
@page
async def draft_edit(request: Request, namespace: NamespaceParam, app: AppName) -> Response:
    ctx = await context(request, namespace)
    draft = (await ctx.services.apps.get_app(namespace, app)).wire()
    return render(ctx, "draft.html", app=draft, values=_draft_values(draft), errors=views.FormErrors())


@routes.post("/ns/{namespace}/apps/{app}/draft", response_class=HTMLResponse)
@page
async def draft_save(request: Request, namespace: NamespaceParam, app: AppName) -> Response:
    ctx = await context(request, namespace)
    sent = await form(ctx)
    values = {k: str(sent.get(k) or "") for k in ("displayName", "description", "content")}
    draft = (await ctx.services.apps.get_app(namespace, app)).wire()
    errors = views.FormErrors()
    try:
        content = yaml.safe_load(values["content"]) or {}
        if not isinstance(content, dict):
            raise yaml.YAMLError("expected a mapping with agents, toolVersions, mcpServers and guardrails")
    except yaml.YAMLError as exc:
        errors.add("content", f"This is not valid YAML: {exc}")
        return render(ctx, "draft.html", 422, app=draft, values=values, errors=errors)
    try:
        body = DraftUpdate.model_validate(
            {"displayName": values["displayName"] or None, "description": values["description"], **content}
        )
        await ctx.services.apps.update_draft(namespace, app, body)
    except ValidationError as exc:
        for err in exc.errors():
            where = ".".join(str(p) for p in err.get("loc", ()))
            field = (
                "displayName"
                if where.startswith("displayName")
                else "description"
                if where == "description"
                else "content"
            )
            errors.add(field, f"{where}: {err.get('msg')}" if field == "content" else str(err.get("msg")))
        return render(ctx, "draft.html", 422, app=draft, values=values, errors=errors)
    except DockyardError as error:
        errors.add(None, error.message)
        return render(ctx, "draft.html", error.status_code, app=draft, values=values, errors=errors)
    return redirect(ctx, f"{ctx.base}/apps/{app}", {"ok": "Draft saved."})


async def _version_form(
    ctx: Ctx, app: str, errors: views.FormErrors, values: dict[str, Any], status_code: int
) -> Response:
    services, namespace = ctx.services, ctx.namespace
    agents = (await services.catalog.list_agent_versions(namespace, app)).wire()["items"]
    tools = (await services.catalog.list_tools(namespace)).wire()["items"]
    versions = (await services.apps.list_versions(namespace, app)).wire()["items"]
    draft = (await services.apps.get_app(namespace, app)).wire()
    if not values:
        values = {
            "version": views.next_version([v["version"] for v in versions]),
            "agent": [f"{a['name']}@{a['version']}" for a in draft["agents"]],
            "tool": [f"{t['name']}@{t['version']}" for t in draft["toolVersions"]],
        }
    return render(
        ctx,
        "version_new.html",
        status_code,
        app=draft,
        agents=agents,
        tools=tools,
        errors=errors,
        values=values,
    )


# /versions/new comes before /versions/{version}: the first route whose path matches answers
@routes.get("/ns/{namespace}/apps/{app}/versions/new", response_class=HTMLResponse)
@page
async def version_new(request: Request, namespace: NamespaceParam, app: AppName) -> Response:
    ctx = await context(request, namespace)
    return await _version_form(ctx, app, views.FormErrors(), {}, 200)


@routes.post("/ns/{namespace}/apps/{app}/versions/new", response_class=HTMLResponse)
@page
async def version_create(request: Request, namespace: NamespaceParam, app: AppName) -> Response:
    ctx = await context(request, namespace)
    sent = await form(ctx)
    values = {k: sent.get(k, "") for k in ("version", "name", "description")}
    values["agent"], values["tool"] = sent.get("agent", []), sent.get("tool", [])
    catalog = await ctx.services.catalog.list_agent_versions(namespace, app)
    by_key = {f"{a.name}@{a.version}": a.agent for a in catalog.items}
    errors = views.FormErrors()
    chosen_agents = [by_key[k] for k in values["agent"] if k in by_key]
    names = [a.name for a in chosen_agents]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        errors.add("agents", f"Choose one version of agent {dup!r}: a version holds each agent once.")
    tool_refs = [dict(zip(("name", "version"), k.split("@", 1), strict=True)) for k in values["tool"] if "@" in k]
    tool_names = [t["name"] for t in tool_refs]
    for dup in sorted({n for n in tool_names if tool_names.count(n) > 1}):
        errors.add("toolVersions", f"Choose one version of tool {dup!r}: a version pins each tool once.")
    body = None
    try:
        body = VersionCreate(
            version=values["version"],
            name=values["name"],
            description=values["description"],
            agents=chosen_agents,
            tool_versions=tool_refs,
        )
    except ValidationError as exc:
        found = views.errors_from_validation(exc)
        for where, messages in found.fields.items():
            for message in messages:
                errors.add(where, message)
        errors.general += found.general
    if errors or body is None:
        return await _version_form(ctx, app, errors, values, 422)
    try:
        created = await ctx.services.apps.create_version(namespace, app, body)
    except DockyardError as error:
        return await _version_form(ctx, app, views.errors_from_api(error.message, error.details), values, 422)
    return redirect(
        ctx,
        f"{ctx.base}/apps/{app}/versions/{created.version}",
        {"ok": f"Version {created.version} ({created.name}) created and validated."},
    )


@routes.get("/ns/{namespace}/apps/{app}/versions/{version}", response_class=HTMLResponse)
@page
async def version_page(request: Request, namespace: NamespaceParam, app: AppName, version: VersionParam) -> Response:
    ctx = await context(request, namespace)
    return await _version_view(ctx, app, version, {}, 200)


async def _version_view(
    ctx: Ctx, app: str, version: str, errors: dict[str, views.FormErrors], status_code: int
) -> Response:
    found = (await ctx.services.apps.get_version(ctx.namespace, app, version)).wire()
    return render(ctx, "version.html", status_code, app=app, v=found, errors=errors)


@routes.post("/ns/{namespace}/apps/{app}/versions/{version}/restore", response_class=HTMLResponse)
@page
async def version_restore(request: Request, namespace: NamespaceParam, app: AppName, version: VersionParam) -> Response:
    ctx = await context(request, namespace)
    sent = await form(ctx)
    if sent.get("confirm") != "yes":
        errors = views.FormErrors()
        errors.add("confirm", "Tick the box to confirm: a restore overwrites the whole draft and cannot be undone.")
        return await _version_view(ctx, app, version, {"restore": errors}, 422)
    try:
        await ctx.services.apps.restore(namespace, app, Restore(version=version, confirm=True))
    except DockyardError as error:
        return await _version_view(ctx, app, version, {"restore": views.errors_from_api(error.message, None)}, 403)
    return redirect(ctx, f"{ctx.base}/apps/{app}", {"ok": f"The draft now holds version {version}."})


@routes.post("/ns/{namespace}/apps/{app}/versions/{version}/delete", response_class=HTMLResponse)
@page
async def version_delete(request: Request, namespace: NamespaceParam, app: AppName, version: VersionParam) -> Response:
    ctx = await context(request, namespace)
    await form(ctx)
    try:
        await ctx.services.apps.delete_version(namespace, app, version)
    except DockyardError as error:
        errors = views.FormErrors()
        errors.add(None, error.message)
        return await _version_view(ctx, app, version, {"delete": errors}, error.status_code)
    return redirect(ctx, f"{ctx.base}/apps/{app}", {"ok": f"Version {version} deleted."})
