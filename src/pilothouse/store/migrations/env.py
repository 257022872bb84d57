"""Alembic environment: runs on the connection pilothouse hands it."""

from alembic import context
from sqlalchemy import Connection

from pilothouse.catalog._models import Action
from pilothouse.store._access import ApiKey
from pilothouse.store._base import Base
from pilothouse.store._records import Conversation

# Importing one model of each module registers all of its tables on Base.
_REGISTERED = (Action, ApiKey, Conversation)

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
