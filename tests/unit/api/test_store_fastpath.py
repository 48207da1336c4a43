"""The turn's writes on SQLite sent straight to the driver (:mod:`dockyard_api.store.fastpath`): the driver
receives exactly what SQLAlchemy would have sent, the path is taken, and the driver's errors are raised as
SQLAlchemy raises them."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Executable, event, exc, select

from dockyard_api.store import ConversationStore, schema
from dockyard_api.store.fastpath import SqliteWrites, _Compiled
from dockyard_api.store.statements import Statements
from dockyard_core.interventions import Intervention

WHERE = {"namespace": "shop", "environment": "bot-production"}
LIMITS = {"requestsPerMinute": 100, "tokensPerDay": 10_000}


async def turns(store: ConversationStore) -> None:
    """What the store's callers write: new and continued sessions, rate limits, usage, an aborted turn, a
    turn with a guardrail's intervention, a session released by a lost replica's sweep."""
    first = await store.start_turn(**WHERE, app="bot", session_id=None, user_id="u1", version="1.0.0",
                                   key_id="k1", limits=LIMITS)  # fmt: skip
    await store.finish_turn(first, user_message="hi", reply="hello", agent="helper", tools_used=["clock", "kb"],
                            tokens_in=12, tokens_out=7, usage=True)  # fmt: skip
    again = await store.start_turn(**WHERE, app="bot", session_id=first.session_id, user_id="u1", version="1.0.0",
                                   key_id="k1", limits=LIMITS)  # fmt: skip
    await store.finish_turn(again, user_message="ünïcode ✓", reply="", agent="helper", tools_used=[],
                            tokens_in=0, tokens_out=0, usage=True,
                            interventions=[Intervention("pii", "input", "redact", "EMAIL_ADDRESS x1")])  # fmt: skip
    aborted = await store.start_turn(**WHERE, app="bot", session_id="s-2", user_id=None, version="2.0.0",
                                     key_id="k2")  # fmt: skip
    await store.abort_turn(aborted, error="model_error", usage=(3, 0))


def test_the_driver_receives_what_sqlalchemy_would_send(tmp_path: Path) -> None:
    """With a statement listener the store's writes go through SQLAlchemy (the fast path steps aside for
    listeners): what SQLAlchemy sends the driver for each write is recorded, and the fast path's compiled
    statement gives the same SQL and the same values for the same parameters."""
    sent: list[tuple[str, Any]] = []
    writes: list[tuple[Connection, Executable, Any]] = []

    async def main() -> None:
        store = ConversationStore(f"sqlite:///{tmp_path / 'a.db'}")
        assert store.sync_engine is not None
        assert store._sql.fast is not None
        fast, write = store._sql.fast, store._sql.write

        def recording(conn: Connection, statement: Executable, params: Any) -> Any:
            writes.append((conn, statement, params))
            return write(conn, statement, params)

        store._sql.write = recording
        event.listen(store.sync_engine, "before_cursor_execute",
                     lambda _c, _cur, sql, params, _ctx, _many: sent.append((sql, params)))  # fmt: skip
        await store.start()
        try:
            await turns(store)
            assert fast.sent == 0  # a listener: every statement went through SQLAlchemy

            def compare(conn: Connection) -> int:
                checked = 0
                for _, statement, params in writes:
                    rows = [params] if isinstance(params, dict) else list(params)
                    compiled = fast._compile(conn, statement, frozenset(rows[0]))
                    assert isinstance(compiled, _Compiled)
                    values = [compiled.values(row) for row in rows]
                    expected = (compiled.sql, values if len(rows) > 1 else values[0])
                    assert expected in [(sql, list(p) if isinstance(p, list) else p) for sql, p in sent], expected
                    checked += 1
                return checked

            assert await store.run(compare) == len(writes) >= 9
        finally:
            await store.close()

    asyncio.run(main())


def test_a_turn_s_writes_take_the_fast_path_and_read_back_the_same(tmp_path: Path) -> None:
    async def main() -> None:
        store = ConversationStore(f"sqlite:///{tmp_path / 'b.db'}")
        await store.start()
        try:
            await turns(store)
            assert store._sql.fast is not None
            assert store._sql.fast.sent >= 9
            before = datetime.now(UTC)
            first = (await store.start_turn(**WHERE, app="bot", session_id="s-2", user_id=None, version="9.9.9",
                                            key_id="k2"))  # fmt: skip
            assert first.history == []  # the aborted turn stored nothing
            assert first.version == "2.0.0"  # the session stays pinned to its version
            await store.abort_turn(first, error="x")
            sessions = await store.run(lambda conn: conn.execute(select(schema.sessions)).all())
            continued = next(s for s in sessions if s.session_id != "s-2")
            again = await store.start_turn(**WHERE, app="bot", session_id=continued.session_id, user_id="u1",
                                           version="1.0.0", key_id="k1")  # fmt: skip
            assert [(m.role, m.content, m.agent, m.tools_used) for m in again.history] == [
                ("user", "hi", None, ()),
                ("assistant", "hello", "helper", ("clock", "kb")),
                ("user", "ünïcode ✓", None, ()),
                ("assistant", "", "helper", ()),
            ]
            assert all(m.created_at is not None and m.created_at.tzinfo is UTC and m.created_at <= before
                       for m in again.history)  # fmt: skip
            assert continued.message_count == 4
            assert continued.turn_token is None
            usage = await store.run(lambda conn: conn.execute(select(schema.usage_daily)).all())
            assert sorted((u.key_id, u.requests, u.errors, u.tokens_in, u.tokens_out) for u in usage) == [
                ("k1", 2, 0, 12, 7),
                ("k2", 1, 1, 3, 0),
            ]
        finally:
            await store.close()

    asyncio.run(main())


def test_the_driver_s_errors_are_raised_as_sqlalchemy_raises_them(tmp_path: Path) -> None:
    async def main() -> None:
        store = ConversationStore(f"sqlite:///{tmp_path / 'c.db'}")
        await store.start()
        try:
            sql: Statements = store._sql
            message = {"id": "msg_x", "session_pk": 999_999, "seq": 1, "role": "user", "content": "x",
                       "agent": None, "tools_used": None, "tokens_in": 0, "tokens_out": 0, "created_at": None,
                       "latency_ms": None}  # fmt: skip

            def orphan(conn: Connection) -> None:
                sql.write(conn, sql.add_messages, [message])  # no such session: the foreign key refuses it

            with pytest.raises(exc.IntegrityError):
                await store.run(orphan)
            assert isinstance(sql.fast, SqliteWrites)
            assert sql.fast.sent == 0
        finally:
            await store.close()

    asyncio.run(main())
