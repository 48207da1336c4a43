"""The console's pages and actions under ``/console/``: server-rendered (Jinja2), a little JavaScript.

Every page acts as the signed-in Kubernetes user exactly like the management API does (TokenReview of
the session's token, then impersonation and SubjectAccessReviews), by calling the same functions the
management routers run. A refused action is shown in words next to the form that asked for it.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import quote

import jinja2
import yaml
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from pydantic import ValidationError

from dockyard_api import __version__
from dockyard_api.auth import Authenticator
from dockyard_api.console import session as sess
from dockyard_api.console import views
from dockyard_api.deps import AppName, EnvName, KeyId, NamespaceParam, VersionParam, app_state, store_of
from dockyard_api.management.apps import router as apps_api
from dockyard_api.management.catalog import router as catalog_api
from dockyard_api.management.environments import router as env_api
from dockyard_api.management.schemas import (
    Deploy,
    DraftUpdate,
    EnvironmentCreate,
    KeyCreate,
    Restore,
    Rollback,
    VersionCreate,
)
from dockyard_api.management.usage import router as usage_api
from dockyard_core.errors import DockyardError, UnauthenticatedError, from_kube
from dockyard_core.kubeclient import AsyncKube, KubeError, User

PREFIX = "/console"
STATIC = resources.files("dockyard_api.console") / "static"
TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("dockyard_api.console", "templates"),
    autoescape=jinja2.select_autoescape(("html",)),
    trim_blocks=True,
    lstrip_blocks=True,
)
TEMPLATES.globals["version"] = __version__
TEMPLATES.filters["size"] = views.human_size
TABS = ("overview", "history", "keys", "access", "embed", "checklist", "usage")

router = APIRouter(prefix=PREFIX, include_in_schema=False)


class SignInRequired(Exception):
    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Ctx:
    """One request of a signed-in person."""

    request: Request
    session: sess.Session
    user: User
    namespace: str
    flash: dict[str, Any]

    @property
    def kube(self) -> AsyncKube:
        return app_state(self.request).kube

    @property
    def auth(self) -> Authenticator:
        return app_state(self.request).authenticator

    @property
    def base(self) -> str:
        return f"{PREFIX}/ns/{self.namespace}"


def _sealer(request: Request) -> sess.Sealer:
    return app_state(request).console_sealer


def _secure(request: Request) -> bool:
    return sess.over_tls(request.url.scheme, request.headers.get("x-forwarded-proto"))


async def _ctx(request: Request, namespace: str | None = None) -> Ctx:
    session = _sealer(request).open_session(request.cookies.get(sess.SESSION_COOKIE))
    if session is None:
        raise SignInRequired()
    try:
        user = await app_state(request).authenticator.user(f"Bearer {session.token}")
    except UnauthenticatedError as exc:
        raise SignInRequired(f"Your session ended: {exc.message}. Sign in again.") from exc
    flash = _sealer(request).open(request.cookies.get(sess.FLASH_COOKIE), sess.FLASH_SECONDS) or {}
    return Ctx(request, session, user, namespace or session.namespace, flash)


def render(ctx: Ctx | None, name: str, status_code: int = 200, **values: Any) -> HTMLResponse:
    common: dict[str, Any] = {"ctx": ctx, "csrf": ctx.session.csrf if ctx else "", "flash": {}}
    if ctx is not None:
        common.update(base=ctx.base, namespace=ctx.namespace, username=ctx.user.username, flash=ctx.flash)
    page = TEMPLATES.get_template(name).render(**common, **values)
    response = HTMLResponse(page, status_code=status_code, headers=_page_headers())
    if ctx is not None and ctx.flash:
        response.delete_cookie(sess.FLASH_COOKIE, path=sess.COOKIE_PATH)  # a flash is shown once
    return response


def _page_headers() -> dict[str, str]:
    return {
        "Cache-Control": "no-store",
        "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
        "script-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",
    }


def redirect(ctx: Ctx, url: str, flash: dict[str, Any] | None = None) -> RedirectResponse:
    response = RedirectResponse(url, status_code=303)
    if flash:
        response.set_cookie(
            sess.FLASH_COOKIE,
            _sealer(ctx.request).seal(flash),
            **sess.cookie_options(_secure(ctx.request), sess.FLASH_SECONDS),
        )
    return response


def _error(exc: Exception) -> DockyardError:
    if isinstance(exc, KubeError):
        return from_kube(exc)
    assert isinstance(exc, DockyardError)
    return exc


def page(handler: Callable[..., Awaitable[Response]]) -> Callable[..., Awaitable[Response]]:
    """A page handler: an error it does not handle itself is shown in words on an error page."""

    @functools.wraps(handler)
    async def wrapped(*args: Any, **kwargs: Any) -> Response:
        try:
            return await handler(*args, **kwargs)
        except (DockyardError, KubeError) as exc:
            error = _error(exc)
            if isinstance(error, UnauthenticatedError):
                raise SignInRequired(error.message) from exc
            request: Request = kwargs["request"]
            try:
                ctx: Ctx | None = await _ctx(request, kwargs.get("namespace"))
            except DockyardError:  # the API server itself is away: the page says so without a session
                ctx = None
            return render(ctx, "error.html", error.status_code, error=error)

    return wrapped


async def _form(ctx: Ctx) -> dict[str, Any]:
    """The POSTed form, once its CSRF token matched the session's."""
    form = await ctx.request.form()
    if not sess.csrf_ok(ctx.session.csrf, str(form.get("csrf") or "")):
        raise CsrfError()
    return {k: form.getlist(k) if k in ("agent", "tool") else form.get(k) for k in form}


class CsrfError(DockyardError):
    status_code = 403
    code = "csrf"

    def __init__(self) -> None:
        super().__init__(
            "This form expired or was sent from another site (its CSRF token does not match your session). "
            "Reload the page and try again."
        )


# --- sign-in -----------------------------------------------------------------------------------------


@router.get("/", response_class=HTMLResponse)
async def home(request: Request) -> Response:
    session = _sealer(request).open_session(request.cookies.get(sess.SESSION_COOKIE))
    if session is None:
        return RedirectResponse(f"{PREFIX}/signin", status_code=303)
    return RedirectResponse(f"{PREFIX}/ns/{session.namespace}/apps", status_code=303)


def _signin_page(request: Request, errors: views.FormErrors, values: dict[str, str], status_code: int) -> Response:
    csrf = sess.new_csrf()
    page = TEMPLATES.get_template("signin.html").render(
        ctx=None, csrf=csrf, errors=errors, values=values, flash={}, reason=request.query_params.get("reason", "")
    )
    response = HTMLResponse(page, status_code=status_code, headers=_page_headers())
    response.set_cookie(
        sess.PRESESSION_COOKIE, _sealer(request).seal({"c": csrf}), **sess.cookie_options(_secure(request), 3600)
    )
    return response


@router.get("/signin", response_class=HTMLResponse)
async def signin_form(request: Request) -> Response:
    return _signin_page(request, views.FormErrors(), {"namespace": "default"}, 200)


@router.post("/signin", response_class=HTMLResponse)
async def signin(request: Request) -> Response:
    form = await request.form()
    token = str(form.get("token") or "").strip()
    namespace = str(form.get("namespace") or "").strip()
    values = {"namespace": namespace}
    errors = views.FormErrors()
    pre = _sealer(request).open(request.cookies.get(sess.PRESESSION_COOKIE), 3600) or {}
    if not sess.csrf_ok(pre.get("c"), str(form.get("csrf") or "")):
        errors.add(None, "This sign-in form expired or was sent from another site. Try again.")
        return _signin_page(request, errors, values, 403)
    if not views.is_namespace(namespace):
        errors.add("namespace", "Enter the Kubernetes namespace you work in, e.g. default or team-a.")
    if not token:
        errors.add("token", "Paste a Kubernetes token, e.g. the output of kubectl create token <service account>.")
    if errors:
        return _signin_page(request, errors, values, 422)
    try:
        await app_state(request).authenticator.user(f"Bearer {token}")
    except DockyardError as exc:
        errors.add("token", f"This token was not accepted: {exc.message}.")
        return _signin_page(request, errors, values, 401)
    session = sess.Session(token=token, namespace=namespace, csrf=sess.new_csrf())
    response = RedirectResponse(f"{PREFIX}/ns/{namespace}/apps", status_code=303)
    response.set_cookie(
        sess.SESSION_COOKIE,
        _sealer(request).seal_session(session),
        **sess.cookie_options(_secure(request), sess.SESSION_SECONDS),
    )
    response.delete_cookie(sess.PRESESSION_COOKIE, path=sess.COOKIE_PATH)
    return response


@router.post("/signout")
async def signout(request: Request) -> Response:
    ctx = await _ctx(request)
    await _form(ctx)
    response = RedirectResponse(f"{PREFIX}/signin", status_code=303)
    response.delete_cookie(sess.SESSION_COOKIE, path=sess.COOKIE_PATH)
    return response


@router.post("/namespace")
async def switch_namespace(request: Request) -> Response:
    ctx = await _ctx(request)
    form = await _form(ctx)
    namespace = str(form.get("namespace") or "")
    if not views.is_namespace(namespace):
        return redirect(ctx, f"{ctx.base}/apps", {"error": f"{namespace!r} is not a namespace name."})
    return RedirectResponse(f"{PREFIX}/ns/{namespace}/apps", status_code=303)


@router.get("/static/{name}")
async def static(name: str) -> Response:
    media = {
        "console.css": "text/css; charset=utf-8",
        "console.js": "text/javascript; charset=utf-8",
        "signin.js": "text/javascript; charset=utf-8",
    }
    if name not in media:
        return Response("not found", status_code=404)
    body = (STATIC / name).read_text(encoding="utf-8")
    return Response(body, media_type=media[name], headers={"Cache-Control": "public, max-age=300"})


# --- apps and versions -------------------------------------------------------------------------------


@router.get("/ns/{namespace}/apps", response_class=HTMLResponse)
@page
async def apps_page(request: Request, namespace: NamespaceParam) -> Response:
    ctx = await _ctx(request, namespace)
    found = await apps_api.list_apps(namespace, ctx.user, ctx.kube)
    return render(ctx, "apps.html", apps=found["items"])


async def _app_data(ctx: Ctx, app: str) -> dict[str, Any]:
    draft = await apps_api.get_app(ctx.namespace, app, ctx.user, ctx.kube)
    versions = (await apps_api.list_versions(ctx.namespace, app, ctx.user, ctx.kube))["items"]
    envs = (await env_api.list_environments(ctx.namespace, app, ctx.user, ctx.kube))["items"]
    tds = (await catalog_api.list_tool_deployments(ctx.namespace, ctx.user, ctx.kube))["items"]
    rows = []
    for env in views.environment_rows(envs):
        jobs = [t["job"] for t in tds if t["environment"] == env["objectName"]]
        rows.append({**env, "health": views.health(env), "dock": views.dock_status(jobs)})
    return {"app": draft, "versions": versions, "environments": rows}


@router.get("/ns/{namespace}/apps/{app}", response_class=HTMLResponse)
@page
async def app_page(request: Request, namespace: NamespaceParam, app: AppName) -> Response:
    ctx = await _ctx(request, namespace)
    return render(ctx, "app.html", **await _app_data(ctx, app))


def _draft_values(draft: dict[str, Any]) -> dict[str, Any]:
    content = {k: draft.get(k) or [] for k in ("agents", "toolVersions", "mcpServers")}
    return {
        "displayName": draft.get("displayName") or "",
        "description": draft.get("description") or "",
        "content": yaml.safe_dump(content, sort_keys=False, allow_unicode=True),
    }


@router.get("/ns/{namespace}/apps/{app}/draft", response_class=HTMLResponse)
@page
async def draft_edit(request: Request, namespace: NamespaceParam, app: AppName) -> Response:
    ctx = await _ctx(request, namespace)
    draft = await apps_api.get_app(namespace, app, ctx.user, ctx.kube)
    return render(ctx, "draft.html", app=draft, values=_draft_values(draft), errors=views.FormErrors())


@router.post("/ns/{namespace}/apps/{app}/draft", response_class=HTMLResponse)
@page
async def draft_save(request: Request, namespace: NamespaceParam, app: AppName) -> Response:
    ctx = await _ctx(request, namespace)
    form = await _form(ctx)
    values = {k: str(form.get(k) or "") for k in ("displayName", "description", "content")}
    draft = await apps_api.get_app(namespace, app, ctx.user, ctx.kube)
    errors = views.FormErrors()
    try:
        content = yaml.safe_load(values["content"]) or {}
        if not isinstance(content, dict):
            raise yaml.YAMLError("expected a mapping with agents, toolVersions and mcpServers")
    except yaml.YAMLError as exc:
        errors.add("content", f"This is not valid YAML: {exc}")
        return render(ctx, "draft.html", 422, app=draft, values=values, errors=errors)
    try:
        body = DraftUpdate.model_validate(
            {"displayName": values["displayName"] or None, "description": values["description"], **content}
        )
        await apps_api.update_draft(namespace, app, body, ctx.user, ctx.kube)
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
    except (DockyardError, KubeError) as exc:
        error = _error(exc)
        errors.add(None, error.message)
        return render(ctx, "draft.html", error.status_code, app=draft, values=values, errors=errors)
    return redirect(ctx, f"{ctx.base}/apps/{app}", {"ok": "Draft saved."})


async def _version_form(
    ctx: Ctx, app: str, errors: views.FormErrors, values: dict[str, Any], status_code: int
) -> Response:
    agents = (await catalog_api.list_agent_versions(ctx.namespace, app, ctx.user, ctx.kube))["items"]
    tools = (await catalog_api.list_tools(ctx.namespace, ctx.user, ctx.kube))["items"]
    versions = (await apps_api.list_versions(ctx.namespace, app, ctx.user, ctx.kube))["items"]
    draft = await apps_api.get_app(ctx.namespace, app, ctx.user, ctx.kube)
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


@router.get("/ns/{namespace}/apps/{app}/versions/new", response_class=HTMLResponse)
@page
async def version_new(request: Request, namespace: NamespaceParam, app: AppName) -> Response:
    ctx = await _ctx(request, namespace)
    return await _version_form(ctx, app, views.FormErrors(), {}, 200)


@router.post("/ns/{namespace}/apps/{app}/versions/new", response_class=HTMLResponse)
@page
async def version_create(request: Request, namespace: NamespaceParam, app: AppName) -> Response:
    ctx = await _ctx(request, namespace)
    form = await _form(ctx)
    values = {k: form.get(k, "") for k in ("version", "name", "description")}
    values["agent"], values["tool"] = form.get("agent", []), form.get("tool", [])
    catalog = (await catalog_api.list_agent_versions(namespace, app, ctx.user, ctx.kube))["items"]
    by_key = {f"{a['name']}@{a['version']}": a["agent"] for a in catalog}
    errors = views.FormErrors()
    chosen_agents = [by_key[k] for k in values["agent"] if k in by_key]
    names = [a["name"] for a in chosen_agents]
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
        created = await apps_api.create_version(namespace, app, body, ctx.user, ctx.kube)
    except (DockyardError, KubeError) as exc:
        error = _error(exc)
        return await _version_form(ctx, app, views.errors_from_api(error.message, error.details), values, 422)
    return redirect(
        ctx,
        f"{ctx.base}/apps/{app}/versions/{created['version']}",
        {"ok": f"Version {created['version']} ({created['name']}) created and validated."},
    )


@router.get("/ns/{namespace}/apps/{app}/versions/{version}", response_class=HTMLResponse)
@page
async def version_page(request: Request, namespace: NamespaceParam, app: AppName, version: VersionParam) -> Response:
    ctx = await _ctx(request, namespace)
    return await _version_view(ctx, app, version, {}, 200)


async def _version_view(
    ctx: Ctx, app: str, version: str, errors: dict[str, views.FormErrors], status_code: int
) -> Response:
    found = await apps_api.get_version(ctx.namespace, app, version, ctx.user, ctx.kube)
    return render(ctx, "version.html", status_code, app=app, v=found, errors=errors)


@router.post("/ns/{namespace}/apps/{app}/versions/{version}/restore", response_class=HTMLResponse)
@page
async def version_restore(request: Request, namespace: NamespaceParam, app: AppName, version: VersionParam) -> Response:
    ctx = await _ctx(request, namespace)
    form = await _form(ctx)
    if form.get("confirm") != "yes":
        errors = views.FormErrors()
        errors.add("confirm", "Tick the box to confirm: a restore overwrites the whole draft and cannot be undone.")
        return await _version_view(ctx, app, version, {"restore": errors}, 422)
    try:
        await apps_api.restore(namespace, app, Restore(version=version, confirm=True), ctx.user, ctx.kube, ctx.auth)
    except (DockyardError, KubeError) as exc:
        error = _error(exc)
        return await _version_view(ctx, app, version, {"restore": views.errors_from_api(error.message, None)}, 403)
    return redirect(ctx, f"{ctx.base}/apps/{app}", {"ok": f"The draft now holds version {version}."})


@router.post("/ns/{namespace}/apps/{app}/versions/{version}/delete", response_class=HTMLResponse)
@page
async def version_delete(request: Request, namespace: NamespaceParam, app: AppName, version: VersionParam) -> Response:
    ctx = await _ctx(request, namespace)
    await _form(ctx)
    try:
        await apps_api.delete_version(namespace, app, version, ctx.user, ctx.kube)
    except (DockyardError, KubeError) as exc:
        error = _error(exc)
        errors = views.FormErrors()
        errors.add(None, error.message)
        return await _version_view(ctx, app, version, {"delete": errors}, error.status_code)
    return redirect(ctx, f"{ctx.base}/apps/{app}", {"ok": f"Version {version} deleted."})


# --- environments ------------------------------------------------------------------------------------


async def _env_form(ctx: Ctx, app: str, errors: views.FormErrors, values: dict[str, Any], code: int) -> Response:
    versions = (await apps_api.list_versions(ctx.namespace, app, ctx.user, ctx.kube))["items"]
    return render(ctx, "environment_new.html", code, app=app, versions=versions, errors=errors, values=values)


@router.get("/ns/{namespace}/apps/{app}/environments/new", response_class=HTMLResponse)
@page
async def environment_new(request: Request, namespace: NamespaceParam, app: AppName) -> Response:
    ctx = await _ctx(request, namespace)
    return await _env_form(ctx, app, views.FormErrors(), {}, 200)


@router.post("/ns/{namespace}/apps/{app}/environments/new", response_class=HTMLResponse)
@page
async def environment_create(request: Request, namespace: NamespaceParam, app: AppName) -> Response:
    ctx = await _ctx(request, namespace)
    form = await _form(ctx)
    values = {k: str(form.get(k) or "") for k in ("name", "description", "appVersion")}
    try:
        body = EnvironmentCreate(
            name=values["name"], description=values["description"], app_version=values["appVersion"] or None
        )
    except ValidationError as exc:
        return await _env_form(ctx, app, views.errors_from_validation(exc), values, 422)
    try:
        created = await env_api.create_environment(namespace, app, body, ctx.user, ctx.kube)
    except (DockyardError, KubeError) as exc:
        error = _error(exc)
        errors = views.errors_from_api(error.message, error.details)
        return await _env_form(ctx, app, errors, values, error.status_code)
    return redirect(
        ctx,
        f"{ctx.base}/environments/{created['objectName']}",
        {"ok": f"Environment {created['name']} created; deploying version {created['appVersion']}."},
    )


async def _env_view(
    ctx: Ctx, environment: str, tab: str, errors: dict[str, views.FormErrors], status_code: int
) -> Response:
    env = await env_api.get_environment(ctx.namespace, environment, ctx.user, ctx.kube)
    versions = (await apps_api.list_versions(ctx.namespace, env["app"], ctx.user, ctx.kube))["items"]
    values: dict[str, Any] = {"env": env, "versions": versions, "tab": tab, "errors": errors, "tabs": TABS}
    values["health"] = views.health(env)
    values["busy"] = views.in_progress(env)
    values["history"] = views.history_rows(env)
    if tab == "overview":
        tds = (await catalog_api.list_tool_deployments(ctx.namespace, ctx.user, ctx.kube))["items"]
        mine = [t for t in tds if t["environment"] == environment]
        values["toolDeployments"] = mine
        values["dock"] = views.dock_status([t["job"] for t in mine])
    if tab == "keys":
        try:
            values["keys"] = (await env_api.list_keys(ctx.namespace, environment, ctx.user, ctx.kube, ctx.auth))[
                "items"
            ]
            values["keysError"] = None
        except DockyardError as exc:
            values["keys"], values["keysError"] = [], exc.message
    if tab == "checklist":
        values["checklist"] = views.checklist_groups(env.get("checklist") or [])
    if tab == "usage":
        try:
            report = await usage_api.environment_usage(
                ctx.namespace, environment, ctx.user, ctx.auth, store_of(ctx.request), None, None
            )
            values["usage"], values["usageError"] = report, None
            values["chart"] = views.usage_chart(views.dense_days(report))
        except DockyardError as exc:
            values["usage"], values["usageError"], values["chart"] = None, exc.message, ""
    return render(ctx, "environment.html", status_code, **values)


@router.get("/ns/{namespace}/environments/{environment}", response_class=HTMLResponse)
@page
async def environment_page(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    ctx = await _ctx(request, namespace)
    tab = request.query_params.get("tab", "overview")
    return await _env_view(ctx, environment, tab if tab in TABS else "overview", {}, 200)


@router.get("/ns/{namespace}/environments/{environment}/status")
async def environment_status(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    """For polling: the environment's phase, versions and whether a deployment is still under way."""
    try:
        ctx = await _ctx(request, namespace)
        env = await env_api.get_environment(namespace, environment, ctx.user, ctx.kube)
    except SignInRequired:
        return JSONResponse({"error": "signed out"}, status_code=401)
    except (DockyardError, KubeError) as exc:
        error = _error(exc)
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


async def _env_action(
    request: Request,
    namespace: str,
    environment: str,
    section: str,
    tab: str,
    action: Callable[[Ctx, dict[str, Any]], Awaitable[tuple[str, dict[str, Any]]]],
) -> Response:
    ctx = await _ctx(request, namespace)
    form = await _form(ctx)
    try:
        url, flash = await action(ctx, form)
    except ValidationError as exc:
        return await _env_view(ctx, environment, tab, {section: views.errors_from_validation(exc)}, 422)
    except (DockyardError, KubeError) as exc:
        error = _error(exc)
        errors = views.FormErrors()
        field = "confirm" if error.details and "confirm" in str(error.details) else None
        errors.add(field, error.message)
        return await _env_view(ctx, environment, tab, {section: errors}, error.status_code)
    return redirect(ctx, url, flash)


@router.post("/ns/{namespace}/environments/{environment}/deploy", response_class=HTMLResponse)
@page
async def environment_deploy(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    async def act(ctx: Ctx, form: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        body = Deploy(version=str(form.get("version") or ""))
        done = await env_api.deploy(namespace, environment, body, ctx.user, ctx.kube, ctx.auth, Response())
        return f"{ctx.base}/environments/{environment}", {"ok": done["message"]}

    return await _env_action(request, namespace, environment, "deploy", "overview", act)


@router.post("/ns/{namespace}/environments/{environment}/rollback", response_class=HTMLResponse)
@page
async def environment_rollback(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    async def act(ctx: Ctx, form: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        body = Rollback(version=str(form.get("version") or ""), confirm=form.get("confirm") == "yes")
        done = await env_api.rollback(namespace, environment, body, ctx.user, ctx.kube, ctx.auth)
        return f"{ctx.base}/environments/{environment}?tab=history", {"ok": done["message"]}

    return await _env_action(request, namespace, environment, "rollback", "history", act)


@router.post("/ns/{namespace}/environments/{environment}/delete", response_class=HTMLResponse)
@page
async def environment_delete(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    app: dict[str, str] = {}

    async def act(ctx: Ctx, form: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        env = await env_api.get_environment(namespace, environment, ctx.user, ctx.kube)
        app["name"] = env["app"]
        typed = str(form.get("confirm") or "").strip()
        done = await env_api.delete_environment(namespace, environment, ctx.user, ctx.kube, ctx.auth, typed or None)
        return f"{ctx.base}/apps/{env['app']}", {"ok": f"Environment {env['name']} deleted: {done['message']}."}

    return await _env_action(request, namespace, environment, "delete", "overview", act)


@router.post("/ns/{namespace}/environments/{environment}/apikeys", response_class=HTMLResponse)
@page
async def key_create(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    async def act(ctx: Ctx, form: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        body = KeyCreate(name=str(form.get("name") or "").strip())
        created = await env_api.create_key(namespace, environment, body, ctx.user, ctx.kube, ctx.auth)
        flash = {"ok": f"API key {created.name!r} generated.", "key": created.key, "keyName": created.name}
        return f"{ctx.base}/environments/{environment}?tab=keys", flash

    return await _env_action(request, namespace, environment, "keys", "keys", act)


@router.post("/ns/{namespace}/environments/{environment}/apikeys/{key_id}/revoke", response_class=HTMLResponse)
@page
async def key_revoke(request: Request, namespace: NamespaceParam, environment: EnvName, key_id: KeyId) -> Response:
    async def act(ctx: Ctx, form: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        await env_api.revoke_key(namespace, environment, key_id, ctx.user, ctx.kube, ctx.auth)
        return f"{ctx.base}/environments/{environment}?tab=keys", {"ok": "API key revoked: it no longer works."}

    return await _env_action(request, namespace, environment, "keys", "keys", act)


# --- models and tools --------------------------------------------------------------------------------


@router.get("/ns/{namespace}/models", response_class=HTMLResponse)
@page
async def models_page(request: Request, namespace: NamespaceParam) -> Response:
    ctx = await _ctx(request, namespace)
    models = (await catalog_api.list_models(namespace, ctx.user, ctx.kube))["items"]
    mds = (await catalog_api.list_model_deployments(namespace, ctx.user, ctx.kube))["items"]
    tds = (await catalog_api.list_tool_deployments(namespace, ctx.user, ctx.kube))["items"]
    tools = (await catalog_api.list_tools(namespace, ctx.user, ctx.kube))["items"]
    busy = any((d["job"] or {}).get("status") == "IN_PROGRESS" for d in [*mds, *tds, *models])
    return render(ctx, "models.html", models=models, modelDeployments=mds, toolDeployments=tds, tools=tools, busy=busy)


# --- wiring ------------------------------------------------------------------------------------------


def install(app: FastAPI) -> None:
    """Mount the console on the facade (``/console/``)."""

    async def signin_required(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, SignInRequired)
        target = f"{PREFIX}/signin" + (f"?reason={quote(exc.reason)}" if exc.reason else "")
        response = RedirectResponse(target, status_code=303)
        response.delete_cookie(sess.SESSION_COOKIE, path=sess.COOKIE_PATH)
        return response

    app.add_exception_handler(SignInRequired, signin_required)
    app.include_router(router)


def sealer_for(token_key: bytes) -> sess.Sealer:
    return sess.Sealer(token_key)
