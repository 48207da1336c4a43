"""dockyard_core.otlp: what the exporter writes is an ExportTraceServiceRequest opentelemetry-proto's own classes
decode field by field, and the sender's HTTP (content type, headers, gzip, retries) against a real loopback server."""

from __future__ import annotations

import gzip
import random
import shutil
import sysconfig
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from dockyard_core import otlp, tracing

pytestmark = pytest.mark.usefixtures("span_type")  # each test with the C span and with the Python one


def value(any_value: AnyValue) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind)


def attributes(message: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in message.attributes}


def test_a_batch_decodes_as_the_spans_that_were_recorded() -> None:
    finished: list[tracing.Span] = []
    tracer = tracing.Tracer(tracing.sampler({}), finished.append)
    caller = tracing.extract("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "vendor=1")
    static = tracing.Static({"dockyard.app": "bot", "url.scheme": "http"})
    server = tracer.start_span("POST /execute", tracing.SERVER, {"m": "POST"}, parent=caller, static=static)
    server.add_static(tracing.Static({"http.response.status_code": 200}))
    with server, tracer.start_span("chat tiny", tracing.CLIENT, {"gen_ai.request.model": "tiny"}) as chat:
        chat.set_attributes({"gen_ai.usage.input_tokens": 30, "n": -1, "t": 0.5, "ok": True, "l": ["a", "b"]})
        chat.set_error("timeout")
    linked = tracer.start_span("reconcile", links=tracing.links_to(server.traceparent(), {"dockyard.link": "request"}))
    linked.set_attribute("text", "ünïcode")
    # strings longer than 16 characters take the encoder's own path (not kept): one whose field fits a one-byte
    # length, one with a long key, one of multi-byte characters over 127 bytes
    ids = {"gen_ai.conversation.id": "ses_" + "0123456789abcdef" * 2, "k" * 120: "seventeen chars..", "long": "ü" * 70}
    linked.set_attributes(ids)
    linked.end()
    encoder = otlp.Encoder(tracing.resource("dockyard-api", "1.0", {}), "dockyard", "1.0")
    request = ExportTraceServiceRequest.FromString(
        encoder.request([encoder.span(s) for s in finished]) + encoder.request([encoder.span(finished[0])])
    )

    assert len(request.resource_spans) == 2  # two requests concatenated: a repeated field, as protobuf merges
    (scope_spans,) = request.resource_spans[0].scope_spans
    assert attributes(request.resource_spans[0].resource)["service.name"] == "dockyard-api"
    assert (scope_spans.scope.name, scope_spans.scope.version) == ("dockyard", "1.0")
    decoded = {s.name: s for s in scope_spans.spans}
    assert list(decoded) == ["chat tiny", "POST /execute", "reconcile"]
    got_chat, got_server, got_linked = decoded.values()
    assert got_server.trace_id == bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
    assert got_server.parent_span_id == bytes.fromhex("b7ad6b7169203331")
    assert got_server.trace_state == "vendor=1"
    assert got_server.kind == 2
    assert got_chat.kind == 3
    assert got_linked.kind == 1
    assert got_chat.parent_span_id == got_server.span_id == server.span_id.to_bytes(8, "big")
    assert attributes(got_chat) == {
        "gen_ai.request.model": "tiny", "gen_ai.usage.input_tokens": 30, "n": -1, "t": 0.5, "ok": True,
        "l": ["a", "b"], "error.type": "timeout",
    }  # fmt: skip
    assert (got_chat.status.code, got_chat.status.message) == (2, "timeout")
    assert got_server.status.code == 0
    assert attributes(got_server) == {"dockyard.app": "bot", "url.scheme": "http", "http.response.status_code": 200,
                                      "m": "POST"}  # fmt: skip
    assert server.all_attributes() == attributes(got_server)
    assert got_chat.start_time_unix_nano == chat.start_ns
    assert got_chat.end_time_unix_nano == chat.end_ns > 0
    assert got_linked.parent_span_id == b""
    (link,) = got_linked.links
    assert (link.trace_id, link.span_id) == (got_server.trace_id, got_server.span_id)
    assert attributes(link) == {"dockyard.link": "request"}
    assert attributes(got_linked) == {"text": "ünïcode", **ids}


class Backend:
    """A loopback OTLP/HTTP receiver that answers with the statuses it is given, then 200."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.received: list[tuple[dict[str, str], bytes]] = []
        backend = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                backend.received.append((dict(self.headers.items()), body))
                self.send_response(backend.statuses.pop(0) if backend.statuses else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"


@pytest.fixture
def backend() -> Iterator[Backend]:
    running = Backend()
    thread = threading.Thread(target=running.server.serve_forever, daemon=True)
    thread.start()
    yield running
    running.server.shutdown()


def test_the_sender_posts_protobuf_with_the_headers_gzip_and_retries(backend: Backend) -> None:
    backend.statuses = [503, 200, 400]
    sender = otlp.Sender(tracing.TraceSettings(backend.url, False, {"authorization": "Bearer t"}, 5.0, gzip=True))
    pauses: list[float] = []
    sender.send_with_retries(b"first", deadline=float("inf"), pause=lambda s: pauses.append(s) is not None)
    with pytest.raises(otlp.ExportError, match="HTTP 400") as refused:
        sender.send(b"second")
    assert not refused.value.retryable
    sender.close()
    assert pauses == [0.5]  # the 503 was tried again once, after half a second
    assert [gzip.decompress(body) for _, body in backend.received] == [b"first", b"first", b"second"]
    headers = backend.received[0][0]
    assert headers["Content-Type"] == "application/x-protobuf"
    assert headers["Content-Encoding"] == "gzip"
    assert headers["authorization"] == "Bearer t"


def test_a_batch_reaches_the_backend_when_flushed(backend: Backend) -> None:
    running = tracing.start("svc", "1", lambda reason, n: None, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": backend.url})
    assert running is not None
    try:
        for i in range(3):
            with running.tracer.start_span(f"span {i}"):
                pass
        assert running.flush(5000)
    finally:
        running.stop()
    request = ExportTraceServiceRequest.FromString(b"".join(body for _, body in backend.received))
    names = [s.name for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert names == ["span 0", "span 1", "span 2"]


def test_the_c_encoder_is_built_where_a_compiler_is() -> None:
    """pyproject.toml builds it as an optional extension: where a C compiler and Python's headers are at hand (CI
    installs both), it must be there."""
    headers = Path(sysconfig.get_paths()["include"], "Python.h").exists()
    assert otlp.C_ENCODER or shutil.which("cc") is None or not headers


@pytest.mark.skipif(not otlp.C_ENCODER, reason="the C encoder was not built (no C compiler)")
def test_the_c_encoder_writes_the_same_bytes_as_the_python_one() -> None:
    """Spans of every kind of attribute value, both encoders, byte for byte (small spans and spans larger than the
    C encoder's buffers on the stack, arrays too); a span with links is left to Python."""
    rng = random.Random(30)
    values: list[Any] = [
        True, False, 0, 1, -1, 127, 128, 2**63 - 1, -(2**63), 2**70 + 5, 0.0, -2.5, float("inf"), float("nan"),
        "", "x", "seventeen chars..", "ü" * 70, "a\udcffb", "é" * 300, ["a", "b"], (1, 2.5, True), [], [["n", 1]],
        {"not": "scalar"}, None, ["é" * 300, "x"] * 20, list(range(-100, 2**40, 2**33)), "z" * 5000,
    ]  # fmt: skip
    encoder = otlp.Encoder(tracing.resource("dockyard-api", "1.0", {}), "dockyard", "1.0")
    finished: list[tracing.Span] = []
    tracer = tracing.Tracer(tracing.sampler({}), finished.append)
    for i in range(300):
        parent = tracing.extract(f"00-{rng.getrandbits(128) | 1:032x}-{rng.getrandbits(64) | 1:016x}-01",
                                 "vendor=1" if i % 3 == 0 else None) if i % 2 else None  # fmt: skip
        static = tracing.Static({"dockyard.app": f"app{i % 4}", "n": i % 7}) if i % 4 else None
        span = tracer.start_span("ñame " * (i % 40), rng.choice((1, 2, 3)), parent=parent, static=static)
        for _ in range(rng.randrange(6)):
            span.set_attribute(f"key.{rng.randrange(10)}", rng.choice(values))
        if i % 5 == 0:
            span.set_error("x" * (i % 3))
        span.end()
    assert len(finished) == 300
    from dockyard_core import _spans

    for span in finished:
        assert _spans.span(span) == encoder.python_span(span), span.attributes
    linked = tracer.start_span("linked", links=tracing.links_to(finished[1].traceparent(), {"why": "x"}))
    linked.end()
    assert _spans.span(linked) is None
    assert encoder.span(linked) == encoder.python_span(linked)


def test_the_queue_takes_encodes_drops_and_wakes_as_the_python_one(span_type: type) -> None:
    """The exporter's queue (its C form, ``_spans.Sink``, or ``BatchExporter.__call__``): a span is queued (the C form
    holds it as it is, for the export thread to encode, taken off the garbage collector's lists; the Python one encodes
    it now); the export thread is woken at a full batch; a span with links is encoded in Python; one that cannot be
    encoded is dropped and counted as export_failed (by the C form when its batch is encoded); past the queue's
    size, queue_full."""
    import gc

    drops: list[tuple[str, int]] = []
    settings = tracing.TraceSettings("http://127.0.0.1:9/v1/traces", False)
    encoder = otlp.Encoder(tracing.resource("t", "1", {}), "dockyard", "1")
    exporter = otlp.BatchExporter(encoder, otlp.Sender(settings), lambda reason, n: drops.append((reason, n)),
                                  max_queue=5, max_batch=4, delay_s=3600)  # fmt: skip
    exporter.stop(5)  # its thread gone: the queue is only this test's (a wake is seen, nothing sent)
    assert not exporter._thread.is_alive()
    held = span_type is not tracing.PySpan
    try:
        assert (type(exporter.sink).__name__ == "Sink") == held
        tracer = tracing.Tracer(tracing.sampler({}), exporter.sink)
        one = tracer.start_span("one", attributes={"a": 1}, static=tracing.Static({"s": "t"}))
        one.end()
        tracer.start_span("linked", links=[(5, 6, "", {"l": 1})]).end()
        assert [type(item) is bytes for item in exporter.queue] == [not held, True]
        assert gc.is_tracked(one) != held  # held: off the collector's lists
        assert not exporter._wake.is_set()
        tracer.start_span("broken", attributes={7: "not a str key"}).end()
        assert drops == ([] if held else [("export_failed", 1)])
        assert len(exporter.queue) == (3 if held else 2)
        tracer.start_span("three").end()
        assert exporter._wake.is_set() == held  # a batch of four with the broken one held
        tracer.start_span("four").end()
        assert exporter._wake.is_set()
        tracer.start_span("five").end()
        tracer.start_span("six").end()
        assert drops[-1] == ("queue_full", 1)
        assert len(exporter.queue) == 5
        encoded = exporter.encoded(list(exporter.queue))
        failed, full = ("export_failed", 1), ("queue_full", 1)
        # held: the broken span took a place in the queue, and is counted when its batch is encoded
        assert drops == ([full, full, failed] if held else [failed, full])
        names = [s.name for s in ExportTraceServiceRequest.FromString(encoder.request(encoded))
                 .resource_spans[0].scope_spans[0].spans]  # fmt: skip
        assert names == ["one", "linked", "three", "four", *([] if held else ["five"])]
        assert encoded[0] == encoder.python_span(one)
    finally:
        exporter.queue.clear()
