"""The conversation database's tables (SQLAlchemy Core). The migrations in ``migrations/versions``
create them; a test checks that the migrated database matches these definitions."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.types import TypeDecorator


class UtcDateTime(TypeDecorator[datetime]):
    """A UTC time stored without a zone (the same text/timestamp on SQLite and PostgreSQL), read back aware."""

    impl = DateTime(timezone=False)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


RowId = BigInteger().with_variant(Integer(), "sqlite")
"""64-bit row ids (SQLite only auto-increments an INTEGER PRIMARY KEY)."""
Counter = BigInteger().with_variant(Integer(), "sqlite")

metadata = MetaData()

instances = Table(
    "dockyard_instances",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("started_at", UtcDateTime, nullable=False),
    Column("heartbeat_at", UtcDateTime, nullable=False),
    Column("stopped", Boolean, nullable=False, default=False),
    Column("host", String(253), nullable=False, default=""),
)
"""Facade processes using the database; a turn held by one that stopped or went silent is free."""

sessions = Table(
    "dockyard_sessions",
    metadata,
    Column("pk", RowId, primary_key=True, autoincrement=True),
    Column("namespace", String(63), nullable=False),
    Column("environment", String(253), nullable=False),
    Column("session_id", String(128), nullable=False),
    Column("app", String(253), nullable=False),
    Column("user_id", String(256), nullable=True),
    Column("key_id", String(64), nullable=False, default=""),
    Column("version", String(32), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("last_active_at", UtcDateTime, nullable=False),
    Column("message_count", Integer, nullable=False, default=0),
    Column("turn_token", String(36), nullable=True),
    Column("turn_holder", String(36), nullable=True),
    Column("turn_expires_at", UtcDateTime, nullable=True),
    UniqueConstraint("namespace", "environment", "session_id", name="uq_dockyard_sessions_session"),
)
"""One conversation: who owns it, the app version it is pinned to, and the turn running on it (if any)."""

messages = Table(
    "dockyard_messages",
    metadata,
    Column("pk", RowId, primary_key=True, autoincrement=True),
    Column("id", String(40), nullable=False),
    Column("session_pk", RowId, ForeignKey("dockyard_sessions.pk", ondelete="CASCADE"), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("role", String(16), nullable=False),
    Column("content", Text, nullable=False),
    Column("agent", String(253), nullable=True),
    Column("tools_used", JSON, nullable=True),
    Column("tokens_in", Integer, nullable=False, default=0),
    Column("tokens_out", Integer, nullable=False, default=0),
    Column("created_at", UtcDateTime, nullable=False),
    Column("latency_ms", Integer, nullable=True),
    UniqueConstraint("id", name="uq_dockyard_messages_id"),
    UniqueConstraint("session_pk", "seq", name="uq_dockyard_messages_seq"),
)
"""The messages of finished turns: a user message and the reply, always stored together. The reply's
``latency_ms`` is the turn's time from taking the session to storing it (null: the user message, or a turn
stored before Alembic 0005)."""

usage_daily = Table(
    "dockyard_usage_daily",
    metadata,
    Column("namespace", String(63), nullable=False),
    Column("environment", String(253), nullable=False),
    Column("key_id", String(64), nullable=False),
    Column("day", Date, nullable=False),
    Column("requests", Counter, nullable=False, default=0),
    Column("errors", Counter, nullable=False, default=0),
    Column("rate_limited", Counter, nullable=False, default=0),
    Column("tokens_in", Counter, nullable=False, default=0),
    Column("tokens_out", Counter, nullable=False, default=0),
    Column("updated_at", UtcDateTime, nullable=False),
    PrimaryKeyConstraint("namespace", "environment", "key_id", "day", name="pk_dockyard_usage_daily"),
    Index("ix_dockyard_usage_daily_updated", "updated_at"),
)
"""Usage statistics per environment, API key and UTC day. Never deleted with the environment."""

rate_windows = Table(
    "dockyard_rate_windows",
    metadata,
    Column("namespace", String(63), nullable=False),
    Column("environment", String(253), nullable=False),
    Column("key_id", String(64), nullable=False),
    Column("minute", BigInteger, nullable=False),
    Column("hits", Integer, nullable=False),
    PrimaryKeyConstraint("namespace", "environment", "key_id", "minute", name="pk_dockyard_rate_windows"),
)
"""Requests per API key per minute (``minute`` = Unix time // 60), for spec.rateLimits.requestsPerMinute."""

interventions = Table(
    "dockyard_interventions",
    metadata,
    Column("pk", RowId, primary_key=True, autoincrement=True),
    Column("namespace", String(63), nullable=False),
    Column("environment", String(253), nullable=False),
    Column("app", String(253), nullable=False),
    Column("version", String(32), nullable=False),
    Column("session_id", String(128), nullable=False),
    Column("message_id", String(40), nullable=True),
    Column("policy", String(63), nullable=False),
    Column("stage", String(16), nullable=False),
    Column("action", String(8), nullable=False),
    Column("tool", String(253), nullable=False, default=""),
    Column("reason", String(512), nullable=False),
    Column("at", UtcDateTime, nullable=False),
    Index("ix_dockyard_interventions_environment", "namespace", "environment", "at"),
)
"""What guardrails and the PII protection did to turns (:class:`dockyard_core.interventions.Intervention`):
which policy acted where and why, written with the turn it acted on. Never the text it matched.
``message_id`` is the stored reply's id (None for a turn that failed and stored nothing)."""

turn_outcomes = Table(
    "dockyard_turn_outcomes",
    metadata,
    Column("pk", RowId, primary_key=True, autoincrement=True),
    Column("namespace", String(63), nullable=False),
    Column("environment", String(253), nullable=False),
    Column("version", String(32), nullable=False),
    Column("at", UtcDateTime, nullable=False),
    Column("seconds", Float, nullable=False),
    Column("outcome", String(64), nullable=False),
    Column("passed", Boolean, nullable=True),
    Index("ix_dockyard_turn_outcomes_environment", "namespace", "environment", "at"),
)
"""One row per finished turn (its version, duration, ``ok`` or the error code, and for a sampled turn whether
it passed the live evaluation): what the SLO watcher reads over its window (docs/promotion.md). Written in
batches off the request path; rows older than a day are deleted."""

usage_versions = Table(
    "dockyard_usage_versions",
    metadata,
    Column("namespace", String(63), nullable=False),
    Column("environment", String(253), nullable=False),
    Column("version", String(32), nullable=False),
    Column("day", Date, nullable=False),
    Column("requests", Counter, nullable=False, default=0),
    Column("errors", Counter, nullable=False, default=0),
    Column("tokens_in", Counter, nullable=False, default=0),
    Column("tokens_out", Counter, nullable=False, default=0),
    PrimaryKeyConstraint("namespace", "environment", "version", "day", name="pk_dockyard_usage_versions"),
)
"""Usage per environment, app version and UTC day (the usage endpoint's ``versions``). Never deleted with the
environment."""
