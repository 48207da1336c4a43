"""The conversation store: sessions, messages, usage statistics and rate limits in a relational
database (SQLAlchemy 2 async; SQLite by default, PostgreSQL for several facade replicas).

- One turn at a time per session. A turn takes the session with a lease (``turn_token``,
  ``turn_holder``, ``turn_expires_at`` on the session row), in a transaction (row lock on
  PostgreSQL), so the rule holds across replicas. A turn that finds the session busy waits up to
  ``session_busy_wait_seconds`` and then gets 409. A turn's lease ends when it finishes or aborts, when
  ``turn_lease_seconds`` pass, or when its replica stops or goes silent (each replica heartbeats in
  ``dockyard_instances``): a killed facade never leaves a session stuck.
- A turn is stored whole or not at all: ``finish_turn`` writes the user message and the reply in one
  transaction, ``abort_turn`` writes nothing.
- A turn of the execute endpoint is TWO transactions: ``start_turn(limits=...)`` counts the rate limits
  and takes the session; ``finish_turn(usage=True)`` (or ``abort_turn(usage=...)``) stores the turn (or
  releases the session) and counts the usage. Locks: the session row first, then the counters.
- Usage statistics per environment, API key and UTC day are upserted counters; they are never deleted
  with the environment (SPEC: "usage statistics are preserved").
- Rate limits (Environment ``spec.rateLimits``) are counted in the database, so they hold across
  replicas sharing PostgreSQL: requests per minute per key in fixed one-minute windows, tokens per day
  per environment from the usage counters.

Every failure of the database is a :class:`DatabaseUnavailableError` (503) naming the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import IO, Any, TypeVar

from sqlalchemy import Connection, Engine, bindparam, create_engine, delete, event, func, insert, select, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from dockyard_api.store import migrate
from dockyard_api.store.schema import instances, messages, rate_windows, sessions, usage_daily
from dockyard_core.errors import (
    ConflictError,
    DatabaseUnavailableError,
    DockyardError,
    InvalidError,
    NotFoundError,
    RateLimitedError,
)

log = logging.getLogger("dockyard.store")
T = TypeVar("T")

_RACE = object()

SESSION_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
"""Session ids a client may choose: 1 to 128 letters, digits and ``. _ : @ -``."""


@dataclass(frozen=True)
class StoredMessage:
    role: str
    """user or assistant."""
    content: str
    id: str = ""
    agent: str | None = None
    tools_used: tuple[str, ...] = ()
    created_at: datetime | None = None


@dataclass(frozen=True)
class Turn:
    """A turn in progress on a session: the session is held until finish_turn or abort_turn."""

    session_id: str
    version: str
    """The app version the session is pinned to (the one ACTIVE when it started)."""
    history: list[StoredMessage]
    """Earlier messages, oldest first, bounded (history_messages, history_max_chars)."""
    created: bool
    """True when this turn created the session."""
    namespace: str
    environment: str
    app: str
    user_id: str | None
    key_id: str
    token: str = field(repr=False)
    session_pk: int = field(repr=False)


@dataclass(frozen=True)
class RateLimits:
    """Environment ``spec.rateLimits``: None means no limit."""

    requests_per_minute: int | None = None
    tokens_per_day: int | None = None

    @classmethod
    def of(cls, limits: Any) -> RateLimits:
        """From the spec's dict (camelCase), a pydantic model with the same attributes, or None."""
        if limits is None:
            return cls()
        if isinstance(limits, RateLimits):
            return limits
        if isinstance(limits, Mapping):
            return cls(limits.get("requestsPerMinute"), limits.get("tokensPerDay"))
        return cls(getattr(limits, "requests_per_minute", None), getattr(limits, "tokens_per_day", None))


@dataclass
class Counters:
    requests: int = 0
    errors: int = 0
    rate_limited: int = 0
    tokens_in: int = 0
    tokens_out: int = 0

    def add(self, other: Counters) -> None:
        self.requests += other.requests
        self.errors += other.errors
        self.rate_limited += other.rate_limited
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out

    def view(self) -> dict[str, int]:
        return {
            "requests": self.requests,
            "errors": self.errors,
            "rateLimited": self.rate_limited,
            "tokensIn": self.tokens_in,
            "tokensOut": self.tokens_out,
        }


@dataclass
class UsageReport:
    """Usage of one environment over [since, until] (UTC days, both included)."""

    namespace: str
    environment: str
    since: date
    until: date
    totals: Counters
    days: dict[date, Counters]
    keys: dict[str, Counters]

    def view(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "environment": self.environment,
            "from": self.since.isoformat(),
            "to": self.until.isoformat(),
            "totals": self.totals.view(),
            "days": [{"day": d.isoformat(), **c.view()} for d, c in sorted(self.days.items())],
            "keys": [{"keyId": k, **c.view()} for k, c in sorted(self.keys.items())],
        }


def default_url(model_store: Path) -> str:
    """The embedded default: a SQLite file on the model store volume (one facade replica)."""
    return f"sqlite:///{model_store / 'conversations' / 'dockyard.db'}"


def _now() -> datetime:
    return datetime.now(UTC)


def _reason(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
    return f"{type(orig).__name__}: {text}"[:300]


class ConversationStore:
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
    ) -> None:
        self.url = make_url(url)
        self.history_messages = history_messages
        self.history_max_chars = history_max_chars
        self.busy_wait_seconds = busy_wait_seconds
        self.turn_lease = timedelta(seconds=turn_lease_seconds)
        self.heartbeat_seconds = heartbeat_seconds
        self.stale_after = timedelta(seconds=3 * heartbeat_seconds + 1)
        self.instance_id = str(uuid.uuid4())
        self.dialect = self.url.get_backend_name()
        if self.dialect not in ("sqlite", "postgresql"):
            raise ValueError(f"unsupported database {self.dialect!r}: use sqlite or postgresql+asyncpg")
        self.engine: AsyncEngine | None = None
        self.sync_engine: Engine | None = None
        self._sqlite_conn: Connection | None = None
        """The SQLite writer thread's connection (used in that thread only)."""
        self._executor: ThreadPoolExecutor | None = None
        if self.dialect == "sqlite":
            # SQLite: a plain (sync) engine in ONE thread; a whole transaction is one hop to that thread, and
            # the one thread also serialises this process's writers (SQLite has one writer anyway)
            database = self.url.database
            if database and database != ":memory:":
                Path(database).parent.mkdir(parents=True, exist_ok=True)
            self.sync_engine = create_engine(
                self.url.set(drivername="sqlite+pysqlite"),
                connect_args={"timeout": statement_timeout_seconds, "check_same_thread": False},
            )
            _sqlite_setup(self.sync_engine)
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dockyard-sqlite")
        else:
            self.engine = create_async_engine(
                self.url,
                pool_pre_ping=True,  # a connection cut by a database restart is replaced, not used
                pool_size=10,
                max_overflow=20,
                pool_timeout=connect_timeout_seconds,
                connect_args={"timeout": connect_timeout_seconds, "command_timeout": statement_timeout_seconds},
            )
        self._sql = _Statements(self.dialect)
        self._unreleased: dict[int, str] = {}
        """Turns whose release failed (database away): session pk -> turn token, retried by _maintain."""
        self._closed = False
        self._ready = False
        self._last_error = "not started"
        self._task: asyncio.Task[None] | None = None
        self._owner: IO[bytes] | None = None
        database = self.url.database if self.dialect == "sqlite" else None
        self._owner_path = Path(f"{database}.owner") if database and database != ":memory:" else None

    # --- life cycle ------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self._ready

    async def start(self) -> None:
        """Migrate and register this process; when the database is away, keep trying in the background
        (calls answer 503 until then): the facade starts and serves its other APIs regardless."""
        try:
            await self._prepare()
        except Exception as exc:  # the database away, or anything else: the loop below retries
            if not isinstance(exc, DockyardError):  # run() recorded the reason of a DockyardError
                self._last_error = _reason(exc)
            log.warning("conversation database not ready: %s (retrying)", self._last_error)
        self._task = asyncio.create_task(self._maintain())

    def _own_sqlite_file(self) -> None:
        """One facade process per SQLite file: an exclusive lock on ``<db>.owner`` (released by the kernel
        when the process dies, so a restarted facade takes over at once). A second process does not get
        it: its store stays not ready (503) and keeps trying, e.g. until the old pod of a rollout is gone."""
        if self._owner_path is None or self._owner is not None:
            return
        owner = open(self._owner_path, "a+b")  # noqa: SIM115 - held for the process's lifetime
        try:
            fcntl.flock(owner.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner.seek(0)
            holder = owner.read(200).decode(errors="replace").strip() or "another process"
            owner.close()
            raise OSError(
                f"the SQLite file is used by another facade process ({holder}); several facade replicas need "
                "PostgreSQL (DOCKYARD_API_DATABASE_URL)"
            ) from None
        owner.truncate(0)
        owner.write(f"{socket.gethostname()} pid {os.getpid()}".encode())
        owner.flush()
        self._owner = owner

    async def _prepare(self) -> None:
        self._own_sqlite_file()
        await self.run(migrate.upgrade_connection)
        now = _now()

        def register(conn: Connection) -> None:
            conn.execute(
                insert(instances).values(
                    id=self.instance_id, started_at=now, heartbeat_at=now, stopped=False, host=socket.gethostname()
                )
            )
            if self.dialect == "sqlite":
                # this process owns the SQLite file (above): any other instance is a dead predecessor
                conn.execute(update(instances).where(instances.c.id != self.instance_id).values(stopped=True))

        await self.run(register)
        self._ready = True
        log.info("conversation database ready (%s)", self.url.render_as_string(hide_password=True))

    async def _maintain(self) -> None:
        last_sweep = 0.0
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
            try:
                if not self._ready:
                    await self._prepare()
                    continue
                await self.run(self._heartbeat)
                if self._unreleased:
                    pending = dict(self._unreleased)
                    await self.run(functools.partial(self._release_all, pending=pending))
                    for pk, token in pending.items():  # forgotten once committed
                        if self._unreleased.get(pk) == token:
                            del self._unreleased[pk]
                if time.monotonic() - last_sweep > 60:
                    await self.run(_sweep)
                    last_sweep = time.monotonic()
            except Exception as exc:  # keep the heartbeat alive whatever happened
                if not isinstance(exc, DockyardError):
                    self._last_error = _reason(exc)
                log.warning("conversation database: %s", self._last_error)

    def _release_all(self, conn: Connection, *, pending: dict[int, str]) -> None:
        for pk, token in pending.items():
            conn.execute(self._sql.release, {"b_pk": pk, "b_token": token})

    def _heartbeat(self, conn: Connection) -> None:
        conn.execute(update(instances).where(instances.c.id == self.instance_id).values(heartbeat_at=_now()))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._ready:

            def stopped(conn: Connection) -> None:
                conn.execute(update(instances).where(instances.c.id == self.instance_id).values(stopped=True))

            with contextlib.suppress(DockyardError, OSError, TimeoutError):
                await self.run(stopped)
        await self.dispose()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        if self._owner is not None:
            self._owner.close()  # releases the lock
            self._owner = None

    async def run(self, fn: Callable[[Connection], T]) -> T:
        """``fn(connection)`` in one transaction; database failures become DatabaseUnavailableError (503)."""
        try:
            if self._executor is not None:
                return await asyncio.get_running_loop().run_in_executor(self._executor, self._sqlite_tx, fn)
            assert self.engine is not None
            async with self.engine.begin() as conn:
                return await conn.run_sync(fn)
        except DockyardError:
            raise
        except sa_exc.IntegrityError:
            raise
        except (sa_exc.SQLAlchemyError, OSError, TimeoutError) as exc:
            self._last_error = _reason(exc)
            raise DatabaseUnavailableError(f"the conversation database is unavailable: {self._last_error}") from exc

    def _sqlite_tx(self, fn: Callable[[Connection], T]) -> T:
        """In the writer thread: ``fn`` in one transaction on the thread's own connection, kept open between
        transactions (a pool checkout and its reset cost more than a short transaction); a connection that
        failed for any reason other than the transaction's own (a DockyardError, a constraint) is dropped and
        the next transaction opens a new one."""
        assert self.sync_engine is not None
        conn = self._sqlite_conn
        if conn is None or conn.closed or conn.invalidated:
            conn = self._sqlite_conn = self.sync_engine.connect()
        try:
            with conn.begin():
                return fn(conn)
        except (DockyardError, sa_exc.IntegrityError):
            raise
        except BaseException:
            self._sqlite_conn = None
            with contextlib.suppress(Exception):
                conn.close()
            raise

    def _sqlite_dispose(self) -> None:
        assert self.sync_engine is not None
        if self._sqlite_conn is not None:
            with contextlib.suppress(Exception):
                self._sqlite_conn.close()
            self._sqlite_conn = None
        self.sync_engine.dispose()

    async def dispose(self) -> None:
        """Close the connections (tests: what a killed process leaves behind)."""
        if self.engine is not None:
            await self.engine.dispose()
        if self.sync_engine is not None and self._executor is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._sqlite_dispose)

    def _check_ready(self) -> None:
        if not self._ready:
            raise DatabaseUnavailableError(f"the conversation database is not ready: {self._last_error}")

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
    ) -> Turn:
        """Take the session for one turn (creating it, pinned to ``version``, when new).

        With ``limits`` (Environment ``spec.rateLimits``) the request is also counted against the rate limits
        in the same transaction, exactly as :meth:`check_rate_limit` would before it: over a limit raises
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
        sid = session_id or f"ses_{uuid.uuid4().hex}"
        new = session_id is None  # an id made here just now: no row can hold it, nothing to read first
        deadline = time.monotonic() + self.busy_wait_seconds
        delay = 0.02
        while True:
            turn = await self._try_start(namespace, environment, app, sid, user_id, version, key_id, rl, new)
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
        now = _now()
        token = str(uuid.uuid4())
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
                refused = self._limit(conn, namespace, environment, key_id, limits, now)
                if refused is not None:
                    return refused
            if answer is not None:
                return answer
            if busy:
                return None
            if row is None:
                created = conn.execute(
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
            conn.execute(
                self._sql.take, {"b_pk": row.pk, "b_token": token, "b_holder": self.instance_id, "b_until": held_until}
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
    ) -> str:
        """Store the user message and the reply together and release the session; the reply's id. With
        ``usage`` the request and its tokens are counted (as :meth:`record_usage`) in the same transaction:
        a stored turn is always counted, a counted one always stored."""
        self._check_ready()
        now = _now()
        reply_id = f"msg_{uuid.uuid4().hex}"

        def tx(conn: Connection) -> None:
            released = conn.execute(self._sql.finish, {"b_pk": turn.session_pk, "b_token": turn.token, "b_now": now})
            count = released.scalar()
            if count is None:
                raise ConflictError(
                    f"session {turn.session_id!r}: this turn lost the session (it ran past its lease and another "
                    "turn took it); nothing of it was stored",
                    {"sessionId": turn.session_id},
                )
            common = {"session_pk": turn.session_pk, "created_at": now}
            conn.execute(
                self._sql.add_messages,
                [
                    {
                        **common,
                        "id": f"msg_{uuid.uuid4().hex}",
                        "seq": count - 1,
                        "role": "user",
                        "content": user_message,
                        "agent": None,
                        "tools_used": None,
                        "tokens_in": 0,
                        "tokens_out": 0,
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
                    },
                ],
            )
            if usage:
                self._count(
                    conn, turn.namespace, turn.environment, turn.key_id, now,
                    requests=1, tokens_in=max(0, tokens_in), tokens_out=max(0, tokens_out),
                )  # fmt: skip

        await self.run(tx)
        return reply_id

    async def abort_turn(self, turn: Turn, *, error: str, usage: tuple[int, int] | None = None) -> None:
        """Release the session; nothing of the turn is stored (a session created by it stays, empty). When
        the database is away, the release is retried in the background once it is back. With ``usage``
        (tokens in, tokens out) the failed request is counted (an error, its tokens) in the same transaction."""
        self._check_ready()
        now = _now()

        def tx(conn: Connection) -> None:
            conn.execute(self._sql.release, {"b_pk": turn.session_pk, "b_token": turn.token})
            if usage is not None:
                self._count(
                    conn, turn.namespace, turn.environment, turn.key_id, now,
                    requests=1, errors=1, tokens_in=max(0, usage[0]), tokens_out=max(0, usage[1]),
                )  # fmt: skip

        try:
            await self.run(tx)
        except DatabaseUnavailableError:
            # this process is alive, so its turn would hold the session until the lease ends: release it
            # as soon as the database is back
            self._unreleased[turn.session_pk] = turn.token
            raise
        log.debug("turn on session %s aborted: %s", turn.session_id, error)

    async def stored_messages(self, *, namespace: str, environment: str, session_id: str) -> list[StoredMessage]:
        """Every stored message of a session, oldest first (tests, tools)."""
        self._check_ready()
        query = (
            select(messages)
            .join(sessions, messages.c.session_pk == sessions.c.pk)
            .where(
                sessions.c.namespace == namespace,
                sessions.c.environment == environment,
                sessions.c.session_id == session_id,
            )
            .order_by(messages.c.seq)
        )
        rows = await self.run(lambda conn: conn.execute(query).all())
        return [StoredMessage(r.role, r.content, r.id, r.agent, tuple(r.tools_used or ()), r.created_at) for r in rows]

    # --- usage and rate limits -------------------------------------------------------------------

    async def check_rate_limit(self, *, namespace: str, environment: str, key_id: str, limits: Any) -> None:
        """Count this request against the environment's limits; 429 (RateLimitedError) when over one."""
        rl = RateLimits.of(limits)
        if not rl.requests_per_minute and not rl.tokens_per_day:
            return
        self._check_ready()
        now = _now()
        refused = await self.run(lambda conn: self._limit(conn, namespace, environment, key_id, rl, now))
        if refused is not None:
            raise refused

    def _limit(
        self, conn: Connection, namespace: str, environment: str, key_id: str, rl: RateLimits, now: datetime
    ) -> RateLimitedError | None:
        """Count one request against ``rl`` in the caller's transaction; the refusal when over a limit (then
        counted as rate limited)."""
        refused: RateLimitedError | None = None
        if rl.tokens_per_day:
            used = conn.execute(
                self._sql.tokens_today, {"b_ns": namespace, "b_env": environment, "b_day": now.date()}
            ).scalar_one()
            if int(used) >= rl.tokens_per_day:
                midnight = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), UTC)
                refused = RateLimitedError(
                    f"environment {environment!r} has used {int(used)} tokens today, its limit is "
                    f"{rl.tokens_per_day} (spec.rateLimits.tokensPerDay); it resets at 00:00 UTC",
                    {"limit": "tokensPerDay", "value": rl.tokens_per_day, "used": int(used)},
                    retry_after=int((midnight - now).total_seconds()) + 1,
                )
        if refused is None and rl.requests_per_minute:
            epoch = now.timestamp()
            row = {"namespace": namespace, "environment": environment, "key_id": key_id}
            counted = conn.execute(
                self._sql.hit, {**row, "minute": int(epoch // 60), "hits": 1, "b_limit": rl.requests_per_minute}
            ).scalar()
            if counted is None:
                refused = RateLimitedError(
                    f"API key {key_id!r} has made {rl.requests_per_minute} requests this minute, the limit of "
                    f"environment {environment!r} (spec.rateLimits.requestsPerMinute)",
                    {"limit": "requestsPerMinute", "value": rl.requests_per_minute, "keyId": key_id},
                    retry_after=60 - int(epoch % 60),
                )
        if refused is not None:
            self._count(conn, namespace, environment, key_id, now, rate_limited=1)
        return refused

    async def record_usage(
        self, *, namespace: str, environment: str, key_id: str, ok: bool, tokens_in: int, tokens_out: int
    ) -> None:
        """Count one request (and its tokens) for the environment and key, today (UTC)."""
        self._check_ready()
        now = _now()
        await self.run(
            lambda conn: self._count(
                conn,
                namespace,
                environment,
                key_id,
                now,
                requests=1,
                errors=0 if ok else 1,
                tokens_in=max(0, tokens_in),
                tokens_out=max(0, tokens_out),
            )
        )

    def _count(
        self, conn: Connection, namespace: str, environment: str, key_id: str, now: datetime, **counts: int
    ) -> None:
        row = {"namespace": namespace, "environment": environment, "key_id": key_id, "day": now.date()}
        conn.execute(self._sql.count, {**row, "updated_at": now, **{n: counts.get(n, 0) for n in USAGE_COUNTERS}})

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

    async def environments_used_since(self, when: datetime) -> list[tuple[str, str]]:
        """(namespace, environment) whose usage changed after ``when`` (for the status summary)."""
        self._check_ready()
        query = (
            select(usage_daily.c.namespace, usage_daily.c.environment).where(usage_daily.c.updated_at > when).distinct()
        )
        rows = await self.run(lambda conn: conn.execute(query).all())
        return [(r.namespace, r.environment) for r in rows]


class _Statements:
    """The hot path's statements, built once per dialect with bind parameters (building a statement costs
    more than running it on SQLite)."""

    def __init__(self, dialect: str) -> None:
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


USAGE_COUNTERS = ("requests", "errors", "rate_limited", "tokens_in", "tokens_out")


def _sweep(conn: Connection) -> None:
    """Forget old rate-limit windows and long-gone instances (never usage nor messages)."""
    minute = int(time.time() // 60)
    conn.execute(delete(rate_windows).where(rate_windows.c.minute < minute - 2))
    conn.execute(delete(instances).where(instances.c.heartbeat_at < _now() - timedelta(days=1)))


def _sqlite_setup(engine: Engine) -> None:
    """WAL (readers never block the writer), a busy timeout, foreign keys, and BEGIN IMMEDIATE so a
    transaction takes the write lock up front (no "database is locked" on upgrade from read to write)."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _: Any) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN itself (below)
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


__all__ = [
    "ConversationStore",
    "Counters",
    "RateLimits",
    "StoredMessage",
    "Turn",
    "UsageReport",
    "default_url",
]
