"""turn owners and cancel requests

Who holds a running turn (``conversation.owner``, the ``turn_owner`` lease
of each process that runs turns), so a restarted service can tell a turn a
crash left behind from one another process still runs; and the cancel
requests a process records for a turn another process runs
(``turn_cancel``), which that process polls.

Revision ID: 0011
Revises: 0008
Create Date: 2026-11-26 15:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import pilothouse.store._types

revision: str = "0011"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "turn_owner",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("pid_start", sa.Integer(), nullable=True),
        sa.Column("started_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=False),
        sa.Column(
            "heartbeat_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=True
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_turn_owner")),
    )
    op.create_table(
        "turn_cancel",
        sa.Column("conversation_id", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(length=36), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=False),
        sa.Column(
            "requested_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversation.id"],
            name=op.f("fk_turn_cancel_conversation_id_conversation"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("conversation_id", name=op.f("pk_turn_cancel")),
    )
    with op.batch_alter_table("conversation", schema=None) as batch_op:
        batch_op.add_column(sa.Column("owner", sa.String(length=36), nullable=True))
        batch_op.create_index("ix_conversation_status_owner", ["status", "owner"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("conversation", schema=None) as batch_op:
        batch_op.drop_index("ix_conversation_status_owner")
        batch_op.drop_column("owner")
    op.drop_table("turn_cancel")
    op.drop_table("turn_owner")
