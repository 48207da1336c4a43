"""One error shape for every 4xx/5xx answer: ``{"error": {"code", "message", "details"}}``.

The error types live in :mod:`dockyard_core.errors` (shared with the operator); this module only turns
them into HTTP answers."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from dockyard_core.errors import DockyardError, from_kube
from dockyard_core.kubeclient import KubeError
from dockyard_core.resources.cel import RuleViolation


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details}}


async def _dockyard_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DockyardError)
    return JSONResponse(
        error_body(exc.code, exc.message, exc.details), status_code=exc.status_code, headers=exc.headers()
    )


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, f"http_{exc.status_code}")
    return JSONResponse(
        error_body(code, str(exc.detail)), status_code=exc.status_code, headers=getattr(exc, "headers", None)
    )


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    details = [{"field": _field(err), "message": str(err.get("msg", ""))} for err in exc.errors()]
    shown = "; ".join(f"{d['field']}: {d['message']}" for d in details[:3])
    more = f" (and {len(details) - 3} more)" if len(details) > 3 else ""
    message = f"the request is not valid: {shown}{more}" if shown else "the request is not valid"
    return JSONResponse(error_body("invalid_request", message, details), status_code=422)


def _field(err: Any) -> str:
    """The dotted location of a validation error; a failed CEL-twin rule adds the field it names."""
    loc = [str(p) for p in err.get("loc", ())]
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, RuleViolation):
        loc += cause.field_path
    return ".".join(loc)


async def _kube_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, KubeError)
    return await _dockyard_error(request, from_kube(exc))


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(DockyardError, _dockyard_error)
    app.add_exception_handler(KubeError, _kube_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)


__all__ = ["error_body", "install_error_handlers"]
