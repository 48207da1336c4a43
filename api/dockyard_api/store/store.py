"""The conversation store: sessions, messages, usage statistics and rate limits in a relational
database (SQLAlchemy 2 async; SQLite by default, PostgreSQL for several facade replicas).

- One turn at a time per session. A turn takes the session with a lease (``turn_token``,
  ``turn_holder``, ``turn_expires_at`` on the session row), in a transaction (row lock on
  PostgreSQL), so the rule holds across replicas. A turn that finds the session busy waits up to
  ``session_busy_wait_seconds`` and then gets 409. A turn's lease ends when it finishes or aborts, when
  ``turn_lease_seconds`` pass, or when its replica stops or goes silent (each replica heartbeats in
  ``dockyard_instances``): a killed facade never leaves a session stuck.
- A turn is stored whole or not at all: ``finish_turn`` writes the user message and the reply in one
  transaction, ``abort_turn`` writes no message. What guardrails and the PII protection did to the turn
  (``interventions``) is written in the same transaction by both (:mod:`dockyard_api.store.interventions`,
  never the matched values) and listed per environment by ``list_interventions``.
- A turn of the execute endpoint is TWO transactions: ``start_turn(limits=...)`` counts the rate limits
  and takes the session; ``finish_turn(usage=True)`` (or ``abort_turn(usage=...)``) stores the turn (or
  releases the session) and counts the usage. Locks: the session row first, then the counters.
- Usage statistics per environment, API key and UTC day are upserted counters; they are never deleted
  with the environment (docs/conversation-store.md, 'Usage statistics').
- Rate limits (Environment ``spec.rateLimits``) are counted in the database, so they hold across
  replicas sharing PostgreSQL: requests per minute per key in fixed one-minute windows, tokens per day
  per environment from the usage counters (:mod:`dockyard_api.store.limits`).

The connections, the process's life cycle in the database and ``run()`` are in
:mod:`dockyard_api.store.database`; the values (``Turn``, ``StoredMessage``, ``UsageReport``...) in
:mod:`dockyard_api.store.records`.

Every failure of the database is a :class:`DatabaseUnavailableError` (503) naming the reason.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Sequence
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, select

from dockyard_api.store import interventions as stored_interventions
from dockyard_api.store.database import Database
from dockyard_api.store.limits import count_request, count_usage
from dockyard_api.store.records import (
    SESSION_ID_PATTERN,
    Counters,
    RateLimits,
    StoredIntervention,
    StoredMessage,
    Turn,
    UsageReport,
)
from dockyard_api.store.schema import usage_daily
from dockyard_core.clock import utcnow
from dockyard_core.errors import ConflictError, DatabaseUnavailableError, DockyardError, InvalidError, NotFoundError
from dockyard_core.ids import random_hex
from dockyard_core.interventions import Intervention

log = logging.getLogger("dockyard.store")

_RACE = object()


class ConversationStore(Database):
    """Contract 3 of the runtime: see the module docstring."""

    def __init__(
        self,
        url: str,
        *,
        history_messages: int = 20,
        history_max_chars: int = 24_000,
        busy_wait_seconds: float = 2.0,
        turn_lease_seconds: float = 900.0,
        heartbeat_seconds: float = 2.0,
        connect_timeout_seconds: float = 5.0,
        statement_timeout_seconds: float = 10.0,
        pool_size: int = 32,
    ) -> None:
        super().__init__(
            url,
            heartbeat_seconds=heartbeat_seconds,
            connect_timeout_seconds=connect_timeout_seconds,
            statement_timeout_seconds=statement_timeout_seconds,
            pool_size=pool_size,
        )
        self.history_messages = history_messages
        self.history_max_chars = history_max_chars
        self.busy_wait_seconds = busy_wait_seconds
        self.turn_lease = timedelta(seconds=turn_lease_seconds)
        self._unreleased: dict[int, str] = {}
        """Turns whose release failed (database away): session pk -> turn token, retried by _maintain."""

    async def _after_heartbeat(self) -> None:
        if self._unreleased:
            pending = dict(self._unreleased)
            await self.run(functools.partial(self._release_all, pending=pending))
            for pk, token in pending.items():  # forgotten once committed
                if self._unreleased.get(pk) == token:
                    del self._unreleased[pk]

    def _release_all(self, conn: Connection, *, pending: dict[int, str]) -> None:
        for pk, token in pending.items():
            self._sql.write(conn, self._sql.release, {"b_pk": pk, "b_token": token})

    # --- turns -----------------------------------------------------------------------------------

    async def start_turn(
        self,
        *,
        namespace: str,
        environment: str,
        app: str,
        session_id: str | None,
        user_id: str | None,
        version: str,
        key_id: str,
        limits: Any = None,
        version_for: Callable[[str], str] | None = None,
    ) -> Turn:
        """Take the session for one turn (creating it, pinned to ``version``, when new; with ``version_for``,
        pinned to ``version_for(session id)``: a canary's split, docs/promotion.md).

        With ``limits`` (Environment ``spec.rateLimits``) the request is also counted against the rate limits
        in the same transaction (:func:`~dockyard_api.store.limits.count_request`): over a limit raises
        RateLimitedError (429) without taking the session; a request counted and then answered 404 or 409
        stays counted; a turn that waits for its session is counted once."""
        self._check_ready()
        given = RateLimits.of(limits)
        rl = given if given.requests_per_minute or given.tokens_per_day else None
        if session_id is not None and not SESSION_ID_PATTERN.match(session_id):
            raise InvalidError(
                "session_id must be 1 to 128 letters, digits or . _ : @ - (starting with a letter or digit)",
                [{"field": "body.session_id", "message": "invalid session id"}],
            )
        sid = session_id or f"ses_{random_hex()}"
        new = session_id is None  # an id made here just now: no row can hold it, nothing to read first
        deadline = time.monotonic() + self.busy_wait_seconds
        delay = 0.02
        while True:
            pinned = version_for(sid) if version_for is not None else version
            turn = await self._try_start(namespace, environment, app, sid, user_id, pinned, key_id, rl, new)
            rl, new = None, False  # counted once, whatever comes next
            if isinstance(turn, Turn):
                return turn
            if isinstance(turn, DockyardError):  # 429 or another user's session (404), after the commit
                raise turn
            if turn is _RACE:
                continue  # another replica created the session at the same moment: read it again
            left = deadline - time.monotonic()
            if left <= 0:
                raise ConflictError(
                    f"session {sid!r} is busy: a turn is already running on it; send the next message when "
                    "that one has been answered",
                    {"sessionId": sid},
                )
            await asyncio.sleep(min(delay, left))  # polls the session row: another replica may hold it
            delay = min(delay * 2, 0.25)

    async def _try_start(
        self,
        namespace: str,
        environment: str,
        app: str,
        sid: str,
        user_id: str | None,
        version: str,
        key_id: str,
        limits: RateLimits | None,
        new: bool,
    ) -> Turn | DockyardError | object | None:
        """The turn; None when the session is busy; _RACE when it was created concurrently; the error to
        raise (429 over a rate limit, 404 another user's session) once the transaction has committed (the
        request stays counted against the rate limits, as when it was counted in a transaction of its own).

        One transaction: the session row (locked on PostgreSQL; not read for an id made just now), then the
        rate-limit counters (the refusal takes precedence over 404 and 409), then the session is taken.
        Locks are taken in that order everywhere (session row, then counters), so turns never deadlock."""
        now = utcnow()
        token = random_hex()
        held_until = now + self.turn_lease

        def tx(conn: Connection) -> Turn | DockyardError | object | None:
            row = (
                None
                if new
                else conn.execute(self._sql.session, {"b_ns": namespace, "b_env": environment, "b_sid": sid}).first()
            )
            answer: DockyardError | None = None
            busy = False
            if row is not None:
                if row.user_id != user_id:
                    answer = NotFoundError(
                        f"session {sid!r} belongs to another user: start a new session (or send none)",
                        {"sessionId": sid},
                    )
                elif row.turn_token is not None and self._held(conn, row, now):
                    busy = True
            if limits is not None:
                refused = count_request(conn, self._sql, namespace, environment, key_id, limits, now)
                if refused is not None:
                    return refused
            if answer is not None:
                return answer
            if busy:
                return None
            if row is None:
                created = self._sql.write(
                    conn,
                    self._sql.create_session,
                    {
                        "namespace": namespace,
                        "environment": environment,
                        "session_id": sid,
                        "app": app,
                        "user_id": user_id,
                        "key_id": key_id,
                        "version": version,
                        "created_at": now,
                        "last_active_at": now,
                        "message_count": 0,
                        "turn_token": token,
                        "turn_holder": self.instance_id,
                        "turn_expires_at": held_until,
                    },
                )
                pk = created.scalar()
                if pk is None:
                    return _RACE
                return Turn(sid, version, [], True, namespace, environment, app, user_id, key_id, token, int(pk))
            self._sql.write(
                conn,
                self._sql.take,
                {"b_pk": row.pk, "b_token": token, "b_holder": self.instance_id, "b_until": held_until},
            )
            history = self._history(conn, int(row.pk))
            return Turn(
                sid, row.version, history, False, namespace, environment, app, user_id, key_id, token, int(row.pk)
            )

        return await self.run(tx)

    def _held(self, conn: Connection, row: Any, now: datetime) -> bool:
        """Whether a running turn still holds the session (its lease runs and its replica lives)."""
        if row.turn_expires_at is None or row.turn_expires_at <= now:
            return False
        if row.turn_holder == self.instance_id:
            return True
        holder = conn.execute(self._sql.holder, {"b_id": row.turn_holder}).first()
        return holder is not None and not holder.stopped and holder.heartbeat_at > now - self.stale_after

    def _history(self, conn: Connection, session_pk: int) -> list[StoredMessage]:
        if self.history_messages <= 0:
            return []
        rows = conn.execute(self._sql.history, {"b_pk": session_pk, "b_limit": self.history_messages}).all()
        kept: list[StoredMessage] = []
        size = 0
        for r in rows:  # newest first: keep what fits the character budget
            size += len(r.content)
            if size > self.history_max_chars:
                break
            kept.append(StoredMessage(r.role, r.content, r.id, r.agent, tuple(r.tools_used or ()), r.created_at))
        kept.reverse()
        return kept

    async def finish_turn(
        self,
        turn: Turn,
        *,
        user_message: str,
        reply: str,
        agent: str,
        tools_used: Sequence[str],
        tokens_in: int,
        tokens_out: int,
        usage: bool = False,
        interventions: Sequence[Intervention] = (),
    ) -> str:
        """Store the user message and the reply together and release the session; the reply's id. With
        ``usage`` the request and its tokens are counted (:func:`~dockyard_api.store.limits.count_usage`) in
        the same transaction: a stored turn is always counted, a counted one always stored. The turn's
        ``interventions`` (guardrails, PII) are kept in that transaction too, with the reply's id."""
        self._check_ready()
        now = utcnow()
        reply_id = f"msg_{random_hex()}"
        latency_ms = max(0, round((time.monotonic() - turn.started) * 1000))  # kept with the reply (analytics)

        def tx(conn: Connection) -> None:
            released = self._sql.write(
                conn, self._sql.finish, {"b_pk": turn.session_pk, "b_token": turn.token, "b_now": now}
            )
            count = released.scalar()
            if count is None:
                raise ConflictError(
                    f"session {turn.session_id!r}: this turn lost the session (it ran past its lease and another "
                    "turn took it); nothing of it was stored",
                    {"sessionId": turn.session_id},
                )
            common = {"session_pk": turn.session_pk, "created_at": now}
            self._sql.write(
                conn,
                self._sql.add_messages,
                [
                    {
                        **common,
                        "id": f"msg_{random_hex()}",
                        "seq": count - 1,
                        "role": "user",
                        "content": user_message,
                        "agent": None,
                        "tools_used": None,
                        "tokens_in": 0,
                        "tokens_out": 0,
                        "latency_ms": None,
                    },
                    {
                        **common,
                        "id": reply_id,
                        "seq": count,
                        "role": "assistant",
                        "content": reply,
                        "agent": agent,
                        "tools_used": list(tools_used),
                        "tokens_in": tokens_in,
                        "tokens_out": tokens_out,
                        "latency_ms": latency_ms,
                    },
                ],
            )
            if usage:
                count_usage(
                    conn, self._sql, turn.namespace, turn.environment, turn.key_id, now,
                    requests=1, tokens_in=max(0, tokens_in), tokens_out=max(0, tokens_out),
                )  # fmt: skip
            stored_interventions.add(conn, turn, interventions, message_id=reply_id, at=now)

        await self.run(tx)
        return reply_id

    async def abort_turn(
        self,
        turn: Turn,
        *,
        error: str,
        usage: tuple[int, int] | None = None,
        interventions: Sequence[Intervention] = (),
    ) -> None:
        """Release the session; no message of the turn is stored (a session created by it stays, empty). When
        the database is away, the release is retried in the background once it is back. With ``usage``
        (tokens in, tokens out) the failed request is counted (an error, its tokens) in the same transaction,
        and so are the ``interventions`` that acted before it failed (without a message id)."""
        self._check_ready()
        now = utcnow()

        def tx(conn: Connection) -> None:
            self._sql.write(conn, self._sql.release, {"b_pk": turn.session_pk, "b_token": turn.token})
            if usage is not None:
                count_usage(
                    conn, self._sql, turn.namespace, turn.environment, turn.key_id, now,
                    requests=1, errors=1, tokens_in=max(0, usage[0]), tokens_out=max(0, usage[1]),
                )  # fmt: skip
            stored_interventions.add(conn, turn, interventions, message_id=None, at=now)

        try:
            await self.run(tx)
        except DatabaseUnavailableError:
            # this process is alive, so its turn would hold the session until the lease ends: release it
            # as soon as the database is back
            self._unreleased[turn.session_pk] = turn.token
            raise
        log.debug("turn on session %s aborted: %s", turn.session_id, error)

    # --- usage and rate limits -------------------------------------------------------------------

    async def usage(self, *, namespace: str, environment: str, since: date, until: date) -> UsageReport:
        """Usage of an environment (alive or deleted) per day and per key over [since, until]."""
        self._check_ready()
        query = select(usage_daily).where(
            usage_daily.c.namespace == namespace,
            usage_daily.c.environment == environment,
            usage_daily.c.day >= since,
            usage_daily.c.day <= until,
        )
        rows = await self.run(lambda conn: conn.execute(query).all())
        report = UsageReport(namespace, environment, since, until, Counters(), {}, {})
        for r in rows:
            c = Counters(r.requests, r.errors, r.rate_limited, r.tokens_in, r.tokens_out)
            report.totals.add(c)
            report.days.setdefault(r.day, Counters()).add(c)
            report.keys.setdefault(r.key_id, Counters()).add(c)
        return report

    async def list_interventions(
        self, namespace: str, environment: str, *, limit: int = 50
    ) -> list[StoredIntervention]:
        """The environment's newest interventions (alive or deleted), newest first: ``limit`` of them, 1 to
        :data:`~dockyard_api.store.interventions.LIST_LIMIT`."""
        self._check_ready()
        return await self.run(
            functools.partial(stored_interventions.newest, namespace=namespace, environment=environment, limit=limit)
        )

    async def environments_used_since(self, when: datetime) -> list[tuple[str, str]]:
        """(namespace, environment) whose usage changed after ``when`` (for the status summary)."""
        self._check_ready()
        query = (
            select(usage_daily.c.namespace, usage_daily.c.environment).where(usage_daily.c.updated_at > when).distinct()
        )
        rows = await self.run(lambda conn: conn.execute(query).all())
        return [(r.namespace, r.environment) for r in rows]


__all__ = ["ConversationStore"]
