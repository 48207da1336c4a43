"""Where a deployed-app turn spends the facade's time, without a control plane: the runtime (informers
filled as a watch would fill them) and the REAL conversation store, against the scripted model server
in its own process, in this process.

For each concurrency (32 and 1): ``direct`` (the runtime's own model client posts the chat completion),
then ``turn`` (``AppRuntime.prepare`` + ``AppRuntime.complete``: environment, rate limits, session, one
model call, storing the turn and its usage). Printed: p50 of both and what the turn adds, and per turn the
database transactions and statements, the time spent inside transactions and waiting for them (SQLite's
one writer thread, PostgreSQL's pool), and the time spent in each store call. ``--cprofile FILE`` also
writes a cProfile of the concurrency-32 turns (``python -m pstats FILE``).

    .venv/bin/python -m bench.turn_profile [--turns 2000 --delay-ms 20 --database sqlite|postgresql]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event

from bench.execute import HYPER, INSTRUCTIONS, MESSAGE, model_process, percentile
from dockyard_api.auth import EnvironmentCaller
from dockyard_api.runtime.service import AppRuntime, RuntimeSettings
from dockyard_api.store import ConversationStore
from dockyard_core.kubeclient import AsyncKube

NS = "bench"


class Meter:
    """Counts transactions and statements and times the store's calls."""

    def __init__(self, store: ConversationStore) -> None:
        self.tx = 0
        self.statements = 0
        self.in_tx = 0.0
        self.calls: dict[str, list[float]] = defaultdict(list)
        engine = store.sync_engine if store.sync_engine is not None else store.engine.sync_engine  # type: ignore[union-attr]
        event.listen(engine, "commit", self._commit)
        event.listen(engine, "before_cursor_execute", self._statement)
        run = store.run

        async def timed_run(fn: Callable[[Any], Any]) -> Any:
            started = time.perf_counter()
            try:
                return await run(fn)
            finally:
                self.calls["run (wait + transaction)"].append(time.perf_counter() - started)

        store.run = timed_run  # type: ignore[method-assign]
        if store.sync_engine is not None:
            inner = store._sqlite_tx

            def timed_tx(fn: Callable[[Any], Any]) -> Any:
                started = time.perf_counter()
                try:
                    return inner(fn)
                finally:
                    self.calls["SQLite thread: whole hop"].append(time.perf_counter() - started)

            store._sqlite_tx = timed_tx  # type: ignore[method-assign]
        for name in ("start_turn", "finish_turn", "abort_turn"):
            method = getattr(store, name)
            setattr(store, name, self._wrap(name, method))
        self._began: dict[int, float] = {}
        event.listen(engine, "begin", self._begin)

    def _wrap(self, name: str, method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await method(*args, **kwargs)
            finally:
                self.calls[name].append(time.perf_counter() - started)

        return wrapped

    def _begin(self, conn: Any) -> None:
        self._began[id(conn)] = time.perf_counter()

    def _commit(self, conn: Any) -> None:
        self.tx += 1
        began = self._began.pop(id(conn), None)
        if began is not None:
            self.in_tx += time.perf_counter() - began

    def _statement(self, *_: Any) -> None:
        self.statements += 1

    def reset(self) -> None:
        self.tx = self.statements = 0
        self.in_tx = 0.0
        self.calls.clear()


def objects(model_url: str, limits: bool) -> dict[str, list[dict[str, Any]]]:
    def meta(name: str) -> dict[str, Any]:
        return {"name": name, "namespace": NS, "resourceVersion": "1"}

    spec: dict[str, Any] = {"appRef": "bot"}
    if limits:
        spec["rateLimits"] = {"requestsPerMinute": 10**9, "tokensPerDay": 10**15}
    agent = {"name": "helper", "version": "1.0.0", "instructions": INSTRUCTIONS, "model": "tiny"}
    return {
        "environments": [{"metadata": meta("bot-draft"), "spec": spec}],
        "apps": [{"metadata": meta("bot"), "spec": {"agents": [agent]}}],
        "appversions": [],
        "modeldeployments": [
            {
                "metadata": meta("tiny"),
                "spec": {"name": "tiny", "hyperParameters": HYPER},
                "status": {"endpoint": model_url},
            }
        ],
        "tools": [],
        "tooldeployments": [],
    }


async def measure(url: str, model_url: str, args: argparse.Namespace, kubeconfig: str) -> None:
    runtime = AppRuntime(AsyncKube(kubeconfig), RuntimeSettings())
    for plural, items in objects(model_url, args.limits).items():
        runtime.informers[plural].replace(items)
    store = ConversationStore(url)
    await store.start()
    meter = Meter(store)
    caller = EnvironmentCaller(NS, "bot-draft", "bot", "key1")
    body = {
        "model": "tiny",
        "temperature": HYPER["temperature"],
        "max_tokens": HYPER["maxTokens"],
        "top_p": HYPER["topP"],
        "top_k": HYPER["topK"],
        "messages": [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": MESSAGE}],
    }

    async def direct() -> None:
        await runtime.models.complete(model_url, body, what="bench")

    async def turn() -> None:
        prepared = await runtime.prepare(store, caller, "bot", message=MESSAGE, session_id=None, user_id="bench")
        await runtime.complete(store, prepared)

    async def drive(send: Callable[[], Awaitable[None]], calls: int, concurrency: int) -> list[float]:
        latencies: list[float] = []
        left = calls

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                started = time.perf_counter()
                await send()
                latencies.append((time.perf_counter() - started) * 1000)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return latencies

    try:
        await drive(direct, 100, 32)
        await drive(turn, 100, 32)
        for concurrency, calls in ((32, args.turns), (1, args.sequential)):
            rounds: dict[str, list[float]] = {"direct": [], "turn": []}
            for _ in range(args.rounds):
                rounds["direct"] += await drive(direct, calls, concurrency)
                meter.reset()
                profile = cProfile.Profile() if args.cprofile and concurrency == 32 else None
                if profile:
                    profile.enable()
                started, cpu = time.perf_counter(), time.process_time()
                rounds["turn"] += await drive(turn, calls, concurrency)
                elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
                if profile:
                    profile.disable()
                    profile.dump_stats(args.cprofile)
            d50, t50 = percentile(rounds["direct"], 50), percentile(rounds["turn"], 50)
            t99 = percentile(rounds["turn"], 99)
            print(f"concurrency {concurrency}: direct p50 {d50:6.2f} ms   turn p50 {t50:6.2f} ms   "
                  f"added {t50 - d50:5.2f} ms   (turn p99 {t99:6.1f} ms, {calls / elapsed:6.1f} turns/s)")  # fmt: skip
            print(f"  per turn (last round): {meter.tx / calls:.2f} transactions, {meter.statements / calls:.2f} "
                  f"statements, {meter.in_tx * 1000 / calls:.2f} ms inside transactions, "
                  f"{cpu * 1000 / calls:.2f} ms CPU")  # fmt: skip
            for name, values in sorted(meter.calls.items()):
                print(f"    {name:26} x{len(values) / calls:4.2f}/turn   p50 {statistics.median(values) * 1000:6.2f} ms"
                      f"   mean {statistics.fmean(values) * 1000:6.2f} ms")  # fmt: skip
    finally:
        await store.close()
        await runtime.aclose()


@contextmanager
def database(kind: str) -> Iterator[str]:
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/bench.db"
        return
    from tests.support.postgres import postgres_server

    with postgres_server() as pg:
        yield pg.url(asyncio.run(pg.create_database("bench")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=2000, help="turns per round at concurrency 32")
    parser.add_argument("--sequential", type=int, default=200, help="turns per round at concurrency 1")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--limits", action="store_true", help="set both rate limits on the environment")
    parser.add_argument("--cprofile", help="write a cProfile of the concurrency-32 turns here")
    args = parser.parse_args()
    print(f"{args.database}, model delay {args.delay_ms:g} ms, limits {args.limits}, loadavg {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp, database(args.database) as url, model_process(args.delay_ms) as model:
        kubeconfig = Path(tmp) / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: x\nclusters: [{name: x, cluster: {server: "
            "'http://127.0.0.1:9'}}]\ncontexts: [{name: x, context: {cluster: x, user: x}}]\n"
            "users: [{name: x, user: {}}]\n"
        )
        asyncio.run(measure(url, model, args, str(kubeconfig)))
    print(f"loadavg after {os.getloadavg()}")


if __name__ == "__main__":
    main()
