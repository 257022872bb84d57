"""ERP business-key lengths, and the action's skill-disclosure switch

Seed 000 (the ERP ``sys.llm`` module) gives each entity's business key a
length: 4 for provider, configuration and memory strategy, 8 for agent,
persona, skill, advisor, vector store and document collection (12 before).
This migration makes SQLite enforce every catalog key's length on new
writes (PostgreSQL's ``varchar(n)`` does; SQLite ignores declared lengths,
so triggers refuse a longer key). Shortening the columns themselves, which
existing rows must fit, is the last migration's step
(``0018_business_key_lengths``): a database with longer keys then stops
there, with every other step done, and can still be read and exported.

Skill-tool links get genai-4j's ``access_level`` (``read`` by default). MCP clients get optional ``input_schema`` / ``output_schema`` (seed 000's
``llmSchemaInput`` / ``llmSchemaOutput``). Actions get ``progressive_disclosure`` (seed 000's default is off: a skill
contributes ``Your skill: <prompt>.``); existing actions keep the progressive
disclosure they had.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26 15:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# table -> the ERP length of the keys 0018 shortens (from 12).
_SHORTENED = {
    "provider": 4,
    "configuration": 4,
    "memory_strategy": 4,
    "agent": 8,
    "persona": 8,
    "skill": 8,
    "advisor": 8,
    "vector_store": 8,
    "document_collection": 8,
}

# table -> (key column, length) of every catalog table, for SQLite's triggers.
_ALL_KEYS = {
    **{table: ("code", new) for table, new in _SHORTENED.items()},
    "application": ("code", 8),
    "action": ("code", 12),
    "tool": ("code", 12),
    "model": ("code", 12),
    "mcp_client": ("name", 32),
    "agent_type": ("code", 4),
    "action_type": ("code", 4),
    "persona_type": ("code", 4),
    "skill_type": ("code", 4),
    "tool_type": ("code", 4),
    "advisor_type": ("code", 4),
    "mcp_client_type": ("code", 4),
    "vector_store_type": ("code", 4),
    "memory_strategy_type": ("code", 4),
}


def upgrade() -> None:
    with op.batch_alter_table("action", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "progressive_disclosure", sa.Boolean(), nullable=False, server_default=sa.false()
            )
        )
    with op.batch_alter_table("skill_tool", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("access_level", sa.String(length=16), nullable=False, server_default="read")
        )
    with op.batch_alter_table("mcp_client", schema=None) as batch_op:
        batch_op.add_column(sa.Column("input_schema", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("output_schema", sa.JSON(), nullable=True))
    # Existing actions keep what they had: skills disclosed progressively.
    op.execute(sa.text("UPDATE action SET progressive_disclosure = :on").bindparams(on=True))
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        for table, (column, limit) in _ALL_KEYS.items():
            for event in ("INSERT", f"UPDATE OF {column}"):
                name = f"ck_{table}_{column}_length_{event.split()[0].lower()}"
                op.execute(
                    f"CREATE TRIGGER {name} BEFORE {event} ON {table} "
                    f"WHEN length(NEW.{column}) > {limit} BEGIN "
                    f"SELECT RAISE(ABORT, '{table}.{column} longer than {limit} characters'); END"
                )


def downgrade() -> None:
    with op.batch_alter_table("action", schema=None) as batch_op:
        batch_op.drop_column("progressive_disclosure")
    with op.batch_alter_table("skill_tool", schema=None) as batch_op:
        batch_op.drop_column("access_level")
    with op.batch_alter_table("mcp_client", schema=None) as batch_op:
        batch_op.drop_column("output_schema")
        batch_op.drop_column("input_schema")
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        for table, (column, _) in _ALL_KEYS.items():
            for event in ("insert", "update"):
                op.execute(f"DROP TRIGGER IF EXISTS ck_{table}_{column}_length_{event}")
