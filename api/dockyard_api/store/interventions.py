"""The interventions table of the conversation store: the rows a turn's interventions become (written in
the transaction that stores or aborts the turn) and an environment's newest ones. Only what the
:class:`~dockyard_core.interventions.Intervention` says (policy, stage, action, tool, reason) and where the
turn ran are kept: never the text a policy matched (the runtime's reasons never hold it)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select

from dockyard_api.store.records import StoredIntervention, Turn
from dockyard_api.store.schema import interventions
from dockyard_core.interventions import REASON_LIMIT, Intervention

LIST_LIMIT = 500
"""The most interventions one list returns."""

INSERT = insert(interventions)


def add(conn: Connection, turn: Turn, found: Sequence[Intervention], *, message_id: str | None, at: datetime) -> None:
    """Write ``found`` for ``turn`` in the caller's transaction (nothing when empty)."""
    if not found:
        return
    common = {
        "namespace": turn.namespace,
        "environment": turn.environment,
        "app": turn.app,
        "version": turn.version,
        "session_id": turn.session_id,
        "message_id": message_id,
        "at": at,
    }
    conn.execute(INSERT, [{**common, **_columns(i)} for i in found])


def _columns(found: Intervention) -> dict[str, Any]:
    return {
        "policy": found.policy[:63],
        "stage": found.stage,
        "action": found.action,
        "tool": found.tool[:253],
        "reason": found.reason[:REASON_LIMIT],
    }


def newest(conn: Connection, namespace: str, environment: str, limit: int) -> list[StoredIntervention]:
    """The environment's ``limit`` newest interventions (1 to LIST_LIMIT), newest first."""
    c = interventions.c
    query = (
        select(interventions)
        .where(c.namespace == namespace, c.environment == environment)
        .order_by(c.at.desc(), c.pk.desc())
        .limit(max(1, min(limit, LIST_LIMIT)))
    )
    return [
        StoredIntervention(
            r.at, r.app, r.version, r.session_id, r.message_id, r.policy, r.stage, r.action, r.reason, r.tool
        )
        for r in conn.execute(query).all()
    ]
