"""HTTP side of the web client and the widget, under an environment's base URL ``/e/{namespace}/{environment}``.

- ``GET  {base}/v1/loader.js``: the widget (one dependency-free script; ETag, gzip, cached 5 minutes).
- ``POST {base}/v1/widget/token``: a short-lived token for a page of an allowed site (Origin checked), or,
  called by a site's server with an API key, for one of its signed-in users (``identify``).
- ``GET  {base}/web/``: the web client page; ``POST {base}/web/token``: its token (public page: anonymous
  user, same origin only; signIn: a Kubernetes token allowed to get the Environment).
- CORS of ``{base}/v1/...`` for browsers: the token endpoint answers every site (it decides itself and
  says why not); the deployed-app API answers the sites in ``spec.widget.allowedOrigins`` only.
"""

from __future__ import annotations

import gzip
import hashlib
import html
import re
from importlib import resources
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Header, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dockyard_api import __version__
from dockyard_api.auth import bearer
from dockyard_api.deps import Auth, EnvName, NamespaceParam, Web, state_of
from dockyard_api.errors import error_body
from dockyard_api.web import tokens
from dockyard_api.web.service import BrowserConfig, WebService, same_origin
from dockyard_core.errors import ForbiddenError, NotFoundError, UnauthenticatedError

STATIC = resources.files("dockyard_api.web") / "static"
LOADER_MAX_AGE = 300
"""Seconds a browser or CDN may reuse loader.js without asking (then it revalidates with its ETag)."""


class _Asset:
    """A static text asset held in memory with its ETag and gzip form."""

    def __init__(self, name: str, media_type: str) -> None:
        text = (STATIC / name).read_text(encoding="utf-8").replace("__DOCKYARD_VERSION__", __version__)
        self.body = text.encode()
        self.gzipped = gzip.compress(self.body, compresslevel=9, mtime=0)
        self.etag = '"' + hashlib.sha256(self.body).hexdigest()[:20] + '"'
        self.media_type = media_type

    def response(self, request: Request, headers: dict[str, str]) -> Response:
        headers = {**headers, "ETag": self.etag, "Vary": "Accept-Encoding"}
        if self.etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
            return Response(status_code=304, headers=headers)
        if "gzip" in request.headers.get("accept-encoding", ""):
            return Response(self.gzipped, media_type=self.media_type, headers={**headers, "Content-Encoding": "gzip"})
        return Response(self.body, media_type=self.media_type, headers=headers)


LOADER = _Asset("loader.js", "text/javascript; charset=utf-8")
PAGE = (STATIC / "page.html").read_text(encoding="utf-8")

router = APIRouter(tags=["web client and widget"])


class WidgetTokenRequest(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True, extra="forbid")

    app_id: Annotated[str, Field(min_length=1, max_length=253)]
    """The app of the page's snippet (data-app-id); must be the environment's app."""
    previous_token: Annotated[str | None, Field(max_length=4096)] = None
    """The token the widget held before (even expired): renewing it keeps the same anonymous end user."""
    end_user: Annotated[str | None, Field(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")] = None
    """Only with an API key (a site's server): the site's own user id, for identify()."""


class WebTokenRequest(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True, extra="forbid")

    previous_token: Annotated[str | None, Field(max_length=4096)] = None


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


@router.post("/v1/widget/token", summary="A short-lived widget token for an allowed site (or a site's signed-in user)")
async def widget_token(
    request: Request,
    namespace: NamespaceParam,
    environment: EnvName,
    body: WidgetTokenRequest,
    auth: Auth,
    service: Web,
    authorization: Annotated[str | None, Header(description="Bearer <API key>: only a site's server")] = None,
    origin: Annotated[str | None, Header(description="Sent by the browser: must be an allowed origin")] = None,
) -> dict[str, Any]:
    config = await service.directory.require(namespace, environment)
    _check_app(config, body.app_id)
    key = bearer(authorization)
    if key and not tokens.is_token(key):
        # a site's server vouches for one of its signed-in users (identify): the API key is the proof
        await auth.key_caller(namespace, environment, key)  # 401/403 unless a key of this environment
        if not body.end_user:
            raise UnauthenticatedError("endUser is required with an API key (the site's id of its signed-in user)")
        issued = await service.issue(
            config, kind="widget", sub=f"user:{body.end_user}", ttl=config.widget.token_ttl_seconds
        )
        return issued.view()
    if body.end_user:
        raise ForbiddenError(
            "endUser may only be set by a site's server with an API key (a page cannot choose who it is)",
            {"reason": "end_user_needs_api_key"},
        )
    if not config.origin_allowed(origin):
        raise ForbiddenError(
            f"the site {origin or '(no Origin header)'} is not allowed to use this chat: the environment's owner "
            f"can add it to spec.widget.allowedOrigins of environment {namespace}/{environment}",
            {"reason": "origin_not_allowed", "origin": origin, "allowedOrigins": len(config.widget.allowed_origins)},
        )
    service.limits.hit(
        f"t/{namespace}/{environment}/{_address(request)}",
        config.widget.tokens_per_minute_per_address,
        "spec.widget.tokensPerMinutePerAddress",
    )
    issued = await service.issue(
        config, kind="widget", sub=None, ttl=config.widget.token_ttl_seconds, previous=body.previous_token
    )
    return issued.view()


def _check_app(config: BrowserConfig, app_id: str) -> None:
    if app_id != config.app:
        raise NotFoundError(
            f"environment {config.namespace}/{config.environment} serves app {config.app!r}, not {app_id!r}",
            {"appId": config.app},
        )


async def _page_config(service: WebService, namespace: str, environment: str) -> BrowserConfig:
    config = await service.directory.get(namespace, environment)
    if config is None or config.access.web_client == "disabled":
        raise NotFoundError(f"environment {namespace}/{environment} has no web client")
    return config


@router.get("/web", include_in_schema=False)
async def web_no_slash(request: Request) -> RedirectResponse:
    return RedirectResponse(request.url.path + "/", status_code=308)


@router.get("/web/", summary="The web client: a chat page for the environment's app", response_class=Response)
async def web_page(namespace: NamespaceParam, environment: EnvName, service: Web) -> Response:
    config = await _page_config(service, namespace, environment)
    esc = html.escape
    title = f"{config.app} · {config.display_name}"
    page = (
        PAGE.replace("{{title}}", esc(title))
        .replace("{{app}}", esc(config.app))
        .replace("{{loader}}", f"../v1/loader.js?v={LOADER.etag.strip(chr(34))}")
    )
    csp = (
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; "
        f"img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors {config.frame_ancestors}"
    )
    return Response(
        page,
        media_type="text/html; charset=utf-8",
        headers={
            "Content-Security-Policy": csp,
            "Cache-Control": "no-store",
            "Referrer-Policy": "no-referrer",
            "X-Content-Type-Options": "nosniff",
        },
    )


@router.post("/web/token", summary="A token for the web client page (public: anonymous; signIn: Kubernetes token)")
async def web_token(
    request: Request,
    namespace: NamespaceParam,
    environment: EnvName,
    body: WebTokenRequest,
    auth: Auth,
    service: Web,
    authorization: Annotated[str | None, Header(description="signIn pages: Bearer <Kubernetes token>")] = None,
    origin: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    config = await _page_config(service, namespace, environment)
    if not same_origin(origin, request.headers.get("host")):
        raise ForbiddenError(
            "web-client tokens are only issued to the web client page itself (same origin); sites embed the widget",
            {"reason": "origin"},
        )
    service.limits.hit(
        f"t/{namespace}/{environment}/{_address(request)}",
        config.widget.tokens_per_minute_per_address,
        "spec.widget.tokensPerMinutePerAddress",
    )
    if config.access.web_client == "public":
        issued = await service.issue(
            config, kind="web", sub=None, ttl=config.widget.token_ttl_seconds, previous=body.previous_token
        )
        return issued.view()
    if not bearer(authorization):
        raise UnauthenticatedError(
            f"the web client of {namespace}/{environment} needs a sign-in: a Kubernetes token of a user who may get "
            "the Environment (kubectl create token ...)",
            {"reason": "sign_in_required"},
        )
    user = await auth.user(authorization)
    await auth.require(user, verb="get", namespace=namespace, resource="environments")
    issued = await service.issue(
        config, kind="web", sub=f"k8s:{user.username}", ttl=service.settings.web_sign_in_seconds
    )
    return {**issued.view(), "signedInAs": user.username}


_V1_PATH = re.compile(r"^/e/([a-z0-9][-a-z0-9]*)/([a-z0-9][-a-z0-9.]*)/v1/(.*)$")


class CorsMiddleware:
    """CORS of the deployed-app API for browsers, from each environment's ``spec.widget.allowedOrigins``.

    Only ``/e/{ns}/{env}/v1/...`` requests that carry an Origin are looked at; everything else passes
    untouched (pure ASGI: streaming answers stream on)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        match = _V1_PATH.match(scope["path"])
        origin = _header(scope, b"origin")
        if match is None or origin is None:
            await self.app(scope, receive, send)
            return
        namespace, environment, rest = match.groups()
        if same_origin(origin, _header(scope, b"host")):
            await self.app(scope, receive, send)  # the web client page: same origin, no CORS
            return
        if rest == "widget/token":
            allowed = True  # any site may ask; the endpoint answers which may not, readably
        else:
            service = state_of(scope["app"]).web
            try:
                config = await service.directory.get(namespace, environment)
            except Exception:  # the API server is away: no CORS grant; the request itself reports the error
                config = None
            allowed = config is not None and config.origin_allowed(origin)
        cors = [
            (b"access-control-allow-origin", origin.encode()),
            (b"vary", b"Origin"),
            (b"access-control-expose-headers", b"Retry-After, Content-Type"),
        ]
        if scope["method"] == "OPTIONS" and _header(scope, b"access-control-request-method"):
            if not allowed:
                body = error_body(
                    "origin_not_allowed",
                    f"the site {origin} is not allowed to call this app from a browser (spec.widget.allowedOrigins)",
                )
                await _json(send, 403, body, [(b"vary", b"Origin")])
                return
            await _json(
                send,
                204,
                None,
                [
                    *cors,
                    (b"access-control-allow-methods", b"GET, POST, OPTIONS"),
                    (b"access-control-allow-headers", b"Authorization, Content-Type, Accept"),
                    (b"access-control-max-age", b"600"),
                ],
            )
            return
        if not allowed:
            await self.app(scope, receive, send)
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *cors]}
            await send(message)

        await self.app(scope, receive, send_with_cors)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


async def _json(send: Send, status: int, body: Any, headers: list[tuple[bytes, bytes]]) -> None:
    import orjson

    payload = b"" if body is None else orjson.dumps(body)
    extra = [(b"content-type", b"application/json")] if payload else []
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, *extra, (b"content-length", str(len(payload)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def install(app: FastAPI, prefix: str) -> None:
    """Add the web client and widget routes (under the environment prefix) and their CORS handling."""
    app.include_router(router, prefix=prefix)
    app.add_middleware(CorsMiddleware)
