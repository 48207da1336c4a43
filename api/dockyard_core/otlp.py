"""OTLP/HTTP export of finished spans: the protobuf wire encoding of ``ExportTraceServiceRequest``
(opentelemetry-proto's ``collector/trace/v1``), written out by hand, and the POST that sends it.

Why by hand: the OpenTelemetry SDK's exporter builds a protobuf message object per span, attribute and value,
about 28 µs per span on this project's machines, which alone was more than the 2 % of a turn's CPU tracing may
cost (#30). The wire format is small and stable: varints, fixed64 times, length-delimited fields. A
(key, value) attribute pair is encoded once and kept (:class:`Encoder`): a turn's app, version, environment,
model and server repeat from span to span. The unit tests decode what this writes with opentelemetry-proto's
own classes; the e2e tests send it to a real Jaeger. :class:`BatchExporter` is the bounded queue and the thread
that send them.
"""

from __future__ import annotations

import collections
import gzip
import http.client
import logging
import ssl
import struct
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

from dockyard_core.tracesettings import TraceSettings

AttributeValue = str | bool | int | float | Sequence[str] | Sequence[bool] | Sequence[int] | Sequence[float]
_TIMES = struct.Struct("<BQBQ")
"""Tag and value of start_time_unix_nano (7, fixed64), then of end_time_unix_nano (8, fixed64)."""
_IDS = struct.Struct(">BBQQBBQ")
"""Tag, length and value of trace_id (1: 16 bytes, big-endian, as two halves), then of span_id (2: 8 bytes)."""
_PARENT = struct.Struct(">BBQ")
"""Tag, length and value of parent_span_id (4: 8 bytes)."""
_LOW64 = 0xFFFFFFFFFFFFFFFF
_DOUBLE = struct.Struct("<d")
_CACHE_LIMIT = 4096
_KEPT_STRING = 16
"""String values up to this length are encoded once per (key, value) and kept (names, codes, reasons); longer ones
(a session's id, a tool call's) come once per trace and are encoded each time, keeping the cache for what repeats."""
log = logging.getLogger(__name__)

_c_span: Callable[[Any], bytes | None] | None
_CSink: Callable[..., Callable[[Any], None]] | None
_encode_batch: Callable[[list[Any]], tuple[list[bytes], list[Any]]] | None
try:  # the C forms of Encoder.span and BatchExporter.__call__, where they were built (pyproject.toml)
    from dockyard_core._spans import Sink as _CSink
    from dockyard_core._spans import encode_batch as _encode_batch
    from dockyard_core._spans import span as _c_span
except ImportError:  # pragma: no cover - a machine without a C compiler: the Python encoder only
    _c_span = _CSink = _encode_batch = None
C_ENCODER = _c_span is not None
"""Whether spans are encoded in C (``dockyard_core/_spans.c``: the same bytes as :meth:`Encoder.span`'s
Python path, which tests compare, in about a tenth of the time)."""


class FinishedSpan(Protocol):
    """What the encoder reads of a span (dockyard_core.tracing.Span)."""

    trace_id: int
    span_id: int
    parent_id: int
    tracestate: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    statics: list[Any] | None
    """Blocks of attributes encoded once (``encoded``: their KeyValue fields)."""
    links: list[tuple[int, int, str, Mapping[str, Any]]] | None
    status_code: int
    status_message: str


def varint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def _any_value(value: Any) -> bytes:
    if isinstance(value, bool):
        return b"\x10" + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return b"\x18" + varint(value & 0xFFFFFFFFFFFFFFFF)  # int64: two's complement in ten bytes
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    if isinstance(value, str):
        return field(1, value.encode("utf-8", "replace"))
    if isinstance(value, list | tuple):
        return field(5, b"".join(field(1, _any_value(item)) for item in value))
    return field(1, str(value).encode("utf-8", "replace"))


def attribute_fields(attributes: Mapping[str, Any]) -> bytes:
    """``attributes`` as the repeated KeyValue field (9) of a Span."""
    return b"".join(field(9, key_value(k, v)) for k, v in attributes.items())


def key_value(key: str, value: Any) -> bytes:
    """One ``KeyValue`` message (not yet framed as a field)."""
    return field(1, key.encode()) + field(2, _any_value(value))


class Encoder:
    """Encodes batches of finished spans of one resource and one instrumentation scope."""

    def __init__(self, resource: Mapping[str, Any], scope: str, scope_version: str) -> None:
        self._resource = field(1, b"".join(field(1, key_value(k, v)) for k, v in resource.items()))
        self._scope = field(1, field(1, scope.encode()) + field(2, scope_version.encode()))
        self._pairs: dict[tuple[str, Any, type], bytes] = {}
        self._headings: dict[tuple[str, int], bytes] = {}
        self._keys: dict[str, bytes] = {}

    def _cached(self, cache_key: tuple[str, Any, type]) -> bytes:
        if len(self._pairs) >= _CACHE_LIMIT:
            self._pairs.clear()
        found = self._pairs[cache_key] = field(9, key_value(cache_key[0], cache_key[1]))
        return found

    def _string(self, key: str, value: str) -> bytes:
        """A KeyValue field of a string value that is not kept (an id: a session's, a call's), written without
        the general path's calls: its key's field is kept instead."""
        prefix = self._keys.get(key)
        if prefix is None:
            if len(self._keys) >= _CACHE_LIMIT:
                self._keys.clear()
            prefix = self._keys[key] = field(1, key.encode())
        raw = value.encode("utf-8", "replace")
        size, length = len(raw), len(prefix) + len(raw) + 4
        if length < 0x80:  # every length a one-byte varint
            return bytes((0x4A, length)) + prefix + bytes((0x12, size + 2, 0x0A, size)) + raw
        return field(9, prefix + field(2, field(1, raw)))

    def _heading(self, name: str, kind: int) -> bytes:
        """The span's name and kind fields (names repeat: ``chat tiny``, ``step 1``)."""
        found = self._headings.get((name, kind))
        if found is None:
            if len(self._headings) >= _CACHE_LIMIT:
                self._headings.clear()
            found = self._headings[(name, kind)] = field(5, name.encode("utf-8", "replace")) + b"\x30" + varint(kind)
        return found

    def span(self, span: FinishedSpan) -> bytes:
        """One ``Span`` message, framed as field 2 of ``ScopeSpans``: in C where it was built (not for a span
        with links), else :meth:`python_span`."""
        if _c_span is not None:
            encoded = _c_span(span)
            if encoded is not None:
                return encoded
        return self.python_span(span)

    def python_span(self, span: FinishedSpan) -> bytes:
        """:meth:`span` in Python. An attribute is encoded once per (key, value, type) and kept (the cache is
        emptied when it holds 4096)."""
        trace_id = span.trace_id
        out = bytearray(_IDS.pack(0x0A, 0x10, trace_id >> 64, trace_id & _LOW64, 0x12, 0x08, span.span_id))
        if span.tracestate:
            out += field(3, span.tracestate.encode())
        if span.parent_id:
            out += _PARENT.pack(0x22, 0x08, span.parent_id)
        out += self._headings.get((span.name, span.kind)) or self._heading(span.name, span.kind)
        out += _TIMES.pack(0x39, span.start_ns, 0x41, span.end_ns)
        for static in span.statics or ():
            out += static.encoded
        pairs = self._pairs
        for key, value in span.attributes.items():
            kind = type(value)  # in the key: True and 1, 1 and 1.0 are equal, and hash alike
            if kind is str and len(value) > _KEPT_STRING:  # an id, seen once: not worth keeping
                out += self._string(key, value)
                continue
            if kind is list:
                value = tuple(value)
            cache_key = (key, value, kind)
            try:
                out += pairs.get(cache_key) or self._cached(cache_key)
            except TypeError:  # a value that cannot be a key
                out += field(9, key_value(key, value))
        for trace_id, span_id, tracestate, attributes in span.links or ():
            link = _IDS.pack(0x0A, 0x10, trace_id >> 64, trace_id & _LOW64, 0x12, 0x08, span_id)
            if tracestate:
                link += field(3, tracestate.encode())
            link += b"".join(field(4, key_value(k, v)) for k, v in attributes.items())
            out += field(13, link)
        if span.status_code:
            status = b"\x18" + varint(span.status_code)
            if span.status_message:
                status = field(2, span.status_message.encode("utf-8", "replace")) + status
            out += field(15, status)
        size = len(out)
        if 0x80 <= size < 0x4000:  # most spans: their size in a two-byte varint
            return bytes((0x12, size & 0x7F | 0x80, size >> 7)) + out
        return b"\x12" + varint(size) + out

    def request(self, spans: Sequence[bytes]) -> bytes:
        """An ``ExportTraceServiceRequest`` of spans encoded by :meth:`span`: its bytes joined once (a batch is
        hundreds of kilobytes, which framing by :func:`field` would copy three more times)."""
        scope_spans = len(self._scope) + sum(map(len, spans))
        scope_size = varint(scope_spans)
        resource_spans = len(self._resource) + 1 + len(scope_size) + scope_spans
        return b"".join((b"\x0a", varint(resource_spans), self._resource, b"\x12", scope_size, self._scope, *spans))


class ExportError(Exception):
    """The backend did not take a batch; ``retryable`` says whether trying again may help."""

    def __init__(self, message: str, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


_RETRYABLE = {429, 502, 503, 504}


class Sender:
    """POSTs encoded batches to one OTLP/HTTP traces URL over one kept-alive connection (the exporter
    thread's only)."""

    def __init__(self, settings: TraceSettings) -> None:
        self.settings = settings
        parts = urlsplit(settings.endpoint)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "localhost"
        self._port = parts.port or (443 if self._https else 80)
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._headers = {
            "Content-Type": "application/x-protobuf",
            "User-Agent": "dockyard-otlp",
            **settings.headers,
        }
        if settings.gzip:
            self._headers["Content-Encoding"] = "gzip"
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._https:
                context = ssl.create_default_context(cafile=self.settings.ca_file)
                if self.settings.client_cert:
                    context.load_cert_chain(self.settings.client_cert, self.settings.client_key)
                self._conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self.settings.timeout_s, context=context
                )
            else:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self.settings.timeout_s)
        return self._conn

    def send(self, body: bytes) -> None:
        if self.settings.gzip:
            body = gzip.compress(body, compresslevel=6)
        try:
            conn = self._connection()
            conn.request("POST", self._path, body=body, headers=self._headers)
            response = conn.getresponse()
            response.read()
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise ExportError(f"{type(exc).__name__}: {exc}", retryable=True) from exc
        if response.status >= 300:
            if response.getheader("Connection", "").lower() == "close":
                self.close()
            raise ExportError(f"HTTP {response.status}", retryable=response.status in _RETRYABLE)

    def send_with_retries(self, body: bytes, deadline: float, pause: Callable[[float], bool]) -> None:
        """Send, trying again after a retryable failure (0.5 s, 1 s, 2 s ...) until ``deadline``
        (``time.monotonic()``) or until ``pause`` (which waits) answers True (stopping); the last error is
        raised."""
        delay = 0.5
        while True:
            try:
                self.send(body)
                return
            except ExportError as exc:
                if not exc.retryable or time.monotonic() + delay >= deadline or pause(delay):
                    raise
            delay *= 2

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class BatchExporter:
    """The bounded queue of finished spans and the thread that sends them in batches (OTEL_BSP_*)."""

    def __init__(
        self,
        encoder: Encoder,
        sender: Sender,
        on_drop: Callable[[str, int], None],
        *,
        max_queue: int = 2048,
        max_batch: int = 512,
        delay_s: float = 5.0,
        export_timeout_s: float = 30.0,
    ) -> None:
        self.encoder, self.sender, self.on_drop = encoder, sender, on_drop
        self.max_queue, self.max_batch, self.delay_s = max_queue, max(1, min(max_batch, max_queue)), delay_s
        self.export_timeout_s = export_timeout_s
        self.queue: collections.deque[Any] = collections.deque()
        """Finished spans: encoded (:meth:`Encoder.span`) by :meth:`__call__`, or as they are from the C sink, which
        leaves them to the export thread (:meth:`encoded`)."""
        self.sink: Callable[[Any], None] = self
        """What the tracer hands an ended span to: this exporter (:meth:`__call__`), or where the C extension was
        built, its C form (``_spans.Sink``; a C span ending calls it without Python in between). Either way, the
        same queue, limits and counts."""
        if _CSink is not None and _c_span is not None and type(encoder) is Encoder:  # the Sink encodes as it does
            self.sink = _CSink(self.queue, self.max_queue, self.max_batch, self._wake_up, self._full, self)
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._flush = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dockyard-otlp-export", daemon=True)
        self._thread.start()

    def __call__(self, span: FinishedSpan) -> None:
        """A span ended: encoded and queued, or dropped and counted when the queue is full (never waits).

        Encoded here, not in the export thread: the queue then holds bytes, which the garbage collector does
        not track. Python spans kept until their batch is sent (seconds, hundreds of them) would survive
        collections and be promoted to the oldest generation, where, dying there, they make the full collections
        of the whole process's heap come more often: that cost more than the encoding (docs/benchmarks.md). The C
        sink holds its spans as they are instead, taken off the collector's lists (``_spans.c``)."""
        queue = self.queue
        if len(queue) >= self.max_queue:
            self._full()
            return
        try:
            encoded = self.encoder.span(span)
        except Exception:  # a span that cannot be encoded must not fail the work it traced
            log.exception("span %r not exported", span.name)
            self.on_drop("export_failed", 1)
            return
        queue.append(encoded)
        if len(queue) >= self.max_batch:
            self._wake_up()

    def encoded(self, batch: list[Any]) -> list[bytes]:
        """A batch taken from the queue, every span in it encoded (those the C sink held as they were): a turn's
        three spans took about 6 µs to encode in the turn's thread, between the rest of its work, and take about 4 µs
        here, hundreds in a row (docs/benchmarks.md, "Tracing: the hooks of a turn in C, and spans encoded by the
        export thread"). A span that cannot be encoded is dropped and counted (export_failed)."""
        out: list[bytes]
        rest: list[Any]
        if _encode_batch is not None and _c_span is not None and type(self.encoder) is Encoder:
            out, rest = _encode_batch(batch)
        else:
            out, rest = [], batch
        for item in rest:  # in Python: bytes, and what the C encoder leaves (or fails on, to be told why)
            if type(item) is bytes:
                out.append(item)
                continue
            try:
                out.append(self.encoder.span(item))
            except Exception:  # one span that cannot be encoded must not lose the batch
                log.exception("span %r not exported", getattr(item, "name", "?"))
                self.on_drop("export_failed", 1)
        return out

    def _wake_up(self) -> None:
        """A batch is queued: the export thread sends it."""
        if not self._wake.is_set():
            self._wake.set()

    def _full(self) -> None:
        """A span found the queue full: dropped, and counted."""
        self.on_drop("queue_full", 1)

    def _run(self) -> None:
        """Woken by a full batch: send full batches (fewer, larger requests); every ``delay_s``, on a flush
        and at the stop: send everything."""
        while True:
            woken = self._wake.wait(self.delay_s)
            self._wake.clear()
            stopping = self._stopping.is_set()
            self._export(everything=stopping or not woken or self._flush.is_set())
            if stopping:
                break
        self.sender.close()

    def _export(self, everything: bool) -> None:
        queue = self.queue
        if everything:
            self._flush.clear()
        while len(queue) >= self.max_batch or (everything and queue):
            batch = [queue.popleft() for _ in range(min(len(queue), self.max_batch))]
            try:
                body = self.encoder.request(self.encoded(batch))
                self.sender.send_with_retries(body, time.monotonic() + self.export_timeout_s, self._stopping.wait)
            except ExportError as exc:
                log.warning("%d spans not exported to %s: %s", len(batch), self.sender.settings.endpoint, exc)
                self.on_drop("export_failed", len(batch))
            except Exception:  # whatever else went wrong must not stop the exporter
                log.exception("%d spans not exported", len(batch))
                self.on_drop("export_failed", len(batch))
        if everything:
            self._idle.set()

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Send what is queued now; True when it went out (or failed) within the timeout."""
        self._idle.clear()
        self._flush.set()
        self._wake.set()
        return self._idle.wait(timeout_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Send what is queued (within the timeout), then stop the thread."""
        self._stopping.set()
        self._wake.set()
        self._thread.join(timeout_s)
