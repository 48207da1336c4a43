"""HTTP side of the web client and the widget, under an environment's base URL ``/e/{namespace}/{environment}``.

- ``GET  {base}/v1/loader.js``: the widget (one dependency-free script; ETag, gzip, cached 5 minutes).
- ``POST {base}/v1/widget/token``: a short-lived token for a page of an allowed site (Origin checked), or,
  called by a site's server with an API key, for one of its signed-in users (``identify``).
- ``GET  {base}/web/``: the web client page; ``POST {base}/web/token``: its token (public page: anonymous
  user, same origin only; signIn: a Kubernetes token allowed to get the Environment).
- CORS of ``{base}/v1/...`` for browsers: :mod:`dockyard_api.web.cors`, installed with the routes.

The tokens' rules are :class:`~dockyard_api.web.service.WebService`'s; the page and the script are
:mod:`dockyard_api.web.assets`.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, FastAPI, Header, Request
from fastapi.responses import RedirectResponse, Response

from dockyard_api.deps import Auth, EnvName, NamespaceParam, Web
from dockyard_api.web.assets import LOADER, LOADER_MAX_AGE, page_html
from dockyard_api.web.cors import CorsMiddleware
from dockyard_api.web.schemas import IssuedToken, WebTokenRequest, WidgetTokenRequest

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
    summary="A token for the web client page (public: anonymous; signIn: Kubernetes token)",
    response_model_exclude_none=True,
)
async def web_token(
    request: Request,
    namespace: NamespaceParam,
    environment: EnvName,
    body: WebTokenRequest,
    auth: Auth,
    service: Web,
    authorization: Annotated[str | None, Header(description="signIn pages: Bearer <Kubernetes token>")] = None,
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


def install(app: FastAPI, prefix: str) -> None:
    """Add the web client and widget routes (under the environment prefix) and their CORS handling."""
    app.include_router(router, prefix=prefix)
    app.add_middleware(CorsMiddleware)
