"""``bench.execute --tracing``: a second facade process with tracing on, its spans exported over OTLP/HTTP to a
real Jaeger (``tests.support.jaeger``, built from its pinned Go module on first use) on loopback, beside the
facade with tracing off; the path ``traced`` calls the same app, environment and key through it, alternated
with the others in every round. Printed: the p50 tracing adds (``traced`` minus ``facade``, target <= 1 ms),
the CPU it adds per turn (target <= 2 % of the untraced facade's), the spans Jaeger holds and the spans the
traced facade dropped (``dockyard_api_spans_dropped_total``)."""

from __future__ import annotations

import re
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import httpx
from tests.support.jaeger import Jaeger


@contextmanager
def jaeger() -> Iterator[Jaeger]:
    backend = Jaeger(Path(tempfile.mkdtemp(prefix="bench-jaeger-")))
    backend.start()
    try:
        yield backend
    finally:
        backend.stop()


def otel_env(backend: Jaeger) -> dict[str, str]:
    """The standard variables that turn a facade's tracing on (the batch defaults otherwise)."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": backend.otlp_endpoint, "OTEL_SERVICE_NAME": "dockyard-api-bench"}


def dropped(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(float(m) for m in re.findall(r"^dockyard_api_spans_dropped_total\{[^}]*\} (\S+)$", text, re.M))


def spans_held(backend: Jaeger, limit: int = 200) -> tuple[int, int]:
    """(traces, spans) Jaeger answers for the bench's facade (the newest ``limit`` traces)."""
    traces = backend.traces("dockyard-api-bench", limit=limit)
    return len(traces), sum(len(t.spans) for t in traces)


def facade(start: Any, cluster: Any, database: str, backend: Jaeger | None, untraced: Any) -> Any:
    """The traced facade process (``start``: bench.execute's facade_process), or the untraced one again."""
    if backend is None:
        return nullcontext(("", untraced))
    if database.startswith("sqlite"):  # a SQLite file is one facade's: the traced one gets its own
        database = database.replace(".db", "-traced.db")
        for stale in Path(database.split(":///", 1)[1]).parent.glob("*-traced.db*"):
            stale.unlink()
    return start(cluster, database, None, otel_env(backend))


def p50(latencies_ms: list[float]) -> float:
    """The median as bench.execute's percentile(values, 50) reads it."""
    ordered = sorted(latencies_ms)
    return ordered[min(len(ordered) - 1, round(0.5 * (len(ordered) - 1)))] if ordered else float("nan")


def summary(
    modes: list[str],
    results: list[Any],
    sequential: dict[str, Any],
    cpu: tuple[dict[str, list[float]], dict[str, list[float]]],
    backend: Jaeger,
    traced_url: str,
) -> None:
    """``results``: bench.execute's Results of every round (path, arrivals, latencies_ms); ``cpu``: the facade
    CPU per call by round, untraced and traced."""
    traces, spans = spans_held(backend)
    lost = dropped(traced_url)
    added_1 = p50(sequential["traced"].latencies_ms) - p50(sequential["facade"].latencies_ms)

    def mode_p50(mode: str, path: str) -> float:
        return p50([v for r in results if (r.arrivals, r.path) == (mode, path) for v in r.latencies_ms])

    for mode in modes:
        added = mode_p50(mode, "traced") - mode_p50(mode, "facade")
        off, on = statistics.median(cpu[0][mode]), statistics.median(cpu[1][mode])
        share = (on - off) / off * 100 if off else 0.0
        print(f"summary (tracing on / off, {mode} arrivals, spans to Jaeger over OTLP/HTTP): added p50 {added:.2f} "
              f"ms (<= 1: {met(added <= 1)}), {added_1:.2f} ms at concurrency 1 (<= 1: {met(added_1 <= 1)}); "
              f"facade CPU per turn {off:.3f} -> {on:.3f} ms ({share:+.1f} %, <= 2 %: {met(share <= 2)}); "
              f"Jaeger holds {spans} spans in the newest {traces} traces; spans dropped {lost:.0f}")  # fmt: skip


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"
