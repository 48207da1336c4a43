"""One error shape for every 4xx/5xx answer: ``{"error": {"code", "message", "details"}}``."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from dockyard_api.errortypes import (
    ConflictError,
    DatabaseUnavailableError,
    DockyardError,
    ForbiddenError,
    GoneError,
    InvalidError,
    InvalidRequestError,
    KubeUnavailableError,
    NotFoundError,
    NotReadyError,
    PayloadTooLargeError,
    RateLimitedError,
    UnauthenticatedError,
    UpstreamError,
)
from dockyard_api.kubehttp import KubeError
from dockyard_api.resources.cel import RuleViolation

_KUBE_STATUS: dict[int, type[DockyardError]] = {
    400: InvalidError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
    422: InvalidError,
}


def from_kube(exc: KubeError) -> DockyardError:
    """The facade's error for a Kubernetes API answer: RBAC refusals stay 403, admission and schema
    rejections keep the API server's message (which names the field); an API server that cannot be
    reached, answers too late, throttles (429) or fails (5xx) is a 503 with ``Retry-After``."""
    kind = _KUBE_STATUS.get(exc.status)
    if kind is None:
        return KubeUnavailableError(f"the Kubernetes API server is unavailable: {exc.message}; retry later")
    details = None
    if isinstance(exc.details, dict) and exc.details.get("causes"):
        details = [
            {"field": c.get("field", ""), "message": c.get("message", ""), "reason": c.get("reason", "")}
            for c in exc.details["causes"]
        ]
    return kind(exc.message, details)


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


__all__ = [
    "ConflictError",
    "DatabaseUnavailableError",
    "DockyardError",
    "ForbiddenError",
    "GoneError",
    "InvalidError",
    "InvalidRequestError",
    "KubeUnavailableError",
    "NotFoundError",
    "NotReadyError",
    "PayloadTooLargeError",
    "RateLimitedError",
    "UnauthenticatedError",
    "UpstreamError",
    "error_body",
    "from_kube",
    "install_error_handlers",
]
