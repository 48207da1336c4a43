"""Analytics of an environment per app version and UTC day (docs/conversation-store.md, "Analytics"), from
what the conversation database keeps:

- the stored turns (``dockyard_messages``: each reply with its tokens, the tools it used and, since Alembic
  0005, ``latency_ms``, the time from taking the session to storing the turn) joined with their sessions
  (``dockyard_sessions``: the version the session is pinned to, its user id): turns, users, sessions,
  tokens, latency percentiles and tool calls;
- the failed calls per version and day (``dockyard_usage_versions``, written by the outcome recorder): errors.

Turns that failed store no message: their latency is not in the percentiles (which are those of answered
turns). At most ``ROW_LIMIT`` turns are read for one answer (the newest kept; ``truncated`` says so).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from sqlalchemy import Connection, select

from dockyard_api.store.schema import messages, sessions, usage_versions

ROW_LIMIT = 200_000
PERCENTILES = (50, 90, 99)


@dataclass
class Bucket:
    """One version's figures over one day (or the whole period)."""

    turns: int = 0
    errors: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    users: set[str] = field(default_factory=set)
    sessions: set[str] = field(default_factory=set)
    latencies: list[int] = field(default_factory=list)
    tools: Counter[str] = field(default_factory=Counter)

    def add_turn(self, user: str | None, session: str, tokens_in: int, tokens_out: int, latency: int | None,
                 tools: list[str]) -> None:  # fmt: skip
        self.turns += 1
        self.tokens_in += tokens_in
        self.tokens_out += tokens_out
        if user:
            self.users.add(user)
        self.sessions.add(session)
        if latency is not None:
            self.latencies.append(latency)
        self.tools.update(tools)

    def percentiles(self) -> dict[str, int] | None:
        """Nearest-rank p50, p90, p99 of the latencies in milliseconds; None without any."""
        if not self.latencies:
            return None
        ordered = sorted(self.latencies)
        return {f"p{p}": ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] for p in PERCENTILES}


@dataclass
class VersionAnalytics:
    version: str
    totals: Bucket = field(default_factory=Bucket)
    days: dict[date, Bucket] = field(default_factory=dict)

    def day(self, day: date) -> Bucket:
        return self.days.setdefault(day, Bucket())


@dataclass
class Analytics:
    namespace: str
    environment: str
    since: date
    until: date
    versions: dict[str, VersionAnalytics] = field(default_factory=dict)
    truncated: bool = False

    def version(self, name: str) -> VersionAnalytics:
        return self.versions.setdefault(name, VersionAnalytics(name))


def read(
    conn: Connection, namespace: str, environment: str, since: date, until: date, version: str | None = None
) -> Analytics:
    """The environment's analytics over the UTC days [since, until], of one ``version`` or of all."""
    start = datetime.combine(since, time.min, tzinfo=UTC)
    end = datetime.combine(until + timedelta(days=1), time.min, tzinfo=UTC)
    query = (
        select(
            messages.c.created_at,
            messages.c.tokens_in,
            messages.c.tokens_out,
            messages.c.tools_used,
            messages.c.latency_ms,
            sessions.c.version,
            sessions.c.user_id,
            sessions.c.session_id,
        )
        .join(sessions, messages.c.session_pk == sessions.c.pk)
        .where(
            sessions.c.namespace == namespace,
            sessions.c.environment == environment,
            messages.c.role == "assistant",
            messages.c.created_at >= start,
            messages.c.created_at < end,
        )
        .order_by(messages.c.created_at.desc())
        .limit(ROW_LIMIT + 1)
    )
    if version is not None:
        query = query.where(sessions.c.version == version)
    out = Analytics(namespace, environment, since, until)
    rows = conn.execute(query).all()
    if len(rows) > ROW_LIMIT:
        out.truncated, rows = True, rows[:ROW_LIMIT]
    for r in rows:
        found = out.version(r.version)
        tools = [str(t) for t in r.tools_used or []]
        day = r.created_at.astimezone(UTC).date()
        for bucket in (found.totals, found.day(day)):
            bucket.add_turn(r.user_id, r.session_id, r.tokens_in, r.tokens_out, r.latency_ms, tools)
    errors = select(usage_versions.c.version, usage_versions.c.day, usage_versions.c.errors).where(
        usage_versions.c.namespace == namespace,
        usage_versions.c.environment == environment,
        usage_versions.c.day >= since,
        usage_versions.c.day <= until,
        usage_versions.c.errors > 0,
    )
    if version is not None:
        errors = errors.where(usage_versions.c.version == version)
    for e in conn.execute(errors):
        found = out.version(e.version)
        found.totals.errors += e.errors
        found.day(e.day).errors += e.errors
    return out
