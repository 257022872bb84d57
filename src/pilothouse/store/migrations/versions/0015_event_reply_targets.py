"""event reply targets

Where a ``run_action`` whose turn waited on an event tool is answered once
its conversation finishes: the reply topic and the caller's correlation id,
kept with the conversation so the final ``turn_finished`` survives a
restart of the process in between.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 18:15:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import pilothouse.store._types

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "event_reply",
        sa.Column("correlation_id", sa.String(length=64), nullable=False),
        sa.Column("tenant", sa.String(length=32), nullable=False),
        sa.Column("conversation_uuid", sa.String(length=36), nullable=False),
        sa.Column("reply_to", sa.String(length=249), nullable=False),
        sa.Column("created_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=False),
        sa.Column("claimed_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=True),
        sa.Column(
            "published_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=True
        ),
        sa.PrimaryKeyConstraint("correlation_id", name=op.f("pk_event_reply")),
        sa.UniqueConstraint("conversation_uuid", name=op.f("uq_event_reply_conversation_uuid")),
    )
    with op.batch_alter_table("event_reply", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_event_reply_published_at"), ["published_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("event_reply", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_event_reply_published_at"))
    op.drop_table("event_reply")
