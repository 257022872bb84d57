"""The embedded store's tables: documents, chunks and one state row per collection.

They live in pilothouse's own database beside the catalog, so the embedded
default needs no server of its own. Vectors are float32 blobs (4 bytes per
dimension, little-endian); full text is SQLite FTS5 (``knowledge_chunk_fts``,
an external-content table kept in step by triggers) or, on PostgreSQL, a GIN
index over ``to_tsvector('english', text)``. Both are created by migration
0004, which is also where the triggers are.
"""

from __future__ import annotations

__all__ = ["CollectionState", "IngestJob", "KnowledgeChunk", "KnowledgeDocument"]

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from pilothouse.store._base import Base, utcnow
from pilothouse.store._types import UtcDateTime


class CollectionState(Base):
    """What a collection's vectors were made with, and a counter of its changes.

    ``revision`` grows with every document written or deleted, so a process
    holding an in-memory index knows, with one read, whether it is current.
    ``dimension`` and ``model`` are set by the first ingestion; a later one
    with another model is refused (vectors of two models do not compare).
    """

    __tablename__ = "knowledge_collection"

    collection_id: Mapped[int] = mapped_column(
        ForeignKey("document_collection.id", ondelete="CASCADE"), primary_key=True
    )
    revision: Mapped[int] = mapped_column(Integer, default=0)
    dimension: Mapped[int | None] = mapped_column(Integer)
    model: Mapped[str | None] = mapped_column(String(300))
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)


class KnowledgeDocument(Base):
    """One ingested document (a file, a URL or given text) of a collection."""

    __tablename__ = "knowledge_document"
    __table_args__ = (UniqueConstraint("collection_id", "source"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    collection_id: Mapped[int] = mapped_column(
        ForeignKey("document_collection.id", ondelete="CASCADE"), index=True
    )
    source: Mapped[str] = mapped_column(String(1024))
    """Where it came from: a resolved file path, a URL, or a caller's name."""
    title: Mapped[str] = mapped_column(String(512), default="")
    content_hash: Mapped[str] = mapped_column(String(64))
    """SHA-256 of the extracted text and the chunking that was applied."""
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    chunk_count: Mapped[int] = mapped_column(Integer, default=0)
    char_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)


class KnowledgeChunk(Base):
    """One chunk of a document, with its vector."""

    __tablename__ = "knowledge_chunk"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    """Also the key of the chunk in the full-text table and the HNSW index."""
    document_id: Mapped[int] = mapped_column(
        ForeignKey("knowledge_document.id", ondelete="CASCADE"), index=True
    )
    collection_id: Mapped[int] = mapped_column(Integer, index=True)
    position: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    heading: Mapped[str] = mapped_column(Text, default="")
    """The headings above the chunk, outermost first, joined by `` > ``."""
    token_count: Mapped[int] = mapped_column(Integer)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    embedding: Mapped[bytes] = mapped_column(LargeBinary)


class IngestJob(Base):
    """An ingestion run in the background for a REST call, with its progress.

    The documents of a job are held by the process that runs it, never
    stored: a job whose process is gone cannot go on, and is marked
    ``failed`` (with that reason) when a service starts or its status is read.
    """

    __tablename__ = "knowledge_ingest_job"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(36), unique=True)
    """The id callers see (random, so one job's id tells nothing of another's)."""
    tenant: Mapped[str] = mapped_column(String(32), index=True)
    collection: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    """``pending``, ``running``, ``done`` or ``failed``."""
    owner: Mapped[str | None] = mapped_column(String(64))
    """The lease owner of the process that runs it."""
    documents_total: Mapped[int] = mapped_column(Integer, default=0)
    documents_done: Mapped[int] = mapped_column(Integer, default=0)
    chunks_total: Mapped[int] = mapped_column(Integer, default=0)
    chunks_embedded: Mapped[int] = mapped_column(Integer, default=0)
    result: Mapped[dict[str, Any] | None] = mapped_column()
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
