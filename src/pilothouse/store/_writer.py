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
from functools import cache, lru_cache
from typing import Any, cast

from sqlalchemy import (
    Connection,
    Insert,
    Select,
    Table,
    Update,
    bindparam,
    func,
    insert,
    select,
    update,
)

from pilothouse.catalog._enums import (
    MessageRole,
    ProcessStatus,
    TimelineKind,
    ToolCallStatus,
)
from pilothouse.catalog._models import Action, Agent, CatalogRevision
from pilothouse.errors import InvalidStateError, NotFoundError
from pilothouse.store import _fastsql as fastsql
from pilothouse.store._base import utcnow
from pilothouse.store._engine import Database
from pilothouse.store._records import (
    Attachment,
    Conversation,
    Message,
    TimelineEvent,
    ToolCall,
    memory_order,
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
    memory: list[Any] = field(default_factory=lambda: [])
    """Messages sharing the memory id when the turn began (``read_memory``)."""
    catalog_revision: int = 0
    """The tenant's catalog revision when the turn began."""


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
        audit: bool | None = None,
        default_audit: bool = True,
        check_catalog: bool = False,
    ) -> Conversation:
        """Record a new conversation in status ``NS``, after checking its action and agent.

        Args:
            action_code: the action the conversation runs.
            agent_code: the agent running it, if any.
            memory_id: shares chat memory with other conversations; defaults
                to the conversation's own uuid.
            audit: whether its timeline is recorded; None follows the
                action's switch, then ``default_audit``.
            default_audit: the deployment's setting.
            check_catalog: check that the action and the agent exist and are
                active (off for ad-hoc actions, which the catalog lacks).

        Returns:
            The stored conversation (detached: it belongs to no session).

        Raises:
            NotFoundError: the action or the agent does not exist.
            InvalidStateError: the action or the agent is deactivated.
        """
        values = _new_conversation(
            str(uuid_module.uuid4()),
            self._tenant,
            action_code,
            agent_code,
            memory_id,
            audit,
            utcnow(),
        )
        conversation_id, values["audit"] = await self._db.transaction(
            _insert_conversation, values, default_audit, check_catalog
        )
        return Conversation(id=conversation_id, **values)

    async def start_turn(
        self,
        conversation_uuid: str,
        *,
        action_code: str,
        agent_code: str | None,
        first: TurnBatch,
        memory_id: str | None = None,
        audit: bool | None = None,
        default_audit: bool = True,
        check_catalog: bool = False,
    ) -> TurnHandle:
        """Record a new conversation already taken by its first turn, in one transaction.

        What :meth:`create` and :meth:`begin_turn` write, minus the moment in
        between: the checks of the action and agent, the conversation row (in
        ``RU``), the status event ``NS`` → ``RU`` and ``first``; the memory
        is read when ``memory_id`` is shared with earlier conversations. A
        refused action or agent writes nothing.

        Args:
            conversation_uuid: the new conversation's uuid.
            action_code: the action the conversation runs.
            agent_code: the agent running it, if any.
            first: the turn's first step (usually the user's message).
            memory_id: shares chat memory with other conversations; defaults
                to the conversation's own uuid.
            audit: whether its timeline is recorded; None follows the
                action's switch, then ``default_audit``.
            default_audit: the deployment's setting.
            check_catalog: check that the action and the agent exist and are
                active, and read the catalog revision.

        Returns:
            The handle the turn writes through.

        Raises:
            NotFoundError: the action or the agent does not exist.
            InvalidStateError: the action or the agent is deactivated.
        """
        now = utcnow()
        values = _new_conversation(
            conversation_uuid, self._tenant, action_code, agent_code, memory_id, audit, now
        )
        values["status"] = ProcessStatus.RUNNING
        values["started_at"] = now
        return await self._db.transaction(_start_turn, values, default_audit, check_catalog, first)

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
        return await self._db.transaction(
            _begin, self._tenant, conversation_uuid, frozenset(allowed), first, read_memory
        )

    async def memory(self, memory_id: str) -> list[Any]:
        """Every message sharing ``memory_id``, oldest first (what ``read_memory`` reads)."""
        return await self._db.transaction(_memory, self._tenant, memory_id)

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
        return await self._db.transaction(_write, handle, batch)


_CONVERSATION = cast(Table, Conversation.__table__)
_MESSAGE = cast(Table, Message.__table__)
_ATTACHMENT = cast(Table, Attachment.__table__)
_TOOL_CALL = cast(Table, ToolCall.__table__)
_EVENT = cast(Table, TimelineEvent.__table__)

_USAGE_COLUMNS = (
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "estimated_cost",
)


@dataclass(frozen=True)
class _Statements:
    """The statements on every turn's path, built once.

    A statement object built once also keeps its cache key, which SQLAlchemy
    otherwise computes from the expression tree on every execution.
    """

    insert_conversation: Insert
    insert_message: Insert
    insert_attachment: Insert
    insert_event: Insert
    action_check: Select[*tuple[Any, ...]]
    agent_check: Select[*tuple[Any, ...]]
    take: Update
    memory: Select[*tuple[Any, ...]]


@cache
def _statements() -> _Statements:
    conversation, message = _CONVERSATION.c, _MESSAGE.c
    return _Statements(
        insert_conversation=insert(_CONVERSATION),
        insert_message=insert(_MESSAGE),
        insert_attachment=insert(_ATTACHMENT),
        insert_event=insert(_EVENT),
        action_check=select(
            Action.active,
            Action.audit,
            select(CatalogRevision.revision)
            .where(CatalogRevision.tenant == bindparam("b_tenant"))
            .scalar_subquery()
            .label("catalog_revision"),
        ).where(Action.tenant == bindparam("b_tenant"), Action.code == bindparam("b_code")),
        agent_check=select(Agent.active).where(
            Agent.tenant == bindparam("b_tenant"), Agent.code == bindparam("b_code")
        ),
        take=update(_CONVERSATION)
        .where(conversation.id == bindparam("b_id"), conversation.status == bindparam("b_status"))
        .values(
            status=ProcessStatus.RUNNING,
            started_at=bindparam("b_started"),
            finished_at=None,
            error_detail=None,
            version=conversation.version + 1,
            updated_at=bindparam("b_now"),
        ),
        memory=select(
            message.role, message.content, message.tool_call_id, message.data, message.token_count
        )
        .join(_CONVERSATION, conversation.id == message.conversation_id)
        .where(
            conversation.tenant == bindparam("b_tenant"),
            conversation.memory_id == bindparam("b_memory_id"),
        )
        .order_by(*memory_order()),
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
        # The catalog revision, so a turn can check the compiled action it
        # took from a cache without a statement of its own.
        select(CatalogRevision.revision)
        .where(CatalogRevision.tenant == conversation.tenant)
        .correlate(_CONVERSATION)
        .scalar_subquery()
        .label("catalog_revision"),
    ).where(conversation.uuid == bindparam("uuid"), conversation.tenant == bindparam("tenant"))


def _new_conversation(
    conversation_uuid: str,
    tenant: str,
    action_code: str,
    agent_code: str | None,
    memory_id: str | None,
    audit: bool | None,
    now: datetime,
) -> dict[str, Any]:
    """The column values of a new conversation in status ``NS``."""
    return {
        "uuid": conversation_uuid,
        "tenant": tenant,
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


def _insert_conversation(
    connection: Connection, values: dict[str, Any], default_audit: bool, check_catalog: bool
) -> tuple[int, bool]:
    """Check the action and agent, then insert; returns the id and the audit switch."""
    action_audit = None
    if check_catalog:
        action_audit, _ = _check_catalog(
            connection, values["tenant"], values["action_code"], values["agent_code"]
        )
    if values["audit"] is None:
        values["audit"] = default_audit if action_audit is None else action_audit
    conversation_id = fastsql.insert_one(connection, _statements().insert_conversation, values)
    return conversation_id, bool(values["audit"])


def _start_turn(
    connection: Connection,
    values: dict[str, Any],
    default_audit: bool,
    check_catalog: bool,
    first: TurnBatch,
) -> TurnHandle:
    """The transaction of :meth:`ConversationWriter.start_turn`."""
    tenant = values["tenant"]
    action_audit, revision = None, 0
    if check_catalog:
        action_audit, revision = _check_catalog(
            connection, tenant, values["action_code"], values["agent_code"]
        )
    if values["audit"] is None:
        values["audit"] = default_audit if action_audit is None else action_audit
    handle = TurnHandle(
        conversation_id=fastsql.insert_one(connection, _statements().insert_conversation, values),
        uuid=values["uuid"],
        action_code=values["action_code"],
        agent_code=values["agent_code"],
        memory_id=values["memory_id"],
        audit=bool(values["audit"]),
        next_message=1,
        next_event=1,
        catalog_revision=revision,
    )
    if handle.memory_id != handle.uuid:
        # Shared memory: earlier conversations' messages; a conversation of
        # its own has none yet.
        handle.memory = _memory(connection, tenant, handle.memory_id)
    _write(connection, handle, _with_status_event(handle, first, values["started_at"]))
    return handle


def _with_status_event(handle: TurnHandle, batch: TurnBatch, now: datetime) -> TurnBatch:
    """``batch`` led by the status change of the turn's start (when audited)."""
    if handle.audit:
        batch.events = [
            NewEvent(
                TimelineKind.STATUS_CHANGE,
                {"from": handle.previous_status.value, "to": ProcessStatus.RUNNING.value},
                at=now,
            ),
            *batch.events,
        ]
    return batch


def _check_catalog(
    connection: Connection, tenant: str, action: str, agent: str | None
) -> tuple[bool | None, int]:
    """Refuse a missing or inactive action or agent.

    Returns:
        The action's audit switch and the tenant's catalog revision.
    """
    # Only the columns the checks need: the full Action row would eager-load
    # its whole graph (model, schemas, tools, ...).
    rows = fastsql.fetch(
        connection, _statements().action_check, {"b_tenant": tenant, "b_code": action}
    )
    found = rows[0] if rows else None
    if found is None:
        raise NotFoundError(f"action '{action}' not found")
    if not found.active:
        raise InvalidStateError(
            f"action '{action}' is inactive; activate it to start conversations"
        )
    if agent is not None:
        agents = fastsql.fetch(
            connection, _statements().agent_check, {"b_tenant": tenant, "b_code": agent}
        )
        agent_active = agents[0].active if agents else None
        if agent_active is None:
            raise NotFoundError(f"agent '{agent}' not found")
        if not agent_active:
            raise InvalidStateError(
                f"agent '{agent}' is inactive; activate it to start conversations"
            )
    audit = None if found.audit is None else bool(found.audit)
    return audit, int(found.catalog_revision or 0)


def _begin(
    connection: Connection,
    tenant: str,
    conversation_uuid: str,
    allowed: frozenset[ProcessStatus],
    first: TurnBatch | None,
    read_memory: bool,
) -> TurnHandle:
    """The transaction of :meth:`ConversationWriter.begin_turn`."""
    # One statement reads the conversation and where its numbering stands:
    # a turn's start is on every turn's path.
    rows = fastsql.fetch(
        connection, _begin_statement(), {"uuid": conversation_uuid, "tenant": tenant}
    )
    found = rows[0] if rows else None
    if found is None:
        raise NotFoundError(f"conversation '{conversation_uuid}' not found")
    status: ProcessStatus = found.status
    if status not in allowed:
        raise InvalidStateError(_refusal(conversation_uuid, status))
    now = utcnow()
    # The status in the WHERE clause makes the flip atomic: of two concurrent
    # turns, exactly one sees its UPDATE match.
    taken = fastsql.execute(
        connection,
        _statements().take,
        {"b_id": found.id, "b_status": status, "b_started": found.started_at or now, "b_now": now},
    )
    if taken != 1:
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
        catalog_revision=int(found.catalog_revision or 0),
    )
    if read_memory:
        handle.memory = _memory(connection, tenant, handle.memory_id)
    _write(connection, handle, _with_status_event(handle, first or TurnBatch(), now))
    return handle


def _memory(connection: Connection, tenant: str, memory_id: str) -> list[Any]:
    """Every message sharing ``memory_id``, oldest first."""
    return fastsql.fetch(
        connection, _statements().memory, {"b_tenant": tenant, "b_memory_id": memory_id}
    )


def _write(connection: Connection, handle: TurnHandle, batch: TurnBatch) -> list[int]:
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
        fastsql.executemany(connection, _statements().insert_message, message_rows)
    if attachment_rows:
        connection.execute(_statements().insert_attachment, attachment_rows)
    if batch.tool_calls:
        owner = handle.last_assistant_sequence
        if owner is None:
            raise InvalidStateError("tool calls recorded before any assistant message")
        connection.execute(
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
        connection.execute(
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
        fastsql.executemany(connection, _statements().insert_event, rows)
    if batch.changes or batch.usage:
        unknown = batch.usage.keys() - _USAGE_COLUMNS
        if unknown:
            raise ValueError(f"unknown usage columns: {', '.join(sorted(unknown))}")
        parameters: dict[str, Any] = {f"b_{name}": value for name, value in batch.changes.items()}
        for name in _USAGE_COLUMNS:
            parameters[f"b_add_{name}"] = batch.usage.get(name, 0)
        parameters["b_id"] = handle.conversation_id
        parameters["b_now"] = now
        fastsql.execute(connection, _change_statement(tuple(sorted(batch.changes))), parameters)
    return sequences


@lru_cache(maxsize=64)
def _change_statement(changed: tuple[str, ...]) -> Update:
    """The conversation's UPDATE for one set of changed columns, built once per set.

    Usage columns are always incremented (by zero when unused), so the few
    call sites of :func:`_write` share a handful of statements.
    """
    columns = _CONVERSATION.c
    values: dict[str, Any] = {name: bindparam(f"b_{name}") for name in changed}
    for name in _USAGE_COLUMNS:
        values[name] = columns[name] + bindparam(f"b_add_{name}", type_=columns[name].type)
    values["version"] = columns.version + 1
    values["updated_at"] = bindparam("b_now")
    return update(_CONVERSATION).where(columns.id == bindparam("b_id")).values(values)


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
