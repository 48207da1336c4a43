"""The conversation store's cost per deployed-app turn, SQLite (the embedded default) and PostgreSQL
(a real server from the distribution's package, on loopback), side by side in one run.

One turn is what the execute endpoint asks of the store: check the rate limits (both set), take the
session (with its history), store the user message and the reply, count the usage. ``--concurrency``
turns run at once over ``--sessions`` sessions (so some turns wait for their session, as in life).
Each turn is what the endpoint does: two transactions (``start_turn`` with the limits, ``finish_turn``
with the usage). (The ``--mode separate`` of before, four calls in four transactions, went with the
store's ``check_rate_limit`` and ``record_usage``, which nothing else called.)

SQLite runs twice, alternated: with the turn's writes sent straight to the driver (what the store does,
:mod:`dockyard_api.store.fastpath`) and through SQLAlchemy's execution (``conn.execute``, as before and as on
PostgreSQL); the CPU per turn of this process (the store's writer thread and the event loop) is printed beside
the rates.

    .venv/bin/python -m bench.store [--turns 2000 --concurrency 32 --sessions 500 --rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time

from tests.support.postgres import postgres_server

from dockyard_api.store import ConversationStore
from dockyard_api.store.statements import _execute

LIMITS = {"requestsPerMinute": 1_000_000, "tokensPerDay": 10**12}


async def run(
    url: str, turns: int, concurrency: int, sessions: int, *, through_sqlalchemy: bool = False
) -> dict[str, float]:
    store = ConversationStore(url, busy_wait_seconds=60)
    if through_sqlalchemy:
        store._sql.write = _execute  # every write through conn.execute, as before the fast path
    await store.start()
    latencies: list[float] = []
    gate = asyncio.Semaphore(concurrency)
    where = {"namespace": "bench", "environment": "bot-production"}

    async def one(i: int) -> None:
        async with gate:
            started = time.perf_counter()
            turn = await store.start_turn(
                **where, app="bot", session_id=f"s{i % sessions}", user_id="u", version="1.0.0", key_id="key1",
                limits=LIMITS,
            )  # fmt: skip
            await store.finish_turn(
                turn, user_message="What is the weather in Oslo?", reply="12 degrees and rain.", agent="helper",
                tools_used=["weather"], tokens_in=40, tokens_out=12, usage=True,
            )  # fmt: skip
            latencies.append(time.perf_counter() - started)

    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one(i) for i in range(turns)))
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    await store.close()
    latencies.sort()
    return {
        "turns_per_s": turns / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
        "cpu_us": cpu / turns * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3, help="SQLite: the two ways of writing alternated this often")
    args = parser.parse_args()
    print(
        f"{args.turns} turns, concurrency {args.concurrency}, {args.sessions} sessions, {args.rounds} rounds of "
        f"SQLite; load {os.getloadavg()[0]:.1f}"
    )
    ways = {"SQLite": False, "SQLite, writes through SQLAlchemy": True}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in ways}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for name, through in ways.items():
                url = f"sqlite:///{tmp}/bench-{round_}-{int(through)}.db"
                runs[name].append(asyncio.run(run(url, args.turns, args.concurrency, args.sessions,
                                                  through_sqlalchemy=through)))  # fmt: skip
    with postgres_server() as pg:
        database = asyncio.run(pg.create_database("bench"))
        runs["PostgreSQL"] = [asyncio.run(run(pg.url(database), args.turns, args.concurrency, args.sessions))]
    print(f"load after {os.getloadavg()[0]:.1f}")
    for name, results in runs.items():
        r = {key: statistics.median(result[key] for result in results) for key in results[0]}
        print(f"{name:<34} {r['turns_per_s']:7.0f} turns/s   p50 {r['p50_ms']:6.1f} ms   p99 {r['p99_ms']:6.1f} ms   "
              f"CPU {r['cpu_us']:5.0f} µs per turn (this process; median of {len(results)})")  # fmt: skip
    fast, slow = (statistics.median(r["cpu_us"] for r in runs[name]) for name in ways)
    print(f"summary: SQLite CPU per turn {fast:.0f} µs with the writes sent to the driver, {slow:.0f} µs through "
          f"SQLAlchemy ({slow - fast:.0f} µs less per turn)")  # fmt: skip


if __name__ == "__main__":
    main()
