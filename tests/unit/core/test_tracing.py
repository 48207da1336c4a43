"""dockyard_core.tracing: what the standard OTEL_* variables turn on, and spans that cannot reach a backend counted
(a real OTLP/HTTP exporter against a loopback port where nothing listens)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from dockyard_core import tracing
from tests.support.runners import free_port


def test_off_unless_an_otlp_endpoint_is_set() -> None:
    assert tracing.settings_from_env({}) is None
    assert (
        tracing.settings_from_env({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
        is None
    )
    assert (
        tracing.settings_from_env({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) is None
    )


def test_the_endpoint_the_protocol_and_content_capture() -> None:
    on = tracing.settings_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"})
    assert on == tracing.TraceSettings("http://collector:4318/v1/traces", False)
    own = tracing.settings_from_env(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://traces.example:443/otlp/v1/traces",
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
        }
    )
    assert own == tracing.TraceSettings("https://traces.example:443/otlp/v1/traces", True)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER=zipkin"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
    ],
)
def test_what_cannot_be_done_is_refused_naming_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(tracing.TracingConfigError, match=named):
        tracing.settings_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", **env})


def test_spans_that_cannot_be_sent_are_dropped_and_counted_without_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    drops: dict[str, int] = {}
    running = tracing.start(
        "test", "0", lambda reason, n: drops.__setitem__(reason, drops.get(reason, 0) + n),
        {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}"},
    )  # fmt: skip
    assert running is not None
    try:
        started = time.perf_counter()
        for i in range(200):
            with running.tracer.start_as_current_span(f"span {i}"):
                pass
        assert time.perf_counter() - started < 0.5  # never waits for the backend
        assert drops.get("queue_full", 0) > 100, drops
        deadline = time.monotonic() + 15
        while not drops.get("export_failed") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert drops.get("export_failed", 0) >= 1, drops
    finally:
        running.stop(timeout_millis=100)


def test_off_no_sdk_is_loaded_by_the_facade() -> None:
    """Tracing off costs nothing: building the facade loads no part of the OpenTelemetry SDK."""
    code = (
        "import sys; from dockyard_api.app import create_app; from dockyard_api.runtime import tracing; create_app(); "
        "assert tracing.TRACER is None; "
        "assert not [m for m in sys.modules if m.startswith('opentelemetry.sdk')], "
        "[m for m in sys.modules if m.startswith('opentelemetry.sdk')]"
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


def test_a_url_query_keeps_only_its_parameter_names() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(tracing.query_scrubber())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span("GET /cb", attributes={"url.query": "code=abc&state=x&e="}):
        pass
    (span,) = exporter.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["url.query"] == "code=REDACTED&state=REDACTED&e=REDACTED"


@pytest.mark.parametrize(
    ("env", "flags", "kept"),
    [
        ({}, 0, 100),  # the default: every turn, also one whose caller (the widget) sent no decision
        ({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}, 0, 25),
        ({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}, 1, 100),
        ({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"}, 0, 0),
    ],
)
def test_the_ratio_decides_for_an_unsampled_traceparent_a_sampled_one_is_followed(
    env: dict[str, str], flags: int, kept: int
) -> None:
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

    chosen = tracing.sampler(env)
    decided = 0
    for i in range(400):
        trace_id = (i * 0x9E3779B97F4A7C15 * 0x100000001B3) % (1 << 128) or 1
        parent = NonRecordingSpan(SpanContext(trace_id, 1, is_remote=True, trace_flags=TraceFlags(flags)))
        result = chosen.should_sample(set_span_in_context(parent), trace_id, "POST /execute")
        decided += result.decision.is_sampled()
    assert abs(decided / 4 - kept) <= 8, decided


def test_a_sampler_argument_that_is_no_ratio_is_refused_naming_it() -> None:
    with pytest.raises(tracing.TracingConfigError, match="OTEL_TRACES_SAMPLER_ARG"):
        tracing.sampler({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "half"})
