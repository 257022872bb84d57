"""evaluation datasets and replay runs (eval): recorded cases and their replays

A dataset holds cases, each an input (text and input data) with the output
and the tool results a conversation recorded for it; replays answer tool
calls from them and scorers compare new outputs against them.

Revision ID: 0018c
Revises: 0018b
Create Date: 2026-12-06 15:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import pilothouse.store._types

revision: str = "0018c"
down_revision: str | None = "0018b"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "dataset",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dataset")),
        sa.UniqueConstraint("tenant", "name", name=op.f("uq_dataset_tenant_name")),
    )
    op.create_table(
        "dataset_case",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("sequence", sa.Integer(), nullable=False),
        sa.Column("source_conversation", sa.String(length=36), nullable=True),
        sa.Column("action_code", sa.String(length=12), nullable=False),
        sa.Column("agent_code", sa.String(length=12), nullable=True),
        sa.Column("input_text", sa.Text(), nullable=False),
        sa.Column("input_data", sa.JSON(), nullable=True),
        sa.Column("expected_output", sa.Text(), nullable=True),
        sa.Column("tool_calls", sa.JSON(), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("recorded", sa.JSON(), nullable=False),
        sa.Column("created_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["dataset.id"], name=op.f("fk_dataset_case_dataset_id_dataset")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dataset_case")),
        sa.UniqueConstraint(
            "dataset_id", "sequence", name=op.f("uq_dataset_case_dataset_id_sequence")
        ),
    )
    with op.batch_alter_table("dataset_case", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_dataset_case_dataset_id"), ["dataset_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_dataset_case_source_conversation"), ["source_conversation"], unique=False
        )

    op.create_table(
        "replay_run",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("dataset", sa.String(length=128), nullable=False),
        sa.Column("target", sa.JSON(), nullable=False),
        sa.Column("created_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=False),
        sa.Column("finished_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_replay_run")),
        sa.UniqueConstraint("tenant", "name", name=op.f("uq_replay_run_tenant_name")),
    )
    op.create_table(
        "replay_result",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("case_sequence", sa.Integer(), nullable=False),
        sa.Column("conversation_uuid", sa.String(length=36), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("output", sa.Text(), nullable=True),
        sa.Column("tool_calls", sa.JSON(), nullable=False),
        sa.Column("divergences", sa.JSON(), nullable=False),
        sa.Column("answered", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("cost", sa.Numeric(precision=18, scale=8), nullable=False),
        sa.Column("latency_ms", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["replay_run.id"], name=op.f("fk_replay_result_run_id_replay_run")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_replay_result")),
        sa.UniqueConstraint(
            "run_id", "case_sequence", name=op.f("uq_replay_result_run_id_case_sequence")
        ),
    )
    with op.batch_alter_table("replay_result", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_replay_result_run_id"), ["run_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("replay_result", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_replay_result_run_id"))
    op.drop_table("replay_result")
    op.drop_table("replay_run")
    with op.batch_alter_table("dataset_case", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_dataset_case_source_conversation"))
        batch_op.drop_index(batch_op.f("ix_dataset_case_dataset_id"))
    op.drop_table("dataset_case")
    op.drop_table("dataset")
