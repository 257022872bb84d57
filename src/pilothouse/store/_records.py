"""The conversation store: conversations and their immutable, ordered events.

Messages, attachments and timeline events are append-only. The repository
offers no update or delete for them, and a flush that tries either anyway is
refused here, so no code path can rewrite the audit record.

The classes are mapped on the Core tables of :mod:`pilothouse.store._tables`
(the schema is there, and the turn store's statements use it): importing
this module loads SQLAlchemy's ORM, which a turn does not need.
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

from sqlalchemy import event
from sqlalchemy.orm import Mapped, Mapper, relationship

from pilothouse.catalog._enums import (
    FinishReason,
    MessageRole,
    ProcessStatus,
    TimelineKind,
    ToolCallStatus,
)
from pilothouse.store._base import Base
from pilothouse.store._tables import (
    attachment_table,
    conversation_table,
    memory_order,
    message_table,
    timeline_event_table,
    tool_call_table,
    turn_cancel_table,
    turn_owner_table,
)


class AppendOnlyViolation(RuntimeError):
    """Raised when code tries to update or delete an append-only record."""


class Conversation(Base):
    """One agent running one action, with its outcome and totals."""

    __table__ = conversation_table

    id: Mapped[int]
    uuid: Mapped[str]
    tenant: Mapped[str]
    agent_code: Mapped[str | None]
    action_code: Mapped[str]
    status: Mapped[ProcessStatus]
    finish_reason: Mapped[FinishReason | None]
    response_model: Mapped[str | None]
    input_tokens: Mapped[int]
    output_tokens: Mapped[int]
    cached_tokens: Mapped[int]
    reasoning_tokens: Mapped[int]
    estimated_cost: Mapped[Decimal]
    error_detail: Mapped[str | None]
    memory_id: Mapped[str]
    audit: Mapped[bool]
    """Whether this conversation records its audit timeline."""
    created_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    updated_at: Mapped[datetime]
    version: Mapped[int]
    owner: Mapped[str | None]
    face: Mapped[str | None]
    caller_key_prefix: Mapped[str | None]
    caller_key_name: Mapped[str | None]
    """The process (a :class:`TurnOwner`) whose turn holds the conversation; set when
    a turn takes it, so a crash leaves a trace of who held it."""

    __mapper_args__ = {
        "version_id_col": conversation_table.c.version,
        # Read and written by the turn stores' own statements only, so the
        # reading commands work on a database the key-length step refused
        # (which stops before the column's migration).
        "exclude_properties": ["cancelled_at"],
    }

    messages: Mapped[list[Message]] = relationship(
        lazy="raise", order_by="Message.sequence", viewonly=True
    )


class Message(Base):
    """An immutable message of a conversation, ordered by ``sequence``."""

    __table__ = message_table

    id: Mapped[int]
    conversation_id: Mapped[int]
    sequence: Mapped[int]
    role: Mapped[MessageRole]
    content: Mapped[str]
    token_count: Mapped[int | None]
    tool_call_id: Mapped[str | None]
    data: Mapped[dict[str, Any] | None]
    """Structured extras: tool calls requested, question choices, AI marker."""
    created_at: Mapped[datetime]


class Attachment(Base):
    """A file sent with a message: a URL or the bytes themselves."""

    __table__ = attachment_table

    id: Mapped[int]
    conversation_id: Mapped[int]
    message_sequence: Mapped[int]
    sequence: Mapped[int]
    media_type: Mapped[str]
    name: Mapped[str | None]
    url: Mapped[str | None]
    content: Mapped[bytes | None]
    created_at: Mapped[datetime]


class ToolCall(Base):
    """A tool call the model made, with its outcome once known."""

    __table__ = tool_call_table

    id: Mapped[int]
    conversation_id: Mapped[int]
    message_sequence: Mapped[int]
    """The assistant message that asked for the call."""
    call_id: Mapped[str]
    name: Mapped[str]
    arguments: Mapped[dict[str, Any]]
    result: Mapped[str | None]
    status: Mapped[ToolCallStatus]
    created_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]


class TimelineEvent(Base):
    """One audit event of a conversation: request, response, error, change, ..."""

    __table__ = timeline_event_table

    id: Mapped[int]
    conversation_id: Mapped[int]
    sequence: Mapped[int]
    kind: Mapped[TimelineKind]
    data: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]


class TurnOwner(Base):
    """A process that runs turns: its lease on the conversations it takes.

    A process registers once (the first turn, or ``pilothouse serve`` at
    start-up). ``heartbeat_at`` is renewed by a process that runs a heartbeat
    (the service); None means "no heartbeat": such a process is known alive
    only on its own host, by its pid.
    """

    __table__ = turn_owner_table

    id: Mapped[str]
    host: Mapped[str]
    pid: Mapped[int]
    pid_start: Mapped[int | None]
    """The process's start time in clock ticks since boot (Linux), so a reused
    pid (a restarted container's pid 1) is not taken for the dead process."""
    started_at: Mapped[datetime]
    heartbeat_at: Mapped[datetime | None]


class CancelRequest(Base):
    """A cancel asked of a turn that another process runs; that process polls for it."""

    __table__ = turn_cancel_table

    conversation_id: Mapped[int]
    owner: Mapped[str]
    """The owner the request is for: a later turn (another owner) ignores it."""
    reason: Mapped[str]
    requested_at: Mapped[datetime]


def _refuse(mapper: Mapper[Any], connection: Any, target: Any) -> None:
    raise AppendOnlyViolation(
        f"{type(target).__name__} records are append-only: they are never updated or deleted"
    )


for _cls in (Message, Attachment, TimelineEvent):
    event.listen(_cls, "before_update", _refuse)
    event.listen(_cls, "before_delete", _refuse)
