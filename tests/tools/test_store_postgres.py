"""The conversation store against a REAL PostgreSQL server (the distribution's package, started on a
free loopback port by tests/support/postgres.py). Two ConversationStore instances on one database
are two facade replicas: one turn at a time per session and the rate limits must hold across them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any, TypeVar

import pytest
from sqlalchemy import func, select, text

from dockyard_api.store import ConversationStore, Turn, migrate
from dockyard_api.store.schema import messages, sessions
from dockyard_core.errors import ConflictError, DatabaseUnavailableError, NotFoundError, RateLimitedError
from dockyard_core.interventions import Intervention
from tests.support.conversations import admitted, counted_request, stored_messages
from tests.support.postgres import Postgres, postgres_server

T = TypeVar("T")
WHERE = {"namespace": "shop", "environment": "bot-production"}


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    with postgres_server() as server:
        yield server


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


async def replicas(pg: Postgres, n: int = 2, **kw: Any) -> list[ConversationStore]:
    """``n`` stores on one new database, started at the same moment (like replicas of a rollout)."""
    url = pg.url(await pg.create_database())
    stores = [ConversationStore(url, **kw) for _ in range(n)]
    await asyncio.gather(*(s.start() for s in stores))
    assert all(s.ready for s in stores), [s._last_error for s in stores]
    return stores


async def close(*stores: ConversationStore) -> None:
    for s in stores:
        await s.close()


async def turn(store: ConversationStore, session_id: str | None = "session-1", user: str | None = "user-1",
               version: str = "1.0.0") -> Turn:  # fmt: skip
    return await store.start_turn(**WHERE, app="bot", session_id=session_id, user_id=user, version=version,
                                  key_id="key1")  # fmt: skip


async def finish(store: ConversationStore, t: Turn, text: str) -> str:
    return await store.finish_turn(t, user_message=text, reply=f"re: {text}", agent="helper", tools_used=[],
                                   tokens_in=3, tokens_out=4)  # fmt: skip


def test_replicas_starting_together_migrate_once(pg: Postgres) -> None:
    async def main() -> None:
        stores = await replicas(pg, 6)
        assert await stores[0].run(migrate.current) == migrate.head()
        query = text("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'dockyard_%'")
        tables = await stores[0].run(lambda c: c.execute(query).scalar_one())
        assert tables == 10  # nine tables (0001-0005) and the version table, each once
        await close(*stores)

    run(main())


def test_sessions_continuity_ownership_and_history_on_postgres(pg: Postgres) -> None:
    async def main() -> None:
        [store] = await replicas(pg, 1, history_messages=4)
        first = await turn(store, version="1.0.0")
        assert first.created
        await finish(store, first, "m0")
        for i in range(1, 4):
            t = await turn(store, version="2.0.0")
            assert t.version == "1.0.0"  # pinned at creation
            await finish(store, t, f"m{i}")
        t = await turn(store)
        assert [m.content for m in t.history] == ["m2", "re: m2", "m3", "re: m3"]
        await store.abort_turn(t, error="-")
        with pytest.raises(NotFoundError, match="belongs to another user"):
            await turn(store, user="mallory")
        generated = await turn(store, session_id=None)
        assert generated.session_id.startswith("ses_")
        await close(store)

    run(main())


def test_interventions_are_kept_with_their_turns_and_listed_newest_first_across_replicas(pg: Postgres) -> None:
    async def main() -> None:
        a, b = await replicas(pg, 2, busy_wait_seconds=5)
        blocked = Intervention("no-competitors", "input", "block", "denied term #1")
        redacted = Intervention("pii", "output", "redact", "PHONE_NUMBER x2")
        first = await a.finish_turn(await turn(a), user_message="q", reply="blocked", agent="helper", tools_used=[],
                                    tokens_in=0, tokens_out=0, usage=True, interventions=[blocked])  # fmt: skip
        await b.abort_turn(await turn(b), error="tool failed", usage=(1, 0), interventions=[redacted])
        listed = await a.list_interventions(**WHERE)
        assert [(i.policy, i.stage, i.action, i.reason, i.message_id) for i in listed] == [
            ("pii", "output", "redact", "PHONE_NUMBER x2", None),
            ("no-competitors", "input", "block", "denied term #1", first),
        ]
        assert [i.policy for i in await b.list_interventions(**WHERE, limit=1)] == ["pii"]
        # a turn that lost its session keeps neither its messages nor its interventions
        lost = await turn(b, session_id="session-2")
        await b.run(lambda c: c.execute(sessions.update().where(sessions.c.pk == lost.session_pk)
                                        .values(turn_token="someone-else")))  # fmt: skip
        with pytest.raises(ConflictError):
            await b.finish_turn(lost, user_message="q", reply="a", agent="helper", tools_used=[], tokens_in=0,
                                tokens_out=0, interventions=[blocked])  # fmt: skip
        assert len(await b.list_interventions(**WHERE)) == 2
        await close(a, b)

    run(main())


def test_one_turn_at_a_time_across_two_replicas(pg: Postgres) -> None:
    async def main() -> None:
        a, b = await replicas(pg, 2, busy_wait_seconds=0.3)
        held = await turn(a)
        with pytest.raises(ConflictError, match="busy"):
            await turn(b)
        await finish(a, held, "on a")
        on_b = await turn(b)
        assert [m.content for m in on_b.history] == ["on a", "re: on a"]
        await finish(b, on_b, "on b")
        await close(a, b)

    run(main())


def test_many_concurrent_turns_through_two_replicas_never_overlap_nor_get_lost(pg: Postgres) -> None:
    async def main() -> None:
        a, b = await replicas(pg, 2, busy_wait_seconds=60)
        running = overlaps = 0

        async def one(store: ConversationStore, i: int) -> None:
            nonlocal running, overlaps
            t = await turn(store)
            running += 1
            overlaps += running > 1
            await asyncio.sleep(0.002)
            running -= 1
            await finish(store, t, f"m{i}")

        await asyncio.gather(*(one(a if i % 2 else b, i) for i in range(30)))
        assert overlaps == 0
        stored = await stored_messages(a, **WHERE, session_id="session-1")
        assert len(stored) == 60
        users = [m.content for m in stored if m.role == "user"]
        assert sorted(users) == sorted(f"m{i}" for i in range(30))  # nothing lost, nothing duplicated
        assert all(stored[i + 1].content == f"re: {stored[i].content}" for i in range(0, 60, 2))
        await close(a, b)

    run(main())


def test_a_killed_replicas_turn_is_taken_over_after_its_heartbeat_stops(pg: Postgres) -> None:
    async def main() -> None:
        a, b = await replicas(pg, 2, busy_wait_seconds=0, heartbeat_seconds=0.2)
        await turn(a)
        with pytest.raises(ConflictError):
            await turn(b)  # a is alive: its turn holds
        a._task.cancel()  # type: ignore[union-attr]  # "SIGKILL": no heartbeat, no abort, no close
        await a.dispose()
        started = time.monotonic()
        while True:
            try:
                t = await turn(b)
                break
            except ConflictError:
                assert time.monotonic() - started < 10, "the dead replica's turn was never freed"
                await asyncio.sleep(0.1)
        waited = time.monotonic() - started
        assert waited >= b.stale_after.total_seconds() - 0.5  # not before the replica counts as dead
        assert t.history == []  # no half turn
        await finish(b, t, "taken over")
        await close(b)

    run(main())


def wait_for_a_fresh_minute() -> None:
    """Fixed one-minute windows: start a counting test well inside a minute."""
    second = datetime.now(UTC).second
    if second > 45:
        time.sleep(61 - second)


def test_requests_per_minute_hold_across_two_replicas(pg: Postgres) -> None:
    async def main() -> None:
        a, b = await replicas(pg, 2)
        wait_for_a_fresh_minute()
        limits = {"requestsPerMinute": 10}

        async def call(store: ConversationStore) -> int | None:
            try:
                await admitted(store, **WHERE, key_id="key1", limits=limits)
                return None
            except RateLimitedError as exc:
                return exc.retry_after

        answers = await asyncio.gather(*(call(a if i % 2 else b) for i in range(30)))
        allowed = [r for r in answers if r is None]
        refused = [r for r in answers if r is not None]
        assert len(allowed) == 10  # not 10 per replica
        assert len(refused) == 20
        assert all(1 <= r <= 60 for r in refused)
        today = datetime.now(UTC).date()
        report = await a.usage(**WHERE, since=today, until=today)
        assert report.totals.rate_limited == 20
        await close(a, b)

    run(main())


def test_tokens_per_day_hold_across_two_replicas(pg: Postgres) -> None:
    async def main() -> None:
        a, b = await replicas(pg, 2)
        limits = {"tokensPerDay": 50}
        await counted_request(a, **WHERE, key_id="key1", ok=True, tokens_in=40, tokens_out=10, limits=limits)
        with pytest.raises(RateLimitedError, match="tokensPerDay"):
            await admitted(b, **WHERE, key_id="key2", limits=limits)
        await close(a, b)

    run(main())


def test_usage_counts_from_two_replicas_add_up(pg: Postgres) -> None:
    async def main() -> None:
        a, b = await replicas(pg, 2)
        await asyncio.gather(
            *(
                counted_request(
                    a if i % 2 else b, **WHERE, key_id=f"key{i % 3}", ok=i % 5 != 0, tokens_in=i, tokens_out=2 * i
                )
                for i in range(60)
            )
        )
        today = datetime.now(UTC).date()
        report = (await b.usage(**WHERE, since=today - timedelta(days=1), until=today)).view()
        assert report["totals"] == {
            "requests": 60,
            "errors": 12,
            "rateLimited": 0,
            "tokensIn": sum(range(60)),
            "tokensOut": 2 * sum(range(60)),
        }
        assert [k["requests"] for k in report["keys"]] == [20, 20, 20]
        await close(a, b)

    run(main())


def test_postgres_stopped_answers_503_with_the_reason_and_recovers_without_restart(pg: Postgres) -> None:
    async def main() -> None:
        [store] = await replicas(pg, 1, busy_wait_seconds=0)
        await finish(store, await turn(store), "before")
        pg.stop()
        try:
            started = time.monotonic()
            with pytest.raises(DatabaseUnavailableError, match="the conversation database is unavailable: ") as caught:
                await turn(store)
            assert time.monotonic() - started < 15  # an answer, not a hang
            assert caught.value.status_code == 503
            with pytest.raises(DatabaseUnavailableError):
                await store.usage(**WHERE, since=date(2020, 1, 1), until=date(2020, 1, 31))
        finally:
            pg.start()
        t = await turn(store)  # the same store: its pool reconnects
        assert [m.content for m in t.history] == ["before", "re: before"]
        await finish(store, t, "after")
        count = await store.run(lambda c: c.execute(select(func.count()).select_from(messages)).scalar_one())
        busy = select(func.count()).select_from(sessions).where(sessions.c.turn_token.is_not(None))
        locked = await store.run(lambda c: c.execute(busy).scalar_one())
        assert (count, locked) == (4, 0)
        await close(store)

    run(main())


def test_a_turn_cut_by_the_outage_frees_its_session_once_postgres_is_back(pg: Postgres) -> None:
    async def main() -> None:
        [store] = await replicas(pg, 1, busy_wait_seconds=0, heartbeat_seconds=0.2)
        await finish(store, await turn(store), "before")
        cut = await turn(store)  # the turn is running when the database goes
        pg.stop()
        try:
            with pytest.raises(DatabaseUnavailableError):
                await finish(store, cut, "lost with the outage")
            with pytest.raises(DatabaseUnavailableError):
                await store.abort_turn(cut, error="database unavailable")
        finally:
            pg.start()
        started = time.monotonic()
        while True:  # the release is retried in the background: the session is not held for the lease
            try:
                t = await turn(store)
                break
            except (ConflictError, DatabaseUnavailableError):
                assert time.monotonic() - started < 10, "the cut turn still holds the session"
                await asyncio.sleep(0.1)
        assert [m.content for m in t.history] == ["before", "re: before"]  # nothing of the cut turn
        await finish(store, t, "after")
        await close(store)

    run(main())


def test_whole_turns_with_limits_and_usage_hold_across_two_replicas(pg: Postgres) -> None:
    """The execute path's two transactions (limits + session; messages + usage), on both replicas at once:
    the per-minute limit lets exactly 10 turns through, including turns waiting on one busy session; every
    admitted turn is stored and counted; nothing deadlocks (session row first, then counters, everywhere)."""

    async def main() -> None:
        a, b = await replicas(pg, 2, busy_wait_seconds=30)
        wait_for_a_fresh_minute()
        limits = {"requestsPerMinute": 10, "tokensPerDay": 10**9}

        async def call(i: int) -> str:
            store = a if i % 2 else b
            session_id = "shared" if i % 3 == 0 else None  # a third of them queue on one session
            try:
                t = await store.start_turn(**WHERE, app="bot", session_id=session_id, user_id="u", version="1",
                                           key_id="key1", limits=limits)  # fmt: skip
            except RateLimitedError:
                return "429"
            await asyncio.sleep(0.01)
            await store.finish_turn(t, user_message=f"q{i}", reply="a", agent="helper", tools_used=[], tokens_in=2,
                                    tokens_out=1, usage=True)  # fmt: skip
            return "ok"

        answers = await asyncio.gather(*(call(i) for i in range(30)))
        assert sorted(answers) == ["429"] * 20 + ["ok"] * 10
        today = datetime.now(UTC).date()
        totals = (await a.usage(**WHERE, since=today, until=today)).totals
        assert (totals.requests, totals.rate_limited, totals.tokens_in, totals.tokens_out) == (10, 20, 20, 10)
        count = await a.run(lambda c: c.execute(select(func.count()).select_from(messages)).scalar_one())
        assert count == 20
        await close(a, b)

    run(main())


def test_analytics_and_the_summary_per_version_on_postgres(pg: Postgres) -> None:
    """Alembic 0005 on PostgreSQL (each reply's latency_ms), the analytics of turns stored by two replicas,
    errors per version from the outcome recorder's counters, and the usage summary's versions."""
    import functools

    from dockyard_api.store import analytics
    from dockyard_api.store.outcomes import Outcome, write
    from dockyard_api.store.summary import versions

    async def main() -> tuple[analytics.Analytics, list[dict[str, Any]]]:
        a, b = await replicas(pg, 2, busy_wait_seconds=5)
        try:
            await finish(a, await turn(a, session_id="s1", user="ann"), "one")
            await finish(b, await turn(b, session_id="s2", user="bob", version="1.1.0"), "two")
            now = datetime.now(UTC)
            failed = Outcome(**WHERE, version="1.1.0", at=now, seconds=1.0, outcome="upstream_error")
            await a.run(lambda conn: write(conn, [failed], "postgresql", now))
            today = now.date()
            found = await b.read_only(functools.partial(analytics.read, **WHERE, since=today, until=today))
            summary = await a.run(functools.partial(versions, **WHERE, since=today - timedelta(days=29), until=today))
            return found, summary
        finally:
            await close(a, b)

    found, summary = run(main())
    v1, v11 = found.versions["1.0.0"], found.versions["1.1.0"]
    assert (v1.totals.turns, v1.totals.users, v1.totals.tokens_in, v1.totals.tokens_out) == (1, {"ann"}, 3, 4)
    assert (v11.totals.turns, v11.totals.errors) == (1, 1)
    assert v1.totals.percentiles() is not None  # the latency was stored
    assert [(v["version"], v["requests"], v["errors"]) for v in summary] == [("1.1.0", 1, 1)]
