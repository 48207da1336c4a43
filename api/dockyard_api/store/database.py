"""The conversation store's database: the connections (SQLite in one writer thread, or an async
PostgreSQL pool), the life cycle of this facade process in it (migrations at start, a heartbeat row in
``dockyard_instances``, retries while the database is away, the periodic sweep) and ``run()``, which runs
one transaction and turns every database failure into :class:`DatabaseUnavailableError` (503).
:class:`~dockyard_api.store.store.ConversationStore` builds on it."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import IO, Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, delete, event, insert, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from dockyard_api import metrics
from dockyard_api.store import migrate
from dockyard_api.store.schema import instances, rate_windows
from dockyard_api.store.statements import Statements
from dockyard_core.clock import utcnow
from dockyard_core.errors import DatabaseUnavailableError, DockyardError

log = logging.getLogger("dockyard.store")
T = TypeVar("T")


def default_url(model_store: Path) -> str:
    """The embedded default: a SQLite file on the model store volume (one facade replica)."""
    return f"sqlite:///{model_store / 'conversations' / 'dockyard.db'}"


def _reason(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
    return f"{type(orig).__name__}: {text}"[:300]


class WriterThread:
    """One thread that runs the calls handed to it, one at a time, in order, each answered on the event loop that
    handed it (SQLite's writer). What ``loop.run_in_executor`` on a one-thread ``ThreadPoolExecutor`` did, with one
    future instead of two chained ones: a hop cost the event loop about 20 µs instead of 35 in a loop of 20,000, and
    a turn makes two (docs/benchmarks.md). As there, a call whose caller was cancelled before it began is not run,
    and a call after :meth:`shutdown` is refused (``RuntimeError``: nothing writes to the database once it is
    closed); the thread starts with the first call. It is a daemon: :meth:`Database.close` runs what was handed in
    and stops it; a process that exits without closing loses at most the transaction in progress, which SQLite
    rolls back."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._calls: queue.SimpleQueue[
            tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], Callable[..., Any], tuple[Any, ...]] | None
        ] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self._shut = False

    def submit(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        if self._shut:
            raise RuntimeError(f"{self.name}: cannot take calls after shutdown")
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[T] = loop.create_future()
        if self._thread is None:
            with self._start:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                    self._thread.start()
        self._calls.put((loop, answer, fn, args))
        return answer

    def shutdown(self) -> None:
        """Run the calls handed in so far, then stop the thread; later calls are refused."""
        self._shut = True
        if self._thread is not None:
            self._calls.put(None)
            self._thread.join()
            self._thread = None

    def _serve(self) -> None:
        while (call := self._calls.get()) is not None:
            loop, answer, fn, args = call
            if answer.cancelled():  # its caller went away before it began
                continue
            try:
                result = fn(*args)
            except BaseException as exc:  # handed to the caller, as an executor does
                _answer(loop, answer, None, exc)
            else:
                _answer(loop, answer, result, None)


def _answer(
    loop: asyncio.AbstractEventLoop, answer: asyncio.Future[Any], result: Any, exc: BaseException | None
) -> None:
    with contextlib.suppress(RuntimeError):  # the loop was closed: nobody waits any more
        loop.call_soon_threadsafe(_settle, answer, result, exc)


def _settle(answer: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if answer.done():  # cancelled meanwhile
        return
    if exc is not None:
        answer.set_exception(exc)
    else:
        answer.set_result(result)


class Database:
    """The database of :class:`~dockyard_api.store.store.ConversationStore`: see the module docstring."""

    def __init__(
        self,
        url: str,
        *,
        heartbeat_seconds: float = 2.0,
        connect_timeout_seconds: float = 5.0,
        statement_timeout_seconds: float = 10.0,
        pool_size: int = 32,
    ) -> None:
        """``pool_size``: PostgreSQL connections kept open (as many as turns run at once on this replica: a
        connection beyond them is opened for a transaction and closed after it, a new server process each
        time); a quarter more are opened for a burst."""
        self.url = make_url(url)
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
        self._executor: WriterThread | None = None
        self._reader: Engine | None = None
        """SQLite: the engine of :meth:`read_only` (made on first use)."""
        self.statement_timeout = statement_timeout_seconds
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
            self._executor = WriterThread("dockyard-sqlite")
        else:
            self.engine = create_async_engine(
                self.url,
                pool_pre_ping=True,  # a connection cut by a database restart is replaced, not used
                pool_size=pool_size,
                max_overflow=max(2, pool_size // 4),
                pool_timeout=connect_timeout_seconds,
                connect_args={"timeout": connect_timeout_seconds, "command_timeout": statement_timeout_seconds},
            )
        self._sql = Statements(self.dialect)
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
            metrics.store_up(False)
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
        now = utcnow()

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
        metrics.store_up(True)
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
                metrics.store_up(True)
                await self._after_heartbeat()
                if time.monotonic() - last_sweep > 60:
                    await self.run(_sweep)
                    last_sweep = time.monotonic()
            except Exception as exc:  # keep the heartbeat alive whatever happened
                metrics.store_up(False)
                if not isinstance(exc, DockyardError):
                    self._last_error = _reason(exc)
                log.warning("conversation database: %s", self._last_error)

    async def _after_heartbeat(self) -> None:
        """Work of the maintenance loop after each heartbeat (the store retries its pending releases)."""

    def _heartbeat(self, conn: Connection) -> None:
        conn.execute(update(instances).where(instances.c.id == self.instance_id).values(heartbeat_at=utcnow()))

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
            self._executor.shutdown()
        if self._owner is not None:
            self._owner.close()  # releases the lock
            self._owner = None

    async def run(self, fn: Callable[[Connection], T]) -> T:
        """``fn(connection)`` in one transaction; database failures become DatabaseUnavailableError (503)."""
        try:
            if self._executor is not None:
                return await self._executor.submit(self._sqlite_tx, fn)
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

    async def read_only(self, fn: Callable[[Connection], T]) -> T:
        """``fn(connection)`` for a long read (analytics). PostgreSQL: as :meth:`run`. SQLite: on a read-only
        connection of another engine (no ``BEGIN IMMEDIATE``: it takes no write lock; WAL: a reader blocks no
        writer), in a thread of its own, so that it never holds up the writer thread's turns. Database failures
        become DatabaseUnavailableError (503)."""
        if self.dialect != "sqlite":
            return await self.run(fn)
        self._check_ready()

        def read() -> T:
            if self._reader is None:
                self._reader = create_engine(
                    self.url.set(drivername="sqlite+pysqlite"),
                    connect_args={"timeout": self.statement_timeout, "check_same_thread": False},
                )
                event.listen(self._reader, "connect", _read_only)
            with self._reader.connect() as conn:
                return fn(conn)

        try:
            return await asyncio.to_thread(read)
        except (sa_exc.SQLAlchemyError, OSError) as exc:
            raise DatabaseUnavailableError(f"the conversation database is unavailable: {_reason(exc)}") from exc

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
        if self._reader is not None:
            self._reader.dispose()
        if self.engine is not None:
            await self.engine.dispose()
        if self.sync_engine is not None and self._executor is not None:
            await self._executor.submit(self._sqlite_dispose)

    def _check_ready(self) -> None:
        if not self._ready:
            raise DatabaseUnavailableError(f"the conversation database is not ready: {self._last_error}")


def _sweep(conn: Connection) -> None:
    """Forget old rate-limit windows and long-gone instances (never usage nor messages)."""
    minute = int(time.time() // 60)
    conn.execute(delete(rate_windows).where(rate_windows.c.minute < minute - 2))
    conn.execute(delete(instances).where(instances.c.heartbeat_at < utcnow() - timedelta(days=1)))


def _read_only(dbapi_connection: Any, _: Any) -> None:
    """A connection of :meth:`Database.read_only`: it may not write, and waits for a busy database."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA query_only=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


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
