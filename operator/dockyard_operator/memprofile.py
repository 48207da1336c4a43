"""Where the operator's memory goes: tracemalloc behind an environment flag, for the benchmarks.

``DOCKYARD_OPERATOR_TRACEMALLOC=<file>`` starts tracemalloc (one frame per allocation: cheap enough
for a 1,500-object run, and enough to name the allocating line). A thread checks the traced memory
every few seconds; whenever it reaches a new high (5% above the last), it keeps the top allocators
of that moment, and at exit (normal exit, e.g. after SIGTERM) it writes the ones of the highest
moment (the exit's own when that is higher) to ``<file>`` as text. Off by
default: tracing slows every allocation.
"""

from __future__ import annotations

import atexit
import os
import threading
import tracemalloc
from pathlib import Path

ENV = "DOCKYARD_OPERATOR_TRACEMALLOC"
TOP = 25


def _top(snapshot: tracemalloc.Snapshot) -> list[str]:
    snapshot = snapshot.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    stats = snapshot.statistics("lineno")
    total = sum(s.size for s in stats)
    lines = [f"traced {total / 2**20:.1f} MiB in {sum(s.count for s in stats)} blocks; top {TOP} by line:"]
    for stat in stats[:TOP]:
        frame = stat.traceback[0]
        lines.append(f"{stat.size / 2**20:8.1f} MiB {stat.count:9d} blocks  {frame.filename}:{frame.lineno}")
    return lines


def start_from_env(interval: float = 5.0) -> None:
    """Start the profiler when the environment asks for it (a no-op otherwise)."""
    target = os.environ.get(ENV)
    if not target:
        return
    tracemalloc.start(1)
    best: list[str] = []
    highest = 0
    stop = threading.Event()

    def watch() -> None:
        nonlocal highest, best
        while not stop.wait(interval):
            current, _ = tracemalloc.get_traced_memory()
            if current > 1.05 * highest:
                highest, best = current, _top(tracemalloc.take_snapshot())

    def write() -> None:
        nonlocal best
        stop.set()
        current, peak = tracemalloc.get_traced_memory()
        if current > highest:  # the end is the highest moment seen
            best = _top(tracemalloc.take_snapshot())
        lines = [f"tracemalloc peak {peak / 2**20:.1f} MiB; at the highest sample:", *best]
        Path(target).write_text("\n".join(lines) + "\n")

    threading.Thread(target=watch, name="tracemalloc", daemon=True).start()
    atexit.register(write)
