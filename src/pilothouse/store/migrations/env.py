"""Alembic environment: runs on the connection pilothouse hands it."""

from alembic import context
from sqlalchemy import Connection

from pilothouse.catalog._models import Action
from pilothouse.knowledge._tables import KnowledgeChunk
from pilothouse.memory._tables import MemoryRecord
from pilothouse.store._access import ApiKey
from pilothouse.store._base import Base
from pilothouse.store._lineage import ConversationLink
from pilothouse.store._outbox import EventOutbox
from pilothouse.store._records import Conversation

# Importing one model of each module registers all of its tables on Base.
_REGISTERED = (
    Action,
    ApiKey,
    Conversation,
    ConversationLink,
    EventOutbox,
    KnowledgeChunk,
    MemoryRecord,
)

# SQLite's full-text index of the knowledge chunks is a virtual table (and
# its shadow tables) made by hand in migration 0004: autogenerate must not
# offer to drop what it cannot describe.
_FTS_PREFIX = "knowledge_chunk_fts"


def _include_name(name: str | None, type_: str, _parents: object) -> bool:
    return not (type_ == "table" and name is not None and name.startswith(_FTS_PREFIX))


connection = context.config.attributes.get("connection")
if not isinstance(connection, Connection):
    raise RuntimeError("pilothouse migrations run through pilothouse.store.Database.upgrade()")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
    include_name=_include_name,
)
with context.begin_transaction():
    context.run_migrations()
