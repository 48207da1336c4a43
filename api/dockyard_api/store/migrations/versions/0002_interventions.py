"""What guardrails and the PII protection did to turns (never the values they matched).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "dockyard_interventions",
        sa.Column("pk", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("namespace", sa.String(63), nullable=False),
        sa.Column("environment", sa.String(253), nullable=False),
        sa.Column("app", sa.String(253), nullable=False),
        sa.Column("version", sa.String(32), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("message_id", sa.String(40), nullable=True),
        sa.Column("policy", sa.String(63), nullable=False),
        sa.Column("stage", sa.String(16), nullable=False),
        sa.Column("action", sa.String(8), nullable=False),
        sa.Column("tool", sa.String(253), nullable=False),
        sa.Column("reason", sa.String(512), nullable=False),
        sa.Column("at", sa.DateTime(timezone=False), nullable=False),
    )
    op.create_index(
        "ix_dockyard_interventions_environment", "dockyard_interventions", ["namespace", "environment", "at"]
    )


def downgrade() -> None:
    op.drop_index("ix_dockyard_interventions_environment", table_name="dockyard_interventions")
    op.drop_table("dockyard_interventions")
