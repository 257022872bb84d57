"""The conversation store: conversations and their immutable, ordered events.

Messages, attachments and timeline events are append-only. The repository
offers no update or delete for them, and a flush that tries either anyway is
refused here, so no code path can rewrite the audit record.
"""

from __future__ import annotations

__all__ = [
    "memory_order",
    "AppendOnlyViolation",
    "CancelRequest",
    "TurnOwner",
    "Attachment",
    "Conversation",
    "Message",
    "TimelineEvent",
    "ToolCall",
]

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    Numeric,
    String,
    Text,
    UniqueConstraint,
    event,
)
from sqlalchemy.orm import Mapped, Mapper, mapped_column, relationship

from pilothouse.catalog._enums import (
    FinishReason,
    MessageRole,
    ProcessStatus,
    TimelineKind,
    ToolCallStatus,
)
from pilothouse.store._base import Base, utcnow
from pilothouse.store._types import UtcDateTime, coded_enum


class AppendOnlyViolation(RuntimeError):
    """Raised when code tries to update or delete an append-only record."""


class Conversation(Base):
    """One agent running one action, with its outcome and totals."""

    __tablename__ = "conversation"
    __table_args__ = (
        Index("ix_conversation_tenant_created", "tenant", "created_at"),
        Index("ix_conversation_tenant_memory", "tenant", "memory_id"),
        # The start-up sweep and the owners' cancel poll look for running
        # turns by owner; without it both would scan every conversation.
        Index("ix_conversation_status_owner", "status", "owner"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True)
    tenant: Mapped[str] = mapped_column(String(32), default="default")
    agent_code: Mapped[str | None] = mapped_column(String(12))
    action_code: Mapped[str] = mapped_column(String(12))
    status: Mapped[ProcessStatus] = mapped_column(
        coded_enum(ProcessStatus, "process_status"), default=ProcessStatus.NOT_STARTED
    )
    finish_reason: Mapped[FinishReason | None] = mapped_column(
        coded_enum(FinishReason, "finish_reason")
    )
    response_model: Mapped[str | None] = mapped_column(String(256))
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cached_tokens: Mapped[int] = mapped_column(Integer, default=0)
    reasoning_tokens: Mapped[int] = mapped_column(Integer, default=0)
    estimated_cost: Mapped[Decimal] = mapped_column(Numeric(18, 8), default=Decimal(0))
    error_detail: Mapped[str | None] = mapped_column(Text)
    memory_id: Mapped[str] = mapped_column(String(64))
    audit: Mapped[bool] = mapped_column(default=True)
    """Whether this conversation records its audit timeline."""
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    owner: Mapped[str | None] = mapped_column(String(36))
    """The process (a :class:`TurnOwner`) whose turn holds the conversation; set when
    a turn takes it, so a crash leaves a trace of who held it."""

    __mapper_args__ = {"version_id_col": version}

    messages: Mapped[list[Message]] = relationship(
        lazy="raise", order_by="Message.sequence", viewonly=True
    )


class Message(Base):
    """An immutable message of a conversation, ordered by ``sequence``."""

    __tablename__ = "message"
    __table_args__ = (UniqueConstraint("conversation_id", "sequence"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversation.id"))
    sequence: Mapped[int] = mapped_column(Integer)
    role: Mapped[MessageRole] = mapped_column(coded_enum(MessageRole, "message_role"))
    content: Mapped[str] = mapped_column(Text, default="")
    token_count: Mapped[int | None] = mapped_column(Integer)
    tool_call_id: Mapped[str | None] = mapped_column(String(128))
    data: Mapped[dict[str, Any] | None] = mapped_column()
    """Structured extras: tool calls requested, question choices, AI marker."""
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class Attachment(Base):
    """A file sent with a message: a URL or the bytes themselves."""

    __tablename__ = "attachment"
    __table_args__ = (UniqueConstraint("conversation_id", "message_sequence", "sequence"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversation.id"))
    message_sequence: Mapped[int] = mapped_column(Integer)
    sequence: Mapped[int] = mapped_column(Integer)
    media_type: Mapped[str] = mapped_column(String(128))
    name: Mapped[str | None] = mapped_column(String(256))
    url: Mapped[str | None] = mapped_column(Text)
    content: Mapped[bytes | None] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class ToolCall(Base):
    """A tool call the model made, with its outcome once known."""

    __tablename__ = "tool_call"
    __table_args__ = (UniqueConstraint("conversation_id", "call_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversation.id"))
    message_sequence: Mapped[int] = mapped_column(Integer)
    """The assistant message that asked for the call."""
    call_id: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(128))
    arguments: Mapped[dict[str, Any]] = mapped_column(default=dict)
    result: Mapped[str | None] = mapped_column(Text)
    status: Mapped[ToolCallStatus] = mapped_column(
        coded_enum(ToolCallStatus, "tool_call_status"), default=ToolCallStatus.REQUESTED
    )
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class TimelineEvent(Base):
    """One audit event of a conversation: request, response, error, change, ..."""

    __tablename__ = "timeline_event"
    __table_args__ = (UniqueConstraint("conversation_id", "sequence"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversation.id"))
    sequence: Mapped[int] = mapped_column(Integer)
    kind: Mapped[TimelineKind] = mapped_column(coded_enum(TimelineKind, "timeline_kind"))
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class TurnOwner(Base):
    """A process that runs turns: its lease on the conversations it takes.

    A process registers once (the first turn, or ``pilothouse serve`` at
    start-up). ``heartbeat_at`` is renewed by a process that runs a heartbeat
    (the service); None means "no heartbeat": such a process is known alive
    only on its own host, by its pid.
    """

    __tablename__ = "turn_owner"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    pid_start: Mapped[int | None] = mapped_column(Integer)
    """The process's start time in clock ticks since boot (Linux), so a reused
    pid (a restarted container's pid 1) is not taken for the dead process."""
    started_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class CancelRequest(Base):
    """A cancel asked of a turn that another process runs; that process polls for it."""

    __tablename__ = "turn_cancel"

    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("conversation.id", ondelete="CASCADE"), primary_key=True
    )
    owner: Mapped[str] = mapped_column(String(36))
    """The owner the request is for: a later turn (another owner) ignores it."""
    reason: Mapped[str] = mapped_column(String(64), default="cancelled")
    requested_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


def _refuse(mapper: Mapper[Any], connection: Any, target: Any) -> None:
    raise AppendOnlyViolation(
        f"{type(target).__name__} records are append-only: they are never updated or deleted"
    )


def memory_order() -> tuple[Any, ...]:
    """The columns that order a chat memory's messages in writing order.

    Messages of one step share a timestamp; the conversation and the
    sequence break the tie. The turn's memory read and the query API's
    window both sort by them.
    """
    return (Message.created_at, Message.conversation_id, Message.sequence)


for _cls in (Message, Attachment, TimelineEvent):
    event.listen(_cls, "before_update", _refuse)
    event.listen(_cls, "before_delete", _refuse)
