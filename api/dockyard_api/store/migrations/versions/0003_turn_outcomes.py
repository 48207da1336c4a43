"""Turn outcomes (what the SLO watcher reads) and usage per app version (docs/promotion.md).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
COUNTER = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "dockyard_turn_outcomes",
        sa.Column("pk", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("namespace", sa.String(63), nullable=False),
        sa.Column("environment", sa.String(253), nullable=False),
        sa.Column("version", sa.String(32), nullable=False),
        sa.Column("at", sa.DateTime(timezone=False), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("outcome", sa.String(64), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=True),
    )
    op.create_index(
        "ix_dockyard_turn_outcomes_environment", "dockyard_turn_outcomes", ["namespace", "environment", "at"]
    )
    op.create_table(
        "dockyard_usage_versions",
        sa.Column("namespace", sa.String(63), nullable=False),
        sa.Column("environment", sa.String(253), nullable=False),
        sa.Column("version", sa.String(32), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("requests", COUNTER, nullable=False),
        sa.Column("errors", COUNTER, nullable=False),
        sa.Column("tokens_in", COUNTER, nullable=False),
        sa.Column("tokens_out", COUNTER, nullable=False),
        sa.PrimaryKeyConstraint("namespace", "environment", "version", "day", name="pk_dockyard_usage_versions"),
    )


def downgrade() -> None:
    op.drop_table("dockyard_usage_versions")
    op.drop_index("ix_dockyard_turn_outcomes_environment", table_name="dockyard_turn_outcomes")
    op.drop_table("dockyard_turn_outcomes")
