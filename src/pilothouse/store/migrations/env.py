"""Alembic environment: runs on the connection pilothouse hands it."""

from alembic import context
from sqlalchemy import Connection

import pilothouse.catalog._models
import pilothouse.store._records  # noqa: F401  (registers the conversation tables)
from pilothouse.store._base import Base

connection = context.config.attributes.get("connection")
if not isinstance(connection, Connection):
    raise RuntimeError("pilothouse migrations run through pilothouse.store.Database.upgrade()")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
