"""The conversation store's hot-path statements, built once per dialect with bind parameters, and the
usage counters they add to."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Executable, bindparam, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite

from dockyard_api.store.fastpath import Params, SqliteWrites
from dockyard_api.store.schema import instances, messages, rate_windows, sessions, usage_daily

USAGE_COUNTERS = ("requests", "errors", "rate_limited", "tokens_in", "tokens_out")


class Statements:
    """The hot path's statements, built once per dialect with bind parameters (building a statement costs
    more than running it on SQLite)."""

    def __init__(self, dialect: str) -> None:
        self.fast: SqliteWrites | None = SqliteWrites() if dialect == "sqlite" else None
        self.write: Callable[[Connection, Executable, Params], Any] = (
            self.fast.execute if self.fast is not None else _execute
        )
        """``write(conn, statement, params)``: a turn's write (``conn.execute``; on SQLite straight to the
        driver, :mod:`dockyard_api.store.fastpath`); what it answers has ``scalar()``."""
        insert_ = postgresql.insert if dialect == "postgresql" else sqlite.insert
        self.session = (
            select(
                sessions.c.pk,
                sessions.c.user_id,
                sessions.c.version,
                sessions.c.turn_token,
                sessions.c.turn_expires_at,
                sessions.c.turn_holder,
            )
            .where(
                sessions.c.namespace == bindparam("b_ns"),
                sessions.c.environment == bindparam("b_env"),
                sessions.c.session_id == bindparam("b_sid"),
            )
            # the session row alone, locked (PostgreSQL): a join here would be re-checked against the OLD
            # holder's row after waiting for the lock (READ COMMITTED re-evaluation): the holder is read apart
            .with_for_update()
        )
        self.holder = select(instances.c.heartbeat_at, instances.c.stopped).where(instances.c.id == bindparam("b_id"))
        self.create_session = (
            insert_(sessions)
            .on_conflict_do_nothing(index_elements=["namespace", "environment", "session_id"])
            .returning(sessions.c.pk)
        )
        self.take = (
            update(sessions)
            .where(sessions.c.pk == bindparam("b_pk"))
            .values(
                turn_token=bindparam("b_token"), turn_holder=bindparam("b_holder"), turn_expires_at=bindparam("b_until")
            )
        )
        self.history = (
            select(
                messages.c.id,
                messages.c.role,
                messages.c.content,
                messages.c.agent,
                messages.c.tools_used,
                messages.c.created_at,
            )
            .where(messages.c.session_pk == bindparam("b_pk"))
            .order_by(messages.c.seq.desc())
            .limit(bindparam("b_limit"))
        )
        self.release = (
            update(sessions)
            .where(sessions.c.pk == bindparam("b_pk"), sessions.c.turn_token == bindparam("b_token"))
            .values(turn_token=None, turn_holder=None, turn_expires_at=None)
        )
        self.finish = self.release.values(
            last_active_at=bindparam("b_now"), message_count=sessions.c.message_count + 2
        ).returning(sessions.c.message_count)
        self.add_messages = insert(messages)
        tokens = usage_daily.c.tokens_in + usage_daily.c.tokens_out
        self.tokens_today = select(func.coalesce(func.sum(tokens), 0)).where(
            usage_daily.c.namespace == bindparam("b_ns"),
            usage_daily.c.environment == bindparam("b_env"),
            usage_daily.c.day == bindparam("b_day"),
        )
        hit = insert_(rate_windows)
        self.hit = hit.on_conflict_do_update(
            index_elements=["namespace", "environment", "key_id", "minute"],
            set_={"hits": rate_windows.c.hits + 1},
            where=rate_windows.c.hits < bindparam("b_limit"),
        ).returning(rate_windows.c.hits)
        count = insert_(usage_daily)
        self.count = count.on_conflict_do_update(
            index_elements=["namespace", "environment", "key_id", "day"],
            set_={
                **{n: usage_daily.c[n] + count.excluded[n] for n in USAGE_COUNTERS},
                "updated_at": count.excluded.updated_at,
            },
        )


def _execute(conn: Connection, statement: Executable, params: Params) -> Any:
    return conn.execute(statement, params)
