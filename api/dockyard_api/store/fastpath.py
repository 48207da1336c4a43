"""The turn's writes on SQLite, sent to the driver without SQLAlchemy's execution machinery (#31).

A turn of the execute endpoint writes four to six short statements in two transactions (take the session,
count the request; store the messages, count the usage). On SQLite, SQLAlchemy's per-statement work around
them (an execution context, the parameters' processing, a result object, its events) was most of the writer
thread's time: about 305 µs per turn, where the same statements through ``sqlite3`` alone take about 80.
Sent to the driver, the writer thread's time per turn fell by 60 to 80 µs and ``bench.store``'s CPU per turn
by 151 µs (docs/benchmarks.md, "The turn's writes without SQLAlchemy's execution machinery").

:class:`SqliteWrites` compiles each statement once per set of parameter names, with SQLAlchemy, for SQLite,
and keeps its SQL, the order of its parameters and SQLAlchemy's own bind processors of their types (so the
driver receives exactly the values SQLAlchemy would send: a UTC time as SQLite's text, JSON as text, ...).
Then a statement is one ``cursor.execute`` on the connection's own driver connection, inside the transaction
SQLAlchemy began there. The driver's errors are raised as SQLAlchemy raises them (``IntegrityError``,
``OperationalError``...), so the store treats them as before (503 when the database is away).

Not sent this way, but through SQLAlchemy as before: statements that need a Python-side default evaluated
(none of the turn's writes do: they give every such column), and every statement while anything listens to
the engine's statement events (``bench.turn_profile`` counts statements that way): those see every
statement. The reads that return rows (the session, its history) go through SQLAlchemy too: their rows are
read by name and their times converted back.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Executable, exc
from sqlalchemy.sql.compiler import SQLCompiler

Params = Mapping[str, Any] | Sequence[Mapping[str, Any]]


class Written:
    """What a write answers: the first column of its first returned row (``RETURNING``), if any."""

    __slots__ = ("_row",)

    def __init__(self, row: tuple[Any, ...] | None) -> None:
        self._row = row

    def scalar(self) -> Any:
        return None if self._row is None else self._row[0]


class _Compiled:
    __slots__ = ("defaults", "names", "processors", "returns", "sql")

    def __init__(self, compiled: SQLCompiler) -> None:
        dialect = compiled.dialect
        self.sql = str(compiled)
        self.names = tuple(compiled.positiontup or ())
        self.defaults = {  # the statement's own values (``message_count + 2``: its 2; ``turn_token=None``)
            name: bind.effective_value for bind, name in compiled.bind_names.items() if not bind.required
        }
        self.processors: tuple[Callable[[Any], Any] | None, ...] = tuple(
            compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect) for name in self.names
        )
        self.returns = bool(compiled.returning)

    def values(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        defaults = self.defaults
        return tuple(
            (value if process is None else process(value))  # None too: a JSON column sends None as 'null'
            for name, process in zip(self.names, self.processors, strict=True)
            for value in (params[name] if name in params else defaults[name],)
        )


def _listened(conn: Connection) -> bool:
    """Whether anything listens to the connection's (or its engine's) statements."""
    events = conn.dispatch
    return bool(
        events.before_execute or events.after_execute or events.before_cursor_execute or events.after_cursor_execute
    )


_SLOW = object()
"""A compiled statement that must go through SQLAlchemy (a Python-side default to evaluate)."""


class SqliteWrites:
    """``execute(conn, statement, params)``: :meth:`Connection.execute`, for the turn's writes on SQLite, without
    SQLAlchemy's execution machinery (see the module docstring)."""

    def __init__(self) -> None:
        self._compiled: dict[tuple[int, frozenset[str]], tuple[Executable, _Compiled | object]] = {}
        """(the statement's id, its parameters' names) -> (the statement, kept so that its id stays its own; what
        it compiled to)."""
        self.sent = 0
        """Statements sent straight to the driver (tests: the fast path is taken)."""

    def _compile(self, conn: Connection, statement: Executable, names: frozenset[str]) -> _Compiled | object:
        """The statement compiled for the connection's dialect (the engine's: its types' processors) with these
        parameters, as SQLAlchemy compiles it to execute it; kept (the statements are the store's, built once)."""
        key = (id(statement), names)
        found = self._compiled.get(key)
        if found is None or found[0] is not statement:
            compiled = statement.compile(dialect=conn.dialect, column_keys=sorted(names))  # type: ignore[attr-defined]
            assert isinstance(compiled, SQLCompiler)
            slow = not compiled.positional or bool(compiled.insert_prefetch or compiled.update_prefetch)
            found = self._compiled[key] = (statement, _SLOW if slow else _Compiled(compiled))
        return found[1]

    def execute(self, conn: Connection, statement: Executable, params: Params) -> Any:
        many = not isinstance(params, Mapping)
        rows: Sequence[Mapping[str, Any]] = params if many else (params,)  # type: ignore[assignment]
        if not rows or _listened(conn):
            return conn.execute(statement, params)
        compiled = self._compile(conn, statement, frozenset(rows[0]))
        if not isinstance(compiled, _Compiled):
            return conn.execute(statement, params)
        driver = conn.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        values: Any = None
        try:
            if many:
                values = [compiled.values(row) for row in rows]
                driver.executemany(compiled.sql, values)
                self.sent += 1
                return Written(None)
            values = compiled.values(rows[0])
            cursor = driver.execute(compiled.sql, values)
            row = cursor.fetchone() if compiled.returns else None
            cursor.close()
            self.sent += 1
            return Written(row)
        except sqlite3.Error as error:  # as SQLAlchemy raises it: IntegrityError, OperationalError, ...
            raise exc.DBAPIError.instance(compiled.sql, values, error, sqlite3.Error) from error
