"""budgets and what their scopes have spent

The ``budgets`` catalog kind (a spending limit per scope and period) and the
ledger of what each scope has spent and holds in the current period; a
model call's worst case is held by a conditional UPDATE before it is sent.

Revision ID: 0018b
Revises: 0018
Create Date: 2026-12-06 10:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import pilothouse.store._types

revision: str = "0018b"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "budget_usage",
        sa.Column("tenant", sa.String(length=32), nullable=False),
        sa.Column("budget", sa.String(length=12), nullable=False),
        sa.Column("subject", sa.String(length=64), nullable=False),
        sa.Column("period", sa.String(length=24), nullable=False),
        sa.Column("spent_money", sa.Numeric(precision=24, scale=12), nullable=False),
        sa.Column("held_money", sa.Numeric(precision=24, scale=12), nullable=False),
        sa.Column("spent_input", sa.BigInteger(), nullable=False),
        sa.Column("held_input", sa.BigInteger(), nullable=False),
        sa.Column("spent_output", sa.BigInteger(), nullable=False),
        sa.Column("held_output", sa.BigInteger(), nullable=False),
        sa.Column("turns", sa.BigInteger(), nullable=False),
        sa.Column("alerted", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "tenant", "budget", "subject", "period", name=op.f("pk_budget_usage")
        ),
    )
    op.create_table(
        "budget",
        sa.Column("code", sa.String(length=12), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("match", sa.String(length=255), nullable=True),
        sa.Column("model_id", sa.Integer(), nullable=True),
        sa.Column("provider_id", sa.Integer(), nullable=True),
        sa.Column("period", sa.String(length=8), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("money", sa.Numeric(precision=18, scale=6), nullable=True),
        sa.Column("input_tokens", sa.BigInteger(), nullable=True),
        sa.Column("output_tokens", sa.BigInteger(), nullable=True),
        sa.Column("turns", sa.BigInteger(), nullable=True),
        sa.Column("on_limit", sa.String(length=16), nullable=False),
        sa.Column("downgrade_to_id", sa.Integer(), nullable=True),
        sa.Column("thresholds", sa.JSON(), nullable=False),
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(length=32), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["downgrade_to_id"], ["model.id"], name=op.f("fk_budget_downgrade_to_id_model")
        ),
        sa.ForeignKeyConstraint(["model_id"], ["model.id"], name=op.f("fk_budget_model_id_model")),
        sa.ForeignKeyConstraint(
            ["provider_id"], ["provider.id"], name=op.f("fk_budget_provider_id_provider")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_budget")),
        sa.UniqueConstraint("tenant", "code", name=op.f("uq_budget_tenant_code")),
    )
    with op.batch_alter_table("budget", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_budget_tenant"), ["tenant"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("budget", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_budget_tenant"))
    op.drop_table("budget")
    op.drop_table("budget_usage")
