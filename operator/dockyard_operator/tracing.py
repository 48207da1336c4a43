"""The operator's traces (docs/observability.md, "Traces"): a span per reconcile of a ModelDeployment or
ToolDeployment (``reconcile {kind}``) and per import job (``import {model}``), with the object, its
generation, the dock job and the request id; a span LINK to the trace of the facade request that last
changed the object (its ``dockyard.dev/traceparent`` annotation, :mod:`dockyard_core.requestid`).

Tracing starts on first use, from the same OTEL_* variables as the facade's (:mod:`dockyard_core.tracing`);
off, :func:`tracer` answers None and the hooks return a shared null context manager.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter

from dockyard_core import tracing
from dockyard_core.requestid import REQUEST_ID_ANNOTATION, TRACEPARENT_ANNOTATION
from dockyard_operator.monitoring import REGISTRY

if TYPE_CHECKING:
    from dockyard_core.tracing import Span, Tracer

log = logging.getLogger(__name__)
VERSION = "0.1.0"
SPANS_DROPPED = Counter(
    "dockyard_operator_spans_dropped",
    "Spans that never reached the tracing backend: queue_full, export_failed",
    ["reason"],
    registry=REGISTRY,
)
for _reason in ("queue_full", "export_failed"):
    SPANS_DROPPED.labels(_reason)

_STARTED: tuple[str, ...] | None = None
"""The OTEL_* values tracing was started for (None: not yet)."""
_RUNNING: tracing.Tracing | None = None
_TRACER: Tracer | None = None
_VARIABLES = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
)
NOOP: contextlib.nullcontext[None] = contextlib.nullcontext()


def _dropped(reason: str, count: int) -> None:
    SPANS_DROPPED.labels(reason).inc(count)


def tracer() -> Tracer | None:
    """The operator's tracer (started on the first call when the OTEL_* variables ask for tracing, and again
    when they changed: an operator run again in the same process, as the tests do) or None. Variables that
    ask for what Dockyard cannot do are logged and leave tracing off (a reconcile never fails for them)."""
    global _STARTED, _RUNNING, _TRACER
    values = tuple(os.environ.get(name, "") for name in _VARIABLES)
    if values != _STARTED:
        _STARTED = values
        if _RUNNING is not None:
            _RUNNING.stop(timeout_millis=1000)
        try:
            _RUNNING = tracing.start("dockyard-operator", VERSION, _dropped)
        except tracing.TracingConfigError as exc:
            log.error("tracing stays off: %s", exc)
            _RUNNING = None
        _TRACER = _RUNNING.tracer if _RUNNING is not None else None
    return _TRACER


def object_span(
    name: str, body: Mapping[str, Any], **attributes: Any
) -> contextlib.AbstractContextManager[Span | None]:
    """A span about one object (``body``): namespace, name, kind, generation, request id, and a link to the
    trace of the request that last changed it."""
    active = tracer()
    if active is None:
        return NOOP
    meta = body.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    values: dict[str, Any] = {
        "k8s.namespace.name": str(meta.get("namespace") or ""),
        "dockyard.object.kind": str(body.get("kind") or ""),
        "dockyard.object.name": str(meta.get("name") or ""),
        "dockyard.object.generation": int(meta.get("generation") or 0),
        **{k: v for k, v in attributes.items() if v is not None},
    }
    if annotations.get(REQUEST_ID_ANNOTATION):
        values["dockyard.request_id"] = str(annotations[REQUEST_ID_ANNOTATION])
    links = tracing.links_to(annotations.get(TRACEPARENT_ANNOTATION), {"dockyard.link": "request"})
    return active.start_span(name, attributes=values, links=links or None)


def result(span: Span | None, outcome: str) -> None:
    """The reconcile's result (success, error, conflict, gone) or the job's status."""
    if span is None:
        return
    span.set_attribute("dockyard.result", outcome)
    if outcome in ("error", "FAILED"):
        span.set_error(outcome)
