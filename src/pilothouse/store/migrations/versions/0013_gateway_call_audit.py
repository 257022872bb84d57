"""gateway call audit

One row per call the OpenAPI → MCP gateway proxies (``gateway_call``): who
(tenant, API key prefix, or the conversation of a turn), which operation,
the HTTP status, the outcome and the latency; never arguments or header
values.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26 18:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import pilothouse.store._types

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "gateway_call",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(length=32), nullable=False),
        sa.Column("gateway", sa.String(length=64), nullable=False),
        sa.Column("tool", sa.String(length=128), nullable=False),
        sa.Column("operation", sa.String(length=512), nullable=False),
        sa.Column("via", sa.String(length=8), nullable=False),
        sa.Column("key_prefix", sa.String(length=32), nullable=True),
        sa.Column("conversation_uuid", sa.String(length=36), nullable=True),
        sa.Column("call_id", sa.String(length=128), nullable=True),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("outcome", sa.String(length=64), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("created_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gateway_call")),
    )
    with op.batch_alter_table("gateway_call", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_gateway_call_tenant"), ["tenant"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_gateway_call_conversation_uuid"), ["conversation_uuid"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_gateway_call_created_at"), ["created_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("gateway_call", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_gateway_call_created_at"))
        batch_op.drop_index(batch_op.f("ix_gateway_call_conversation_uuid"))
        batch_op.drop_index(batch_op.f("ix_gateway_call_tenant"))
    op.drop_table("gateway_call")
