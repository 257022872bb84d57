"""memory provenance and versions

Each memory record names the conversation and user its value was derived
from (``source_conversation``, ``source_user``), so erasing a user finds
every record derived from them in any scope; records written before this
revision have no provenance (null). ``memory_version`` keeps the values a
record held before each change, with when they held (``valid_from``,
``valid_to``).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06 07:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import pilothouse.store._types

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = pilothouse.store._types.UtcDateTime


def upgrade() -> None:
    with op.batch_alter_table("memory_record", schema=None) as batch_op:
        batch_op.add_column(sa.Column("source_conversation", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("source_user", sa.String(length=128), nullable=True))
        batch_op.create_index(
            "ix_memory_record_source_user", ["tenant", "source_user"], unique=False
        )
        batch_op.create_index(
            "ix_memory_record_source_conversation", ["tenant", "source_conversation"], unique=False
        )
    op.create_table(
        "memory_version",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("record_id", sa.Integer(), nullable=False),
        sa.Column("tenant", sa.String(length=32), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("memory_type", sa.String(length=32), nullable=False),
        sa.Column("importance", sa.Float(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("source_conversation", sa.String(length=64), nullable=True),
        sa.Column("source_user", sa.String(length=128), nullable=True),
        sa.Column("change", sa.String(length=16), nullable=False),
        sa.Column("valid_from", _TS(timezone=True), nullable=False),
        sa.Column("valid_to", _TS(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["record_id"],
            ["memory_record.id"],
            name=op.f("fk_memory_version_record_id_memory_record"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_version")),
    )
    with op.batch_alter_table("memory_version", schema=None) as batch_op:
        batch_op.create_index("ix_memory_version_record", ["record_id", "valid_to"], unique=False)
        batch_op.create_index(
            "ix_memory_version_source_user", ["tenant", "source_user"], unique=False
        )
        batch_op.create_index(
            "ix_memory_version_source_conversation",
            ["tenant", "source_conversation"],
            unique=False,
        )


def downgrade() -> None:
    op.drop_table("memory_version")
    with op.batch_alter_table("memory_record", schema=None) as batch_op:
        batch_op.drop_index("ix_memory_record_source_conversation")
        batch_op.drop_index("ix_memory_record_source_user")
        batch_op.drop_column("source_user")
        batch_op.drop_column("source_conversation")
