"""dockyard_core.tracing: what the standard OTEL_* variables turn on, the sampler's decisions, the W3C traceparent,
and spans that cannot reach a backend counted (the real exporter against a loopback port where nothing listens).
What the exporter sends is decoded in test_otlp.py."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time

import pytest

from dockyard_core import tracing
from tests.support.runners import free_port

pytestmark = pytest.mark.usefixtures("span_type")  # each test with the C span and with the Python one


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


def test_the_exporter_variables_with_the_sdk_defaults() -> None:
    on = tracing.settings_from_env(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector:4318",
            "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20abc,x-tenant=t1",
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2500",
            "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
            "OTEL_EXPORTER_OTLP_CERTIFICATE": "/etc/ca.pem",
        }
    )
    assert on is not None
    assert on.headers == {"authorization": "Bearer abc", "x-tenant": "t1"}
    assert (on.timeout_s, on.gzip, on.ca_file) == (2.5, True, "/etc/ca.pem")
    with pytest.raises(tracing.TracingConfigError, match="OTEL_EXPORTER_OTLP_HEADERS"):
        tracing.settings_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_HEADERS": "x"})
    with pytest.raises(tracing.TracingConfigError, match="OTEL_EXPORTER_OTLP_COMPRESSION=zstd"):
        tracing.settings_from_env(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}
        )


def test_the_resource_names_the_service_as_the_variables_say() -> None:
    env = {"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=prod,service.name=x", "OTEL_SERVICE_NAME": "api"}
    found = tracing.resource("dockyard-api", "1.2", env)
    assert found["service.name"] == "api"
    assert found["service.version"] == "1.2"
    assert found["deployment.environment.name"] == "prod"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", (0x0AF7651916CD43DD8448EB211C80319C, True)),
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", (0x0AF7651916CD43DD8448EB211C80319C, False)),
        ("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-later", (0x0AF7651916CD43DD8448EB211C80319C, True)),
        ("00-00000000000000000000000000000000-b7ad6b7169203331-01", None),
        ("00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", None),
        ("ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", None),
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra", None),
        ("not a traceparent", None),
    ],
)
def test_a_callers_traceparent_is_read_as_w3c_says(header: str, expected: tuple[int, bool] | None) -> None:
    parent = tracing.extract(header, "vendor=1")
    assert (None if parent is None else (parent.trace_id, parent.sampled)) == expected
    if parent is not None:
        child = tracing.Tracer(tracing.sampler({}), lambda span: None).start_span("POST /x", parent=parent)
        headers: dict[str, str] = {}
        tracing.inject(headers, child)
        assert headers == {"traceparent": child.traceparent(), "tracestate": "vendor=1"}
        assert headers["traceparent"].startswith(f"00-{parent.trace_id:032x}-{child.span_id:016x}-")
        assert child.parent_id == 0xB7AD6B7169203331


def test_children_follow_the_current_span_and_an_unsampled_one_records_nothing() -> None:
    finished: list[tracing.Span] = []
    tracer = tracing.Tracer(tracing.sampler({"OTEL_TRACES_SAMPLER": "parentbased_always_off"}), finished.append)
    sampled = tracing.extract("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    with tracer.start_span("root", parent=sampled) as root, tracer.start_span("child") as child:
        assert tracing.current() is child
        child.set_attribute("k", "v")
    assert tracing.current() is None
    assert [s.name for s in finished] == ["child", "root"]
    assert (child.parent_id, child.trace_id) == (root.span_id, root.trace_id)
    with tracer.start_span("unsampled root") as off, tracer.start_span("its child") as under:
        under.set_attribute("k", "v")
        assert under.traceparent().endswith("-00")
    assert (off.recording, under.recording, under.attributes, under.trace_id) == (False, False, {}, off.trace_id)
    assert len(finished) == 2


def test_spans_that_cannot_be_sent_are_dropped_and_counted_without_waiting() -> None:
    drops: dict[str, int] = {}
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",
        "OTEL_BSP_MAX_QUEUE_SIZE": "4",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "2",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_BSP_EXPORT_TIMEOUT": "200",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "1000",
    }
    running = tracing.start("test", "0", lambda reason, n: drops.__setitem__(reason, drops.get(reason, 0) + n), env)
    assert running is not None
    try:
        started = time.perf_counter()
        for i in range(200):
            with running.tracer.start_span(f"span {i}"):
                pass
        assert time.perf_counter() - started < 0.5  # never waits for the backend
        assert drops.get("queue_full", 0) > 100, drops
        deadline = time.monotonic() + 15
        while not drops.get("export_failed") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert drops.get("export_failed", 0) >= 1, drops
        running.stop(timeout_millis=5000)
    finally:
        running.stop(timeout_millis=100)
    assert drops["queue_full"] + drops["export_failed"] == 200, drops  # every span accounted for


def test_off_nothing_is_started_by_the_facade() -> None:
    """Tracing off costs nothing: building the facade starts no export thread and no tracer."""
    code = (
        "import threading; from dockyard_api.app import create_app; from dockyard_api.runtime import tracing; "
        "create_app(); assert tracing.TRACER is None; "
        "assert not [t for t in threading.enumerate() if t.name == 'dockyard-otlp-export']"
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


def test_a_url_query_keeps_only_its_parameter_names() -> None:
    assert tracing.query_names("code=abc&state=x&e=") == "code=REDACTED&state=REDACTED&e=REDACTED"


@pytest.mark.parametrize(
    ("env", "flags", "kept"),
    [
        ({}, 0, 100),  # the default: every turn, also one whose caller (the widget) sent no decision
        ({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}, 0, 25),
        ({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}, 1, 100),
        ({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"}, 0, 0),
        ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}, 1, 25),
        ({"OTEL_TRACES_SAMPLER": "always_off"}, 1, 0),
    ],
)
def test_the_ratio_decides_for_an_unsampled_traceparent_a_sampled_one_is_followed(
    env: dict[str, str], flags: int, kept: int
) -> None:
    chosen = tracing.sampler(env)
    decided = 0
    for i in range(400):
        trace_id = (i * 0x9E3779B97F4A7C15 * 0x100000001B3) % (1 << 128) or 1
        parent = tracing.extract(f"00-{trace_id:032x}-{1:016x}-{flags:02x}")
        decided += chosen(parent, trace_id)
    assert abs(decided / 4 - kept) <= 8, decided


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"},
        {"OTEL_TRACES_SAMPLER": "parentbased_always_off"},
        {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"},
    ],
)
def test_the_tracer_answers_for_a_parent_based_sampler_only_what_it_would_answer(env: dict[str, str]) -> None:
    """A parent-based sampler is not called for a local parent nor for a caller's sampled traceparent (the
    tracer gives the parent's decision itself); a caller's unsampled traceparent and a root still ask it, and
    a sampler that does not follow parents is asked every time. The decisions are the sampler's in every case."""
    chosen = tracing.sampler(env)
    asked: list[int] = []

    def sample(parent: tracing.Span | None, trace_id: int) -> bool:
        asked.append(trace_id)
        return chosen(parent, trace_id)

    sample.follows_parent = getattr(chosen, "follows_parent", False)  # type: ignore[attr-defined]
    tracer = tracing.Tracer(sample, lambda span: None)
    follows = env.get("OTEL_TRACES_SAMPLER", "parentbased_").startswith("parentbased_")
    for i in range(200):
        trace_id = (i * 0x9E3779B97F4A7C15 * 0x100000001B3) % (1 << 128) or 1
        for flags in (0, 1):
            remote = tracing.extract(f"00-{trace_id:032x}-{1:016x}-{flags:02x}")
            del asked[:]
            child = tracer.start_span("child", parent=remote)
            assert child.sampled == chosen(remote, trace_id)
            assert len(asked) == (0 if follows and flags else 1)
            del asked[:]
            grandchild = tracer.start_span("grandchild", parent=child)
            assert grandchild.sampled == chosen(child, trace_id)
            assert len(asked) == (0 if follows else 1)
    root = tracer.start_span("root", use_current=False)
    assert root.sampled == chosen(None, root.trace_id)


def test_a_sampler_argument_that_is_no_ratio_is_refused_naming_it() -> None:
    with pytest.raises(tracing.TracingConfigError, match="OTEL_TRACES_SAMPLER_ARG"):
        tracing.sampler({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "half"})
    with pytest.raises(tracing.TracingConfigError, match="OTEL_TRACES_SAMPLER=jaeger_remote"):
        tracing.sampler({"OTEL_TRACES_SAMPLER": "jaeger_remote"})


def test_a_span_holds_nothing_once_it_is_gone(span_type: type) -> None:
    """The C span counts its references right: what it held (attributes, the sink, statics) is back to the
    references it had before, after a span made, entered, filled, ended and dropped, and after one left current
    in a context of its own (a cycle through the context, for the garbage collector)."""
    import contextvars
    import gc

    attributes: dict[str, object] = {}
    static = tracing.Static({"a": 1})
    ended: list[object] = []

    def sink(span: object) -> None:
        ended.append(span)

    before = (sys.getrefcount(attributes), sys.getrefcount(sink), sys.getrefcount(static))
    span = span_type(1 << 100, 2, True, "k=v", 3, "name", tracing.SERVER, attributes, None, sink)
    with span:
        span.add_static(static)
        span.set_attributes({"x": 1})
        span.set_error("boom")
        assert tracing.current() is span
    assert tracing.current() is None
    assert ended == [span]
    assert not span.recording
    assert span.traceparent() == f"00-{1 << 100:032x}-{2:016x}-01"
    span.set_attribute("late", 1)  # ended: records nothing more
    assert attributes == {"x": 1, "error.type": "boom"}
    assert span.status_code == tracing.ERROR
    ended.clear()
    del span

    def left_current() -> None:
        span_type(1, 2, True, "", 0, "n", 1, attributes, None, sink).activate()

    contextvars.copy_context().run(left_current)
    gc.collect()
    assert (sys.getrefcount(attributes), sys.getrefcount(sink), sys.getrefcount(static)) == before


def test_a_spans_traceparent_is_its_ids_in_hex(span_type: type) -> None:
    """``traceparent()`` of any ids (the C form writes the hex digits itself): 32 and 16 lower-case digits, zero
    padded, and the sampled flag."""
    rng = random.Random(7)
    ids = [(1, 1), ((1 << 128) - 1, (1 << 64) - 1), (1 << 64, 1 << 63), (0xABCDEF, 0xFEDCBA)]
    ids += [(rng.getrandbits(128) or 1, rng.getrandbits(64) or 1) for _ in range(200)]
    for trace_id, span_id in ids:
        for sampled in (True, False):
            span = span_type(trace_id, span_id, sampled, "", 0, "x", tracing.INTERNAL, {}, None, None)
            assert span.traceparent() == f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def test_new_ids_are_random_never_zero_and_a_forked_child_draws_its_own(span_type: type) -> None:
    """Trace and span ids of new roots: 128 and 64 bits, never 0, all different, about half of each bit set (the
    C form draws them from its own generator, seeded from the kernel); a process forked after some were drawn
    draws other ids than its parent goes on drawing (the C generator is seeded again in the child, as
    ``random`` is)."""
    tracer = tracing.Tracer(tracing.sampler({}), lambda span: None)
    spans = [tracer.start_span("root", use_current=False) for _ in range(2000)]
    traces, own = [s.trace_id for s in spans], [s.span_id for s in spans]
    assert all(0 < t < 1 << 128 for t in traces)
    assert all(0 < i < 1 << 64 for i in own)
    assert len(set(traces)) == len(set(own)) == 2000
    ones = sum(bin(t).count("1") for t in traces) / (128 * 2000)
    high = sum(t >> 64 != 0 for t in traces)
    assert 0.48 < ones < 0.52
    assert high == 2000  # the upper half is drawn too

    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        try:
            os.write(write, f"{tracer.start_span('child', use_current=False).span_id}".encode())
        finally:
            os._exit(0)
    os.close(write)
    assert os.waitpid(child, 0)[1] == 0
    with os.fdopen(read) as pipe:
        drawn_in_child = int(pipe.read())
    assert drawn_in_child != tracer.start_span("parent", use_current=False).span_id


@pytest.mark.skipif(tracing._spans is None, reason="the C extension was not built")
def test_the_c_extract_reads_traceparents_as_the_python_one() -> None:
    """The C form of extract answers what py_extract answers, on valid, odd and malformed traceparents."""
    valid = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    cases = [
        valid, valid.upper(), f"  {valid}\n", valid[:-1] + "0", valid + "-x", "01" + valid[2:] + "-later; v=1",
        "01" + valid[2:] + "-a\nb", "01" + valid[2:] + "x", "01" + valid[2:], "ff" + valid[2:], "cc" + valid[2:],
        valid.replace("0af7", "0ag7"), "00-" + "0" * 32 + "-b7ad6b7169203331-01", valid[:36] + "0" * 16 + "-01",
        valid[:55 - 1], valid.replace("-", "_"), "", "00-" + "ü" * 52, "02" + valid[2:] + "-ü", valid + "\u00a0",
        "0X" + valid[2:], "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",
        "00-+af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        f"\x1c\t{valid.upper()}\x0b\x1f", "01" + valid.upper()[2:] + "-Later", valid.replace("a", "\u212a"),
        valid[:-1] + "\u212a", " " * 3 + valid[:30] + " " + valid[31:],
    ]  # fmt: skip
    # and mutations of it: an ASCII traceparent is read as it is (its case and strip's whitespace skipped in
    # place), any other through strip() and lower() as py_extract does
    rng = random.Random(5)
    alphabet = "0af-AF9g \t\n\x1c\x0b\u212a\u00a0"
    for _ in range(400):
        chars = list(rng.choice(cases[:6]))
        for _ in range(rng.randint(1, 3)):
            chars[rng.randrange(len(chars))] = rng.choice(alphabet)
        cases.append("".join(chars))
    states = [None, "", "vendor=1", "x" * 600]
    for text in cases:
        for state in states:
            expected, got = tracing.py_extract(text, state), tracing._spans.extract(text, state)
            if expected is None:
                assert got is None, (text, state)
                continue
            assert got is not None, (text, state)
            fields = ("trace_id", "span_id", "parent_id", "sampled", "tracestate", "remote", "kind", "name")
            assert [getattr(got, f) for f in fields] == [getattr(expected, f) for f in fields], (text, state)
            assert not got.recording
            assert got.attributes == {}
    assert tracing._spans.extract(None) is None


def test_start_span_takes_its_arguments_by_position_and_by_name(span_type: type) -> None:
    ended: list[tracing.Span] = []
    tracer = tracing.Tracer(tracing.sampler({}), ended.append)
    static = tracing.Static({"s": 1})
    with tracer.start_span("parent", tracing.SERVER, {"a": 1}, None, None, True, static) as parent:
        child = tracer.start_span("child", kind=tracing.CLIENT, static=static, attributes={"b": 2})
        detached = tracer.start_span(name="root", use_current=False)
        other = tracer.start_span("other", parent=detached, links=[(1, 2, "", {"l": 1})])
    for span in (child, detached, other):
        span.end()
    assert isinstance(child, span_type)
    assert (child.trace_id, child.parent_id, child.kind, child.attributes) == (parent.trace_id, parent.span_id,
                                                                               tracing.CLIENT, {"b": 2})  # fmt: skip
    assert child.statics == [static]
    assert parent.statics == [static]
    assert parent.kind == tracing.SERVER
    assert detached.parent_id == 0
    assert detached.trace_id != parent.trace_id
    assert detached.kind == tracing.INTERNAL
    assert (other.trace_id, other.parent_id) == (detached.trace_id, detached.span_id)
    assert other.links == [(1, 2, "", {"l": 1})]
    assert [s.name for s in ended] == ["parent", "child", "root", "other"]
    with pytest.raises(TypeError):
        tracer.start_span("x", colour="red")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        tracer.start_span()  # type: ignore[call-arg]
    never = tracing.Tracer(tracing.sampler({"OTEL_TRACES_SAMPLER": "always_off"}), ended.append)
    quiet = never.start_span("quiet", attributes={"c": 3}, static=static)
    quiet.set_attribute("d", 4)
    quiet.end()
    assert not quiet.sampled
    assert quiet.attributes == {}
    assert quiet.statics is None
    assert len(ended) == 4


def test_the_c_forms_refuse_what_is_not_set_up_instead_of_crashing(span_type: type) -> None:
    """Objects made with ``__new__`` alone, or a span whose fields were deleted, raise a Python error."""
    if span_type is tracing.PySpan:
        pytest.skip("the C forms only")
    spans = tracing._spans
    bare = tracing.CSpan.__new__(tracing.CSpan)
    with pytest.raises(TypeError):
        bare.traceparent()
    assert bare.set_attribute("a", 1) is None  # not recording: nothing to do
    with pytest.raises(ValueError, match="not initialised"):
        spans.span(bare)
    with pytest.raises(RuntimeError, match="not initialised"):
        spans.Sink.__new__(spans.Sink)(bare)
    with pytest.raises(RuntimeError, match="not initialised"):
        spans.Tracer.__new__(spans.Tracer).start_span("x")
    tracer = tracing.Tracer(tracing.sampler({}), lambda span: None)
    parent = tracer.start_span("parent")
    del parent.trace_id, parent.tracestate, parent.attributes
    child = tracer.start_span("child", parent=parent)
    assert child.trace_id is None
    with pytest.raises(TypeError):
        parent.set_attribute("x", 1)  # its attributes are gone: None takes no item
