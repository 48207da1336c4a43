"""HTTP side of the web client and the widget, under an environment's base URL ``/e/{namespace}/{environment}``.

- ``GET  {base}/v1/loader.js``: the widget (one dependency-free script; ETag, gzip, cached 5 minutes).
- ``POST {base}/v1/widget/token``: a short-lived token for a page of an allowed site (Origin checked), or,
  called by a site's server with an API key, for one of its signed-in users (``identify``).
- ``GET  {base}/web/``: the web client page; ``POST {base}/web/token``: its token (public page: anonymous
  user, same origin only; kubernetes (signIn): a Kubernetes token allowed to get the Environment; oidc: the
  token the sign-in's callback handed to the page).
- ``GET  {base}/web/oidc/login`` and ``GET {base}/web/oidc/callback``: the sign-in of an oidc web client
  through its OpenID Connect provider (:mod:`dockyard_api.web.sign_in`); browser errors as a page.
- CORS of ``{base}/v1/...`` for browsers: :mod:`dockyard_api.web.cors`, installed with the routes.

The tokens' rules are :class:`~dockyard_api.web.service.WebService`'s; the page and the script are
:mod:`dockyard_api.web.assets`.
"""

from __future__ import annotations

import html
from typing import Annotated

from fastapi import APIRouter, Cookie, FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from dockyard_api.deps import Auth, EnvName, NamespaceParam, Web
from dockyard_api.errors import error_body
from dockyard_api.web.assets import LOADER, LOADER_MAX_AGE, page_html
from dockyard_api.web.cors import CorsMiddleware
from dockyard_api.web.oidc import COOKIE
from dockyard_api.web.schemas import IssuedToken, WebTokenRequest, WidgetTokenRequest
from dockyard_api.web.sign_in import Redirect
from dockyard_core.errors import DockyardError

router = APIRouter(tags=["web client and widget"])


def _address(request: Request) -> str:
    return request.client.host if request.client else ""


@router.get(
    "/v1/loader.js",
    summary="The embeddable chat widget's loader script ({widget_url}/v1/loader.js)",
    response_class=Response,
    responses={200: {"content": {"text/javascript": {}}}},
)
async def loader(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    # The same script serves every environment: it finds its environment from its own src URL. So it is
    # served without reading the Environment (a CDN may cache it; an unknown environment fails at token time).
    return LOADER.response(
        request,
        {
            "Cache-Control": f"public, max-age={LOADER_MAX_AGE}, stale-while-revalidate=86400",
            "X-Content-Type-Options": "nosniff",
            "Cross-Origin-Resource-Policy": "cross-origin",
        },
    )


@router.post(
    "/v1/widget/token",
    summary="A short-lived widget token for an allowed site (or a site's signed-in user)",
    response_model_exclude_none=True,
)
async def widget_token(
    request: Request,
    namespace: NamespaceParam,
    environment: EnvName,
    body: WidgetTokenRequest,
    auth: Auth,
    service: Web,
    authorization: Annotated[str | None, Header(description="Bearer <API key>: only a site's server")] = None,
    origin: Annotated[str | None, Header(description="Sent by the browser: must be an allowed origin")] = None,
) -> IssuedToken:
    return await service.widget_token(
        auth, namespace, environment, body, authorization=authorization, origin=origin, address=_address(request)
    )


@router.get("/web", include_in_schema=False)
async def web_no_slash(request: Request) -> RedirectResponse:
    return RedirectResponse(request.url.path + "/", status_code=308)


@router.get("/web/", summary="The web client: a chat page for the environment's app", response_class=Response)
async def web_page(namespace: NamespaceParam, environment: EnvName, service: Web) -> Response:
    config = await service.page_config(namespace, environment)
    csp = (
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; "
        f"img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors {config.frame_ancestors}"
    )
    return Response(
        page_html(config),
        media_type="text/html; charset=utf-8",
        headers={
            "Content-Security-Policy": csp,
            "Cache-Control": "no-store",
            "Referrer-Policy": "no-referrer",
            "X-Content-Type-Options": "nosniff",
        },
    )


@router.post(
    "/web/token",
    summary="A token for the web client page (public: anonymous; kubernetes: Kubernetes token; oidc: signed in)",
    response_model_exclude_none=True,
)
async def web_token(
    request: Request,
    namespace: NamespaceParam,
    environment: EnvName,
    body: WebTokenRequest,
    auth: Auth,
    service: Web,
    authorization: Annotated[
        str | None,
        Header(description="kubernetes pages: Bearer <Kubernetes token>; oidc: Bearer <the sign-in's web token>"),
    ] = None,
    origin: Annotated[str | None, Header()] = None,
) -> IssuedToken:
    return await service.web_token(
        auth,
        namespace,
        environment,
        body,
        authorization=authorization,
        origin=origin,
        host=request.headers.get("host"),
        address=_address(request),
    )


def _page_url(request: Request) -> str:
    """The web client page's URL as this request reached it (before the operator publishes webClientUrl)."""
    return str(request.url.replace(query=None, fragment=None)).rsplit("/oidc/", 1)[0] + "/"


def _redirect(to: Redirect, secure: bool) -> RedirectResponse:
    answer = RedirectResponse(to.location, status_code=303, headers={"Cache-Control": "no-store"})
    if to.cookie is None:
        answer.delete_cookie(COOKIE, path=to.cookie_path, secure=secure, httponly=True, samesite="lax")
    else:
        answer.set_cookie(
            COOKIE, to.cookie, max_age=600, path=to.cookie_path, secure=secure, httponly=True, samesite="lax"
        )
    return answer


def _failure(request: Request, exc: DockyardError) -> Response:
    """A sign-in that failed: the JSON error for programs, a readable page for a browser (it navigated here)."""
    headers = {"Cache-Control": "no-store", **(exc.headers() or {})}
    if "text/html" not in request.headers.get("accept", ""):
        return JSONResponse(error_body(exc.code, exc.message, exc.details), exc.status_code, headers=headers)
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
        'content="width=device-width, initial-scale=1"><title>Sign-in failed · Dockyard</title></head>'
        '<body style="font-family: system-ui, sans-serif; max-width: 40rem; margin: 2rem auto; padding: 0 1rem">'
        f'<h1>Sign-in failed</h1><p role="alert">{html.escape(exc.message)}</p>'
        f"<p><small>{html.escape(exc.code)} ({exc.status_code})</small></p>"
        f'<p><a href="{html.escape(_page_url(request))}">Back to the chat</a></p></body></html>'
    )
    csp = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
    return Response(page, exc.status_code, media_type="text/html; charset=utf-8",
                    headers={**headers, "Content-Security-Policy": csp})  # fmt: skip


@router.get("/web/oidc/login", summary="Sign in to an oidc web client: sends the browser to the provider")
async def oidc_login(request: Request, namespace: NamespaceParam, environment: EnvName, service: Web) -> Response:
    try:
        to = await service.sign_in.login(namespace, environment, _page_url(request), _address(request))
    except DockyardError as exc:
        return _failure(request, exc)
    return _redirect(to, request.url.scheme == "https")


@router.get("/web/oidc/callback", summary="The OpenID provider's answer: signs in and returns to the web client")
async def oidc_callback(
    request: Request,
    namespace: NamespaceParam,
    environment: EnvName,
    service: Web,
    code: Annotated[str | None, Query(max_length=4096)] = None,
    state: Annotated[str | None, Query(max_length=512)] = None,
    error: Annotated[str | None, Query(max_length=256)] = None,
    error_description: Annotated[str | None, Query(max_length=1024)] = None,
    cookie: Annotated[str | None, Cookie(alias=COOKIE)] = None,
) -> Response:
    try:
        to = await service.sign_in.callback(
            namespace, environment, _page_url(request), code=code, state=state, error=error,
            error_description=error_description, cookie=cookie,
        )  # fmt: skip
    except DockyardError as exc:
        return _failure(request, exc)
    return _redirect(to, request.url.scheme == "https")


def install(app: FastAPI, prefix: str) -> None:
    """Add the web client and widget routes (under the environment prefix) and their CORS handling."""
    app.include_router(router, prefix=prefix)
    app.add_middleware(CorsMiddleware)
