"""The write side of the conversation store.

A turn owns its conversation while it runs (status ``RU``, taken with one
conditional UPDATE so two turns can never run at once), numbers its own
messages and events, and writes each step of the turn as one
:class:`TurnBatch` in one transaction: few round trips, and never a
half-written step.
"""

from __future__ import annotations

__all__ = [
    "ConversationWriter",
    "NewAttachment",
    "NewEvent",
    "NewMessage",
    "NewToolCall",
    "ToolCallOutcome",
    "TurnBatch",
    "TurnHandle",
]

import uuid as uuid_module
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from pilothouse.catalog._enums import (
    MessageRole,
    ProcessStatus,
    TimelineKind,
    ToolCallStatus,
)
from pilothouse.errors import InvalidStateError, NotFoundError
from pilothouse.store._base import utcnow
from pilothouse.store._engine import Database
from pilothouse.store._records import (
    Attachment,
    Conversation,
    Message,
    TimelineEvent,
    ToolCall,
)

#: Statuses from which a new user message may start a turn. ``CO`` is here
#: because a conversation takes many turns; each turn completes it again.
STARTABLE = frozenset({ProcessStatus.NOT_STARTED, ProcessStatus.COMPLETED})


@dataclass(frozen=True)
class NewAttachment:
    """A file sent with a message: a URL or the bytes."""

    media_type: str
    url: str | None = None
    content: bytes | None = None
    name: str | None = None


@dataclass(frozen=True)
class NewMessage:
    """A message to append; its sequence is assigned by the turn."""

    role: MessageRole
    content: str
    token_count: int | None = None
    tool_call_id: str | None = None
    data: Mapping[str, Any] | None = None
    attachments: tuple[NewAttachment, ...] = ()


@dataclass(frozen=True)
class NewToolCall:
    """A tool call the model asked for in the batch's assistant message."""

    call_id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class ToolCallOutcome:
    """The result of a tool call recorded earlier."""

    call_id: str
    status: ToolCallStatus
    result: str


@dataclass(frozen=True)
class NewEvent:
    """An audit event for the conversation's timeline."""

    kind: TimelineKind
    data: Mapping[str, Any] = field(default_factory=lambda: {})
    at: datetime = field(default_factory=utcnow)
    """When it happened; batches are written later than their events occur."""


@dataclass
class TurnBatch:
    """Everything one step of a turn writes, committed together.

    Attributes:
        messages: appended in order.
        tool_calls: calls requested by the last assistant message of this
            batch (or of an earlier batch when ``messages`` has none).
        outcomes: results of earlier tool calls.
        events: timeline events (dropped when the conversation's audit is off).
        changes: conversation columns to set (status, finish_reason, ...).
        usage: token and cost increments to add to the conversation totals.
    """

    messages: list[NewMessage] = field(default_factory=lambda: [])
    tool_calls: list[NewToolCall] = field(default_factory=lambda: [])
    outcomes: list[ToolCallOutcome] = field(default_factory=lambda: [])
    events: list[NewEvent] = field(default_factory=lambda: [])
    changes: dict[str, Any] = field(default_factory=lambda: {})
    usage: dict[str, int | Decimal] = field(default_factory=lambda: {})

    def __bool__(self) -> bool:
        return bool(
            self.messages
            or self.tool_calls
            or self.outcomes
            or self.events
            or self.changes
            or self.usage
        )


@dataclass
class TurnHandle:
    """A running turn's hold on its conversation and its sequence counters."""

    conversation_id: int
    uuid: str
    action_code: str
    agent_code: str | None
    memory_id: str
    audit: bool
    next_message: int
    next_event: int
    last_assistant_sequence: int | None = None
    previous_status: ProcessStatus = ProcessStatus.NOT_STARTED


_USAGE_COLUMNS = {
    "input_tokens": Conversation.input_tokens,
    "output_tokens": Conversation.output_tokens,
    "cached_tokens": Conversation.cached_tokens,
    "reasoning_tokens": Conversation.reasoning_tokens,
    "estimated_cost": Conversation.estimated_cost,
}


class ConversationWriter:
    """Creates conversations and writes the steps of their turns.

    Args:
        database: the store.
        tenant: every conversation written belongs to this tenant.
    """

    def __init__(self, database: Database, tenant: str) -> None:
        self._db = database
        self._tenant = tenant

    async def create(
        self,
        *,
        action_code: str,
        agent_code: str | None,
        memory_id: str | None = None,
        audit: bool = True,
    ) -> Conversation:
        """Record a new conversation in status ``NS``.

        Args:
            action_code: the action the conversation runs.
            agent_code: the agent running it, if any.
            memory_id: shares chat memory with other conversations; defaults
                to the conversation's own uuid.
            audit: whether its timeline is recorded.

        Returns:
            The stored conversation.
        """
        conversation_uuid = str(uuid_module.uuid4())
        conversation = Conversation(
            uuid=conversation_uuid,
            tenant=self._tenant,
            action_code=action_code,
            agent_code=agent_code,
            status=ProcessStatus.NOT_STARTED,
            memory_id=memory_id or conversation_uuid,
            audit=audit,
        )
        async with self._db.sessions.begin() as session:
            session.add(conversation)
        return conversation

    async def begin_turn(
        self,
        conversation_uuid: str,
        *,
        allowed: Iterable[ProcessStatus] = STARTABLE,
    ) -> TurnHandle:
        """Take the conversation for one turn, flipping it to ``RU``.

        Args:
            conversation_uuid: the conversation.
            allowed: statuses the turn may start from.

        Returns:
            The handle the turn writes through.

        Raises:
            NotFoundError: no such conversation for this tenant.
            InvalidStateError: the conversation is running or finished.
        """
        allowed_set = frozenset(allowed)
        async with self._db.sessions.begin() as session:
            # One statement reads the conversation and where its numbering
            # stands: a turn's start is on every turn's path.
            found = (
                await session.execute(
                    select(
                        Conversation,
                        _max_of(Message.sequence, Message.conversation_id),
                        _max_of(TimelineEvent.sequence, TimelineEvent.conversation_id),
                        _max_of(
                            Message.sequence,
                            Message.conversation_id,
                            Message.role == MessageRole.ASSISTANT,
                        ),
                    ).where(
                        Conversation.uuid == conversation_uuid,
                        Conversation.tenant == self._tenant,
                    )
                )
            ).first()
            if found is None:
                raise NotFoundError(f"conversation '{conversation_uuid}' not found")
            row, next_message, next_event, last_assistant = found
            if row.status not in allowed_set:
                raise InvalidStateError(_refusal(conversation_uuid, row.status))
            now = utcnow()
            # The status in the WHERE clause makes the flip atomic: of two
            # concurrent turns, exactly one sees its UPDATE match.
            result = await session.execute(
                update(Conversation)
                .where(Conversation.id == row.id, Conversation.status == row.status)
                .values(
                    status=ProcessStatus.RUNNING,
                    started_at=row.started_at or now,
                    finished_at=None,
                    error_detail=None,
                    version=Conversation.version + 1,
                    updated_at=now,
                )
                .execution_options(synchronize_session=False)
            )
            if getattr(result, "rowcount", 1) != 1:
                raise InvalidStateError(_refusal(conversation_uuid, ProcessStatus.RUNNING))
            handle = TurnHandle(
                conversation_id=row.id,
                uuid=row.uuid,
                action_code=row.action_code,
                agent_code=row.agent_code,
                memory_id=row.memory_id,
                audit=row.audit,
                next_message=int(next_message or 0) + 1,
                next_event=int(next_event or 0) + 1,
                last_assistant_sequence=last_assistant,
                previous_status=row.status,
            )
            if handle.audit:
                self._add_events(
                    session,
                    handle,
                    [
                        NewEvent(
                            TimelineKind.STATUS_CHANGE,
                            {"from": row.status.value, "to": ProcessStatus.RUNNING.value},
                        )
                    ],
                )
        return handle

    async def write(self, handle: TurnHandle, batch: TurnBatch) -> list[int]:
        """Write one step of a turn in one transaction.

        Args:
            handle: the running turn.
            batch: what the step produced.

        Returns:
            The sequences given to ``batch.messages``, in order.
        """
        if not batch:
            return []
        async with self._db.sessions.begin() as session:
            return await self.write_in(session, handle, batch)

    async def write_in(
        self, session: AsyncSession, handle: TurnHandle, batch: TurnBatch
    ) -> list[int]:
        """Write a batch inside a transaction the caller owns.

        Lets a caller group the batches of several turns in one commit.
        """
        sequences = self._add_messages(session, handle, batch.messages)
        if batch.tool_calls:
            owner = handle.last_assistant_sequence
            if owner is None:
                raise InvalidStateError("tool calls recorded before any assistant message")
            await session.execute(
                insert(ToolCall),
                [
                    {
                        "conversation_id": handle.conversation_id,
                        "message_sequence": owner,
                        "call_id": call.call_id,
                        "name": call.name,
                        "arguments": dict(call.arguments),
                        "status": ToolCallStatus.REQUESTED,
                        "created_at": utcnow(),
                    }
                    for call in batch.tool_calls
                ],
            )
        for outcome in batch.outcomes:
            await session.execute(
                update(ToolCall)
                .where(
                    ToolCall.conversation_id == handle.conversation_id,
                    ToolCall.call_id == outcome.call_id,
                )
                .values(status=outcome.status, result=outcome.result, finished_at=utcnow())
                .execution_options(synchronize_session=False)
            )
        if batch.events and handle.audit:
            self._add_events(session, handle, batch.events)
        if batch.changes or batch.usage:
            values: dict[Any, Any] = dict(batch.changes)
            for name, amount in batch.usage.items():
                values[name] = _USAGE_COLUMNS[name] + amount
            values["version"] = Conversation.version + 1
            values["updated_at"] = utcnow()
            await session.execute(
                update(Conversation)
                .where(Conversation.id == handle.conversation_id)
                .values(values)
                .execution_options(synchronize_session=False)
            )
        return sequences

    def _add_messages(
        self, session: AsyncSession, handle: TurnHandle, messages: list[NewMessage]
    ) -> list[int]:
        sequences: list[int] = []
        now = utcnow()
        for message in messages:
            sequence = handle.next_message
            handle.next_message += 1
            if message.role is MessageRole.ASSISTANT:
                handle.last_assistant_sequence = sequence
            session.add(
                Message(
                    conversation_id=handle.conversation_id,
                    sequence=sequence,
                    role=message.role,
                    content=message.content,
                    token_count=message.token_count,
                    tool_call_id=message.tool_call_id,
                    data=dict(message.data) if message.data is not None else None,
                    created_at=now,
                )
            )
            for index, attachment in enumerate(message.attachments, start=1):
                session.add(
                    Attachment(
                        conversation_id=handle.conversation_id,
                        message_sequence=sequence,
                        sequence=index,
                        media_type=attachment.media_type,
                        name=attachment.name,
                        url=attachment.url,
                        content=attachment.content,
                        created_at=now,
                    )
                )
            sequences.append(sequence)
        return sequences

    @staticmethod
    def _add_events(session: AsyncSession, handle: TurnHandle, events: list[NewEvent]) -> None:
        for item in events:
            session.add(
                TimelineEvent(
                    conversation_id=handle.conversation_id,
                    sequence=handle.next_event,
                    kind=item.kind,
                    data=dict(item.data),
                    created_at=item.at,
                )
            )
            handle.next_event += 1

    async def _load(self, session: AsyncSession, conversation_uuid: str) -> Conversation:
        row = await session.scalar(
            select(Conversation).where(
                Conversation.uuid == conversation_uuid, Conversation.tenant == self._tenant
            )
        )
        if row is None:
            raise NotFoundError(f"conversation '{conversation_uuid}' not found")
        return row


def _max_of(column: Any, owner: Any, *conditions: Any) -> Any:
    """A scalar subquery: the largest ``column`` of the outer conversation's rows."""
    return (
        select(func.max(column))
        .where(owner == Conversation.id, *conditions)
        .correlate(Conversation)
        .scalar_subquery()
    )


def _refusal(conversation_uuid: str, status: ProcessStatus) -> str:
    reasons = {
        ProcessStatus.RUNNING: "is running a turn; wait for it to finish or cancel it",
        ProcessStatus.WAITING: "is waiting for answers to its questions; submit them first",
        ProcessStatus.FAILED: "has failed and is finished; start a new conversation",
        ProcessStatus.TERMINATED: "was cancelled and is finished; start a new conversation",
        ProcessStatus.KILLED: "was killed and is finished; start a new conversation",
    }
    reason = reasons.get(status, f"is in status {status.name} ({status.value})")
    return f"conversation '{conversation_uuid}' {reason}"
