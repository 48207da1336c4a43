"""The conversation store's cost per deployed-app turn, SQLite (the embedded default) and PostgreSQL
(a real server from the distribution's package, on loopback), side by side in one run.

One turn is what the execute endpoint asks of the store: check the rate limits (both set), take the
session (with its history), store the user message and the reply, count the usage. ``--concurrency``
turns run at once over ``--sessions`` sessions (so some turns wait for their session, as in life).
Each turn is what the endpoint does: two transactions (``start_turn`` with the limits, ``finish_turn``
with the usage). (The ``--mode separate`` of before, four calls in four transactions, went with the
store's ``check_rate_limit`` and ``record_usage``, which nothing else called.)

    .venv/bin/python -m bench.store [--turns 2000 --concurrency 32 --sessions 500]
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

LIMITS = {"requestsPerMinute": 1_000_000, "tokensPerDay": 10**12}


async def run(url: str, turns: int, concurrency: int, sessions: int) -> dict[str, float]:
    store = ConversationStore(url, busy_wait_seconds=60)
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

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(turns)))
    elapsed = time.perf_counter() - started
    await store.close()
    latencies.sort()
    return {
        "turns_per_s": turns / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--sessions", type=int, default=500)
    args = parser.parse_args()
    print(
        f"{args.turns} turns, concurrency {args.concurrency}, {args.sessions} sessions; load {os.getloadavg()[0]:.1f}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = asyncio.run(run(f"sqlite:///{tmp}/bench.db", args.turns, args.concurrency, args.sessions))
    with postgres_server() as pg:
        database = asyncio.run(pg.create_database("bench"))
        postgres = asyncio.run(run(pg.url(database), args.turns, args.concurrency, args.sessions))
    print(f"load after {os.getloadavg()[0]:.1f}")
    for name, r in (("SQLite", sqlite), ("PostgreSQL", postgres)):
        print(f"{name:<11} {r['turns_per_s']:7.0f} turns/s   p50 {r['p50_ms']:6.1f} ms   p99 {r['p99_ms']:6.1f} ms")


if __name__ == "__main__":
    main()
