"""retrieval rerank and background ingestion jobs

A document collection may rerank its fused candidates with its ``qa_model``
(``rerank``, ``rerank_candidates``); a REST ingestion may run in the
background as a job whose progress is read back (``knowledge_ingest_job``).

Revision ID: 0018e_rag
Revises: 0018e_mcp
Create Date: 2026-12-06 18:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import pilothouse.store._types

revision: str = "0018e_rag"
down_revision: str | None = "0018e_mcp"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("document_collection", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("rerank", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.add_column(
            sa.Column("rerank_candidates", sa.Integer(), nullable=False, server_default="10")
        )
    op.create_table(
        "knowledge_ingest_job",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=36), nullable=False),
        sa.Column("tenant", sa.String(length=32), nullable=False),
        sa.Column("collection", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("owner", sa.String(length=64), nullable=True),
        sa.Column("documents_total", sa.Integer(), nullable=False),
        sa.Column("documents_done", sa.Integer(), nullable=False),
        sa.Column("chunks_total", sa.Integer(), nullable=False),
        sa.Column("chunks_embedded", sa.Integer(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=False),
        sa.Column("finished_at", pilothouse.store._types.UtcDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_knowledge_ingest_job")),
        sa.UniqueConstraint("job_id", name=op.f("uq_knowledge_ingest_job_job_id")),
    )
    with op.batch_alter_table("knowledge_ingest_job", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_knowledge_ingest_job_tenant"), ["tenant"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("knowledge_ingest_job", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_knowledge_ingest_job_tenant"))
    op.drop_table("knowledge_ingest_job")
    with op.batch_alter_table("document_collection", schema=None) as batch_op:
        batch_op.drop_column("rerank_candidates")
        batch_op.drop_column("rerank")
