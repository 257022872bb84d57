"""virtual MCP servers: a tenant's named bundles of tools

The ``virtual_servers`` catalog kind (served at ``/mcp/<code>``) and its
member links to actions, agents and tools.

Revision ID: 0018e_mcp
Revises: 0018c
Create Date: 2026-12-06 18:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import pilothouse.store._types

revision: str = "0018e_mcp"
down_revision: str | None = "0018c"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "virtual_server",
        sa.Column("code", sa.String(length=12), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("operations", sa.JSON(), nullable=False),
        sa.Column("builtins", sa.JSON(), nullable=False),
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(length=32), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_virtual_server")),
        sa.UniqueConstraint("tenant", "code", name=op.f("uq_virtual_server_tenant_code")),
    )
    with op.batch_alter_table("virtual_server", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_virtual_server_tenant"), ["tenant"], unique=False)
    for member in ("action", "agent", "tool"):
        op.create_table(
            f"virtual_server_{member}",
            sa.Column("virtual_server_id", sa.Integer(), nullable=False),
            sa.Column(f"{member}_id", sa.Integer(), nullable=False),
            sa.Column("position", sa.Integer(), nullable=False),
            sa.ForeignKeyConstraint(
                [f"{member}_id"],
                [f"{member}.id"],
                name=op.f(f"fk_virtual_server_{member}_{member}_id_{member}"),
            ),
            sa.ForeignKeyConstraint(
                ["virtual_server_id"],
                ["virtual_server.id"],
                name=op.f(f"fk_virtual_server_{member}_virtual_server_id_virtual_server"),
                ondelete="CASCADE",
            ),
            sa.PrimaryKeyConstraint(
                "virtual_server_id", f"{member}_id", name=op.f(f"pk_virtual_server_{member}")
            ),
        )


def downgrade() -> None:
    for member in ("action", "agent", "tool"):
        op.drop_table(f"virtual_server_{member}")
    with op.batch_alter_table("virtual_server", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_virtual_server_tenant"))
    op.drop_table("virtual_server")
