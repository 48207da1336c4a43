"""Typed errors of the Dockyard client. Every answer of the facade that is not a success raises an
:class:`ApiError` subclass carrying the facade's JSON error body ``{"error": {"code", "message", "details"}}``."""

from __future__ import annotations

from typing import Any

import httpx


class DockyardClientError(Exception):
    """Base of every error the client raises."""


class TransportError(DockyardClientError):
    """The facade could not be reached, or the connection broke (retrying may help)."""


class ConfigurationError(DockyardClientError):
    """Something the client needs is missing: a URL, an API key, a namespace, a Kubernetes token."""


class ApiError(DockyardClientError):
    """The facade answered with an error. ``body`` is its JSON body; ``code``, ``message`` and ``details``
    are taken from ``body["error"]``."""

    status_code: int = 0

    def __init__(self, status_code: int, body: Any, headers: httpx.Headers | None = None) -> None:
        self.status_code = status_code
        self.body = body
        self.headers = headers or httpx.Headers()
        error = body.get("error") if isinstance(body, dict) else None
        error = error if isinstance(error, dict) else {}
        self.code: str = str(error.get("code") or f"http_{status_code}")
        self.message: str = str(error.get("message") or (body if isinstance(body, str) else "") or "")
        self.details: Any = error.get("details")
        super().__init__(f"{status_code} {self.code}: {self.message}")


class BadRequest(ApiError):
    """400."""


class Unauthenticated(ApiError):
    """401: no credentials, or an unknown or revoked API key / token."""


class Forbidden(ApiError):
    """403: an API key of another environment, or RBAC refused."""


class NotFound(ApiError):
    """404: no such model, tool, job, session, app, version or environment."""


class Conflict(ApiError):
    """409: the request contradicts the current state (chunks missing, not ReadyToDeploy, busy, ...)."""


class Gone(ApiError):
    """410: the import session expired or was aborted."""


class PayloadTooLarge(ApiError):
    """413: a chunk or a file above the facade's limits."""


class InvalidRequest(ApiError):
    """422: a body, path or query that breaks a rule (``details`` names the fields)."""


class RateLimited(ApiError):
    """429: too many requests; ``retry_after`` is the server's ``Retry-After`` in seconds (if given)."""

    @property
    def retry_after(self) -> float | None:
        value = self.headers.get("retry-after")
        try:
            return float(value) if value is not None else None
        except ValueError:
            return None


class ServerError(ApiError):
    """5xx: the facade, the Kubernetes API server or a model endpoint failed (retrying may help)."""


class StreamError(ApiError):
    """An ``error`` event in a streamed deployed-app call."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    413: PayloadTooLarge,
    422: InvalidRequest,
    429: RateLimited,
}


def error_for(status_code: int, body: Any, headers: httpx.Headers | None = None) -> ApiError:
    """The typed error of an HTTP error answer."""
    kind = _BY_STATUS.get(status_code) or (ServerError if status_code >= 500 else ApiError)
    return kind(status_code, body, headers)


def error_of(response: httpx.Response) -> ApiError:
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    return error_for(response.status_code, body, response.headers)
