"""ERP business-key lengths: shorten the key columns existing rows must fit

Seed 000 gives providers, configurations and memory strategies keys of 4
characters, agents, personas, skills, advisors, vector stores and document
collections keys of 8 (12 before). PostgreSQL's key columns are shortened
here (SQLite's triggers, made in 0005, refuse longer new keys).

It never truncates: when an existing row's key is too long, it refuses and
reports every such row (tenant, entity, key, length, limit), and changes
nothing. It is the last migration, so a database it refuses has every other
step and stays readable: ``pilothouse catalog export`` and ``pilothouse
conversations list`` work on it (the way out: export, shorten, import into a
fresh database; or rename in SQL and upgrade again).

Revision ID: 0019
Revises: 0018e_rag
Create Date: 2026-12-06 08:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from pilothouse.errors import ValidationIssue
from pilothouse.store._engine import READING_COMMANDS, KeyLengthRefusal

revision: str = "0019"
down_revision: str | None = "0018e_rag"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# table -> (entity name, old length, new length) of the keys this migration shortens.
_SHORTENED = {
    "provider": ("provider", 12, 4),
    "configuration": ("configuration", 12, 4),
    "memory_strategy": ("memory strategy", 12, 4),
    "agent": ("agent", 12, 8),
    "persona": ("persona", 12, 8),
    "skill": ("skill", 12, 8),
    "advisor": ("advisor", 12, 8),
    "vector_store": ("vector store", 12, 8),
    "document_collection": ("document collection", 12, 8),
}


def _too_long() -> list[ValidationIssue]:
    bind = op.get_bind()
    issues: list[ValidationIssue] = []
    for table, (entity, _, limit) in _SHORTENED.items():
        rows = bind.execute(
            sa.text(
                f"SELECT tenant, code FROM {table} WHERE length(code) > :limit "
                "ORDER BY tenant, code"
            ),
            {"limit": limit},
        ).all()
        for tenant, code in rows:
            issues.append(
                ValidationIssue(
                    entity=entity,
                    code=code,
                    field="code",
                    rule=(
                        f"{len(code)} characters in tenant '{tenant}', the ERP key length is "
                        f"{limit}: rename it (and every reference to it) to at most {limit} "
                        "characters, then run `pilothouse db upgrade` again; nothing was changed "
                        f"(until then {READING_COMMANDS} read this database)"
                    ),
                )
            )
    return issues


def upgrade() -> None:
    issues = _too_long()
    if issues:
        # Raised inside the migration's transaction: nothing is truncated or half-done.
        raise KeyLengthRefusal(issues, readable_at=down_revision or "")
    if op.get_bind().dialect.name == "sqlite":
        return
    for table, (_, old, new) in _SHORTENED.items():
        op.alter_column(
            table, "code", type_=sa.String(length=new), existing_type=sa.String(length=old)
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    for table, (_, old, new) in _SHORTENED.items():
        op.alter_column(
            table, "code", type_=sa.String(length=old), existing_type=sa.String(length=new)
        )
