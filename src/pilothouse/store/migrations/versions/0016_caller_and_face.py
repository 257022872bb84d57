"""caller and face of conversations and gateway calls

Who started a conversation and through which face: ``face``,
``caller_key_prefix`` and ``caller_key_name`` on ``conversation``; the
gateway's audit rows get ``face`` and ``key_name`` beside their
``key_prefix``. Existing rows keep NULL: nobody recorded who made them.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06 07:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("conversation", schema=None) as batch_op:
        batch_op.add_column(sa.Column("face", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("caller_key_prefix", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("caller_key_name", sa.String(length=128), nullable=True))
    with op.batch_alter_table("gateway_call", schema=None) as batch_op:
        batch_op.add_column(sa.Column("face", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("key_name", sa.String(length=128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gateway_call", schema=None) as batch_op:
        batch_op.drop_column("key_name")
        batch_op.drop_column("face")
    with op.batch_alter_table("conversation", schema=None) as batch_op:
        batch_op.drop_column("caller_key_name")
        batch_op.drop_column("caller_key_prefix")
        batch_op.drop_column("face")
