"""The operator's traces (docs/observability.md, "Traces"): a span per reconcile of a ModelDeployment or
ToolDeployment (``reconcile {kind}``) and per import job (``import {model}``), with the object, its
generation, the dock job and the request id; a span LINK to the trace of the facade request that last
changed the object (its ``dockyard.dev/traceparent`` annotation, :mod:`dockyard_core.requestid`).

Tracing starts on first use, from the same OTEL_* variables as the facade's (:mod:`dockyard_core.tracing`);
off, :func:`tracer` answers None and the hooks return a shared null context manager.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter

from dockyard_core import tracing
from dockyard_core.requestid import REQUEST_ID_ANNOTATION, TRACEPARENT_ANNOTATION
from dockyard_operator.monitoring import REGISTRY

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

VERSION = "0.1.0"
SPANS_DROPPED = Counter(
    "dockyard_operator_spans_dropped",
    "Spans that never reached the tracing backend: queue_full, export_failed, already_shutdown",
    ["reason"],
    registry=REGISTRY,
)
for _reason in ("queue_full", "export_failed"):
    SPANS_DROPPED.labels(_reason)

_STARTED = False
_TRACER: Tracer | None = None
NOOP: contextlib.nullcontext[None] = contextlib.nullcontext()


def _dropped(reason: str, count: int) -> None:
    SPANS_DROPPED.labels(reason).inc(count)


def tracer() -> Tracer | None:
    """The operator's tracer (started on the first call when the OTEL_* variables ask for tracing) or None."""
    global _STARTED, _TRACER
    if not _STARTED:
        _STARTED = True
        running = tracing.start("dockyard-operator", VERSION, _dropped)
        _TRACER = running.tracer if running is not None else None
    return _TRACER


def object_span(
    name: str, body: Mapping[str, Any], **attributes: Any
) -> contextlib.AbstractContextManager[Span | None]:
    """A span about one object (``body``): namespace, name, kind, generation, request id, and a link to the
    trace of the request that last changed it."""
    active = tracer()
    if active is None:
        return NOOP
    from opentelemetry import propagate, trace

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
    links = []
    if annotations.get(TRACEPARENT_ANNOTATION):
        ctx = trace.get_current_span(propagate.extract({"traceparent": annotations[TRACEPARENT_ANNOTATION]}))
        if ctx.get_span_context().is_valid:
            links.append(trace.Link(ctx.get_span_context(), {"dockyard.link": "request"}))
    return active.start_as_current_span(
        name, attributes=values, links=links, record_exception=False, set_status_on_exception=False
    )


def result(span: Span | None, outcome: str) -> None:
    """The reconcile's result (success, error, conflict, gone) or the job's status."""
    if span is None:
        return
    span.set_attribute("dockyard.result", outcome)
    if outcome in ("error", "FAILED"):
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, outcome))
