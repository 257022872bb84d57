"""Scoped long-term memory tables: records, their versions, extraction jobs, erasure log.

They live in pilothouse's own database beside the conversations (migrations
0006 and 0017), so the embedded default needs no server of its own and PostgreSQL
holds them the same way. Vectors are float32 blobs (4 bytes per dimension,
little-endian), as the knowledge store keeps them: a scope holds few records
(a user's facts, a session's last hundred), so they are compared exactly in
the process after SQL has narrowed the rows to one scope.

Every read and write names the tenant and the scope's keys in SQL: a record
of one user, agent or session is never loaded for another, so no filter in
Python can forget one.
"""

from __future__ import annotations

__all__ = ["MemoryErasure", "MemoryJob", "MemoryRecord", "MemoryRecordVersion", "MemorySession"]

from datetime import datetime
from typing import Any

from sqlalchemy import (
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from pilothouse.store._base import Base, utcnow
from pilothouse.store._types import UtcDateTime


class MemoryRecord(Base):
    """One remembered thing of one scope: session, user, agent or organization.

    The scope decides which keys are set: ``session`` has ``session_id`` and
    ``agent`` (and ``user_id`` unless anonymous), ``user`` has ``user_id``
    and ``agent``, ``agent`` has ``agent`` only, ``organization`` none (the
    tenant is the organization).

    ``source_conversation`` and ``source_user`` are its provenance: the
    conversation and user its current value was derived from (extraction and
    session turns set them; a record a caller added, and every record written
    before provenance was kept, has none). Erasing a user deletes every record
    derived from them, whatever its scope.
    """

    __tablename__ = "memory_record"
    __table_args__ = (
        Index("ix_memory_record_scope_user", "tenant", "scope", "user_id"),
        Index("ix_memory_record_scope_agent", "tenant", "scope", "agent"),
        Index("ix_memory_record_scope_session", "tenant", "scope", "session_id"),
        Index("ix_memory_record_expires", "expires_at"),
        Index("ix_memory_record_source_user", "tenant", "source_user"),
        Index("ix_memory_record_source_conversation", "tenant", "source_conversation"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True)
    tenant: Mapped[str] = mapped_column(String(32))
    scope: Mapped[str] = mapped_column(String(16))
    user_id: Mapped[str | None] = mapped_column(String(128))
    agent: Mapped[str | None] = mapped_column(String(64))
    session_id: Mapped[str | None] = mapped_column(String(64))
    content: Mapped[str] = mapped_column(Text)
    content_hash: Mapped[str] = mapped_column(String(64))
    """SHA-256 of the normalised content: the same fact twice is one record."""
    memory_type: Mapped[str] = mapped_column(String(32))
    importance: Mapped[float] = mapped_column(Float, default=1.0)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    embedding: Mapped[bytes] = mapped_column(LargeBinary)
    model: Mapped[str] = mapped_column(String(300))
    """The embedding model's name: vectors of two models never compare."""
    access_count: Mapped[int] = mapped_column(Integer, default=0)
    last_accessed_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    source_conversation: Mapped[str | None] = mapped_column(String(64))
    """The conversation (session) the current value was derived from."""
    source_user: Mapped[str | None] = mapped_column(String(128))
    """The user whose conversation the current value was derived from."""


class MemoryRecordVersion(Base):
    """A value a memory record held before a change (an edit, an extraction UPDATE).

    ``valid_from`` and ``valid_to`` bound when the record held it; the current
    value is the record itself. Versions keep their own provenance and go
    with their record (forget, erasure, expiry: the foreign key cascades).
    """

    __tablename__ = "memory_version"
    __table_args__ = (
        Index("ix_memory_version_record", "record_id", "valid_to"),
        Index("ix_memory_version_source_user", "tenant", "source_user"),
        Index("ix_memory_version_source_conversation", "tenant", "source_conversation"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    record_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("memory_record.id", ondelete="CASCADE")
    )
    tenant: Mapped[str] = mapped_column(String(32))
    content: Mapped[str] = mapped_column(Text)
    memory_type: Mapped[str] = mapped_column(String(32))
    importance: Mapped[float] = mapped_column(Float)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    source_conversation: Mapped[str | None] = mapped_column(String(64))
    source_user: Mapped[str | None] = mapped_column(String(128))
    change: Mapped[str] = mapped_column(String(16))
    """What replaced this value: ``edit`` or ``extraction``."""
    valid_from: Mapped[datetime] = mapped_column(UtcDateTime)
    valid_to: Mapped[datetime] = mapped_column(UtcDateTime)


class MemoryJob(Base):
    """A durable request to extract facts from one turn, run after the turn.

    ``status`` is ``pending``, ``running`` (taken by a worker until
    ``lease_until``: a worker that dies leaves it to be taken again),
    ``done`` or ``failed`` (after ``max_attempts``, with ``error``).
    """

    __tablename__ = "memory_job"
    __table_args__ = (Index("ix_memory_job_status", "status", "lease_until"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(32))
    conversation_uuid: Mapped[str | None] = mapped_column(String(36), index=True)
    user_id: Mapped[str | None] = mapped_column(String(128), index=True)
    agent: Mapped[str | None] = mapped_column(String(64))
    session_id: Mapped[str | None] = mapped_column(String(64))
    action_code: Mapped[str | None] = mapped_column(String(12))
    extraction_model: Mapped[str | None] = mapped_column(String(12))
    """A catalog model's code; None uses the action's own model."""
    messages: Mapped[list[Any]] = mapped_column(default=list)
    """The turn's messages as ``[{"role": ..., "content": ...}]``."""
    status: Mapped[str] = mapped_column(String(12), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    lease_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    error: Mapped[str | None] = mapped_column(Text)
    outcome: Mapped[dict[str, Any]] = mapped_column(default=dict)
    """Counts of ``ADD``, ``UPDATE``, ``DELETE`` and ``NOOP`` once done."""
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class MemoryErasure(Base):
    """The audit event of one erasure of everything about a user.

    It keeps what accountability needs and nothing the erasure removed: the
    user id only as a keyed digest (``sha256(tenant + ":" + user_id)``: whoever
    holds the id can show that its erasure happened; the row alone names no
    one), who asked, when, and how many rows of each kind went.
    """

    __tablename__ = "memory_erasure"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(32), index=True)
    subject_digest: Mapped[str] = mapped_column(String(64), index=True)
    requested_by: Mapped[str] = mapped_column(String(128))
    reason: Mapped[str] = mapped_column(String(512), default="")
    counts: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class MemorySession(Base):
    """Which user a session (a conversation using scoped memory) served.

    Written on the session's first scoped turn; erasing a user finds that
    user's conversations here, to cut their chat memory loose.
    """

    __tablename__ = "memory_session"
    __table_args__ = (UniqueConstraint("tenant", "session_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(32))
    session_id: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str | None] = mapped_column(String(128), index=True)
    agent: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
