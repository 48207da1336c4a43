"""Sessions, messages, usage statistics, rate-limit windows, facade instances.

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "dockyard_instances",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("started_at", sa.DateTime(timezone=False), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=False), nullable=False),
        sa.Column("stopped", sa.Boolean(), nullable=False),
        sa.Column("host", sa.String(253), nullable=False),
    )
    op.create_table(
        "dockyard_sessions",
        sa.Column("pk", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("namespace", sa.String(63), nullable=False),
        sa.Column("environment", sa.String(253), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("app", sa.String(253), nullable=False),
        sa.Column("user_id", sa.String(256), nullable=True),
        sa.Column("key_id", sa.String(64), nullable=False),
        sa.Column("version", sa.String(32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=False), nullable=False),
        sa.Column("last_active_at", sa.DateTime(timezone=False), nullable=False),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.Column("turn_token", sa.String(36), nullable=True),
        sa.Column("turn_holder", sa.String(36), nullable=True),
        sa.Column("turn_expires_at", sa.DateTime(timezone=False), nullable=True),
        sa.UniqueConstraint("namespace", "environment", "session_id", name="uq_dockyard_sessions_session"),
    )
    op.create_table(
        "dockyard_messages",
        sa.Column("pk", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("session_pk", ROW_ID, sa.ForeignKey("dockyard_sessions.pk", ondelete="CASCADE"), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("agent", sa.String(253), nullable=True),
        sa.Column("tools_used", sa.JSON(), nullable=True),
        sa.Column("tokens_in", sa.Integer(), nullable=False),
        sa.Column("tokens_out", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=False), nullable=False),
        sa.UniqueConstraint("id", name="uq_dockyard_messages_id"),
        sa.UniqueConstraint("session_pk", "seq", name="uq_dockyard_messages_seq"),
    )
    counter = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "dockyard_usage_daily",
        sa.Column("namespace", sa.String(63), nullable=False),
        sa.Column("environment", sa.String(253), nullable=False),
        sa.Column("key_id", sa.String(64), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("requests", counter, nullable=False),
        sa.Column("errors", counter, nullable=False),
        sa.Column("rate_limited", counter, nullable=False),
        sa.Column("tokens_in", counter, nullable=False),
        sa.Column("tokens_out", counter, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=False), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "environment", "key_id", "day", name="pk_dockyard_usage_daily"),
    )
    op.create_index("ix_dockyard_usage_daily_updated", "dockyard_usage_daily", ["updated_at"])
    op.create_table(
        "dockyard_rate_windows",
        sa.Column("namespace", sa.String(63), nullable=False),
        sa.Column("environment", sa.String(253), nullable=False),
        sa.Column("key_id", sa.String(64), nullable=False),
        sa.Column("minute", sa.BigInteger(), nullable=False),
        sa.Column("hits", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "environment", "key_id", "minute", name="pk_dockyard_rate_windows"),
    )


def downgrade() -> None:
    op.drop_table("dockyard_rate_windows")
    op.drop_index("ix_dockyard_usage_daily_updated", table_name="dockyard_usage_daily")
    op.drop_table("dockyard_usage_daily")
    op.drop_table("dockyard_messages")
    op.drop_table("dockyard_sessions")
    op.drop_table("dockyard_instances")
