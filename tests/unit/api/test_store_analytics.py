"""Analytics from the conversation store (SQLite, migrated by Alembic): turns, users, sessions, tokens,
latency percentiles and tool calls per version and day from the stored replies, errors from the per-version
usage counters; the view every day of the period; the service refuses a bad period or version naming the
query field."""

from __future__ import annotations

import asyncio
import functools
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from dockyard_api.management.analytics.service import AnalyticsService, analytics_view
from dockyard_api.store import ConversationStore
from dockyard_api.store import analytics as stored
from dockyard_api.store.outcomes import Outcome, write
from dockyard_api.store.schema import messages
from dockyard_core.errors import InvalidError

WHERE = {"namespace": "team", "environment": "bot-prod"}


class Allow:
    async def require(self, *_: Any, **__: Any) -> None:
        return None


async def scenario(store: ConversationStore) -> None:
    async def answer(session: str, user: str | None, version: str, tools: list[str], tokens: tuple[int, int]) -> None:
        t = await store.start_turn(**WHERE, app="bot", session_id=session, user_id=user, version=version, key_id="k")
        await store.finish_turn(t, user_message="hi", reply="hello", agent="helper", tools_used=tools,
                                tokens_in=tokens[0], tokens_out=tokens[1])  # fmt: skip

    await answer("s1", "alice", "1.0.0", ["weather"], (10, 5))
    await answer("s1", "alice", "1.0.0", ["weather", "search"], (20, 5))
    await answer("s2", "bob", "1.0.0", [], (10, 5))
    await answer("s3", None, "1.1.0", ["search"], (7, 3))
    other = await store.start_turn(namespace="team", environment="other", app="bot", session_id="x", user_id="eve",
                                   version="1.0.0", key_id="k")  # fmt: skip
    await store.finish_turn(other, user_message="a", reply="b", agent="helper", tools_used=[], tokens_in=1,
                            tokens_out=1)  # fmt: skip

    def shape(conn: Any) -> None:
        # latencies 100..400 ms on version 1.0.0 (the store measured a few ms: set known values), yesterday for one
        ids = [r.pk for r in conn.execute(messages.select().where(messages.c.role == "assistant")).all()]
        for pk, ms in zip(ids, (100, 200, 400, 50, 9), strict=True):
            conn.execute(update(messages).where(messages.c.pk == pk).values(latency_ms=ms))
        yesterday = datetime.now(UTC) - timedelta(days=1)
        conn.execute(update(messages).where(messages.c.pk == ids[0]).values(created_at=yesterday))
        now = datetime.now(UTC)
        failed = [Outcome(**WHERE, version="1.0.0", at=now, seconds=1.0, outcome="upstream_error")] * 2
        write(conn, failed, store.dialect, now)

    await store.run(shape)


def test_figures_per_version_and_day(tmp_path: Path) -> None:
    async def main() -> tuple[stored.Analytics, Any]:
        store = ConversationStore(f"sqlite:///{tmp_path / 'dockyard.db'}")
        await store.start()
        try:
            await scenario(store)
            today = datetime.now(UTC).date()
            found = await store.run(
                functools.partial(stored.read, **WHERE, since=today - timedelta(days=6), until=today)
            )
            only = await store.run(functools.partial(stored.read, **WHERE, since=today, until=today, version="1.1.0"))
            return found, only
        finally:
            await store.close()

    found, only = asyncio.run(main())
    today = datetime.now(UTC).date()
    v1 = found.versions["1.0.0"]
    assert (v1.totals.turns, v1.totals.errors, v1.totals.tokens_in, v1.totals.tokens_out) == (3, 2, 40, 15)
    assert (v1.totals.users, v1.totals.sessions) == ({"alice", "bob"}, {"s1", "s2"})
    assert v1.totals.tools == {"weather": 2, "search": 1}
    assert v1.totals.percentiles() == {"p50": 200, "p90": 400, "p99": 400}
    assert v1.days[today - timedelta(days=1)].turns == 1  # moved to yesterday
    assert v1.days[today].turns == 2
    assert v1.days[today].errors == 2
    v11 = found.versions["1.1.0"]
    assert (v11.totals.turns, v11.totals.users, v11.totals.sessions) == (1, set(), {"s3"})  # no user id: a session
    assert set(found.versions) == {"1.0.0", "1.1.0"}  # the other environment is not counted
    assert set(only.versions) == {"1.1.0"}

    view = analytics_view(found).wire()
    assert [v["version"] for v in view["versions"]] == ["1.1.0", "1.0.0"]  # newest turn first, then the version
    shown = next(v for v in view["versions"] if v["version"] == "1.0.0")
    assert len(shown["days"]) == 7  # every day of the period, zeros included
    zero = {"turns": 0, "errors": 0, "users": 0, "sessions": 0, "tokensIn": 0, "tokensOut": 0, "latencyMs": None}
    assert shown["days"][0] == {"day": (today - timedelta(days=6)).isoformat(), **zero, "tools": {}}
    assert shown["totals"]["latencyMs"] == {"p50": 200, "p90": 400, "p99": 400}
    assert shown["totals"]["users"] == 2
    assert (view["from"], view["to"], view["truncated"]) == ((today - timedelta(days=6)).isoformat(), today.isoformat(),
                                                              False)  # fmt: skip


def test_a_stored_turn_keeps_its_latency(tmp_path: Path) -> None:
    async def main() -> list[Any]:
        store = ConversationStore(f"sqlite:///{tmp_path / 'dockyard.db'}")
        await store.start()
        try:
            t = await store.start_turn(**WHERE, app="bot", session_id="s", user_id=None, version="1.0.0", key_id="k")
            await asyncio.sleep(0.05)
            await store.finish_turn(t, user_message="q", reply="a", agent="a", tools_used=[], tokens_in=1, tokens_out=1)
            return list(await store.run(lambda c: c.execute(messages.select().order_by(messages.c.seq)).all()))
        finally:
            await store.close()

    user, reply = asyncio.run(main())
    assert user.latency_ms is None
    assert 50 <= reply.latency_ms < 5000


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"since": date(2026, 1, 10), "until": date(2026, 1, 1)}, "query.from"),
        ({"since": date(2025, 1, 1), "until": date(2026, 1, 1)}, "query.from"),
        ({"version": "latest"}, "query.version"),
    ],
)
def test_bad_queries_are_refused_naming_the_field(args: dict[str, Any], field: str) -> None:
    service = AnalyticsService(None, Allow(), None)  # type: ignore[arg-type]
    with pytest.raises(InvalidError) as refused:
        asyncio.run(service.environment_analytics("team", "bot-prod", **args))
    assert refused.value.details[0]["field"] == field  # type: ignore[index]


def test_the_status_summary_lists_versions_most_recent_first(tmp_path: Path) -> None:
    from dockyard_api.store.summary import versions

    async def main() -> list[dict[str, Any]]:
        store = ConversationStore(f"sqlite:///{tmp_path / 'dockyard.db'}")
        await store.start()
        try:
            now = datetime.now(UTC)
            earlier = now - timedelta(days=3)

            def record(conn: Any) -> None:
                old = Outcome(**WHERE, version="1.0.0", at=earlier, seconds=1, outcome="ok", tokens_in=5)
                write(conn, [old], "sqlite", earlier)
                ok = Outcome(**WHERE, version="1.1.0", at=now, seconds=1, outcome="ok", tokens_out=7)
                failed = Outcome(**WHERE, version="1.1.0", at=now, seconds=1, outcome="upstream_error")
                write(conn, [ok, failed], "sqlite", now)

            await store.run(record)
            return await store.run(functools.partial(versions, **WHERE, since=now.date() - timedelta(days=29),
                                                     until=now.date()))  # fmt: skip
        finally:
            await store.close()

    found = asyncio.run(main())
    today = datetime.now(UTC).date()
    assert found == [
        {"version": "1.1.0", "requests": 2, "errors": 1, "tokensIn": 0, "tokensOut": 7, "lastDay": today.isoformat()},
        {"version": "1.0.0", "requests": 1, "errors": 0, "tokensIn": 5, "tokensOut": 0,
         "lastDay": (today - timedelta(days=3)).isoformat()},
    ]  # fmt: skip


def test_a_long_analytics_read_never_holds_up_a_turn(tmp_path: Path) -> None:
    """SQLite: the read runs on a read-only connection of its own, not in the writer thread of the turns."""
    import time

    async def main() -> tuple[float, stored.Analytics]:
        store = ConversationStore(f"sqlite:///{tmp_path / 'dockyard.db'}")
        await store.start()
        try:
            await scenario(store)
            today = datetime.now(UTC).date()

            def slow_read(conn: Any) -> stored.Analytics:
                found = stored.read(conn, **WHERE, since=today, until=today)
                time.sleep(1.0)  # a read of many turns
                return found

            reading = asyncio.create_task(store.read_only(slow_read))
            await asyncio.sleep(0.2)
            started = time.monotonic()
            t = await store.start_turn(**WHERE, app="bot", session_id="during", user_id="x", version="1.0.0",
                                       key_id="k")  # fmt: skip
            await store.finish_turn(t, user_message="q", reply="a", agent="a", tools_used=[], tokens_in=1, tokens_out=1)
            took = time.monotonic() - started
            return took, await reading
        finally:
            await store.close()

    took, found = asyncio.run(main())
    assert took < 0.5, f"a turn waited {took:.2f} s for the analytics read"
    assert found.versions["1.0.0"].totals.turns == 2


def test_the_read_only_connection_cannot_write(tmp_path: Path) -> None:
    from dockyard_core.errors import DatabaseUnavailableError

    async def main() -> None:
        store = ConversationStore(f"sqlite:///{tmp_path / 'dockyard.db'}")
        await store.start()
        try:
            with pytest.raises(DatabaseUnavailableError, match="readonly"):
                await store.read_only(lambda conn: conn.execute(messages.delete()))
        finally:
            await store.close()

    asyncio.run(main())
