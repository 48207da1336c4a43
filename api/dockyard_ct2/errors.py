"""The CTranslate2 server's errors: :class:`ApiError` and the JSON error shape ``{"error": {"code",
"message", "details", "type", "param"}}`` (Dockyard's shape plus the fields OpenAI clients read), with the
handlers that answer every failure in it."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("dockyard_ct2.server")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, *, param: str | None = None, details: Any = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.details = details


def error_body(code: str, message: str, *, param: str | None = None, details: Any = None) -> dict[str, Any]:
    kind = "invalid_request_error" if code in ("invalid_request", "context_length_exceeded") else code
    return {"error": {"code": code, "message": message, "details": details, "type": kind, "param": param}}


def install_error_handlers(app: FastAPI) -> None:
    """Every error as the JSON error shape: ApiError, invalid bodies (400), 404/405 and the unexpected (500)."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        headers = {"Retry-After": "1"} if exc.status == 503 else None
        return JSONResponse(
            error_body(exc.code, exc.message, param=exc.param, details=exc.details), exc.status, headers=headers
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
            for e in exc.errors()
        ]
        first = errors[0] if errors else {"loc": [], "msg": "invalid request", "type": ""}
        if first["type"] == "json_invalid":
            return JSONResponse(error_body("invalid_request", "the body is not valid JSON", details=errors), 400)
        where = ".".join(x for x in first["loc"] if x != "body") or "body"
        message = f"{where}: {first['msg']}"
        return JSONResponse(error_body("invalid_request", message, param=where, details=errors), 400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(error_body(code, str(exc.detail)), exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return JSONResponse(error_body("internal_error", "internal server error"), 500)
