"""OpenTelemetry traces of Dockyard's processes (docs/observability.md, "Traces").

Configured by the standard ``OTEL_*`` variables only: tracing is on when an OTLP endpoint is set
(``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``), ``OTEL_TRACES_EXPORTER`` is
``otlp`` (or unset) and ``OTEL_SDK_DISABLED`` is not ``true``. The sampler (``OTEL_TRACES_SAMPLER``,
``OTEL_TRACES_SAMPLER_ARG``), the batch processor (``OTEL_BSP_*``), the exporter (``OTEL_EXPORTER_OTLP_*``:
headers, timeout, compression, certificates) and the resource (``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``) read the variables the OpenTelemetry SDKs read, with their defaults.

The recorder is Dockyard's own, not the OpenTelemetry Python SDK: a span is a small slotted object, the
current span a context variable, and a finished span is encoded (by hand, :mod:`dockyard_core.otlp`) into a
bounded queue that one thread POSTs over OTLP/HTTP (protobuf). The SDK spent about 23 µs to make, fill and
end a span and 28 µs to encode it; a turn of five spans cost 19 to 26 % of the facade's CPU per turn, against
#30's 2 % (docs/benchmarks.md, "Tracing on and off"). The wire format, the W3C ``traceparent`` and the
sampling decisions are the standard ones; tests decode the export with opentelemetry-proto and send it to a
real Jaeger.

Nothing is waited for: when the queue is full (the backend slow or down) a finished span is dropped and
counted (``queue_full``), as are the spans of a batch the backend did not take (``export_failed``).

Off costs nothing: :func:`start` answers None and each process's hooks test their own tracer global (None
when off) before doing anything else.
"""

from __future__ import annotations

import logging
import os
import random
import re
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from dockyard_core import otlp
from dockyard_core.tracesettings import CONTENT_VARIABLE as CONTENT_VARIABLE
from dockyard_core.tracesettings import TraceSettings as TraceSettings
from dockyard_core.tracesettings import TracingConfigError as TracingConfigError
from dockyard_core.tracesettings import number
from dockyard_core.tracesettings import resource as resource
from dockyard_core.tracesettings import settings_from_env as settings_from_env

try:  # the span type in C, where it was built (an optional extension: pyproject.toml)
    from dockyard_core import _spans
except ImportError:  # pragma: no cover - a machine without a C compiler: the Python span only
    _spans = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

OnDrop = Callable[[str, int], None]
"""Receives (reason, count) for spans that will never reach the backend: ``queue_full`` (the bounded queue
was full), ``export_failed`` (the backend refused them or could not be reached)."""


INTERNAL, SERVER, CLIENT = 1, 2, 3
"""Span kinds (OTLP's numbers)."""
ERROR = 2
"""The status code of a failed span (OTLP's number)."""


# --- spans and the current one -----------------------------------------------------------------------

_CURRENT: ContextVar[Span | None] = ContextVar("dockyard_span", default=None)
_bits = random.getrandbits
_now = time.time_ns


class Static:
    """Attributes that repeat from span to span (a route's, an app version's, a model call's settings): made
    once (cache them) and encoded once, so that a span with them costs one reference, not a dict and an
    encoding per attribute. ``name``: the name of the spans it is made for, where that repeats too
    (``chat {model}``)."""

    __slots__ = ("attributes", "encoded", "name")

    def __init__(self, attributes: Mapping[str, Any], name: str = "") -> None:
        self.attributes = dict(attributes)
        self.encoded = otlp.attribute_fields(self.attributes)
        self.name = name


class Span:
    """A span in progress, then finished: it becomes the current span while entered (``with``) or between
    :meth:`activate` and :meth:`finish`. A span that is not sampled records nothing (``recording`` False) but
    carries the trace on: its children and the ``traceparent`` it gives to outgoing requests."""

    __slots__ = (
        "_sink",
        "_token",
        "attributes",
        "end_ns",
        "kind",
        "links",
        "name",
        "parent_id",
        "remote",
        "sampled",
        "span_id",
        "start_ns",
        "statics",
        "status_code",
        "status_message",
        "trace_id",
        "tracestate",
    )  # fmt: skip

    def __init__(
        self,
        trace_id: int,
        span_id: int,
        sampled: bool,
        tracestate: str,
        parent_id: int,
        name: str,
        kind: int,
        attributes: dict[str, Any],
        links: list[tuple[int, int, str, Mapping[str, Any]]] | None,
        sink: Callable[[Span], None] | None,
        remote: bool = False,
        statics: list[Static] | None = None,
    ) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = parent_id
        self.sampled = sampled
        self.tracestate = tracestate
        self.remote = remote
        self.name = name
        self.kind = kind
        self.attributes = attributes
        self.statics = statics
        self.links = links
        self.status_code = 0
        self.status_message = ""
        self._sink = sink
        self._token: Token[Span | None] | None = None
        self.start_ns = _now()
        self.end_ns = 0

    @property
    def recording(self) -> bool:
        return self._sink is not None

    def set_attribute(self, key: str, value: Any) -> None:
        if self._sink is not None:
            self.attributes[key] = value

    def set_attributes(self, values: Mapping[str, Any]) -> None:
        if self._sink is not None:
            self.attributes.update(values)

    def add_static(self, static: Static) -> None:
        """Attributes made and encoded once (:class:`Static`); never also set one by one."""
        if self._sink is not None:
            if self.statics is None:
                self.statics = [static]
            else:
                self.statics.append(static)

    def all_attributes(self) -> dict[str, Any]:
        """The span's attributes, those of its :class:`Static` blocks included."""
        merged: dict[str, Any] = {}
        for static in self.statics or ():
            merged.update(static.attributes)
        merged.update(self.attributes)
        return merged

    def set_error(self, code: str) -> None:
        """The span failed with ``code`` (``error.type`` and an error status; never an exception's message,
        which may quote what a model or a tool wrote)."""
        if self._sink is not None:
            self.attributes["error.type"] = code
            self.status_code, self.status_message = ERROR, code

    def traceparent(self) -> str:
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{'01' if self.sampled else '00'}"

    def end(self) -> None:
        sink, self._sink = self._sink, None
        if sink is not None:
            self.end_ns = _now()
            sink(self)

    def activate(self) -> None:
        self._token = _CURRENT.set(self)

    def finish(self) -> None:
        """Stop being the current span (the one before is again) and end."""
        if self._token is not None:
            _CURRENT.reset(self._token)
            self._token = None
        self.end()

    def __enter__(self) -> Span:
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()


PySpan = Span
"""The span in Python (what :class:`Span` is where the C extension was not built)."""


if _spans is not None:

    class CSpan(_spans.Span):
        """:class:`PySpan` in C (``dockyard_core/_spans.c``): the same fields and methods, made, filled and
        ended in a fraction of the time; the unit tests run on both."""

        __slots__ = ()
        all_attributes = PySpan.all_attributes

    _spans.bind(_CURRENT, CSpan)
    Span = CSpan  # type: ignore[misc,assignment]


current: Callable[[], Span | None] = _CURRENT.get
"""``current()``: the current span (None outside any); the context variable's own method, no call in between."""


def detach() -> None:
    """No current span from here on in this task (whose context is its own copy): work a request starts in
    the background (an evaluation run) makes traces of its own instead of parts of that request's."""
    _CURRENT.set(None)


_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")


def py_extract(traceparent: str | None, tracestate: str | None = None) -> Span | None:
    """The remote parent a W3C ``traceparent`` names (None when absent or not valid); :func:`extract` is this or
    its C form."""
    if not traceparent:
        return None
    found = _TRACEPARENT.fullmatch(traceparent.strip().lower())
    if found is None:
        return None
    version, trace_hex, span_hex, flags, rest = found.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if not trace_id or not span_id:
        return None
    state = (tracestate or "")[:512]
    return Span(trace_id, span_id, bool(int(flags, 16) & 1), state, 0, "", SERVER, {}, None, None, remote=True)


extract: Callable[..., Span | None] = py_extract
"""``extract(traceparent, tracestate=None)``: :func:`py_extract`, or its C form where the extension was built."""
if _spans is not None:
    extract = _spans.extract


def inject(headers: dict[str, str], span: Span | None = None) -> None:
    """Add the (current) span's W3C ``traceparent`` (and ``tracestate``) to outgoing ``headers``."""
    span = span if span is not None else _CURRENT.get()
    if span is not None:
        headers["traceparent"] = span.traceparent()
        if span.tracestate:
            headers["tracestate"] = span.tracestate


# --- sampling ----------------------------------------------------------------------------------------

Sampler = Callable[["Span | None", int], bool]
"""Decides (parent or None, new trace id) whether a new span is sampled."""


def _ratio(ratio: float) -> Callable[[int], bool]:
    bound = round(ratio * 0xFFFFFFFFFFFFFFFF)  # TraceIdRatioBased's: on the trace id's low 64 bits
    return lambda trace_id: (trace_id & 0xFFFFFFFFFFFFFFFF) < bound


def sampler(env: Mapping[str, str]) -> Sampler:
    """The sampler ``OTEL_TRACES_SAMPLER`` names (default ``parentbased_always_on``). The parent-based ones
    follow a local parent and a caller's traceparent marked sampled; a caller's traceparent NOT marked
    sampled gets the root's decision instead of none: the widget and the web client send their traceparent
    unsampled, so ``parentbased_traceidratio``'s ratio (``OTEL_TRACES_SAMPLER_ARG``) applies to their turns."""
    name = env.get("OTEL_TRACES_SAMPLER", "").strip().lower() or "parentbased_always_on"
    ratio = 1.0
    if name.endswith("traceidratio"):
        raw = env.get("OTEL_TRACES_SAMPLER_ARG", "1").strip() or "1"
        try:
            ratio = min(1.0, max(0.0, float(raw)))
        except ValueError as exc:
            raise TracingConfigError(f"OTEL_TRACES_SAMPLER_ARG={raw!r} is no ratio between 0 and 1") from exc
    roots: dict[str, Callable[[int], bool]] = {
        "always_on": lambda _: True,
        "always_off": lambda _: False,
        "traceidratio": _ratio(ratio),
    }
    base = name.removeprefix("parentbased_")
    if base not in roots:
        raise TracingConfigError(
            f"OTEL_TRACES_SAMPLER={name}: Dockyard samples with always_on, always_off, traceidratio and their "
            "parentbased_ forms"
        )
    root = roots[base]
    if not name.startswith("parentbased_"):
        return lambda parent, trace_id: root(trace_id)

    def parent_based(parent: Span | None, trace_id: int) -> bool:
        if parent is None or (parent.remote and not parent.sampled):
            return root(trace_id)
        return parent.sampled

    parent_based.follows_parent = True  # type: ignore[attr-defined]  # the tracer answers those itself
    return parent_based


# --- the tracer --------------------------------------------------------------------------------------


class Tracer:
    """Makes spans: children of the current span (or of ``parent``, e.g. a caller's traceparent), sampled as
    the sampler decides, handed to ``sink`` when they end. :data:`PyTracer`; where the C extension was built,
    ``Tracer`` is :class:`CTracer`, which makes ``CSpan`` s."""

    def __init__(self, sample: Sampler, sink: Callable[[Span], None]) -> None:
        self.sample = sample
        self.sink = sink
        self.follows_parent = bool(getattr(sample, "follows_parent", False))
        """The sampler is parent-based (its ``follows_parent``): a local parent's decision, and a remote one's
        when sampled, is its answer, which the tracer then gives without calling it."""

    def start_span(
        self,
        name: str,
        kind: int = INTERNAL,
        attributes: dict[str, Any] | None = None,
        links: list[tuple[int, int, str, Mapping[str, Any]]] | None = None,
        parent: Span | None = None,
        use_current: bool = True,
        static: Static | None = None,
    ) -> Span:
        """A new span (enter it, or :meth:`Span.activate` it, to make it current; end it); ``static``: attributes
        made and encoded once (:class:`Static`)."""
        if parent is None and use_current:
            parent = _CURRENT.get()
        if parent is None:
            trace_id, parent_id, tracestate = _bits(128) or 1, 0, ""
        else:
            trace_id, parent_id, tracestate = parent.trace_id, parent.span_id, parent.tracestate
        if (
            parent.sampled
            if self.follows_parent and parent is not None and (parent.sampled or not parent.remote)
            else self.sample(parent, trace_id)
        ):
            return Span(
                trace_id, _bits(64) or 1, True, tracestate, parent_id, name, kind,
                {} if attributes is None else attributes, links, self.sink, False,
                None if static is None else [static],
            )  # fmt: skip
        return Span(trace_id, _bits(64) or 1, False, tracestate, parent_id, name, kind, {}, None, None)


PyTracer = Tracer
"""The tracer in Python (what :class:`Tracer` is where the C extension was not built)."""

if _spans is not None:

    class CTracer(_spans.Tracer):
        """:class:`PyTracer` in C (``dockyard_core/_spans.c``), making :class:`CSpan` s."""

        __slots__ = ()

    Tracer = CTracer  # type: ignore[misc,assignment]


# --- configuration ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tracing:
    """Tracing of one process: its tracer, its exporter, what the variables asked for."""

    tracer: Tracer
    exporter: otlp.BatchExporter
    settings: TraceSettings

    def flush(self, timeout_millis: int = 5000) -> bool:
        return self.exporter.flush(timeout_millis / 1000)

    def stop(self, timeout_millis: int = 5000) -> None:
        """Send what is queued (within the timeout), then stop."""
        self.exporter.stop(timeout_millis / 1000)


def start(service: str, version: str, on_drop: OnDrop, environ: Mapping[str, str] | None = None) -> Tracing | None:
    """Tracing for this process's ``service`` when the OTEL_* variables ask for it (None: off)."""
    settings = settings_from_env(environ)
    if settings is None:
        return None
    env = os.environ if environ is None else environ
    sample = sampler(env)
    encoder = otlp.Encoder(resource(service, version, env), "dockyard", version)
    sender = otlp.Sender(settings)
    exporter = otlp.BatchExporter(
        encoder,
        sender,
        on_drop,
        max_queue=int(number(env, "OTEL_BSP_MAX_QUEUE_SIZE", 2048)) or 1,
        max_batch=int(number(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)) or 1,
        delay_s=number(env, "OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000,
        export_timeout_s=number(env, "OTEL_BSP_EXPORT_TIMEOUT", 30000) / 1000,
    )
    log.info("tracing on: the spans of %s go to %s", service, settings.endpoint)
    return Tracing(Tracer(sample, exporter.sink), exporter, settings)


def links_to(traceparent: str | None, attributes: Mapping[str, Any]) -> list[tuple[int, int, str, Mapping[str, Any]]]:
    """A span link to the span a traceparent names (none when it is not valid)."""
    other = extract(traceparent)
    return [] if other is None else [(other.trace_id, other.span_id, other.tracestate, attributes)]


def query_names(query: str) -> str:
    """A URL query with only its parameter names kept (``code=REDACTED&state=REDACTED``): an OIDC callback's
    code or a token someone put in a URL never reaches a span."""
    names = [part.split("=", 1)[0] for part in query.split("&") if part]
    return "&".join(f"{unquote(name)}=REDACTED" for name in names)
