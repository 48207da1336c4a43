"""Alembic environment of the conversation database. The facade runs the migrations itself at start
(``dockyard_api.store.migrate``), passing the connection in ``config.attributes["connection"]``."""

from __future__ import annotations

from alembic import context

from dockyard_api.store.migrate import VERSION_TABLE
from dockyard_api.store.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
