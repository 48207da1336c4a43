"""``bench.execute --tracing --hook-timing``: times the facade's tracing hooks in place (imported at the traced
facade's start through ``PYTHONPATH``; not part of Dockyard). Every hook of ``dockyard_api.runtime.tracing`` and a
span's ``with`` is wrapped to add its thread CPU time (``time.thread_time_ns``) to a total per hook and per kind of
turn (traced: the current span sampled; unsampled), written as JSON to ``$DOCKYARD_BENCH_HOOK_TIMING`` every 500
turns, with the wrapper's own cost per call measured in a loop (an under-estimate in place); and the export
thread's CPU time (``export_thread``: the encoding of the spans the C sink held, and the sending), counted as the
traced turns'."""

from __future__ import annotations

import os

_PATH = os.environ.get("DOCKYARD_BENCH_HOOK_TIMING")
if _PATH:
    import json
    import time
    from collections import defaultdict
    from typing import Any

    from dockyard_api.runtime import tracing as hooks
    from dockyard_core import tracing as core

    spent: dict[str, int] = defaultdict(int)
    clock = time.thread_time_ns

    def _kind(span: Any = None) -> str:
        span = span if span is not None else core.current()
        return "traced" if span is not None and span.sampled else "unsampled"

    def _timed(fn: Any, label: str) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                key = f"{_kind()}:{label}"
                spent[key] += clock() - started
                spent[key + "#"] += 1

        return wrapper

    def _calibrated() -> float:
        empty = _timed(lambda: None, "calibration")
        started = clock()
        for _ in range(2000):
            empty()
        per_call = (clock() - started) / 2000
        for suffix in ("", "#"):
            spent.pop(f"unsampled:calibration{suffix}", None)
        return per_call

    def _dump() -> None:
        with open(_PATH, "w") as out:
            json.dump({"wrapper_ns_per_call": _calibrated(), "spent": dict(spent)}, out)

    def _wrap_hooks() -> None:
        """Wraps the hooks bound now (``use`` binds the C hooks of a turn when tracing starts with the C tracer)."""
        for name in ("request", "turn", "turn_done", "agent", "chat", "chat_done", "inject", "tool", "tool_done",
                     "tool_request"):  # fmt: skip
            setattr(hooks, name, _timed(getattr(hooks, name), name))
        _request_done = hooks.request_done

        def request_done(span: Any, route: str, status: int) -> None:
            started = clock()
            try:
                _request_done(span, route, status)
            finally:
                key = f"{_kind(span)}:request_done"
                spent[key] += clock() - started
                spent[key + "#"] += 1
                if (spent["traced:request_done#"] + spent["unsampled:request_done#"]) % 500 == 0:
                    _dump()

        hooks.request_done = request_done  # type: ignore[assignment]

    _use = hooks.use

    def use(*args: Any, **kwargs: Any) -> None:
        _use(*args, **kwargs)
        _wrap_hooks()

    hooks.use = use  # type: ignore[assignment]
    _wrap_hooks()

    from dockyard_core import otlp

    _export = otlp.BatchExporter._export

    def _timed_export(self: Any, everything: bool) -> None:
        """The export thread's work (encoding what the C sink held, sending), counted as the traced turns'."""
        started = clock()
        try:
            _export(self, everything)
        finally:
            spent["traced:export_thread"] += clock() - started

    otlp.BatchExporter._export = _timed_export  # type: ignore[method-assign]
    core.Span.__enter__ = _timed(core.Span.__enter__, "span_enter")  # type: ignore[method-assign]
    core.Span.__exit__ = _timed(core.Span.__exit__, "span_exit")  # type: ignore[method-assign]
