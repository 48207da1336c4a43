"""Alembic migrations of the conversation database, run by the facade at start.

Idempotent (Alembic records the revision in ``dockyard_alembic_version``) and safe with several
replicas starting at once: on PostgreSQL the upgrade runs inside one transaction holding an advisory
lock, so the first replica migrates and the others find the database at head. SQLite is used by one
facade process (the embedded default) and its transaction serialises writers anyway.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text

MIGRATIONS = Path(__file__).with_name("migrations")
VERSION_TABLE = "dockyard_alembic_version"
ADVISORY_LOCK_KEY = 0x646F636B79617264 & 0x7FFFFFFFFFFFFFFF  # "dockyard"
"""PostgreSQL advisory lock held while migrating (a bigint; any fixed value unique to Dockyard)."""


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head() -> str:
    """The newest revision the package ships."""
    revision = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert revision is not None
    return revision


def current(connection: Connection) -> str | None:
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def upgrade_connection(connection: Connection) -> None:
    """Upgrade inside the caller's transaction (the store runs it at start)."""
    if connection.dialect.name == "postgresql":
        # transaction-scoped: released by the commit that also makes the new schema visible
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK_KEY})
    if current(connection) == head():
        return
    command.upgrade(alembic_config(connection), "head")
