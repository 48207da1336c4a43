"""Evaluation runs with their per-case results (docs/promotion.md).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dockyard_evaluation_runs",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("namespace", sa.String(63), nullable=False),
        sa.Column("environment", sa.String(253), nullable=False),
        sa.Column("app", sa.String(253), nullable=False),
        sa.Column("version", sa.String(32), nullable=False),
        sa.Column("shadow", sa.Boolean(), nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("started_by", sa.String(253), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=False), nullable=False),
        sa.Column("deadline_at", sa.DateTime(timezone=False), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=False), nullable=True),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("done", sa.Integer(), nullable=False),
        sa.Column("passed", sa.Integer(), nullable=False),
        sa.Column("error", sa.String(512), nullable=False),
        sa.Column("results", sa.JSON(), nullable=False),
    )
    op.create_index(
        "ix_dockyard_evaluation_runs_environment",
        "dockyard_evaluation_runs",
        ["namespace", "environment", "started_at"],
    )


def downgrade() -> None:
    op.drop_index("ix_dockyard_evaluation_runs_environment", table_name="dockyard_evaluation_runs")
    op.drop_table("dockyard_evaluation_runs")
