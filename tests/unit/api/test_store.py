"""The conversation store on its embedded default, a SQLite file: migrations, sessions, turns,
bounded history, usage statistics and rate limits (Contract 3). The same behaviours against a real
PostgreSQL server, and across two store instances (= two facade replicas), are in
tests/tools/test_store_postgres.py."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import select

from dockyard_api.store import ConversationStore, RateLimits, Turn, default_url, migrate
from dockyard_api.store.schema import metadata, rate_windows, sessions
from dockyard_core.errors import ConflictError, DatabaseUnavailableError, InvalidError, NotFoundError, RateLimitedError
from tests.support.conversations import admitted, counted_request, stored_messages

T = TypeVar("T")
WHERE = {"namespace": "shop", "environment": "bot-production"}


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'db' / 'dockyard.db'}"


async def opened(url: str, **kw: Any) -> ConversationStore:
    store = ConversationStore(url, **kw)
    await store.start()
    assert store.ready
    return store


def with_store(tmp_path: Path, body: Callable[[ConversationStore], Awaitable[None]], **kw: Any) -> None:
    async def main() -> None:
        store = await opened(sqlite_url(tmp_path), **kw)
        try:
            await body(store)
        finally:
            await store.close()

    run(main())


async def turn(store: ConversationStore, session_id: str | None = "session-1", user: str | None = "user-1",
               version: str = "1.0.0", key: str = "key1") -> Turn:  # fmt: skip
    return await store.start_turn(**WHERE, app="bot", session_id=session_id, user_id=user, version=version, key_id=key)


async def finish(store: ConversationStore, t: Turn, text: str, tokens: tuple[int, int] = (10, 5)) -> str:
    return await store.finish_turn(
        t, user_message=text, reply=f"re: {text}", agent="helper", tools_used=["weather"],
        tokens_in=tokens[0], tokens_out=tokens[1],
    )  # fmt: skip


# --- migrations --------------------------------------------------------------------------------------


def test_migrations_create_the_declared_schema_and_are_idempotent(tmp_path: Path) -> None:
    async def main() -> None:
        store = await opened(sqlite_url(tmp_path))
        await store.run(migrate.upgrade_connection)  # a second start: nothing to do

        def check(sync: Any) -> tuple[str | None, list[Any]]:
            context = MigrationContext.configure(sync, opts={"version_table": migrate.VERSION_TABLE})
            return migrate.current(sync), compare_metadata(context, metadata)

        revision, diff = await store.run(check)
        assert revision == migrate.head()
        assert diff == [], f"the migrations and schema.py differ: {diff}"
        await store.close()

    run(main())


def test_the_embedded_default_lives_on_the_model_store(tmp_path: Path) -> None:
    url = default_url(tmp_path / "model-store")
    assert url == f"sqlite:///{tmp_path}/model-store/conversations/dockyard.db"

    async def main() -> None:
        store = await opened(url)
        await store.close()

    run(main())
    assert (tmp_path / "model-store" / "conversations" / "dockyard.db").is_file()


# --- sessions and turns ------------------------------------------------------------------------------


def test_a_new_session_is_created_with_the_id_the_client_chose_and_pinned(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        first = await turn(store, version="1.0.0")
        assert (first.session_id, first.version, first.history, first.created) == ("session-1", "1.0.0", [], True)
        await finish(store, first, "hello")
        # a later turn, after version 2.0.0 was deployed, stays on the version the session started with
        second = await turn(store, version="2.0.0")
        assert (second.version, second.created) == ("1.0.0", False)
        assert [(m.role, m.content) for m in second.history] == [("user", "hello"), ("assistant", "re: hello")]
        assert second.history[1].agent == "helper"
        assert second.history[1].tools_used == ("weather",)
        await finish(store, second, "again")
        stored = await stored_messages(store, **WHERE, session_id="session-1")
        assert [m.content for m in stored] == ["hello", "re: hello", "again", "re: again"]

    with_store(tmp_path, body)


def test_without_a_session_id_the_server_makes_one(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        a = await turn(store, session_id=None)
        b = await turn(store, session_id=None)
        assert a.session_id != b.session_id
        assert a.session_id.startswith("ses_")
        await finish(store, a, "x")
        again = await turn(store, session_id=a.session_id)
        assert [m.content for m in again.history] == ["x", "re: x"]

    with_store(tmp_path, body)


def test_sessions_are_isolated_per_environment(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        await finish(store, await turn(store), "in production")
        other = await store.start_turn(
            namespace="shop", environment="bot-staging", app="bot", session_id="session-1", user_id="user-1",
            version="1.0.0", key_id="key2",
        )  # fmt: skip
        assert other.created
        assert other.history == []

    with_store(tmp_path, body)


def test_another_users_session_is_404_saying_so(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        await finish(store, await turn(store, user="alice"), "mine")
        with pytest.raises(NotFoundError, match="belongs to another user") as caught:
            await turn(store, user="bob")
        assert caught.value.status_code == 404
        with pytest.raises(NotFoundError, match="another user"):
            await turn(store, user=None)  # an anonymous caller is not alice either
        assert len((await turn(store, user="alice")).history) == 2

    with_store(tmp_path, body)


def test_bad_session_ids_are_422(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        for bad in ("", "a" * 129, "with space", "-leading", "new\nline"):
            with pytest.raises(InvalidError):
                await turn(store, session_id=bad)

    with_store(tmp_path, body)


def test_one_turn_at_a_time_a_concurrent_turn_gets_409(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        first = await turn(store)
        with pytest.raises(ConflictError, match="busy") as caught:
            await turn(store)
        assert caught.value.status_code == 409
        await finish(store, first, "one")
        await finish(store, await turn(store), "two")  # free again
        assert len(await stored_messages(store, **WHERE, session_id="session-1")) == 4

    with_store(tmp_path, body, busy_wait_seconds=0.2)


def test_a_concurrent_turn_waits_briefly_for_the_session(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        first = await turn(store)
        waiting = asyncio.create_task(turn(store))
        await asyncio.sleep(0.2)
        assert not waiting.done()  # it waits while the first turn runs ...
        await finish(store, first, "one")
        second = await asyncio.wait_for(waiting, 5)  # ... and gets the session once it is free
        assert [m.content for m in second.history] == ["one", "re: one"]
        await finish(store, second, "two")

    with_store(tmp_path, body, busy_wait_seconds=5.0)


def test_many_concurrent_turns_on_one_session_never_overlap(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        running = 0
        overlaps = 0

        async def one(i: int) -> None:
            nonlocal running, overlaps
            t = await turn(store)
            running += 1
            overlaps += running > 1
            await asyncio.sleep(0.005)
            running -= 1
            await finish(store, t, f"m{i}")

        await asyncio.gather(*(one(i) for i in range(20)))
        assert overlaps == 0
        stored = await stored_messages(store, **WHERE, session_id="session-1")
        assert len(stored) == 40
        assert sorted(m.content for m in stored if m.role == "user") == sorted(f"m{i}" for i in range(20))
        # every user message is directly followed by its reply: no interleaving
        assert all(stored[i + 1].content == f"re: {stored[i].content}" for i in range(0, 40, 2))

    with_store(tmp_path, body, busy_wait_seconds=30.0)


def test_an_aborted_turn_stores_nothing_and_frees_the_session(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        await finish(store, await turn(store), "kept")
        broken = await turn(store)
        await store.abort_turn(broken, error="model endpoint down")
        again = await turn(store)
        assert [m.content for m in again.history] == ["kept", "re: kept"]
        await store.abort_turn(again, error="x")
        assert len(await stored_messages(store, **WHERE, session_id="session-1")) == 2

    with_store(tmp_path, body, busy_wait_seconds=0)


def test_a_turn_that_lost_its_lease_stores_nothing(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        slow = await turn(store)
        await asyncio.sleep(0.3)  # past the lease: the session is free for the next turn
        fast = await turn(store)
        await finish(store, fast, "fast")
        with pytest.raises(ConflictError, match="lost the session"):
            await finish(store, slow, "slow")
        assert [m.content for m in await stored_messages(store, **WHERE, session_id="session-1")] == [
            "fast",
            "re: fast",
        ]

    with_store(tmp_path, body, busy_wait_seconds=0, turn_lease_seconds=0.2)


def test_a_killed_facades_turn_does_not_block_the_session_after_restart(tmp_path: Path) -> None:
    async def main() -> None:
        url = sqlite_url(tmp_path)
        before = await opened(url, busy_wait_seconds=0)
        await turn(before)  # the facade dies in the middle of this turn: no finish, no abort, no close
        before._task.cancel()  # type: ignore[union-attr]  # its heartbeat stops with it
        await before.dispose()
        before._owner.close()  # type: ignore[union-attr]  # the kernel releases a dead process's file lock
        after = await opened(url, busy_wait_seconds=0)  # the restarted facade (one process per SQLite file)
        t = await turn(after)
        assert t.history == []  # nothing of the half turn
        await finish(after, t, "after restart")
        await after.close()

    run(main())


def test_a_second_process_on_the_same_sqlite_file_waits_for_the_first(tmp_path: Path) -> None:
    async def main() -> None:
        url = sqlite_url(tmp_path)
        first = await opened(url)
        second = ConversationStore(url, heartbeat_seconds=0.05)
        await second.start()
        assert not second.ready
        with pytest.raises(DatabaseUnavailableError, match=r"used by another facade process .* need PostgreSQL"):
            await turn(second)
        await first.close()  # e.g. the old pod of a rolling update goes
        for _ in range(200):
            if second.ready:
                break
            await asyncio.sleep(0.05)
        assert second.ready
        await finish(second, await turn(second), "served by the second")
        await second.close()

    run(main())


def test_history_is_bounded_by_count_and_characters(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        for i in range(5):
            await finish(store, await turn(store), f"message {i}")
        t = await turn(store)
        assert [m.content for m in t.history] == ["message 3", "re: message 3", "message 4", "re: message 4"]
        await store.abort_turn(t, error="-")
        store.history_max_chars = len("message 4") + len("re: message 4")
        t = await turn(store)
        assert [m.content for m in t.history] == ["message 4", "re: message 4"]
        await store.abort_turn(t, error="-")
        store.history_messages = 0
        assert (await turn(store)).history == []

    with_store(tmp_path, body, history_messages=4)


# --- usage and rate limits -----------------------------------------------------------------------------


def test_usage_is_counted_per_key_and_day(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        await counted_request(store, **WHERE, key_id="key1", ok=True, tokens_in=100, tokens_out=20)
        await counted_request(store, **WHERE, key_id="key1", ok=False, tokens_in=7, tokens_out=0)
        await counted_request(store, **WHERE, key_id="key2", ok=True, tokens_in=1, tokens_out=2)
        await counted_request(store, namespace="shop", environment="other", key_id="key3", ok=True, tokens_in=9,
                              tokens_out=9)  # fmt: skip
        today = datetime.now(UTC).date()
        report = (await store.usage(**WHERE, since=today - timedelta(days=29), until=today)).view()
        assert report["totals"] == {"requests": 3, "errors": 1, "rateLimited": 0, "tokensIn": 108, "tokensOut": 22}
        assert report["days"] == [{"day": today.isoformat(), **report["totals"]}]
        assert report["keys"] == [
            {"keyId": "key1", "requests": 2, "errors": 1, "rateLimited": 0, "tokensIn": 107, "tokensOut": 20},
            {"keyId": "key2", "requests": 1, "errors": 0, "rateLimited": 0, "tokensIn": 1, "tokensOut": 2},
        ]
        empty = await store.usage(**WHERE, since=date(2020, 1, 1), until=date(2020, 1, 31))
        assert empty.totals.view()["requests"] == 0
        used = await store.environments_used_since(datetime.now(UTC) - timedelta(minutes=1))
        assert sorted(used) == [("shop", "bot-production"), ("shop", "other")]
        assert await store.environments_used_since(datetime.now(UTC) + timedelta(seconds=1)) == []

    with_store(tmp_path, body)


def test_requests_per_minute_per_key_answers_429_with_retry_after(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        limits = {"requestsPerMinute": 3}
        allowed = 0
        errors: list[RateLimitedError] = []
        for _ in range(5):
            try:
                await admitted(store, **WHERE, key_id="key1", limits=limits)
                allowed += 1
            except RateLimitedError as exc:
                errors.append(exc)
        refused = len(errors)
        assert all(e.status_code == 429 and "requestsPerMinute" in e.message for e in errors)
        assert all(e.headers() == {"Retry-After": str(e.retry_after)} for e in errors)
        retry_after = [e.retry_after for e in errors]
        if allowed < 3:  # the minute turned during the loop: a new window began
            assert allowed + refused == 5
        else:
            assert (allowed, refused) == (3, 2)
        assert all(1 <= r <= 60 for r in retry_after)
        # per key: another key of the environment has its own window
        await admitted(store, **WHERE, key_id="key2", limits=limits)
        today = datetime.now(UTC).date()
        report = await store.usage(**WHERE, since=today, until=today)
        assert report.keys["key1"].rate_limited == refused

    with_store(tmp_path, body)


def test_tokens_per_day_per_environment_answers_429_until_midnight(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        limits = RateLimits(tokens_per_day=100)
        await counted_request(store, **WHERE, key_id="key1", ok=True, tokens_in=60, tokens_out=30, limits=limits)
        # 90 < 100: allowed; its tokens cross the limit
        await counted_request(store, **WHERE, key_id="key2", ok=True, tokens_in=10, tokens_out=5, limits=limits)
        with pytest.raises(RateLimitedError, match="105 tokens today") as caught:
            await admitted(store, **WHERE, key_id="key3", limits=limits)  # any key of the environment
        now = datetime.now(UTC)
        midnight = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), UTC)
        assert abs(caught.value.retry_after - (midnight - now).total_seconds()) <= 3
        # other environments are not affected
        await admitted(store, namespace="shop", environment="other", key_id="key1", limits=limits)

    with_store(tmp_path, body)


def test_no_limits_cost_nothing(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        for limits in (None, {}, {"requestsPerMinute": None}, RateLimits()):
            for _ in range(3):
                await admitted(store, **WHERE, key_id="key1", limits=limits)
        hits = await store.run(lambda c: c.execute(select(rate_windows.c.hits)).scalars().all())
        assert hits == []  # nothing counted against a limit

    with_store(tmp_path, body)


def test_rate_limits_read_the_environment_spec_model() -> None:
    from dockyard_core.resources.v1alpha1 import Environment

    env = Environment.model_validate(
        {"metadata": {"name": "e"}, "spec": {"appRef": "bot", "rateLimits": {"requestsPerMinute": 5}}}
    )
    assert RateLimits.of(env.spec.rate_limits) == RateLimits(5, None)
    assert RateLimits.of({"requestsPerMinute": 5, "tokensPerDay": 9}) == RateLimits(5, 9)


# --- the database away -------------------------------------------------------------------------------


def test_an_unreachable_database_is_503_with_the_reason_and_recovers(tmp_path: Path) -> None:
    async def main() -> None:
        url = f"sqlite+aiosqlite:///{tmp_path / 'later' / 'dockyard.db'}"
        store = ConversationStore(url, heartbeat_seconds=0.1)  # makes the directory ...
        (tmp_path / "later").rmdir()  # ... which is replaced by a file: SQLite cannot open the database
        (tmp_path / "later").write_text("not a directory")
        await store.start()  # the facade starts anyway
        assert not store.ready
        with pytest.raises(DatabaseUnavailableError, match=r"not ready: .*Not a directory") as caught:
            await turn(store)
        assert caught.value.status_code == 503
        with pytest.raises(DatabaseUnavailableError):
            await store.usage(**WHERE, since=date(2020, 1, 1), until=date(2020, 1, 31))
        (tmp_path / "later").unlink()
        (tmp_path / "later").mkdir()  # back: the store migrates in the background, no restart
        for _ in range(100):
            if store.ready:
                break
            await asyncio.sleep(0.05)
        assert store.ready
        await finish(store, await turn(store), "recovered")
        await store.close()

    run(main())


# --- the session table keeps no turn after finishing ---------------------------------------------------


def test_finished_turns_leave_no_lock_behind(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        await finish(store, await turn(store), "a")
        await store.abort_turn(await turn(store), error="b")
        row = await store.run(lambda c: c.execute(select(sessions.c.turn_token, sessions.c.message_count)).one())
        assert (row.turn_token, row.message_count) == (None, 2)

    with_store(tmp_path, body)


# --- a turn in two transactions: limits with the session, usage with the messages ------------------------


def count_transactions(store: ConversationStore) -> list[int]:
    """A list whose length is the number of transactions committed on the store from now on."""
    from sqlalchemy import event

    committed: list[int] = []
    assert store.sync_engine is not None
    event.listen(store.sync_engine, "commit", lambda _conn: committed.append(1))
    return committed


def test_a_turn_with_limits_and_usage_takes_two_transactions(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        limits = {"requestsPerMinute": 100, "tokensPerDay": 10_000}
        committed = count_transactions(store)
        for session_id in (None, "session-1", "session-1"):  # a new server-made id, a new client id, an old one
            t = await store.start_turn(**WHERE, app="bot", session_id=session_id, user_id="u", version="1",
                                       key_id="key1", limits=limits)  # fmt: skip
            await store.finish_turn(t, user_message="q", reply="a", agent="helper", tools_used=[], tokens_in=7,
                                    tokens_out=3, usage=True)  # fmt: skip
        failed = await store.start_turn(**WHERE, app="bot", session_id="session-1", user_id="u", version="1",
                                        key_id="key1", limits=limits)  # fmt: skip
        await store.abort_turn(failed, error="model down", usage=(4, 0))
        assert len(committed) == 8
        today = datetime.now(UTC).date()
        key = (await store.usage(**WHERE, since=today, until=today)).keys["key1"]
        assert (key.requests, key.errors, key.tokens_in, key.tokens_out, key.rate_limited) == (4, 1, 25, 9, 0)
        assert len(await stored_messages(store, **WHERE, session_id="session-1")) == 4
        hits = await store.run(lambda c: c.execute(select(rate_windows.c.hits)).scalars().all())
        assert sum(hits) == 4  # every start counted once

    with_store(tmp_path, body)


def test_over_a_limit_the_session_is_not_taken_and_429_comes_before_404_and_409(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        limits = {"requestsPerMinute": 2}
        start = dict(WHERE, app="bot", version="1", key_id="key1", limits=limits)
        held = await store.start_turn(**start, session_id="mine", user_id="u")  # hit 1
        with pytest.raises(NotFoundError, match="another user"):  # hit 2, counted although answered 404
            await store.start_turn(**start, session_id="mine", user_id="someone else")
        with pytest.raises(RateLimitedError, match="requestsPerMinute") as caught:  # over: 429, not 409
            await store.start_turn(**start, session_id="mine", user_id="u")
        assert caught.value.retry_after >= 1
        with pytest.raises(RateLimitedError):  # over: 429 before 404, and no session is created
            await store.start_turn(**start, session_id="other", user_id="u")
        assert [m.id for m in await stored_messages(store, **WHERE, session_id="other")] == []
        ids = await store.run(lambda c: c.execute(select(sessions.c.session_id)).scalars().all())
        assert ids == ["mine"]
        await store.finish_turn(
            held, user_message="q", reply="a", agent="a", tools_used=[], tokens_in=1, tokens_out=1, usage=True
        )  # fmt: skip  (the held turn still finishes)
        today = datetime.now(UTC).date()
        key = (await store.usage(**WHERE, since=today, until=today)).keys["key1"]
        assert (key.requests, key.rate_limited) == (1, 2)

    with_store(tmp_path, body)


def test_a_turn_that_waits_for_its_session_is_counted_once(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        limits = {"requestsPerMinute": 1000}
        start = dict(WHERE, app="bot", version="1", key_id="key1", limits=limits, session_id="s", user_id="u")
        held = await store.start_turn(**start)
        waiting = asyncio.create_task(store.start_turn(**start))
        await asyncio.sleep(0.3)  # polls the busy session several times
        assert not waiting.done()
        await store.finish_turn(held, user_message="q", reply="a", agent="a", tools_used=[], tokens_in=1,
                                tokens_out=1, usage=True)  # fmt: skip
        second = await waiting
        await store.abort_turn(second, error="-")
        hits = await store.run(lambda c: c.execute(select(rate_windows.c.hits)).scalars().all())
        assert sum(hits) == 2

    with_store(tmp_path, body, busy_wait_seconds=5)


def test_a_turn_that_lost_its_session_counts_nothing_when_finishing(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        lost = await turn(store)
        await store.run(lambda c: c.execute(sessions.update().values(turn_token="someone-else")))
        with pytest.raises(ConflictError):
            await store.finish_turn(lost, user_message="q", reply="a", agent="a", tools_used=[], tokens_in=5,
                                    tokens_out=5, usage=True)  # fmt: skip
        today = datetime.now(UTC).date()
        assert (await store.usage(**WHERE, since=today, until=today)).totals.requests == 0

    with_store(tmp_path, body)
