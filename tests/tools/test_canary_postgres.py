"""Canary figures on PostgreSQL (a real server on a free loopback port, tests/support/postgres.py): two
ConversationStore replicas on one database split new sessions the same way and pin them, both write their
turns' outcomes, and the window the SLO watcher reads holds both replicas' turns; usage per version is
counted across them (docs/promotion.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from dockyard_api.runtime.canary import Canary, Figures
from dockyard_api.store import ConversationStore
from dockyard_api.store.outcomes import OutcomeRecorder, usage, window
from tests.support.postgres import Postgres, postgres_server

WHERE = {"namespace": "team", "environment": "bot-prod"}


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    with postgres_server() as server:
        yield server


def test_two_replicas_split_alike_and_the_window_holds_both_replicas_turns(pg: Postgres) -> None:
    async def main() -> None:
        url = pg.url(await pg.create_database())
        stores = [ConversationStore(url) for _ in range(2)]
        await asyncio.gather(*(s.start() for s in stores))
        recorders = [OutcomeRecorder(s, flush_seconds=60) for s in stores]
        try:
            choose = Canary("1.1.0", 40).chooser("1.0.0")
            pinned: dict[str, str] = {}
            for i in range(40):  # session i created by one replica, its second turn on the other
                first, second = stores[i % 2], stores[(i + 1) % 2]
                t = await first.start_turn(**WHERE, app="bot", session_id=f"s{i}", user_id=None, version="1.0.0",
                                           key_id="k", version_for=choose)  # fmt: skip
                await first.abort_turn(t, error="x")
                again = await second.start_turn(**WHERE, app="bot", session_id=f"s{i}", user_id=None,
                                                version="1.0.0", key_id="k", version_for=choose)  # fmt: skip
                await second.abort_turn(again, error="x")
                assert again.version == t.version == choose(f"s{i}")
                pinned[f"s{i}"] = t.version
                Figures(recorders[i % 2]).turn(
                    **WHERE, version=t.version, seconds=0.2, outcome="ok" if t.version == "1.0.0" else "model_error",
                    tokens=(2, 1),
                )  # fmt: skip
            assert set(pinned.values()) == {"1.0.0", "1.1.0"}
            await asyncio.gather(*(r.flush() for r in recorders))
            since = datetime.now(UTC) - timedelta(minutes=1)
            found = await stores[0].run(lambda c: window(c, "team", "bot-prod", since))
            canary = sum(v == "1.1.0" for v in pinned.values())
            assert len(found["1.1.0"].seconds) == found["1.1.0"].errors == canary
            assert len(found["1.0.0"].seconds) == 40 - canary
            assert found["1.0.0"].errors == 0
            today = datetime.now(UTC).date()
            counted = await stores[1].run(lambda c: usage(c, "team", "bot-prod", today, today))
            assert (counted["1.1.0"].requests, counted["1.1.0"].errors, counted["1.1.0"].tokens_in) == (
                canary, canary, 2 * canary,
            )  # fmt: skip
            Figures(recorders[0]).turn(**WHERE, version="1.0.0", seconds=0.1, outcome="ok", tokens=(1, 1))
            await recorders[0].flush()  # the day's counter of a version is added to, not replaced
            counted = await stores[1].run(lambda c: usage(c, "team", "bot-prod", today, today))
            assert counted["1.0.0"].requests == 40 - canary + 1
        finally:
            for r in recorders:
                await r.aclose()
            for s in stores:
                await s.close()

    asyncio.run(main())
