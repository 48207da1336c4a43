"""OpenTelemetry traces of Dockyard's processes (docs/observability.md, "Traces").

Configured by the standard ``OTEL_*`` variables only: tracing is on when an OTLP endpoint is set
(``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``), ``OTEL_TRACES_EXPORTER`` is
``otlp`` (or unset) and ``OTEL_SDK_DISABLED`` is not ``true``. Spans go out over OTLP/HTTP (protobuf) through
the SDK's ``BatchSpanProcessor``, whose queue is bounded (``OTEL_BSP_MAX_QUEUE_SIZE``, default 2048): when the
backend is slow or down, spans are dropped (never waited for) and counted by the ``on_drop`` callback the
process gives (its Prometheus counter), as are spans whose export failed. The sampler is the SDK's
(``OTEL_TRACES_SAMPLER``, default parent-based always-on); the resource is ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` over the process's own name and version.

Off costs nothing: :func:`start` answers None, no SDK object is made, and each process's hooks test their
own tracer global (None when off) before doing anything else. Operator and facade each have their own
provider (their own ``service.name``), also when a test runs both in one process.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from opentelemetry import propagate
from opentelemetry.metrics import Counter, NoOpMeter, NoOpMeterProvider
from opentelemetry.trace import Tracer, TracerProvider

log = logging.getLogger(__name__)

OnDrop = Callable[[str, int], None]
"""Receives (reason, count) for spans that will never reach the backend: ``queue_full`` (the bounded queue
was full), ``export_failed`` (the backend refused or could not be reached), ``already_shutdown``."""

INTERNAL_METRICS = "OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED"
CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The GenAI instrumentations' switch for message text; Dockyard adds text only redacted (docs)."""


class TracingConfigError(ValueError):
    """The OTEL_* variables ask for something Dockyard cannot do (named in the message)."""


@dataclass(frozen=True)
class TraceSettings:
    endpoint: str
    """The OTLP/HTTP traces URL (…/v1/traces)."""
    capture_content: bool


def settings_from_env(environ: Mapping[str, str] | None = None) -> TraceSettings | None:
    """What the OTEL_* variables ask for; None when tracing is off."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    exporters = [e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if e.strip()]
    if not exporters or exporters == ["none"]:
        return None
    if exporters != ["otlp"]:
        raise TracingConfigError(f"OTEL_TRACES_EXPORTER={','.join(exporters)}: Dockyard exports with otlp only")
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if not endpoint:
        base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        if not base:
            return None
        endpoint = base.rstrip("/") + "/v1/traces"
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    )
    if protocol.strip() != "http/protobuf":
        raise TracingConfigError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: Dockyard exports OTLP over HTTP (http/protobuf, port 4318)"
        )
    if not endpoint.startswith(("http://", "https://")):
        raise TracingConfigError(f"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT={endpoint!r} is not an http(s) URL")
    capture = env.get(CONTENT_VARIABLE, "").strip().lower() == "true"
    return TraceSettings(endpoint, capture)


class _DropCounter(Counter):
    """The SDK's own processor and exporter counters, read for their failures (``error.type``)."""

    def __init__(self, on_drop: OnDrop, reason: str | None) -> None:
        self.on_drop = on_drop
        self.reason = reason

    def add(self, amount: int | float, attributes: Any = None, context: Any = None) -> None:
        error = (attributes or {}).get("error.type")
        if error is not None and amount:
            self.on_drop(self.reason or str(error), int(amount))


class _DropMeter(NoOpMeter):
    def __init__(self, on_drop: OnDrop) -> None:
        super().__init__("dockyard.tracing")
        self.on_drop = on_drop

    def create_counter(self, name: str, unit: str = "", description: str = "") -> Counter:
        if name == "otel.sdk.processor.span.processed":
            return _DropCounter(self.on_drop, None)  # queue_full, already_shutdown
        if name == "otel.sdk.exporter.span.exported":
            return _DropCounter(self.on_drop, "export_failed")
        return super().create_counter(name, unit, description)


class _DropMeterProvider(NoOpMeterProvider):
    def __init__(self, on_drop: OnDrop) -> None:
        self.meter = _DropMeter(on_drop)

    def get_meter(
        self, name: str, version: str | None = None, schema_url: str | None = None, attributes: Any = None
    ) -> Any:
        return self.meter


@contextlib.contextmanager
def _sdk_counters() -> Iterator[None]:
    """The SDK counts what its batch processor and OTLP exporter drop only when
    ``OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED`` is true as they are made (read once, there): on for them."""
    saved = os.environ.get(INTERNAL_METRICS)
    os.environ[INTERNAL_METRICS] = "true"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(INTERNAL_METRICS, None)
        else:
            os.environ[INTERNAL_METRICS] = saved


def start(service: str, version: str, on_drop: OnDrop, environ: Mapping[str, str] | None = None) -> Tracing | None:
    """A tracer provider for this process's ``service`` when the OTEL_* variables ask for one (None: off)."""
    settings = settings_from_env(environ)
    if settings is None:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider as SdkProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    meters = _DropMeterProvider(on_drop)
    env = os.environ if environ is None else environ
    resource = Resource.create({"service.name": service, "service.version": version})
    if env.get("OTEL_SERVICE_NAME"):
        resource = resource.merge(Resource({"service.name": env["OTEL_SERVICE_NAME"]}))
    provider = SdkProvider(resource=resource, sampler=sampler(env))
    provider.add_span_processor(query_scrubber())  # first: the batch processor gets the span scrubbed
    with _sdk_counters():
        exporter = OTLPSpanExporter(endpoint=settings.endpoint, meter_provider=meters)
        provider.add_span_processor(BatchSpanProcessor(exporter, meter_provider=meters))
    log.info("tracing on: the spans of %s go to %s", service, settings.endpoint)
    return Tracing(provider, provider.get_tracer("dockyard", version), settings)


def sampler(env: Mapping[str, str]) -> Any:
    """The sampler: the SDK's own from ``OTEL_TRACES_SAMPLER``, but for the default and the parent-based ratio
    (``parentbased_traceidratio``, ``parentbased_always_on``), where a caller's traceparent that is NOT marked
    sampled gets the ratio's decision (on its trace id) instead of none: the widget and the web client send
    their traceparent unsampled, so ``OTEL_TRACES_SAMPLER_ARG`` applies to their turns too. A sampled one is
    always followed. None: the SDK reads the variables."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased

    name = env.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    if name not in ("", "parentbased_traceidratio", "parentbased_always_on"):
        return None
    ratio = 1.0
    if name == "parentbased_traceidratio":
        try:
            ratio = min(1.0, max(0.0, float(env.get("OTEL_TRACES_SAMPLER_ARG", "1") or "1")))
        except ValueError as exc:
            raise TracingConfigError(f"OTEL_TRACES_SAMPLER_ARG={env['OTEL_TRACES_SAMPLER_ARG']!r} is no ratio") from exc
    chosen = TraceIdRatioBased(ratio)
    return ParentBased(chosen, remote_parent_sampled=ALWAYS_ON, remote_parent_not_sampled=chosen)


def query_scrubber() -> Any:
    """A span processor that keeps only the names of a URL's query parameters (``url.query``, which the web
    framework's server spans record: an OIDC callback's code, a token someone put in a URL)."""
    from opentelemetry.sdk.trace import SpanProcessor

    class ScrubQuery(SpanProcessor):
        def on_start(self, span: Any, parent_context: Any = None) -> None:
            query = (span.attributes or {}).get("url.query")
            if query:
                names = [name for name, _ in parse_qsl(str(query), keep_blank_values=True)]
                span.set_attribute("url.query", "&".join(f"{name}=REDACTED" for name in names))

    return ScrubQuery()


@dataclass(frozen=True)
class Tracing:
    """Tracing of one process: its SDK provider, its tracer, what the variables asked for."""

    provider: TracerProvider
    tracer: Tracer
    settings: TraceSettings

    def stop(self, timeout_millis: int = 5000) -> None:
        """Send what is queued (within the timeout), then stop."""
        sdk: Any = self.provider
        try:
            sdk.force_flush(timeout_millis)
        finally:
            sdk.shutdown()


def inject(headers: dict[str, str]) -> None:
    """Add the current span's W3C ``traceparent`` (and ``tracestate``) to outgoing ``headers``."""
    propagate.inject(headers)
