"""Evaluation runs in the conversation store (docs/promotion.md, "Where runs are kept"): one row per run of
an app version's suite against an environment, with its per-case results (each case's answer, agent, tools,
latency, error and why it failed) as a JSON list, written as the run progresses. The chat text of a run is
kept here only; the version's ``status.evaluations`` holds its summary (no text) for the checklist and the
promotion gates.

A run executes in the facade replica that started it. Each row has a deadline (its bound: the cases times
the turn deadline, over the concurrency); a run still ``running`` after it (its replica stopped) reads as
``interrupted``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import JSON, Boolean, Column, Connection, Index, Integer, String, Table, insert, select, update

from dockyard_api.store.database import Database
from dockyard_api.store.schema import UtcDateTime, metadata
from dockyard_core.clock import utcnow
from dockyard_core.errors import NotFoundError

LIST_LIMIT = 100

evaluation_runs = Table(
    "dockyard_evaluation_runs",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("namespace", String(63), nullable=False),
    Column("environment", String(253), nullable=False),
    Column("app", String(253), nullable=False),
    Column("version", String(32), nullable=False),
    Column("shadow", Boolean, nullable=False),
    Column("phase", String(16), nullable=False),
    Column("started_by", String(253), nullable=False),
    Column("started_at", UtcDateTime, nullable=False),
    Column("deadline_at", UtcDateTime, nullable=False),
    Column("finished_at", UtcDateTime, nullable=True),
    Column("total", Integer, nullable=False),
    Column("done", Integer, nullable=False),
    Column("passed", Integer, nullable=False),
    Column("error", String(512), nullable=False),
    Column("results", JSON, nullable=False),
    Index("ix_dockyard_evaluation_runs_environment", "namespace", "environment", "started_at"),
)
"""Evaluation runs with their per-case results (docs/promotion.md)."""


@dataclass(frozen=True)
class StoredRun:
    id: str
    namespace: str
    environment: str
    app: str
    version: str
    shadow: bool
    phase: str
    """running, passed (every case), failed (a case failed), error (the run could not run), interrupted."""
    started_by: str
    started_at: datetime
    finished_at: datetime | None
    total: int
    done: int
    passed: int
    error: str
    results: list[dict[str, Any]]


def _row(r: Any, now: datetime) -> StoredRun:
    phase = r.phase
    if phase == "running" and r.deadline_at < now:
        phase = "interrupted"
    return StoredRun(
        r.id,
        r.namespace,
        r.environment,
        r.app,
        r.version,
        bool(r.shadow),
        phase,
        r.started_by,
        r.started_at,
        r.finished_at,
        r.total,
        r.done,
        r.passed,
        r.error,
        list(r.results or []),
    )


class EvaluationRuns:
    """The runs of the conversation store's database (``db``: the facade's ConversationStore)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(
        self,
        *,
        run_id: str,
        namespace: str,
        environment: str,
        app: str,
        version: str,
        shadow: bool,
        by: str,
        total: int,
        bound_seconds: float,
    ) -> None:
        now = utcnow()
        values = {
            "id": run_id,
            "namespace": namespace,
            "environment": environment,
            "app": app,
            "version": version,
            "shadow": shadow,
            "phase": "running",
            "started_by": by[:253],
            "started_at": now,
            "deadline_at": now + timedelta(seconds=bound_seconds),
            "finished_at": None,
            "total": total,
            "done": 0,
            "passed": 0,
            "error": "",
            "results": [],
        }
        await self.db.run(lambda conn: conn.execute(insert(evaluation_runs).values(**values)))

    async def progress(self, run_id: str, results: list[dict[str, Any]]) -> None:
        """The results so far (in case order of completion)."""
        passed = sum(1 for r in results if r.get("passed"))
        query = (
            update(evaluation_runs)
            .where(evaluation_runs.c.id == run_id)
            .values(done=len(results), passed=passed, results=list(results))
        )
        await self.db.run(lambda conn: conn.execute(query))

    async def finish(self, run_id: str, phase: str, results: list[dict[str, Any]], error: str = "") -> None:
        passed = sum(1 for r in results if r.get("passed"))
        query = (
            update(evaluation_runs)
            .where(evaluation_runs.c.id == run_id)
            .values(
                phase=phase,
                done=len(results),
                passed=passed,
                results=list(results),
                error=error[:512],
                finished_at=utcnow(),
            )
        )
        await self.db.run(lambda conn: conn.execute(query))

    async def get(self, namespace: str, environment: str, run_id: str) -> StoredRun:
        c = evaluation_runs.c
        query = select(evaluation_runs).where(c.id == run_id, c.namespace == namespace, c.environment == environment)

        def tx(conn: Connection) -> Any:
            return conn.execute(query).first()

        row = await self.db.run(tx)
        if row is None:
            raise NotFoundError(f"no evaluation run {run_id} in environment {environment}", {"run": run_id})
        return _row(row, utcnow())

    async def list(self, namespace: str, environment: str, limit: int = 20) -> list[StoredRun]:
        """The environment's newest runs, newest first (1 to LIST_LIMIT)."""
        c = evaluation_runs.c
        query = (
            select(evaluation_runs)
            .where(c.namespace == namespace, c.environment == environment)
            .order_by(c.started_at.desc(), c.id)
            .limit(max(1, min(limit, LIST_LIMIT)))
        )
        rows = await self.db.run(lambda conn: conn.execute(query).all())
        now = utcnow()
        return [_row(r, now) for r in rows]

    async def previous(self, run: StoredRun) -> StoredRun | None:
        """The newest finished run in the same environment that started before ``run`` (the diff's base)."""
        c = evaluation_runs.c
        query = (
            select(evaluation_runs)
            .where(
                c.namespace == run.namespace,
                c.environment == run.environment,
                c.started_at < run.started_at,
                c.phase.in_(("passed", "failed")),
            )
            .order_by(c.started_at.desc())
            .limit(1)
        )

        def tx(conn: Connection) -> Any:
            return conn.execute(query).first()

        row = await self.db.run(tx)
        return None if row is None else _row(row, utcnow())
