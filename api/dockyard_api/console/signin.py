"""The console's sign-in and sign-out, the namespace switch and the static files."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from dockyard_api.console import session as sess
from dockyard_api.console import views
from dockyard_api.console.common import (
    PREFIX,
    STATIC,
    TEMPLATES,
    context,
    form,
    page_headers,
    redirect,
    sealer,
    secure,
)
from dockyard_api.deps import app_state
from dockyard_core.errors import DockyardError

routes = APIRouter(include_in_schema=False)

MEDIA = {
    "console.css": "text/css; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "signin.js": "text/javascript; charset=utf-8",
}


@routes.get("/", response_class=HTMLResponse)
async def home(request: Request) -> Response:
    session = sealer(request).open_session(request.cookies.get(sess.SESSION_COOKIE))
    if session is None:
        return RedirectResponse(f"{PREFIX}/signin", status_code=303)
    return RedirectResponse(f"{PREFIX}/ns/{session.namespace}/apps", status_code=303)


def _signin_page(request: Request, errors: views.FormErrors, values: dict[str, str], status_code: int) -> Response:
    csrf = sess.new_csrf()
    page = TEMPLATES.get_template("signin.html").render(
        ctx=None, csrf=csrf, errors=errors, values=values, flash={}, reason=request.query_params.get("reason", "")
    )
    response = HTMLResponse(page, status_code=status_code, headers=page_headers())
    response.set_cookie(
        sess.PRESESSION_COOKIE, sealer(request).seal({"c": csrf}), **sess.cookie_options(secure(request), 3600)
    )
    return response


@routes.get("/signin", response_class=HTMLResponse)
async def signin_form(request: Request) -> Response:
    return _signin_page(request, views.FormErrors(), {"namespace": "default"}, 200)


@routes.post("/signin", response_class=HTMLResponse)
async def signin(request: Request) -> Response:
    sent = await request.form()
    token = str(sent.get("token") or "").strip()
    namespace = str(sent.get("namespace") or "").strip()
    values = {"namespace": namespace}
    errors = views.FormErrors()
    pre = sealer(request).open(request.cookies.get(sess.PRESESSION_COOKIE), 3600) or {}
    if not sess.csrf_ok(pre.get("c"), str(sent.get("csrf") or "")):
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
        sealer(request).seal_session(session),
        **sess.cookie_options(secure(request), sess.SESSION_SECONDS),
    )
    response.delete_cookie(sess.PRESESSION_COOKIE, path=sess.COOKIE_PATH)
    return response


@routes.post("/signout")
async def signout(request: Request) -> Response:
    ctx = await context(request)
    await form(ctx)
    response = RedirectResponse(f"{PREFIX}/signin", status_code=303)
    response.delete_cookie(sess.SESSION_COOKIE, path=sess.COOKIE_PATH)
    return response


@routes.post("/namespace")
async def switch_namespace(request: Request) -> Response:
    ctx = await context(request)
    sent = await form(ctx)
    namespace = str(sent.get("namespace") or "")
    if not views.is_namespace(namespace):
        return redirect(ctx, f"{ctx.base}/apps", {"error": f"{namespace!r} is not a namespace name."})
    return RedirectResponse(f"{PREFIX}/ns/{namespace}/apps", status_code=303)


@routes.get("/static/{name}")
async def static(name: str) -> Response:
    if name not in MEDIA:
        return Response("not found", status_code=404)
    body = (STATIC / name).read_text(encoding="utf-8")
    return Response(body, media_type=MEDIA[name], headers={"Cache-Control": "public, max-age=300"})
