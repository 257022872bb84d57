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
from functools import cache
from typing import Any, cast

from sqlalchemy import Row, Select, Table, bindparam, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

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


AnyRow = Row[*tuple[Any, ...]]
"""A result row of any shape."""


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
    memory: list[AnyRow] = field(default_factory=lambda: [])
    """Messages sharing the memory id when the turn began (``read_memory``)."""
    first_sequences: list[int] = field(default_factory=lambda: [])
    """The sequences given to the messages of ``begin_turn``'s first step."""


class ConversationWriter:
    """Creates conversations and writes the steps of their turns.

    Writes go through SQLAlchemy Core on the tables, not the ORM unit of work:
    every step of every turn passes here, and the ORM's flush bookkeeping
    cost several times the statements themselves (measured in
    ``docs/benchmarks.md``). Appended rows of one kind go in one
    executemany.

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
            The stored conversation (detached: it belongs to no session).
        """
        conversation_uuid = str(uuid_module.uuid4())
        now = utcnow()
        values: dict[str, Any] = {
            "uuid": conversation_uuid,
            "tenant": self._tenant,
            "action_code": action_code,
            "agent_code": agent_code,
            "status": ProcessStatus.NOT_STARTED,
            "memory_id": memory_id or conversation_uuid,
            "audit": audit,
            "input_tokens": 0,
            "output_tokens": 0,
            "cached_tokens": 0,
            "reasoning_tokens": 0,
            "estimated_cost": Decimal(0),
            "created_at": now,
            "updated_at": now,
            "version": 1,
        }
        async with self._db.engine.begin() as connection:
            result = await connection.execute(insert(_CONVERSATION), values)
        (conversation_id,) = result.inserted_primary_key or (None,)
        return Conversation(id=conversation_id, **values)

    async def begin_turn(
        self,
        conversation_uuid: str,
        *,
        allowed: Iterable[ProcessStatus] = STARTABLE,
        first: TurnBatch | None = None,
        read_memory: bool = False,
    ) -> TurnHandle:
        """Take the conversation for one turn, flipping it to ``RU``.

        One transaction: the read of the conversation, the flip, the status
        event and, when given, the turn's first step and the read of its
        memory (before that step is written).

        Args:
            conversation_uuid: the conversation.
            allowed: statuses the turn may start from.
            first: the turn's first step (usually the user's message).
            read_memory: read every message sharing the conversation's memory
                id into :attr:`TurnHandle.memory`.

        Returns:
            The handle the turn writes through.

        Raises:
            NotFoundError: no such conversation for this tenant.
            InvalidStateError: the conversation is running or finished.
        """
        allowed_set = frozenset(allowed)
        async with self._db.engine.begin() as connection:
            # One statement reads the conversation and where its numbering
            # stands: a turn's start is on every turn's path.
            found = (
                await connection.execute(
                    _begin_statement(), {"uuid": conversation_uuid, "tenant": self._tenant}
                )
            ).first()
            if found is None:
                raise NotFoundError(f"conversation '{conversation_uuid}' not found")
            status: ProcessStatus = found.status
            if status not in allowed_set:
                raise InvalidStateError(_refusal(conversation_uuid, status))
            now = utcnow()
            # The status in the WHERE clause makes the flip atomic: of two
            # concurrent turns, exactly one sees its UPDATE match.
            result = await connection.execute(
                update(_CONVERSATION)
                .where(_CONVERSATION.c.id == found.id, _CONVERSATION.c.status == status)
                .values(
                    status=ProcessStatus.RUNNING,
                    started_at=found.started_at or now,
                    finished_at=None,
                    error_detail=None,
                    version=_CONVERSATION.c.version + 1,
                    updated_at=now,
                )
            )
            if result.rowcount != 1:
                raise InvalidStateError(_refusal(conversation_uuid, ProcessStatus.RUNNING))
            handle = TurnHandle(
                conversation_id=found.id,
                uuid=found.uuid,
                action_code=found.action_code,
                agent_code=found.agent_code,
                memory_id=found.memory_id,
                audit=found.audit,
                next_message=int(found.next_message or 0) + 1,
                next_event=int(found.next_event or 0) + 1,
                last_assistant_sequence=found.last_assistant,
                previous_status=status,
            )
            if read_memory:
                handle.memory = await _memory(connection, self._tenant, handle.memory_id)
            batch = first or TurnBatch()
            if handle.audit:
                batch.events = [
                    NewEvent(
                        TimelineKind.STATUS_CHANGE,
                        {"from": status.value, "to": ProcessStatus.RUNNING.value},
                        at=now,
                    ),
                    *batch.events,
                ]
            handle.first_sequences = await _write(connection, handle, batch)
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
        async with self._db.engine.begin() as connection:
            return await _write(connection, handle, batch)


_CONVERSATION = cast(Table, Conversation.__table__)
_MESSAGE = cast(Table, Message.__table__)
_ATTACHMENT = cast(Table, Attachment.__table__)
_TOOL_CALL = cast(Table, ToolCall.__table__)
_EVENT = cast(Table, TimelineEvent.__table__)

_USAGE_COLUMNS = frozenset(
    {"input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens", "estimated_cost"}
)


@cache
def _begin_statement() -> Select[*tuple[Any, ...]]:
    """The conversation with its next message/event numbers, built once."""
    conversation = _CONVERSATION.c
    return select(
        conversation.id,
        conversation.uuid,
        conversation.action_code,
        conversation.agent_code,
        conversation.memory_id,
        conversation.audit,
        conversation.status,
        conversation.started_at,
        _max_of(_MESSAGE.c.sequence, _MESSAGE.c.conversation_id).label("next_message"),
        _max_of(_EVENT.c.sequence, _EVENT.c.conversation_id).label("next_event"),
        _max_of(
            _MESSAGE.c.sequence,
            _MESSAGE.c.conversation_id,
            _MESSAGE.c.role == MessageRole.ASSISTANT,
        ).label("last_assistant"),
    ).where(conversation.uuid == bindparam("uuid"), conversation.tenant == bindparam("tenant"))


async def _memory(connection: AsyncConnection, tenant: str, memory_id: str) -> list[AnyRow]:
    """Every message sharing ``memory_id``, oldest first."""
    message = _MESSAGE.c
    rows = (
        await connection.execute(
            select(
                message.role,
                message.content,
                message.tool_call_id,
                message.data,
                message.token_count,
            )
            .join(_CONVERSATION, _CONVERSATION.c.id == message.conversation_id)
            .where(_CONVERSATION.c.tenant == tenant, _CONVERSATION.c.memory_id == memory_id)
            # Messages of one step share a timestamp; the conversation and
            # the sequence break the tie so the order is the writing order.
            .order_by(message.created_at, message.conversation_id, message.sequence)
        )
    ).all()
    return list(rows)


async def _write(connection: AsyncConnection, handle: TurnHandle, batch: TurnBatch) -> list[int]:
    """Write ``batch`` on ``connection``, inside the caller's transaction."""
    now = utcnow()
    sequences: list[int] = []
    message_rows: list[dict[str, Any]] = []
    attachment_rows: list[dict[str, Any]] = []
    for message in batch.messages:
        sequence = handle.next_message
        handle.next_message += 1
        if message.role is MessageRole.ASSISTANT:
            handle.last_assistant_sequence = sequence
        message_rows.append(
            {
                "conversation_id": handle.conversation_id,
                "sequence": sequence,
                "role": message.role,
                "content": message.content,
                "token_count": message.token_count,
                "tool_call_id": message.tool_call_id,
                "data": dict(message.data) if message.data is not None else None,
                "created_at": now,
            }
        )
        attachment_rows.extend(
            {
                "conversation_id": handle.conversation_id,
                "message_sequence": sequence,
                "sequence": index,
                "media_type": attachment.media_type,
                "name": attachment.name,
                "url": attachment.url,
                "content": attachment.content,
                "created_at": now,
            }
            for index, attachment in enumerate(message.attachments, start=1)
        )
        sequences.append(sequence)
    if message_rows:
        await connection.execute(insert(_MESSAGE), message_rows)
    if attachment_rows:
        await connection.execute(insert(_ATTACHMENT), attachment_rows)
    if batch.tool_calls:
        owner = handle.last_assistant_sequence
        if owner is None:
            raise InvalidStateError("tool calls recorded before any assistant message")
        await connection.execute(
            insert(_TOOL_CALL),
            [
                {
                    "conversation_id": handle.conversation_id,
                    "message_sequence": owner,
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": dict(call.arguments),
                    "status": ToolCallStatus.REQUESTED,
                    "result": None,
                    "created_at": now,
                    "finished_at": None,
                }
                for call in batch.tool_calls
            ],
        )
    for outcome in batch.outcomes:
        await connection.execute(
            update(_TOOL_CALL)
            .where(
                _TOOL_CALL.c.conversation_id == handle.conversation_id,
                _TOOL_CALL.c.call_id == outcome.call_id,
            )
            .values(status=outcome.status, result=outcome.result, finished_at=now)
        )
    if batch.events and handle.audit:
        rows: list[dict[str, Any]] = []
        for item in batch.events:
            rows.append(
                {
                    "conversation_id": handle.conversation_id,
                    "sequence": handle.next_event,
                    "kind": item.kind,
                    "data": dict(item.data),
                    "created_at": item.at,
                }
            )
            handle.next_event += 1
        await connection.execute(insert(_EVENT), rows)
    if batch.changes or batch.usage:
        columns = _CONVERSATION.c
        values: dict[str, Any] = dict(batch.changes)
        for name, amount in batch.usage.items():
            if name not in _USAGE_COLUMNS:
                raise ValueError(f"unknown usage column {name!r}")
            values[name] = columns[name] + amount
        values["version"] = columns.version + 1
        values["updated_at"] = now
        await connection.execute(
            update(_CONVERSATION).where(columns.id == handle.conversation_id).values(values)
        )
    return sequences


def _max_of(column: Any, owner: Any, *conditions: Any) -> Any:
    """A scalar subquery: the largest ``column`` of the outer conversation's rows."""
    return (
        select(func.max(column))
        .where(owner == _CONVERSATION.c.id, *conditions)
        .correlate(_CONVERSATION)
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
