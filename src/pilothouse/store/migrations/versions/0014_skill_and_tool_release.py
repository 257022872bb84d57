"""skill and tool release

genai-4j's skill and tool ``version VARCHAR(20) DEFAULT '1.0.0'`` (seed 002):
a semantic version of each skill and tool, ``release`` here because every
catalog row's ``version`` is its optimistic-lock counter. Existing rows get
the seed's default, 1.0.0.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26 18:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for table in ("skill", "tool"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(
                sa.Column("release", sa.String(length=20), nullable=False, server_default="1.0.0")
            )


def downgrade() -> None:
    for table in ("skill", "tool"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("release")
