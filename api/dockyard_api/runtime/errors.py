"""Errors of a turn: model endpoints that are missing, down, slow or answer garbage
(docs/deployed-app-api.md, 'Errors')."""

from __future__ import annotations

from dockyard_core.errors import DockyardError


class ModelUnavailableError(DockyardError):
    """No model endpoint serves the agent's model, or it refuses connections (503)."""

    status_code = 503
    code = "model_unavailable"


class ModelBadResponseError(DockyardError):
    """The model endpoint answered with an error status or something that is not a chat completion (502)."""

    status_code = 502
    code = "model_bad_response"


class ModelTimeoutError(DockyardError):
    """The model endpoint did not answer within the turn's deadline (504)."""

    status_code = 504
    code = "model_timeout"


class AppNotRunnableError(DockyardError):
    """The app version cannot run a turn: no agents, an agent without a model, a version that is gone (503)."""

    status_code = 503
    code = "app_not_runnable"
