"""when a conversation was last cancelled while idle

``conversation.cancelled_at``: set, on the database's clock, by a cancel
that terminates a conversation no turn runs. A turn whose message arrived
before it (still being prepared in another process, nothing of it written)
then ends ``TE`` instead of running. Existing rows keep NULL.

After the key-length step (0019): a database that step refused stays
readable without this column (the ORM's ``Conversation`` does not map it).

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07 23:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import pilothouse.store._types

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("conversation", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "cancelled_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=True
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("conversation", schema=None) as batch_op:
        batch_op.drop_column("cancelled_at")
