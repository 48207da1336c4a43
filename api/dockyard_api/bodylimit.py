"""A cap on request bodies that are not chunk uploads: 413 in the JSON error shape, without reading on.

An ASGI middleware, so the check happens before any route reads (or FastAPI parses) the body:

- a ``Content-Length`` above the cap is answered at once; nothing of the body is read; one within the cap passes
  untouched (the HTTP parser hands on no more bytes than it announces);
- a body without a length (chunked transfer) is counted as it streams in; once the count passes the
  cap the route is told the client went away, and the client gets the 413.

``multipart/form-data`` bodies (the chunk uploads of the import API) pass: they are streamed to disk and
keep their own, larger limit (``DOCKYARD_API_MAX_CHUNK_BYTES``).
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dockyard_core.errors import PayloadTooLargeError

STREAMED_PREFIXES = (b"multipart/form-data",)


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        content_type = headers.get(b"content-type", b"").lower().lstrip()
        if content_type.startswith(STREAMED_PREFIXES):
            await self.app(scope, receive, send)
            return
        length = headers.get(b"content-length")
        if length is not None and length.strip().isdigit():
            if int(length) > self.max_bytes:
                await self._refuse(send, int(length))
                return
            if b"transfer-encoding" not in headers:
                # the parser delivers exactly Content-Length bytes, no more: nothing to count (an execute call, every
                # turn, saves the two wrappers below on each of its messages)
                await self.app(scope, receive, send)
                return

        received = 0
        exceeded = False
        started = False

        async def counting_receive() -> Message:
            nonlocal received, exceeded
            if exceeded:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    exceeded = True
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded:
                return  # the 413 below is the answer
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except Exception:
            if not exceeded:
                raise
        if exceeded and not started:
            await self._refuse(send, None)

    async def _refuse(self, send: Send, length: int | None) -> None:
        shown = f"{length} bytes" if length is not None else "more bytes"
        error = PayloadTooLargeError(
            f"the request body is too large: {shown} sent, at most {self.max_bytes} bytes are accepted "
            "(DOCKYARD_API_MAX_JSON_BODY_BYTES; chunk uploads have their own limit)",
            {"maxBytes": self.max_bytes},
        )
        body = orjson.dumps({"error": {"code": error.code, "message": error.message, "details": error.details}})
        headers: list[Any] = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": error.status_code, "headers": headers})
        await send({"type": "http.response.body", "body": body})
