"""Dockyard's domain errors: each carries the HTTP status and error code it is answered with.

No FastAPI here: the model store (shared with the operator) raises these too, so every error of the
facade maps to the one JSON error shape through one handler (``dockyard_api.errors``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dockyard_core.kubeclient import KubeError


class DockyardError(Exception):
    """Base of every error the facade answers on purpose."""

    status_code = 400
    code = "bad_request"
    retry_after: float | None = None
    """Seconds after which a retry may succeed: sent as the ``Retry-After`` header when set."""

    def __init__(self, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def headers(self) -> dict[str, str] | None:
        if self.retry_after is None:
            return None
        return {"Retry-After": str(max(1, math.ceil(self.retry_after)))}


class NotReadyError(DockyardError):
    status_code = 503
    code = "not_ready"


class UnauthenticatedError(DockyardError):
    """No credentials, or credentials nobody issued (401)."""

    status_code = 401
    code = "unauthenticated"


class ForbiddenError(DockyardError):
    """Valid credentials that may not do this (403): a key of another environment, RBAC said no."""

    status_code = 403
    code = "forbidden"


class NotFoundError(DockyardError):
    status_code = 404
    code = "not_found"


class ConflictError(DockyardError):
    """The request contradicts the current state (409): in use, already exists, not ready."""

    status_code = 409
    code = "conflict"


class GoneError(DockyardError):
    status_code = 410
    code = "gone"


class PayloadTooLargeError(DockyardError):
    status_code = 413
    code = "payload_too_large"


class InvalidError(DockyardError):
    """Well-formed JSON with values that break a rule (422)."""

    status_code = 422
    code = "invalid"


class InvalidRequestError(InvalidError):
    """A request the facade refuses after reading the cluster, in the shape of a validation error."""

    code = "invalid_request"


class RateLimitedError(DockyardError):
    """Over a rate limit of the environment (429); ``Retry-After`` says when to come back."""

    status_code = 429
    code = "rate_limited"

    def __init__(self, message: str, details: Any = None, *, retry_after: float) -> None:
        super().__init__(message, details)
        self.retry_after = max(1, math.ceil(retry_after))


class DatabaseUnavailableError(DockyardError):
    """The conversation database cannot be reached or failed (503); the request may be retried."""

    status_code = 503
    code = "database_unavailable"
    retry_after = 5.0


class UpstreamError(DockyardError):
    """A server Dockyard depends on failed (502); the request may be retried."""

    status_code = 502
    code = "upstream_error"


class KubeUnavailableError(UpstreamError):
    """The Kubernetes API server could not be reached, did not answer in time, throttled or failed (503,
    with ``Retry-After``): a temporary condition (an API server or its etcd restarting); retry."""

    status_code = 503
    code = "upstream_unavailable"
    retry_after = 5.0


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
