"""Each stored reply's latency (the analytics' percentiles, docs/conversation-store.md "Analytics").

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # nullable: the turns stored before this revision have no latency (left out of the percentiles)
    with op.batch_alter_table("dockyard_messages") as batch:
        batch.add_column(sa.Column("latency_ms", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("dockyard_messages") as batch:
        batch.drop_column("latency_ms")
