"""The console's environment pages: create one, its tabs (overview, history, canary, keys, access, embed,
settings, checklist, usage, analytics, guardrails), the status the page polls, and its actions (deploy, roll
back, delete, generate and revoke API keys, change the settings, allow a site to embed the widget; the canary's are in
:mod:`.canary`). Each calls the management services as the signed-in person (:mod:`.common`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import ValidationError

from dockyard_api.console import analytics, guardrails, settings, views
from dockyard_api.console.common import Ctx, SignInRequired, context, form, page, redirect, render
from dockyard_api.deps import AppName, EnvName, KeyId, NamespaceParam
from dockyard_api.management.schemas import Deploy, EnvironmentCreate, EnvironmentSettings, KeyCreate, Rollback
from dockyard_core.errors import DockyardError

TABS = (
    "overview", "history", "canary", "keys", "access", "embed", "settings", "checklist", "usage", "analytics",
    "guardrails",
)  # fmt: skip
INTERVENTIONS_SHOWN = 20
"""The last interventions the Guardrails tab shows (the API lists up to 500)."""

routes = APIRouter(include_in_schema=False)


async def _env_form(ctx: Ctx, app: str, errors: views.FormErrors, values: dict[str, Any], code: int) -> Response:
    versions = (await ctx.services.apps.list_versions(ctx.namespace, app)).wire()["items"]
    return render(ctx, "environment_new.html", code, app=app, versions=versions, errors=errors, values=values)


@routes.get("/ns/{namespace}/apps/{app}/environments/new", response_class=HTMLResponse)
@page
async def environment_new(request: Request, namespace: NamespaceParam, app: AppName) -> Response:
    ctx = await context(request, namespace)
    return await _env_form(ctx, app, views.FormErrors(), {}, 200)


@routes.post("/ns/{namespace}/apps/{app}/environments/new", response_class=HTMLResponse)
@page
async def environment_create(request: Request, namespace: NamespaceParam, app: AppName) -> Response:
    ctx = await context(request, namespace)
    sent = await form(ctx)
    values = {k: str(sent.get(k) or "") for k in ("name", "description", "appVersion")}
    try:
        body = EnvironmentCreate(
            name=values["name"], description=values["description"], app_version=values["appVersion"] or None
        )
    except ValidationError as exc:
        return await _env_form(ctx, app, views.errors_from_validation(exc), values, 422)
    try:
        created = await ctx.services.environments.create_environment(namespace, app, body)
    except DockyardError as error:
        errors = views.errors_from_api(error.message, error.details)
        return await _env_form(ctx, app, errors, values, error.status_code)
    return redirect(
        ctx,
        f"{ctx.base}/environments/{created.object_name}",
        {"ok": f"Environment {created.name} created; deploying version {created.app_version}."},
    )


async def _env_view(
    ctx: Ctx,
    environment: str,
    tab: str,
    errors: dict[str, views.FormErrors],
    status_code: int,
    sent: dict[str, Any] | None = None,
) -> Response:
    """An environment's tab; ``sent``: a refused form's values, shown again as they were typed."""
    services, namespace = ctx.services, ctx.namespace
    env = (await services.environments.get_environment(namespace, environment)).wire()
    versions = (await services.apps.list_versions(namespace, env["app"])).wire()["items"]
    values: dict[str, Any] = {"env": env, "versions": versions, "tab": tab, "errors": errors, "tabs": TABS}
    values["health"] = views.health(env)
    values["busy"] = views.in_progress(env)
    values["history"] = views.history_rows(env)
    if tab == "overview":
        tds = (await services.catalog.list_tool_deployments(namespace)).wire()["items"]
        mine = [t for t in tds if t["environment"] == environment]
        values["toolDeployments"] = mine
        values["dock"] = views.dock_status([t["job"] for t in mine])
    if tab == "keys":
        try:
            values["keys"] = (await services.keys.list_keys(namespace, environment)).wire()["items"]
            values["keysError"] = None
        except DockyardError as exc:
            values["keys"], values["keysError"] = [], exc.message
    if tab == "settings":
        shown = settings.form_values(env)
        shown.update({k: str(v or "") for k, v in (sent or {}).items() if k in shown})
        values["settings"], values["webClientChoices"] = shown, settings.web_client_choices()
    if tab == "access":
        values["webClient"] = settings.form_values(env)["webClient"]
    if tab == "embed":
        values["origin"] = str((sent or {}).get("origin") or "")
    if tab == "checklist":
        values["checklist"] = views.checklist_groups(env.get("checklist") or [])
    if tab == "usage":
        try:
            report = (await services.usage.environment_usage(namespace, environment)).wire()
            values["usage"], values["usageError"] = report, None
            values["chart"] = views.usage_chart(views.dense_days(report))
        except DockyardError as exc:
            values["usage"], values["usageError"], values["chart"] = None, exc.message, ""
    if tab == "analytics":
        values.update(await analytics.analytics_values(ctx, env))
    if tab == "guardrails":
        values.update(await _guardrails_values(ctx, env))
    return render(ctx, "environment.html", status_code, **values)


async def _guardrails_values(ctx: Ctx, env: dict[str, Any]) -> dict[str, Any]:
    """The Guardrails tab: the active version's guardrails (the draft's in the draft environment), the
    environment's PII settings, and its last interventions (never the values they acted on)."""
    services, namespace = ctx.services, ctx.namespace
    active = env.get("activeVersion")
    values: dict[str, Any] = {"pii": guardrails.pii_view(env.get("pii")), "guardrails": None, "guardrailsError": None}
    try:
        if active == "draft":
            values["guardrails"] = (await services.apps.get_app(namespace, env["app"])).wire().get("guardrails")
        elif active:
            found = await services.apps.get_version(namespace, env["app"], active)
            values["guardrails"] = found.wire().get("guardrails")
    except DockyardError as exc:
        values["guardrailsError"] = exc.message
    try:
        listed = await services.usage.interventions(namespace, env["objectName"], INTERVENTIONS_SHOWN)
        values["interventions"] = guardrails.intervention_rows(listed.wire()["items"])
        values["interventionsError"] = None
    except DockyardError as exc:
        values["interventions"], values["interventionsError"] = [], exc.message
    return values


@routes.get("/ns/{namespace}/environments/{environment}", response_class=HTMLResponse)
@page
async def environment_page(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    ctx = await context(request, namespace)
    tab = request.query_params.get("tab", "overview")
    return await _env_view(ctx, environment, tab if tab in TABS else "overview", {}, 200)


@routes.get("/ns/{namespace}/environments/{environment}/status")
async def environment_status(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    """For polling: the environment's phase, versions and whether a deployment is still under way."""
    try:
        ctx = await context(request, namespace)
        env = (await ctx.services.environments.get_environment(namespace, environment)).wire()
    except SignInRequired:
        return JSONResponse({"error": "signed out"}, status_code=401)
    except DockyardError as error:
        return JSONResponse({"error": error.message}, status_code=error.status_code)
    h = views.health(env)
    return JSONResponse(
        {
            "phase": h["phase"],
            "tone": h["tone"],
            "reason": h["reason"],
            "appVersion": env["appVersion"],
            "activeVersion": env["activeVersion"],
            "inProgress": views.in_progress(env),
        },
        headers={"Cache-Control": "no-store"},
    )


Action = Callable[[Ctx, dict[str, Any]], Awaitable[tuple[str, dict[str, Any]]]]
"""A form action: what it did as (the page to go to, the flash message to show there)."""


async def env_action(
    request: Request, namespace: str, environment: str, section: str, tab: str, action: Action
) -> Response:
    ctx = await context(request, namespace)
    sent = await form(ctx)
    try:
        url, flash = await action(ctx, sent)
    except ValidationError as exc:
        return await _env_view(ctx, environment, tab, {section: views.errors_from_validation(exc)}, 422)
    except DockyardError as error:
        errors = views.FormErrors()
        field = "confirm" if error.details and "confirm" in str(error.details) else None
        errors.add(field, error.message)
        return await _env_view(ctx, environment, tab, {section: errors}, error.status_code)
    return redirect(ctx, url, flash)


@routes.post("/ns/{namespace}/environments/{environment}/deploy", response_class=HTMLResponse)
@page
async def environment_deploy(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    async def act(ctx: Ctx, sent: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        body = Deploy(version=str(sent.get("version") or ""))
        done = await ctx.services.environments.deploy(namespace, environment, body)
        return f"{ctx.base}/environments/{environment}", {"ok": done.answer.message}

    return await env_action(request, namespace, environment, "deploy", "overview", act)


@routes.post("/ns/{namespace}/environments/{environment}/rollback", response_class=HTMLResponse)
@page
async def environment_rollback(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    async def act(ctx: Ctx, sent: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        body = Rollback(version=str(sent.get("version") or ""), confirm=sent.get("confirm") == "yes")
        done = await ctx.services.environments.rollback(namespace, environment, body)
        return f"{ctx.base}/environments/{environment}?tab=history", {"ok": done.message}

    return await env_action(request, namespace, environment, "rollback", "history", act)


@routes.post("/ns/{namespace}/environments/{environment}/delete", response_class=HTMLResponse)
@page
async def environment_delete(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    async def act(ctx: Ctx, sent: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        environments = ctx.services.environments
        env = await environments.get_environment(namespace, environment)
        typed = str(sent.get("confirm") or "").strip()
        done = await environments.delete_environment(namespace, environment, typed or None)
        return f"{ctx.base}/apps/{env.app}", {"ok": f"Environment {env.name} deleted: {done.message}."}

    return await env_action(request, namespace, environment, "delete", "overview", act)


@routes.post("/ns/{namespace}/environments/{environment}/apikeys", response_class=HTMLResponse)
@page
async def key_create(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    async def act(ctx: Ctx, sent: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        body = KeyCreate(name=str(sent.get("name") or "").strip())
        created = await ctx.services.keys.create_key(namespace, environment, body)
        flash = {"ok": f"API key {created.name!r} generated.", "key": created.key, "keyName": created.name}
        return f"{ctx.base}/environments/{environment}?tab=keys", flash

    return await env_action(request, namespace, environment, "keys", "keys", act)


@routes.post("/ns/{namespace}/environments/{environment}/apikeys/{key_id}/revoke", response_class=HTMLResponse)
@page
async def key_revoke(request: Request, namespace: NamespaceParam, environment: EnvName, key_id: KeyId) -> Response:
    async def act(ctx: Ctx, sent: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        await ctx.services.keys.revoke_key(namespace, environment, key_id)
        return f"{ctx.base}/environments/{environment}?tab=keys", {"ok": "API key revoked: it no longer works."}

    return await env_action(request, namespace, environment, "keys", "keys", act)


async def _change_settings(
    ctx: Ctx, environment: str, tab: str, patch: dict[str, Any], sent: dict[str, Any], origin_field: str | None = None
) -> Response:
    """Call the settings service with ``patch``; a refusal is shown next to the field that caused it."""
    section = "allow" if origin_field else "settings"
    try:
        body = EnvironmentSettings.model_validate(patch)
    except ValidationError as exc:
        errors = settings.errors_from(exc, origin_field)
        return await _env_view(ctx, environment, tab, {section: errors}, 422, sent)
    try:
        await ctx.services.environments.change_settings(ctx.namespace, environment, body)
    except DockyardError as error:
        errors = settings.errors_from_api(error.message, error.details, origin_field)
        return await _env_view(ctx, environment, tab, {section: errors}, error.status_code, sent)
    if origin_field:
        site = patch["widget"]["allowedOrigins"][-1]
        flash = f"{site} added to the allowed origins: the widget now chats on pages of that site."
    else:
        flash = "Settings saved: " + ", ".join(path for path, _ in settings.changed_members(patch)) + "."
    return redirect(ctx, f"{ctx.base}/environments/{environment}?tab={tab}", {"ok": flash})


@routes.post("/ns/{namespace}/environments/{environment}/settings", response_class=HTMLResponse)
@page
async def environment_settings(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    ctx = await context(request, namespace)
    sent = await form(ctx)
    env = (await ctx.services.environments.get_environment(namespace, environment)).wire()
    patch, errors = settings.settings_patch(env, sent)
    if errors:
        return await _env_view(ctx, environment, "settings", {"settings": errors}, 422, sent)
    if not patch:
        url = f"{ctx.base}/environments/{environment}?tab=settings"
        return redirect(ctx, url, {"ok": "Nothing changed: the settings are as they were."})
    return await _change_settings(ctx, environment, "settings", patch, sent)


@routes.post("/ns/{namespace}/environments/{environment}/allow-origin", response_class=HTMLResponse)
@page
async def environment_allow_origin(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    ctx = await context(request, namespace)
    sent = await form(ctx)
    origin = str(sent.get("origin") or "").strip()
    if not origin:
        errors = views.FormErrors()
        errors.add("origin", f"Enter the site's origin: {settings.ORIGIN_HELP}.")
        return await _env_view(ctx, environment, "embed", {"allow": errors}, 422, sent)
    env = (await ctx.services.environments.get_environment(namespace, environment)).wire()
    patch = settings.allow_patch(env, origin)
    if patch is None:
        url = f"{ctx.base}/environments/{environment}?tab=embed"
        return redirect(ctx, url, {"ok": f"{origin} is already allowed."})
    return await _change_settings(ctx, environment, "embed", patch, sent, "origin")
