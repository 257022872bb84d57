"""event outbox and processed completions

The outbox of event-tool commands (written in the transaction that suspends
the conversation), the completions applied (keyed by correlation id, so none
applies twice) and the per-skill ``execution`` option (``local`` or
``event``).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26 15:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import pilothouse.store._types

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "event_outbox",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("correlation_id", sa.String(length=64), nullable=False),
        sa.Column("tenant", sa.String(length=32), nullable=False),
        sa.Column("conversation_uuid", sa.String(length=36), nullable=False),
        sa.Column("call_id", sa.String(length=128), nullable=False),
        sa.Column("skill_name", sa.String(length=128), nullable=False),
        sa.Column("topic", sa.String(length=249), nullable=False),
        sa.Column("reply_to", sa.String(length=249), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=False),
        sa.Column("deadline", pilothouse.store._types.UtcDateTime(timezone=True), nullable=False),
        sa.Column(
            "published_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=True
        ),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_event_outbox")),
        sa.UniqueConstraint("correlation_id", name=op.f("uq_event_outbox_correlation_id")),
    )
    with op.batch_alter_table("event_outbox", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_event_outbox_conversation_uuid"), ["conversation_uuid"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_event_outbox_deadline"), ["deadline"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_event_outbox_published_at"), ["published_at"], unique=False
        )
    op.create_table(
        "event_processed",
        sa.Column("correlation_id", sa.String(length=64), nullable=False),
        sa.Column("tenant", sa.String(length=32), nullable=True),
        sa.Column("conversation_uuid", sa.String(length=36), nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column(
            "processed_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=False
        ),
        sa.Column("duplicates", sa.Integer(), nullable=False),
        sa.Column(
            "last_duplicate_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=True
        ),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("correlation_id", name=op.f("pk_event_processed")),
    )
    with op.batch_alter_table("skill", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("execution", sa.String(length=16), nullable=False, server_default="local")
        )


def downgrade() -> None:
    with op.batch_alter_table("skill", schema=None) as batch_op:
        batch_op.drop_column("execution")
    op.drop_table("event_processed")
    with op.batch_alter_table("event_outbox", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_event_outbox_published_at"))
        batch_op.drop_index(batch_op.f("ix_event_outbox_deadline"))
        batch_op.drop_index(batch_op.f("ix_event_outbox_conversation_uuid"))
    op.drop_table("event_outbox")
