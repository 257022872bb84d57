"""browser UI sessions

The browser UI's login: the cookie holds a random session id, this table
its SHA-256 digest, the prefix of the API key it was opened with and when
it expires. Logging out deletes the row.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06 07:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import pilothouse.store._types

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ui_session",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("key_prefix", sa.String(length=16), nullable=False),
        sa.Column("created_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_ui_session")),
    )
    with op.batch_alter_table("ui_session", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_ui_session_key_prefix"), ["key_prefix"], unique=False)
        batch_op.create_index(batch_op.f("ix_ui_session_expires_at"), ["expires_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("ui_session", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_ui_session_expires_at"))
        batch_op.drop_index(batch_op.f("ix_ui_session_key_prefix"))
    op.drop_table("ui_session")
