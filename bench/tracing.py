"""``bench.execute --tracing``: two more facade processes with tracing on, their spans exported over OTLP/HTTP to
a real Jaeger (``tests.support.jaeger``, built from its pinned Go module on first use) on loopback, beside the
facade with tracing off. Two paths call the same app, environment and key through the traced facades, in every
round after the others:

- ``traced``: each call sends a new W3C ``traceparent`` marked sampled (as a caller with its own tracing
  does): the turn is recorded and exported, three spans;
- ``unsampled``: no ``traceparent``; the traced facades' sampler is ``parentbased_traceidratio`` with ratio 0,
  so they record nothing for it.

The two run at the same time, one on each traced facade, swapped every segment (:func:`crossover`). The cost of
tracing is ``traced`` against ``unsampled``: the same seconds of the machine, and each facade in both roles, so
what differs between the two processes (their memory layout, which of them holds the SLO watcher's Lease, a
SQLite file each) cancels in every pair of segments. ``unsampled`` against the untraced facade's ``facade`` is
printed too (what a facade with tracing on pays for a turn it does not sample: a few µs, below the noise between
two processes, and here also at another load: the unsampled calls share the machine with the traced ones).
Printed: the p50 and the CPU tracing adds (targets <= 1 ms and <= 2 % of the untraced turn's), the spans Jaeger
holds, its CPU per traced turn (it shares the machine's cores here), and the spans the traced facades dropped
(``dockyard_api_spans_dropped_total``). ``--tracing-aa`` marks the traced path's traceparent not sampled: both
paths are then the same turns, and what the figures show is the method's own bias and noise.

``python -m bench.tracing``: the recorder alone in one process (the hooks of a turn and the export thread,
which runs between turns), tracing off, on for turns not sampled, and on for sampled ones, alternated.

``python -m bench.tracing --instructions [--turns 1000]``: the same turn's instructions, counted by callgrind
(valgrind's tool; Debian package ``valgrind``), hook by hook (each added to the turn in turn), sampled and not
sampled: the thread that runs the turns, and apart the other threads (the export, which sends nothing until a flush
after the turns). A figure that does not move with the machine or its load (repeated counts agree within 0.5 %;
until 2026-11-27 the export ran between the turns and the counts moved by up to a fifth with how the two threads
met), for telling what a change to the hooks saves (the CPU time in a facade also depends on the caches:
docs/benchmarks.md).
"""

from __future__ import annotations

import atexit
import json
import multiprocessing
import os
import random
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import httpx
from tests.support.jaeger import Jaeger

from bench.common import cpu_seconds


@contextmanager
def jaeger() -> Iterator[Jaeger]:
    backend = Jaeger(Path(tempfile.mkdtemp(prefix="bench-jaeger-")))
    backend.start()
    try:
        yield backend
    finally:
        backend.stop()


SINK = """
import http.server, sys
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


class Sink:
    """A diagnostic stand-in for Jaeger (``bench.execute --tracing-sink``): a process that answers every OTLP/HTTP
    POST with 200 and keeps nothing, so that what a backend working on the same cores costs the facade can be
    told apart from what tracing itself costs it. Not the figure of record (#30 asks for the real backend)."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[str] | None = None
        self.otlp_endpoint = ""

    def start(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.otlp_endpoint = f"http://127.0.0.1:{int(self.process.stdout.readline())}"

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait()


@contextmanager
def sink() -> Iterator[Sink]:
    backend = Sink()
    backend.start()
    try:
        yield backend
    finally:
        backend.stop()


PATHS = ("traced", "unsampled")


SEGMENT_PAIRS = 10
"""Per round: swapped pairs of segments (:func:`crossover`), each segment ``calls // 10`` calls per path (200 with
the defaults), so a round makes ``2 x calls`` calls of each of the two paths."""

SAMPLED_FLAG = "01"
"""The trace flags the ``traced`` path's traceparent carries: ``01`` (sampled); ``--tracing-aa`` sets ``00``, so
that both paths are the same turns and what the method itself shows (its bias and noise) can be read."""


_CLIENTS: ProcessPoolExecutor | None = None


def _flag(value: str) -> None:
    global SAMPLED_FLAG
    SAMPLED_FLAG = value


def clients() -> ProcessPoolExecutor:
    """The two client processes of :func:`crossover`, one per path at a time (started once). Processes, not
    threads: two clients in one interpreter take turns at its lock (up to 5 ms each, ``sys.getswitchinterval``),
    and with lockstep arrivals the answers of one path then waited for the other's (an A/A run showed the
    first-started path's p50 2.9 ms lower)."""
    global _CLIENTS
    if _CLIENTS is None:
        _CLIENTS = ProcessPoolExecutor(len(PATHS), multiprocessing.get_context("spawn"), _flag, (SAMPLED_FLAG,))
        atexit.register(_CLIENTS.shutdown)
    return _CLIENTS


def warm_clients(run_path: Callable[..., Any], target: dict[str, str]) -> None:
    """Start both client processes and make a call from each (their imports, the first connections), so that the
    first segment of :func:`crossover` does not include a process's start."""
    for future in [clients().submit(run_path, path, 2, 1, target) for path in PATHS]:
        future.result()


def crossover(
    run_path: Callable[..., Any],
    calls: int,
    concurrency: int,
    target: dict[str, str],
    urls: tuple[str, str],
    spread_s: float,
    pids: tuple[int, int],
) -> dict[str, tuple[Any, float, list[float], list[float]]]:
    """The ``traced`` and ``unsampled`` calls of a round, at the same time, on two facade processes that both
    trace (``urls``, ``pids``): in each segment one facade serves the traced calls and the other the unsampled
    ones (``concurrency`` clients each), and the next segment swaps them. The CPU of each facade is read around
    each segment (its CPU-time clock, to the nanosecond).

    Why not one facade and alternating segments (the method until 2026-11-27): this machine's speed moves by
    10-20 % within a second (per-turn CPU of the same facade in two adjacent segments of 200 turns differed by
    17 % (standard deviation) in a scratch run, and an A/A run of that method, both paths unsampled, showed an
    added p50 of 3 ms); two segments that run at the same time meet the same machine. What differs between the
    two processes (memory layout, their SQLite files, which one holds the SLO watcher's Lease) falls on the
    traced path in one segment and on the unsampled path in the next, and cancels in the pair: the figures of
    a pair are the mean over its two segments (one per facade) of each path, and the same scratch run gave 5.7 %
    between pairs of these (docs/benchmarks.md, "Tracing: the method").

    Answers, per path, its calls as one bench.execute Result, its CPU ms per call, and per pair of segments the
    CPU ms per call and the p50 (both paired by position)."""
    per = max(1, calls // SEGMENT_PAIRS)
    results: dict[str, list[Any]] = {path: [] for path in PATHS}
    spent: dict[str, list[float]] = {path: [] for path in PATHS}
    for segment in range(2 * SEGMENT_PAIRS):
        serving = dict(zip(PATHS, urls if segment % 2 == 0 else urls[::-1], strict=True))
        facade_of = {path: urls.index(url) for path, url in serving.items()}
        before = [cpu_seconds(pid) for pid in pids]
        # the path whose clients start first changes every segment too: with lockstep arrivals the calls of the
        # first-started clients lead the burst. Facade A (``urls[0]``) then starts first in every segment: in a
        # pair, each facade serves both paths from the same place in the order, and both the order and the
        # facade cancel.
        running = {
            path: clients().submit(run_path, path, per, concurrency, {**target, path: serving[path]}, spread_s)
            for path in (PATHS if segment % 2 == 0 else PATHS[::-1])
        }
        done = {path: future.result() for path, future in running.items()}
        used = [(cpu_seconds(pid) - was) * 1000 for pid, was in zip(pids, before, strict=True)]
        for path in PATHS:
            results[path].append(done[path])
            spent[path].append(used[facade_of[path]])
    out: dict[str, tuple[Any, float, list[float], list[float]]] = {}
    for path, parts in results.items():
        per_call = [ms / max(1, r.calls) for ms, r in zip(spent[path], parts, strict=True)]
        p50s = [p50(r.latencies_ms) for r in parts]
        whole = parts[0]
        whole.calls = sum(r.calls for r in parts)
        whole.seconds = sum(r.seconds for r in parts)
        whole.latencies_ms = [v for r in parts for v in r.latencies_ms]
        whole.errors = sum(r.errors for r in parts)
        pairs = range(0, len(parts), 2)
        out[path] = (
            whole,
            sum(spent[path]) / max(1, whole.calls),
            [(per_call[i] + per_call[i + 1]) / 2 for i in pairs],
            [(p50s[i] + p50s[i + 1]) / 2 for i in pairs],
        )
    return out


def otel_env(backend: Jaeger | Sink) -> dict[str, str]:
    """The standard variables that turn a facade's tracing on (the batch defaults otherwise), sampling what the
    caller marks sampled only."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": backend.otlp_endpoint,
        "OTEL_SERVICE_NAME": "dockyard-api-bench",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0",
    }


def sampled(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` with a new trace's ``traceparent``, marked sampled (:data:`SAMPLED_FLAG`)."""
    return {**headers, "traceparent": f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-{SAMPLED_FLAG}"}


def dropped(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(float(m) for m in re.findall(r"^dockyard_api_spans_dropped_total\{[^}]*\} (\S+)$", text, re.M))


def spans_held(backend: Jaeger | Sink, limit: int = 200) -> tuple[int, int]:
    """(traces, spans) Jaeger answers for the bench's facade (the newest ``limit`` traces); (0, 0) for the sink."""
    if isinstance(backend, Sink):
        return 0, 0
    traces = backend.traces("dockyard-api-bench", limit=limit)
    return len(traces), sum(len(t.spans) for t in traces)


HOOK_TIMING = Path(__file__).resolve().parent / "hooktiming"
"""The ``sitecustomize`` that times the traced facade's hooks in place (``bench.execute --hook-timing``)."""


def hook_timing_env(path: Path) -> dict[str, str]:
    """What makes the traced facade time its hooks in place into ``path`` (``hooktiming/sitecustomize.py``)."""
    pythonpath = os.pathsep.join(p for p in (str(HOOK_TIMING), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": pythonpath, "DOCKYARD_BENCH_HOOK_TIMING": str(path)}


def print_hook_timing(path: Path) -> None:
    """The hooks' CPU per turn in the traced facade, traced and unsampled turns side by side, less the wrapper's
    own cost as measured in a loop (so an upper bound of each hook's cost)."""
    if not path.exists():
        print("hook timing: nothing written (fewer than 500 turns?)")
        return
    found = json.loads(path.read_text())
    spent, wrapper = found["spent"], found["wrapper_ns_per_call"]
    turns = {kind: spent.get(f"{kind}:request_done#", 0) for kind in ("traced", "unsampled")}
    labels = sorted({key.split(":", 1)[1] for key in spent if not key.endswith("#")})
    print(f"\nthe tracing hooks timed in place (thread CPU per turn, µs, less {wrapper / 1000:.2f} µs per timed call; "
          f"turns: {turns['traced']} traced, {turns['unsampled']} unsampled):")  # fmt: skip
    totals = dict.fromkeys(turns, 0.0)
    for label in labels:
        cells = []
        for kind, count in turns.items():
            calls = spent.get(f"{kind}:{label}#", 0)
            us = (spent.get(f"{kind}:{label}", 0) - calls * wrapper) / max(1, count) / 1000
            totals[kind] += us
            cells.append(f"{us:7.2f} ({calls / max(1, count):.1f} calls)")
        print(f"  {label:14} traced {cells[0]}  unsampled {cells[1]}")
    print(f"  {'all':14} traced {totals['traced']:7.2f}              unsampled {totals['unsampled']:7.2f}")


def facade(
    start: Any,
    cluster: Any,
    database: str,
    backend: Jaeger | Sink | None,
    untraced: Any,
    extra: dict[str, str] | None = None,
    name: str = "traced",
) -> Any:
    """A facade process with tracing on (``start``: bench.execute's facade_process; ``extra``: more environment;
    ``name``: its SQLite file's suffix), or the untraced one again."""
    if backend is None:
        return nullcontext(("", untraced))
    if database.startswith("sqlite"):  # a SQLite file is one facade's: a traced one gets its own
        database = database.replace(".db", f"-{name}.db")
        for stale in Path(database.split(":///", 1)[1]).parent.glob(f"*-{name}.db*"):
            stale.unlink()
    return start(cluster, database, None, otel_env(backend) | (extra or {}))


def p50(latencies_ms: list[float]) -> float:
    """The median as bench.execute's percentile(values, 50) reads it."""
    ordered = sorted(latencies_ms)
    return ordered[min(len(ordered) - 1, round(0.5 * (len(ordered) - 1)))] if ordered else float("nan")


def backend_cpu(backend: Jaeger | Sink | None) -> float:
    """CPU-s the tracing backend's process has used so far (0 without one)."""
    if backend is None or backend.process is None:
        return 0.0
    return cpu_seconds(backend.process.pid)


def summary(
    modes: list[str],
    results: list[Any],
    single: dict[str, list[float]],
    cpu: tuple[dict[str, list[float]], dict[str, list[float]], dict[str, list[float]]],
    segments: dict[str, dict[str, list[float]]],
    segment_p50s: dict[str, dict[str, list[float]]],
    backend: Jaeger | Sink,
    traced_urls: tuple[str, ...],
    backend_ms: float,
) -> None:
    """``results``: bench.execute's Results of every round (path, arrivals, latencies_ms); ``single``: by path,
    the p50 of every pair of swapped segments at concurrency 1 (:func:`crossover`; the added p50 there is the
    median of their differences); ``cpu``: the CPU per
    call by round of the untraced facade, and of the traced facades' ``unsampled`` and ``traced`` calls
    (rounds paired: each round's difference, then their median, so a machine that got slower or faster between
    rounds does not count); ``segments`` and ``segment_p50s``: by arrivals and path, the CPU per call and the
    p50 of every pair of swapped segments (:func:`crossover`), paired by position; ``traced_urls``: the traced
    facades (their dropped spans); ``backend_ms``: the tracing backend's CPU per traced turn.

    The added p50 judged is the median of the pairs' p50 differences, for the same reason: a round's p50 pools
    its segments, and with lockstep arrivals a p50 sits on a step of the burst's queue (one call's CPU, ~1.3
    ms), so the median of five rounds' differences moved by 2-5 ms between runs of the same code. The rounds'
    figure is printed beside it.

    The CPU figure judged is the median of the pairs' differences (50 pairs with the defaults), over the median
    unsampled pair: what lands in one segment only (a SQLite checkpoint, another process's burst) moves the
    median of fifty pairs only as one of them. The pairs' quartiles, and the rounds' figures, are printed beside
    it."""
    traces, spans = spans_held(backend)
    lost = sum(dropped(url) for url in traced_urls)
    added_1 = statistics.median(b - a for a, b in zip(single["unsampled"], single["traced"], strict=True))

    def round_p50s(mode: str, path: str) -> list[float]:
        return [p50(r.latencies_ms) for r in results if (r.arrivals, r.path) == (mode, path)]

    def paired(before: list[float], after: list[float]) -> tuple[float, float, str]:
        """The median of the rounds' figures before, that plus the median of the rounds' differences (a
        round that something else on the machine disturbed does not decide), and each round's."""
        base = statistics.median(before)
        extra = statistics.median(b - a for a, b in zip(before, after, strict=True))
        rounds = ", ".join(f"{(b - a) / a * 100:+.1f} %" for a, b in zip(before, after, strict=True))
        return base, base + extra, rounds

    for mode in modes:
        untraced_p50, traced_p50, _ = paired(round_p50s(mode, "unsampled"), round_p50s(mode, "traced"))
        by_rounds = traced_p50 - untraced_p50
        p50_pairs = [b - a for a, b in zip(segment_p50s[mode]["unsampled"], segment_p50s[mode]["traced"], strict=True)]
        added = statistics.median(p50_pairs) if p50_pairs else by_rounds
        p50_low, p50_high = median_interval(p50_pairs)
        _, _, rounds = paired(cpu[1][mode], cpu[2][mode])
        off_segments, on_segments = segments[mode]["unsampled"], segments[mode]["traced"]
        off = statistics.median(off_segments)
        differences = [b - a for a, b in zip(off_segments, on_segments, strict=True)]
        on = off + statistics.median(differences)
        share = (on - off) / off * 100 if off else 0.0
        low, _, high = statistics.quantiles(differences, n=4) if len(differences) > 1 else (0.0, 0.0, 0.0)
        below, above = median_interval(differences)
        facade, unsampled, between = paired(cpu[0][mode], cpu[1][mode])
        where = "a sink that keeps nothing (diagnostic)" if isinstance(backend, Sink) else "Jaeger"
        if SAMPLED_FLAG != "01":
            where += "; A/A: the traced path's traceparent not sampled, both paths the same turns (diagnostic)"
        held = (
            "the sink keeps no spans"
            if isinstance(backend, Sink)
            else f"Jaeger holds {spans} spans in the newest {traces} traces"
        )
        print(f"summary (tracing on / off, {mode} arrivals, spans to {where} over OTLP/HTTP): added p50 {added:.2f} "
              f"ms (median of {len(p50_pairs)} pairs of swapped segments, 95 % interval {p50_low:.2f} to "
              f"{p50_high:.2f}; <= 1: "
              f"{met(added <= 1)}; the median of the rounds' differences {by_rounds:.2f}), {added_1:.2f} ms at "
              f"concurrency 1 (median of {len(single['traced'])} pairs) "
              f"(<= 1: {met(added_1 <= 1)}); "
              f"facade CPU per turn {off:.3f} -> {on:.3f} ms ({share:+.1f} %, <= 2 %: {met(share <= 2)}; median of "
              f"{len(differences)} pairs of swapped segments, 95 % interval of that median {below / off * 100:+.1f} to "
              f"{above / off * 100:+.1f} %, quartiles {low / off * 100:+.1f} and {high / off * 100:+.1f} %; "
              f"by round {rounds}); unsampled turns in the traced facades vs the untraced facade {facade:.3f} -> "
              f"{unsampled:.3f} ms (other processes, the unsampled calls beside the traced ones; by round "
              f"{between}); {held}, used {backend_ms:.3f} ms of CPU per traced turn; spans dropped {lost:.0f}"
              )  # fmt: skip


def median_interval(values: list[float], resamples: int = 4000, seed: int = 30) -> tuple[float, float]:
    """A 95 % interval of the median of ``values`` (percentile bootstrap, seeded): how far the judged median of
    the segment pairs could move with another run's pairs drawn from the same spread."""
    if len(values) < 2:
        return (values[0], values[0]) if values else (float("nan"), float("nan"))
    draw = random.Random(seed).choices
    medians = sorted(statistics.median(draw(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"


# --- python -m bench.tracing: the recorder's own cost, one process, no cluster -------------------------------

TURN_SCOPE = {
    "type": "http",
    "method": "POST",
    "path": "/e/bench/bot-draft/v1/apps/bot/execute",
    "scheme": "http",
    "query_string": b"",
    "headers": [
        (b"host", b"127.0.0.1:8080"),
        (b"authorization", b"Bearer dk_bench"),
        (b"content-type", b"application/json"),
        (b"traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"),
    ],
}
ROUTE = "/e/{namespace}/{environment}/v1/apps/{app_id}/execute"


def scopes(count: int, traced: bool = True) -> list[dict[str, Any]]:
    """Requests of callers that trace (each with a traceparent of a new trace, marked sampled), or (``traced``
    False) of callers that do not (no traceparent: the sampler decides, ratio 0 here)."""
    if not traced:
        return [{**TURN_SCOPE, "headers": TURN_SCOPE["headers"][:3]}] * count  # type: ignore[index]
    return [
        {**TURN_SCOPE, "headers": [*TURN_SCOPE["headers"][:3],  # type: ignore[misc]
                                   (b"traceparent", f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01".encode())]}
        for _ in range(count)
    ]  # fmt: skip


HOOKS = (
    "the request's span (request, request_done)",
    "the turn's attributes (turn, turn_done)",
    "invoke_agent (agent)",
    "the chat span of step 1 (chat, chat_done)",
    "the traceparent sent on (inject)",
)
"""The hooks of :func:`hooks_of_a_turn` in the order its ``hooks`` argument adds them (``--instructions``)."""


class _TurnEnv:
    """The environment a turn of :func:`hooks_of_a_turn` is in (what ``tracing.turn`` reads of it)."""

    app, name, namespace = "bot", "bot-draft", "bench"


_CHAT_BODY = {"model": "bench-model", "messages": [], "max_tokens": 64, "temperature": 0.2, "top_p": 0.9}


def hooks_of_a_turn(number: int, scope: dict[str, Any], hooks: int = len(HOOKS)) -> None:
    """What the facade's tracing does in a one-step turn without tools (bench.execute's app): the request's
    span, the turn's attributes, invoke_agent, the chat span of step 1 with its traceparent sent on, the
    answer's attributes, the request's end. ``hooks``: only the first that many of :data:`HOOKS` (the others
    replaced by a null context or left out; ``--instructions`` counts each one's share)."""
    from dockyard_api.runtime import tracing as h

    answer = {"agent": "bot", "tokens": {"input": 12, "output": 7}, "tools_used": [], "guardrails": [],
              "session_id": f"ses_{number:032x}"}  # fmt: skip
    none = nullcontext()  # made in every turn, so that each hook's count is its own
    span = h.request(scope)
    turn = h.turn(_TurnEnv, "v1", f"ses_{number:032x}") if hooks > 1 else None  # type: ignore[arg-type]
    with h.agent("bot", "bench-model", None) if hooks > 2 else none:
        chat = h.chat("http://127.0.0.1:9000/v1", _CHAT_BODY, 1) if hooks > 3 else None
        if hooks > 4:
            sent: dict[str, str] = {}
            h.inject(sent, chat)
        if hooks > 3:
            h.chat_done(chat, 12, 7, "stop", [])
    if turn is not None:
        h.turn_done(turn, answer, None, b"", "hello", "hi")
    if span is not None:
        h.request_done(span, ROUTE, 200)


def recorder_cost(turns: int, pause_s: float, environ: dict[str, str], traced: bool = True) -> tuple[float, float]:
    """(CPU µs per turn of this process, all threads: the hooks and the export thread; µs of it outside the
    pause) for ``turns`` turns, ``pause_s`` apart (the export thread works between turns, as in a server);
    ``traced``: the requests carry a sampled traceparent (else none)."""
    import time

    from dockyard_api.runtime import tracing as hooks

    requests = scopes(turns, traced)
    hooks.start(environ)
    try:
        for number in range(200):
            hooks_of_a_turn(number, requests[number])
        if hooks._RUNNING is not None:
            hooks._RUNNING.flush()
        idle = time.process_time()
        for _ in range(turns):
            time.sleep(pause_s)
        idle = time.process_time() - idle  # what the pauses themselves cost (the timer, the wake-up)
        started = time.process_time()
        for number in range(turns):
            hooks_of_a_turn(number, requests[number])
            time.sleep(pause_s)
        if hooks._RUNNING is not None:
            hooks._RUNNING.flush(60000)
        spent = time.process_time() - started
    finally:
        hooks.stop()
    return (spent - idle) / turns * 1e6, idle / turns * 1e6


def instructions_child(mode: str, hooks: int, turns: int) -> None:
    """``--instructions``' measured process (under callgrind, instrumentation off until asked): tracing on (to a
    discarding sink; ``off``: not started), 200 turns to warm up, ``ready``, then ``turns`` turns and the export of
    their spans, ``done``; each line waits for one on stdin (the parent switches instrumentation on and off)."""
    import gc

    from dockyard_api.runtime import tracing as h

    requests = scopes(turns + 200, mode == "traced")
    with sink() as backend:
        if mode != "off":  # nothing is sent before the flush (not on a timer, no batch full before it): the export
            # thread then does not run while the turns do, and the counts do not depend on how the two met
            held = str(4 * (turns + 200))
            h.start({**otel_env(backend), "OTEL_BSP_SCHEDULE_DELAY": "3600000", "OTEL_BSP_MAX_QUEUE_SIZE": held,
                     "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": held})  # fmt: skip
        for number in range(200):
            hooks_of_a_turn(number, requests[number], hooks)
        if h._RUNNING is not None:
            h._RUNNING.flush()
        gc.collect()
        gc.disable()  # where the collector would run depends on the whole process, not on the hooks
        print("ready", flush=True)
        sys.stdin.readline()
        for number in range(200, turns + 200):
            hooks_of_a_turn(number, requests[number], hooks)
        if h._RUNNING is not None:
            h._RUNNING.flush(60000)
        print("done", flush=True)
        sys.stdin.readline()
        gc.enable()
        h.stop()


def count_instructions(mode: str, hooks: int, turns: int, out: Path) -> tuple[float, float]:
    """Instructions per turn (callgrind's counts, each thread apart) of :func:`instructions_child`'s measured
    part: of the thread that ran the turns (the hooks), and of the others (the export at the end)."""
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
               f"--callgrind-out-file={out}", sys.executable, "-m", "bench.tracing", "--instructions-child", mode,
               str(hooks), str(turns)]  # fmt: skip
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, env=env)  # fmt: skip
    assert child.stdin is not None
    assert child.stdout is not None
    for switch, line in (("on", "ready"), ("off", "done")):
        while (got := child.stdout.readline()) and got.strip() != line:
            pass
        if not got:
            raise SystemExit(f"the measured process ended before {line!r} (exit {child.wait()})")
        subprocess.run(["callgrind_control", "-i", switch, str(child.pid)], check=True, capture_output=True)
        child.stdin.write("go\n")
        child.stdin.flush()
    child.stdin.close()
    if child.wait() != 0:
        raise SystemExit(f"the measured process failed (exit {child.returncode})")
    by_thread: dict[int, int] = {}
    for part in out.parent.glob(f"{out.name}-*"):  # one file per thread: name-01 (the main thread), -02, ...
        totals = re.search(r"^totals: (\d+)", part.read_text(), re.MULTILINE)
        if totals is None:
            raise SystemExit(f"no totals in {part}")
        by_thread[int(part.name.rsplit("-", 1)[1])] = int(totals.group(1))
    if 1 not in by_thread:
        raise SystemExit(f"no count of the main thread in {out}-01")
    return by_thread.pop(1) / turns, sum(by_thread.values()) / turns


def instructions(turns: int) -> None:
    """``--instructions``: what each hook of a turn costs in instructions, traced and unsampled (the same count on
    any machine and load, within 0.5 %; not the CPU time, which the caches and the rest of a real turn add to, see
    docs/benchmarks.md)."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("--instructions needs valgrind (Debian: apt-get install valgrind)")
    print(f"inputs: {turns} turns per count (after 200 to warm up), the hooks added one at a time, tracing to a "
          f"discarding OTLP sink, nothing sent before a flush after the turns (the export thread idle while they "
          f"run), the collector off, instructions counted by callgrind: the turns' thread, and the others (the "
          f"export)")  # fmt: skip
    per_turn: dict[tuple[str, int], tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="dockyard-instructions-") as tmp:
        off = count_instructions("off", len(HOOKS), turns, Path(tmp) / "off")
        for mode in ("unsampled", "traced"):
            for hooks in range(1, len(HOOKS) + 1):
                per_turn[mode, hooks] = count_instructions(mode, hooks, turns, Path(tmp) / f"{mode}-{hooks}")
    heading = "hook (the turns' thread)"
    print(f"  {heading:46} {'unsampled':>10} {'traced':>10} {'traced - unsampled':>19}")
    for hooks, name in enumerate(HOOKS, start=1):
        # each hook: the turn with it against the turn without it; the first against tracing off (the loop's own
        # instructions cancel out)
        cost = {mode: per_turn[mode, hooks][0] - (per_turn[mode, hooks - 1] if hooks > 1 else off)[0]
                for mode in ("unsampled", "traced")}  # fmt: skip
        print(f"  {name:46} {cost['unsampled']:10,.0f} {cost['traced']:10,.0f} "
              f"{cost['traced'] - cost['unsampled']:19,.0f}")  # fmt: skip
    full = len(HOOKS)
    export = {mode: per_turn[mode, full][1] - off[1] for mode in ("unsampled", "traced")}
    print(f"  {'the export (the other threads)':46} {export['unsampled']:10,.0f} {export['traced']:10,.0f} "
          f"{export['traced'] - export['unsampled']:19,.0f}")  # fmt: skip
    unsampled = sum(per_turn["unsampled", full]) - sum(off)
    traced = sum(per_turn["traced", full]) - sum(off)
    print(f"summary (instructions per turn, hooks and export, against tracing off): a sampled turn "
          f"{traced:,.0f}, one not sampled {unsampled:,.0f}; sampled against not sampled (bench.execute "
          f"--tracing's comparison) {traced - unsampled:,.0f}")  # fmt: skip


def main() -> None:
    import argparse
    import os

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=None, help="per round (default 20000; with --instructions 1000)")
    parser.add_argument(
        "--pause-ms",
        type=float,
        default=0.0,
        help="a sleep between turns (0: time.sleep(0), which lets the export thread run); with 0.5 "
        "the rounds of one run scattered 2-4x (docs/benchmarks.md)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="off, unsampled and traced alternated, this many times")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="instead: each hook's instructions per turn, counted by callgrind (needs valgrind)",
    )
    parser.add_argument("--instructions-child", nargs=3, metavar=("MODE", "HOOKS", "TURNS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.instructions_child:
        mode, hooks, turns = args.instructions_child
        instructions_child(mode, int(hooks), int(turns))
        return
    if args.instructions:
        instructions(args.turns or 1000)
        return
    args.turns = args.turns or 20000
    print(f"inputs: turns={args.turns} per round, pause={args.pause_ms} ms, rounds={args.rounds}, "
          f"cpus={os.cpu_count()}, loadavg={' '.join(f'{v:.2f}' for v in os.getloadavg())}")  # fmt: skip
    modes = {"off": False, "unsampled": False, "traced": True}
    costs: dict[str, list[float]] = {mode: [] for mode in modes}
    with jaeger() as backend:
        for round_ in range(1, args.rounds + 1):
            for mode, traced in modes.items():
                env = otel_env(backend) if mode != "off" else {}
                spent, idle = recorder_cost(args.turns, args.pause_ms / 1000, env, traced)
                costs[mode].append(spent)
                print(f"  round {round_} {mode:9}: {spent:6.2f} µs of CPU per turn (the pauses: {idle:.2f})")
        traces, spans = spans_held(backend)
    off, unsampled, traced_ = (statistics.median(costs[mode]) for mode in modes)
    print(f"summary (the recorder alone, 3 spans per traced turn exported to Jaeger over OTLP/HTTP; medians of "
          f"rounds): tracing on adds {traced_ - off:.1f} µs of CPU to a turn it samples and {unsampled - off:.1f} µs "
          f"to one it does not; sampled against not sampled (what bench.execute --tracing compares in one "
          f"facade) {traced_ - unsampled:.1f} µs. Jaeger holds {spans} spans in the newest {traces} traces. Against "
          f"an untraced facade's CPU per turn that bench.execute prints (e.g. 1.2 ms): "
          f"{(traced_ - off) / 1200 * 100:.1f} % of it (target <= 2 %)")  # fmt: skip


if __name__ == "__main__":
    main()
