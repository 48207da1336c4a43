"""CORS of the deployed-app API for browsers (docs/web-client-and-widget.md): the token endpoint answers
every site (it decides itself and says why not); the rest of ``{base}/v1/...`` answers the sites in the
environment's ``spec.widget.allowedOrigins`` only, or every site while that list is empty (a snippet
carrying an API key may chat from any site until the owner restricts the sites), and the web client page
(same origin) needs none."""

from __future__ import annotations

import re
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dockyard_api.deps import state_of
from dockyard_api.errors import error_body
from dockyard_api.web.service import same_origin

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
            # the listed sites; any site while the list is empty (a page carrying an API key, SPEC §7: the
            # call itself is refused for a widget token from an unlisted site, service.WebService.caller)
            allowed = config is not None and config.key_origin_allowed(origin)
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
                    (b"access-control-allow-headers", b"Authorization, Content-Type, Accept, traceparent, tracestate"),
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
