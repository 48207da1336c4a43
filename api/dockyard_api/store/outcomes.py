"""Turn outcomes per app version: what the SLO watcher reads, and usage per version (docs/promotion.md).

The runtime hands each finished turn (its version, duration, ``ok`` or the error code, its tokens) to an
:class:`OutcomeRecorder`, which keeps it in memory and writes a batch every ``flush_seconds`` in one
transaction: a row per turn in ``dockyard_turn_outcomes`` and the day's counters per version in
``dockyard_usage_versions``. Nothing of this is on the request path (a turn appends to a list); a replica that
dies loses at most its last batch of figures, never a turn. A sampled turn's live evaluation (passed or
not) is handed over once scored, after the answer. Outcome rows older than ``RETENTION`` are deleted by the
flushes, at most once a minute per replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from sqlalchemy import Connection, delete, insert, select
from sqlalchemy.dialects import postgresql, sqlite

from dockyard_api.store.database import Database
from dockyard_api.store.schema import turn_outcomes, usage_versions
from dockyard_core.clock import utcnow
from dockyard_core.errors import DockyardError

log = logging.getLogger("dockyard.store.outcomes")

RETENTION = timedelta(days=1)
PRUNE_SECONDS = 60.0
WINDOW_ROWS = 50_000
"""At most this many of an environment's newest outcome rows are read for one window."""


@dataclass(frozen=True)
class Outcome:
    """One finished turn."""

    namespace: str
    environment: str
    version: str
    at: datetime
    seconds: float
    outcome: str
    """``ok`` or the error code answered."""
    tokens_in: int = 0
    tokens_out: int = 0
    passed: bool | None = None
    """The live evaluation's verdict of a sampled turn (None: not scored)."""
    counted: bool = True
    """False for a scored turn handed over again: its row is written, its usage was counted already."""


@dataclass
class VersionUsage:
    requests: int = 0
    errors: int = 0
    tokens_in: int = 0
    tokens_out: int = 0


@dataclass
class Figures:
    """A version's turns in a window: durations, error count, live evaluation verdicts."""

    seconds: list[float] = field(default_factory=list)
    errors: int = 0
    passed: int = 0
    scored: int = 0


def write(conn: Connection, batch: Sequence[Outcome], dialect: str, now: datetime, prune: bool = True) -> None:
    """One batch: the outcome rows, and the usage counters per (environment, version, day); with ``prune`` the
    rows older than RETENTION go."""
    rows = [
        {"namespace": o.namespace, "environment": o.environment, "version": o.version, "at": o.at,
         "seconds": o.seconds, "outcome": o.outcome, "passed": o.passed}
        for o in batch if o.counted or o.passed is not None
    ]  # fmt: skip
    if rows:
        conn.execute(insert(turn_outcomes), rows)
    sums: dict[tuple[str, str, str, date], VersionUsage] = {}
    for o in batch:
        if not o.counted:
            continue
        u = sums.setdefault((o.namespace, o.environment, o.version, o.at.date()), VersionUsage())
        u.requests += 1
        u.errors += o.outcome != "ok"
        u.tokens_in += max(0, o.tokens_in)
        u.tokens_out += max(0, o.tokens_out)
    insert_ = postgresql.insert if dialect == "postgresql" else sqlite.insert
    for (ns, env, version, day), u in sorted(sums.items()):  # one lock order for every replica: no deadlock
        stmt = insert_(usage_versions).values(
            namespace=ns, environment=env, version=version, day=day,
            requests=u.requests, errors=u.errors, tokens_in=u.tokens_in, tokens_out=u.tokens_out,
        )  # fmt: skip
        conn.execute(
            stmt.on_conflict_do_update(
                index_elements=["namespace", "environment", "version", "day"],
                set_={
                    n: usage_versions.c[n] + stmt.excluded[n] for n in ("requests", "errors", "tokens_in", "tokens_out")
                },
            )
        )
    if prune:
        conn.execute(delete(turn_outcomes).where(turn_outcomes.c.at < now - RETENTION))


def window(conn: Connection, namespace: str, environment: str, since: datetime) -> dict[str, Figures]:
    """The environment's turns since ``since`` per version (newest WINDOW_ROWS at most)."""
    query = (
        select(turn_outcomes.c.version, turn_outcomes.c.seconds, turn_outcomes.c.outcome, turn_outcomes.c.passed)
        .where(
            turn_outcomes.c.namespace == namespace,
            turn_outcomes.c.environment == environment,
            turn_outcomes.c.at >= since,
        )
        .order_by(turn_outcomes.c.at.desc())
        .limit(WINDOW_ROWS)
    )
    found: dict[str, Figures] = {}
    for r in conn.execute(query):
        f = found.setdefault(r.version, Figures())
        if r.passed is not None:  # a scored row: the verdict only (its turn has a row of its own)
            f.scored += 1
            f.passed += bool(r.passed)
            continue
        f.seconds.append(float(r.seconds))
        f.errors += r.outcome not in ("ok", "cancelled")  # a client that went away is no error of the version
    return found


def usage(conn: Connection, namespace: str, environment: str, since: date, until: date) -> dict[str, VersionUsage]:
    """Usage per version over [since, until]."""
    query = select(usage_versions).where(
        usage_versions.c.namespace == namespace,
        usage_versions.c.environment == environment,
        usage_versions.c.day >= since,
        usage_versions.c.day <= until,
    )
    out: dict[str, VersionUsage] = {}
    for r in conn.execute(query):
        u = out.setdefault(r.version, VersionUsage())
        u.requests += r.requests
        u.errors += r.errors
        u.tokens_in += r.tokens_in
        u.tokens_out += r.tokens_out
    return out


class OutcomeRecorder:
    """Batches turn outcomes and writes them every ``flush_seconds`` (see the module docstring)."""

    def __init__(self, store: Database, flush_seconds: float = 0.5, max_pending: int = 100_000) -> None:
        self.store = store
        self.flush_seconds = flush_seconds
        self.max_pending = max_pending
        self._pending: list[Outcome] = []
        self._scoring: list[Callable[[], Outcome]] = []
        """Sampled turns to score (the live evaluation), judged by the next flush."""
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0
        self._pruned = 0.0
        """When this replica last deleted the expired rows (monotonic): once a minute, not every flush."""

    def add(self, outcome: Outcome) -> None:
        if len(self._pending) >= self.max_pending:  # the database is away for long: keep memory bounded
            self.dropped += 1
            return
        self._pending.append(outcome)

    def add_scored(self, score: Callable[[], Outcome]) -> None:
        """A sampled turn's verdict, computed by the next flush (off the request path)."""
        if len(self._scoring) < self.max_pending:
            self._scoring.append(score)

    def start(self) -> None:
        self._task = asyncio.create_task(self._forever())

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(DockyardError, OSError):
            await self.flush()

    async def flush(self) -> int:
        scoring, self._scoring = self._scoring, []
        for score in scoring:
            try:
                self._pending.append(score())
            except Exception:  # a verdict that cannot be computed is not a figure
                log.exception("a live turn could not be scored")
        if not self._pending or not self.store.ready:
            return 0
        batch, self._pending = self._pending, []
        now = utcnow()
        prune = time.monotonic() - self._pruned >= PRUNE_SECONDS
        try:
            await self.store.run(lambda conn: write(conn, batch, self.store.dialect, now, prune))
        except BaseException:
            self._pending = batch + self._pending  # written with the next flush
            raise
        if prune:
            self._pruned = time.monotonic()
        return len(batch)

    async def _forever(self) -> None:
        while True:
            await asyncio.sleep(self.flush_seconds)
            try:
                await self.flush()
            except (DockyardError, OSError) as exc:
                log.warning("turn outcomes not written yet: %s", getattr(exc, "message", exc))
