"""conversation link: titles, forks and hiding beside the audit rows

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26 15:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import pilothouse.store._types

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "conversation_link",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(length=32), nullable=False),
        sa.Column("conversation_uuid", sa.String(length=36), nullable=False),
        sa.Column("parent_uuid", sa.String(length=36), nullable=True),
        sa.Column("fork_sequence", sa.Integer(), nullable=True),
        sa.Column("title", sa.String(length=200), nullable=True),
        sa.Column("hidden", sa.Boolean(), nullable=False),
        sa.Column("created_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversation_link")),
        sa.UniqueConstraint(
            "conversation_uuid", name=op.f("uq_conversation_link_conversation_uuid")
        ),
    )
    with op.batch_alter_table("conversation_link", schema=None) as batch_op:
        batch_op.create_index(
            "ix_conversation_link_tenant_parent", ["tenant", "parent_uuid"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("conversation_link", schema=None) as batch_op:
        batch_op.drop_index("ix_conversation_link_tenant_parent")
    op.drop_table("conversation_link")
