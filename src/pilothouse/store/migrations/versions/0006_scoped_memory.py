"""scoped long-term memory

Memory records of four scopes (session, user, agent, organization) with their
vectors, the durable extraction jobs, the sessions' users (for erasure), the
erasure log, and the settings of a scoped memory strategy.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26 15:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import pilothouse.store._types

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = pilothouse.store._types.UtcDateTime


def upgrade() -> None:
    op.create_table(
        "memory_record",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("tenant", sa.String(length=32), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=True),
        sa.Column("agent", sa.String(length=64), nullable=True),
        sa.Column("session_id", sa.String(length=64), nullable=True),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("memory_type", sa.String(length=32), nullable=False),
        sa.Column("importance", sa.Float(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("embedding", sa.LargeBinary(), nullable=False),
        sa.Column("model", sa.String(length=300), nullable=False),
        sa.Column("access_count", sa.Integer(), nullable=False),
        sa.Column("last_accessed_at", _TS(timezone=True), nullable=True),
        sa.Column("created_at", _TS(timezone=True), nullable=False),
        sa.Column("updated_at", _TS(timezone=True), nullable=False),
        sa.Column("expires_at", _TS(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_record")),
        sa.UniqueConstraint("uuid", name=op.f("uq_memory_record_uuid")),
    )
    with op.batch_alter_table("memory_record", schema=None) as batch_op:
        batch_op.create_index("ix_memory_record_expires", ["expires_at"], unique=False)
        batch_op.create_index(
            "ix_memory_record_scope_agent", ["tenant", "scope", "agent"], unique=False
        )
        batch_op.create_index(
            "ix_memory_record_scope_session", ["tenant", "scope", "session_id"], unique=False
        )
        batch_op.create_index(
            "ix_memory_record_scope_user", ["tenant", "scope", "user_id"], unique=False
        )

    op.create_table(
        "memory_job",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(length=32), nullable=False),
        sa.Column("conversation_uuid", sa.String(length=36), nullable=True),
        sa.Column("user_id", sa.String(length=128), nullable=True),
        sa.Column("agent", sa.String(length=64), nullable=True),
        sa.Column("session_id", sa.String(length=64), nullable=True),
        sa.Column("action_code", sa.String(length=12), nullable=True),
        sa.Column("extraction_model", sa.String(length=12), nullable=True),
        sa.Column("messages", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("lease_until", _TS(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("outcome", sa.JSON(), nullable=False),
        sa.Column("created_at", _TS(timezone=True), nullable=False),
        sa.Column("updated_at", _TS(timezone=True), nullable=False),
        sa.Column("finished_at", _TS(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_job")),
    )
    with op.batch_alter_table("memory_job", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_memory_job_conversation_uuid"), ["conversation_uuid"], unique=False
        )
        batch_op.create_index("ix_memory_job_status", ["status", "lease_until"], unique=False)
        batch_op.create_index(batch_op.f("ix_memory_job_user_id"), ["user_id"], unique=False)

    op.create_table(
        "memory_erasure",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(length=32), nullable=False),
        sa.Column("subject_digest", sa.String(length=64), nullable=False),
        sa.Column("requested_by", sa.String(length=128), nullable=False),
        sa.Column("reason", sa.String(length=512), nullable=False),
        sa.Column("counts", sa.JSON(), nullable=False),
        sa.Column("created_at", _TS(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_erasure")),
    )
    with op.batch_alter_table("memory_erasure", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_memory_erasure_subject_digest"), ["subject_digest"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_memory_erasure_tenant"), ["tenant"], unique=False)

    op.create_table(
        "memory_session",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(length=32), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=True),
        sa.Column("agent", sa.String(length=64), nullable=True),
        sa.Column("created_at", _TS(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_session")),
        sa.UniqueConstraint(
            "tenant", "session_id", name=op.f("uq_memory_session_tenant_session_id")
        ),
    )
    with op.batch_alter_table("memory_session", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_memory_session_user_id"), ["user_id"], unique=False)

    with op.batch_alter_table("memory_strategy", schema=None) as batch_op:
        batch_op.add_column(sa.Column("settings", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("memory_strategy", schema=None) as batch_op:
        batch_op.drop_column("settings")
    with op.batch_alter_table("memory_session", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_memory_session_user_id"))
    op.drop_table("memory_session")
    with op.batch_alter_table("memory_erasure", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_memory_erasure_tenant"))
        batch_op.drop_index(batch_op.f("ix_memory_erasure_subject_digest"))
    op.drop_table("memory_erasure")
    with op.batch_alter_table("memory_job", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_memory_job_user_id"))
        batch_op.drop_index("ix_memory_job_status")
        batch_op.drop_index(batch_op.f("ix_memory_job_conversation_uuid"))
    op.drop_table("memory_job")
    with op.batch_alter_table("memory_record", schema=None) as batch_op:
        batch_op.drop_index("ix_memory_record_scope_user")
        batch_op.drop_index("ix_memory_record_scope_session")
        batch_op.drop_index("ix_memory_record_scope_agent")
        batch_op.drop_index("ix_memory_record_expires")
    op.drop_table("memory_record")
