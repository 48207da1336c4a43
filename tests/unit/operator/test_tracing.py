"""The operator's spans (dockyard_operator.tracing) and the link to the facade request that changed the object: the
request writes its traceparent beside its request id (dockyard_core.requestid.as_annotation), the reconcile's span
links to it. Spans kept in memory; tracing off: no span."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from dockyard_core import requestid
from dockyard_core import tracing as core
from dockyard_operator import tracing

pytestmark = pytest.mark.usefixtures("span_type")  # each test with the C span and with the Python one


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[core.Span]]:
    finished: list[core.Span] = []
    monkeypatch.setattr(tracing, "_STARTED", tuple(os.environ.get(v, "") for v in tracing._VARIABLES))
    monkeypatch.setattr(tracing, "_TRACER", core.Tracer(core.sampler({}), finished.append))
    return finished


def test_a_reconcile_span_links_to_the_request_that_changed_the_object(spans: list[core.Span]) -> None:
    facade = core.Tracer(core.sampler({}), spans.append)
    token = requestid.current.set("req-1")
    try:
        with facade.start_span("POST deploy", core.SERVER) as request:
            annotations = requestid.as_annotation()
    finally:
        requestid.current.reset(token)
    assert annotations[requestid.REQUEST_ID_ANNOTATION] == "req-1"
    traceparent = annotations[requestid.TRACEPARENT_ANNOTATION]
    assert traceparent == f"00-{request.trace_id:032x}-{request.span_id:016x}-01"

    body = {
        "kind": "ModelDeployment",
        "metadata": {"namespace": "team", "name": "llama", "generation": 3, "annotations": annotations},
    }
    with tracing.object_span("reconcile ModelDeployment", body) as span:
        tracing.result(span, "success")
    reconcile = next(s for s in spans if s.name == "reconcile ModelDeployment")
    assert reconcile.attributes == {
        "k8s.namespace.name": "team",
        "dockyard.object.kind": "ModelDeployment",
        "dockyard.object.name": "llama",
        "dockyard.object.generation": 3,
        "dockyard.request_id": "req-1",
        "dockyard.result": "success",
    }
    (link,) = reconcile.links or []
    assert link == (request.trace_id, request.span_id, "", {"dockyard.link": "request"})
    assert reconcile.trace_id != request.trace_id  # its own trace, linked
    assert reconcile.parent_id == 0


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
