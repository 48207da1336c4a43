"""The request id: one per facade request, taken from ``X-Request-Id`` when the caller sends a sane one,
else generated. It is answered in the ``X-Request-Id`` header, added to every log record of the request
(``request_id``) and written on the objects the request creates or changes (the annotation
``dockyard.dev/request-id``), where the operator reads it for its own log lines: one deployment can be
followed across both logs with one grep."""

from __future__ import annotations

import re
from contextvars import ContextVar

from dockyard_core import tracing
from dockyard_core.ids import random_hex

REQUEST_ID_HEADER = "X-Request-Id"
REQUEST_ID_ANNOTATION = "dockyard.dev/request-id"
TRACEPARENT_ANNOTATION = "dockyard.dev/traceparent"
_SANE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

current: ContextVar[str | None] = ContextVar("dockyard_request_id", default=None)


def new_id(offered: str | None = None) -> str:
    """The caller's id when it is sane (letters, digits, ``._:-``, at most 128), else a new one."""
    if offered and _SANE.match(offered):
        return offered
    return random_hex()


def as_annotation() -> dict[str, str]:
    """``{dockyard.dev/request-id: <id>}`` inside a request, else ``{}``; with the W3C traceparent of the
    request's span (``dockyard.dev/traceparent``) when it is traced, which the operator's spans link to."""
    rid = current.get()
    out = {REQUEST_ID_ANNOTATION: rid} if rid else {}
    span = tracing.current()
    if span is not None and span.recording:
        out[TRACEPARENT_ANNOTATION] = span.traceparent()
    return out
