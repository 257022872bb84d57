"""The read side of the conversation store.

:class:`ConversationQueries` answers every question the API, the CLI, the
HTTP service and chat memory ask about recorded conversations. Every query is
scoped to one tenant: a conversation of another tenant is simply "not found",
so a caller cannot even learn that a uuid exists elsewhere.

Each method costs a fixed, small number of statements (never one per
message), and returns rows detached from their session, safe to use after it
closed. :meth:`ConversationQueries.transcript` returns a
:class:`ConversationView`, the one serializable shape of a whole conversation.
"""

from __future__ import annotations

__all__ = [
    "AttachmentView",
    "ConversationInfo",
    "ConversationQueries",
    "ConversationView",
    "MessageView",
    "Page",
    "TimelineEventView",
    "ToolCallView",
]

import builtins
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, field_serializer
from sqlalchemy import ColumnElement, Select, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from pilothouse._cost import cost_text
from pilothouse.catalog._enums import (
    FinishReason,
    MessageRole,
    ProcessStatus,
    TimelineKind,
    ToolCallStatus,
)
from pilothouse.errors import NotFoundError
from pilothouse.store._engine import Database
from pilothouse.store._records import (
    Attachment,
    Conversation,
    Message,
    TimelineEvent,
    ToolCall,
    memory_order,
)

T = TypeVar("T")

#: Roles whose message answers the model's questions; a question counts as
#: pending only while no such message follows it.
_ANSWER_ROLES = (MessageRole.USER, MessageRole.TOOL)


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing.

    Attributes:
        items: the rows of this page.
        total: how many rows match the filters over all pages.
        limit: the page size asked for.
        offset: how many matching rows precede this page.
    """

    items: list[T]
    total: int
    limit: int
    offset: int


class _View(BaseModel):
    # Frozen, and built straight from ORM rows by attribute.
    model_config = ConfigDict(frozen=True, from_attributes=True)


class ConversationInfo(_View):
    """Every field of a conversation, without its events.

    Serialized with ``model_dump(mode="json")``: statuses, finish reasons and
    roles as their wire codes, times as ISO 8601 strings, and
    ``estimated_cost`` as a plain decimal **string** (``"0.00012"``, ``"0"``,
    never ``"0E-8"``), so no precision is lost to floating point.

    ``face``, ``caller_key_prefix`` and ``caller_key_name`` say who started
    the conversation: the face it came through (``rest``, ``openai``,
    ``invoke``, ``jsonrpc``, ``mcp``, ``bus``, ``cli``, ``playground``,
    ``python``, ``replay``) and the API key's prefix and name (None without a key, and
    on conversations recorded before these were kept).
    """

    uuid: str
    tenant: str
    agent_code: str | None
    action_code: str
    status: ProcessStatus
    finish_reason: FinishReason | None
    response_model: str | None
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    reasoning_tokens: int
    estimated_cost: Decimal
    error_detail: str | None
    memory_id: str
    audit: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    version: int
    face: str | None = None
    caller_key_prefix: str | None = None
    caller_key_name: str | None = None

    @field_serializer("estimated_cost", when_used="json")
    def _plain_cost(self, value: Decimal) -> str:
        return cost_text(value)


class AttachmentView(_View):
    """An attachment of a message; the bytes stay in the store.

    ``size`` is the length of the stored bytes (None for a URL attachment);
    :meth:`ConversationQueries.attachments` returns the bytes themselves.
    """

    sequence: int
    media_type: str
    name: str | None
    url: str | None
    size: int | None
    created_at: datetime


class MessageView(_View):
    """One message of a transcript, with its attachments."""

    sequence: int
    role: MessageRole
    content: str
    token_count: int | None
    tool_call_id: str | None
    data: dict[str, Any] | None
    created_at: datetime
    attachments: list[AttachmentView]


class ToolCallView(_View):
    """A tool call and its outcome."""

    message_sequence: int
    call_id: str
    name: str
    arguments: dict[str, Any]
    result: str | None
    status: ToolCallStatus
    created_at: datetime
    finished_at: datetime | None


class TimelineEventView(_View):
    """One audit event."""

    sequence: int
    kind: TimelineKind
    data: dict[str, Any]
    created_at: datetime


class ConversationView(ConversationInfo):
    """A whole conversation: its fields, messages, tool calls and timeline.

    ``model_dump(mode="json")`` (or ``model_dump_json()``) gives the one JSON
    shape the CLI, the HTTP service and exports share.
    """

    messages: list[MessageView]
    tool_calls: list[ToolCallView]
    timeline: list[TimelineEventView]


class ConversationQueries:
    """Reads the conversations of one tenant.

    Args:
        database: the store.
        tenant: only this tenant's conversations are visible.
    """

    def __init__(self, database: Database, tenant: str) -> None:
        self._db = database
        self._tenant = tenant

    async def get(self, uuid: str) -> Conversation:
        """Return one conversation.

        Raises:
            NotFoundError: no conversation with this uuid for this tenant.
        """
        async with self._db.sessions() as session:
            return await self._conversation(session, uuid)

    async def list(
        self,
        *,
        agent: str | None = None,
        action: str | None = None,
        status: ProcessStatus | None = None,
        created_from: datetime | None = None,
        created_to: datetime | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> Page[Conversation]:
        """List conversations, newest first.

        Args:
            agent: only this agent's conversations.
            action: only conversations of this action.
            status: only conversations in this status.
            created_from: created at or after this (aware) time.
            created_to: created strictly before this (aware) time.
            limit: page size (at least 1).
            offset: rows to skip (at least 0).

        Returns:
            The page and the total number of matching conversations.
        """
        if limit < 1 or offset < 0:
            raise ValueError("limit must be at least 1 and offset at least 0")
        conditions: builtins.list[ColumnElement[bool]] = [Conversation.tenant == self._tenant]
        if agent is not None:
            conditions.append(Conversation.agent_code == agent)
        if action is not None:
            conditions.append(Conversation.action_code == action)
        if status is not None:
            conditions.append(Conversation.status == status)
        if created_from is not None:
            conditions.append(Conversation.created_at >= created_from)
        if created_to is not None:
            conditions.append(Conversation.created_at < created_to)
        async with self._db.sessions() as session:
            total = await session.scalar(
                select(func.count()).select_from(Conversation).where(*conditions)
            )
            rows = await session.scalars(
                select(Conversation)
                .where(*conditions)
                .order_by(Conversation.created_at.desc(), Conversation.id.desc())
                .limit(limit)
                .offset(offset)
            )
            return Page(
                items=builtins.list(rows), total=int(total or 0), limit=limit, offset=offset
            )

    async def messages(self, uuid: str) -> builtins.list[Message]:
        """Return a conversation's messages in sequence order.

        Raises:
            NotFoundError: no conversation with this uuid for this tenant.
        """
        return await self._events(
            uuid,
            lambda owner: (
                select(Message).where(Message.conversation_id == owner).order_by(Message.sequence)
            ),
        )

    async def attachments(self, uuid: str) -> builtins.list[Attachment]:
        """Return a conversation's attachments, bytes included, in message order.

        Raises:
            NotFoundError: no conversation with this uuid for this tenant.
        """
        return await self._events(
            uuid,
            lambda owner: (
                select(Attachment)
                .where(Attachment.conversation_id == owner)
                .order_by(Attachment.message_sequence, Attachment.sequence)
            ),
        )

    async def tool_calls(self, uuid: str) -> builtins.list[ToolCall]:
        """Return a conversation's tool calls in the order they were asked for.

        Raises:
            NotFoundError: no conversation with this uuid for this tenant.
        """
        return await self._events(
            uuid,
            lambda owner: (
                select(ToolCall)
                .where(ToolCall.conversation_id == owner)
                .order_by(ToolCall.message_sequence, ToolCall.id)
            ),
        )

    async def timeline(self, uuid: str) -> builtins.list[TimelineEvent]:
        """Return a conversation's audit events in order.

        Raises:
            NotFoundError: no conversation with this uuid for this tenant.
        """
        return await self._events(
            uuid,
            lambda owner: (
                select(TimelineEvent)
                .where(TimelineEvent.conversation_id == owner)
                .order_by(TimelineEvent.sequence)
            ),
        )

    async def pending_questions(self, uuid: str) -> builtins.list[Message]:
        """Return the questions still waiting for an answer.

        Those are the ``QU`` messages after the latest user or tool message,
        and only while the conversation is waiting (``WA``); in any other
        status nothing is pending.

        Raises:
            NotFoundError: no conversation with this uuid for this tenant.
        """
        async with self._db.sessions() as session:
            conversation = await self._conversation(session, uuid)
            if conversation.status is not ProcessStatus.WAITING:
                return []
            last_answer = (
                select(func.coalesce(func.max(Message.sequence), 0))
                .where(
                    Message.conversation_id == conversation.id,
                    Message.role.in_(_ANSWER_ROLES),
                )
                .scalar_subquery()
            )
            rows = await session.scalars(
                select(Message)
                .where(
                    Message.conversation_id == conversation.id,
                    Message.role == MessageRole.QUESTION,
                    Message.sequence > last_answer,
                )
                .order_by(Message.sequence)
            )
            return builtins.list(rows)

    async def memory_messages(
        self, memory_id: str, *, limit: int | None = None
    ) -> builtins.list[Message]:
        """Return the messages of every conversation sharing a memory id, oldest first.

        Args:
            memory_id: the shared chat memory.
            limit: keep only the most recent ``limit`` messages (a window);
                None keeps them all.
        """
        # Newest first, so a window is a LIMIT; reversed below.
        newest_first = [column.desc() for column in memory_order()]
        statement = (
            select(Message)
            .join(Conversation, Conversation.id == Message.conversation_id)
            .where(Conversation.tenant == self._tenant, Conversation.memory_id == memory_id)
            .order_by(*newest_first)
        )
        if limit is not None:
            statement = statement.limit(max(limit, 0))
        async with self._db.sessions() as session:
            rows = builtins.list(await session.scalars(statement))
        rows.reverse()
        return rows

    async def transcript(self, uuid: str) -> ConversationView:
        """Return the whole conversation as one serializable view (five statements).

        Raises:
            NotFoundError: no conversation with this uuid for this tenant.
        """
        async with self._db.sessions() as session:
            conversation = await self._conversation(session, uuid)
            owner = conversation.id
            messages = await session.scalars(
                select(Message).where(Message.conversation_id == owner).order_by(Message.sequence)
            )
            attachment_rows = await session.execute(
                select(
                    Attachment.message_sequence,
                    Attachment.sequence,
                    Attachment.media_type,
                    Attachment.name,
                    Attachment.url,
                    func.length(Attachment.content).label("size"),
                    Attachment.created_at,
                )
                .where(Attachment.conversation_id == owner)
                .order_by(Attachment.message_sequence, Attachment.sequence)
            )
            by_message: defaultdict[int, builtins.list[AttachmentView]] = defaultdict(builtins.list)
            for row in attachment_rows:
                by_message[row.message_sequence].append(AttachmentView.model_validate(row))
            calls = await session.scalars(
                select(ToolCall)
                .where(ToolCall.conversation_id == owner)
                .order_by(ToolCall.message_sequence, ToolCall.id)
            )
            events = await session.scalars(
                select(TimelineEvent)
                .where(TimelineEvent.conversation_id == owner)
                .order_by(TimelineEvent.sequence)
            )
            info = ConversationInfo.model_validate(conversation)
            return ConversationView(
                **dict(info),
                messages=[
                    MessageView(
                        sequence=m.sequence,
                        role=m.role,
                        content=m.content,
                        token_count=m.token_count,
                        tool_call_id=m.tool_call_id,
                        data=m.data,
                        created_at=m.created_at,
                        attachments=by_message.get(m.sequence, []),
                    )
                    for m in messages
                ],
                tool_calls=[ToolCallView.model_validate(c) for c in calls],
                timeline=[TimelineEventView.model_validate(e) for e in events],
            )

    async def _conversation(self, session: AsyncSession, uuid: str) -> Conversation:
        row = await session.scalar(
            select(Conversation).where(
                Conversation.uuid == uuid, Conversation.tenant == self._tenant
            )
        )
        if row is None:
            raise NotFoundError(f"conversation '{uuid}' not found")
        return row

    async def _events(self, uuid: str, statement: Callable[[int], Select[T]]) -> builtins.list[T]:
        """Check the conversation is visible, then run ``statement(conversation id)``."""
        async with self._db.sessions() as session:
            conversation = await self._conversation(session, uuid)
            return builtins.list(await session.scalars(statement(conversation.id)))
