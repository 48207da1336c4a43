"""The operator's spans (dockyard_operator.tracing) and the link to the facade request that changed the object: the
request writes its traceparent beside its request id (dockyard_core.requestid.as_annotation), the reconcile's span
links to it. SDK in-memory exporter; tracing off: no span."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dockyard_core import requestid
from dockyard_operator import tracing


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_STARTED", tuple(os.environ.get(v, "") for v in tracing._VARIABLES))
    monkeypatch.setattr(tracing, "_TRACER", provider.get_tracer("test"))
    yield exporter, provider
    provider.shutdown()


def test_a_reconcile_span_links_to_the_request_that_changed_the_object(
    spans: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    exporter, provider = spans
    token = requestid.current.set("req-1")
    try:
        with provider.get_tracer("facade").start_as_current_span("POST deploy") as request:
            annotations = requestid.as_annotation()
    finally:
        requestid.current.reset(token)
    assert annotations[requestid.REQUEST_ID_ANNOTATION] == "req-1"
    traceparent = annotations[requestid.TRACEPARENT_ANNOTATION]
    assert f"{request.get_span_context().trace_id:032x}" in traceparent

    body = {
        "kind": "ModelDeployment",
        "metadata": {"namespace": "team", "name": "llama", "generation": 3, "annotations": annotations},
    }
    with tracing.object_span("reconcile ModelDeployment", body) as span:
        tracing.result(span, "success")
    reconcile = next(s for s in exporter.get_finished_spans() if s.name == "reconcile ModelDeployment")
    assert dict(reconcile.attributes or {}) == {
        "k8s.namespace.name": "team",
        "dockyard.object.kind": "ModelDeployment",
        "dockyard.object.name": "llama",
        "dockyard.object.generation": 3,
        "dockyard.request_id": "req-1",
        "dockyard.result": "success",
    }
    (link,) = reconcile.links
    assert link.context.trace_id == request.get_span_context().trace_id
    assert link.context.span_id == request.get_span_context().span_id
    assert reconcile.context.trace_id != request.get_span_context().trace_id  # its own trace, linked


def test_no_traceparent_annotation_outside_a_traced_request() -> None:
    token = requestid.current.set("req-2")
    try:
        assert requestid.as_annotation() == {requestid.REQUEST_ID_ANNOTATION: "req-2"}
    finally:
        requestid.current.reset(token)


def test_off_no_span_and_variables_it_cannot_follow_leave_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in tracing._VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert tracing.object_span("reconcile ModelDeployment", {"metadata": {}}) is tracing.NOOP
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    assert tracing.tracer() is None  # logged, not raised: a reconcile never fails for it
