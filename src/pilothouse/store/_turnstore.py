"""The write side of the conversation store: one protocol, the steps a turn writes.

A turn owns its conversation while it runs (status ``RU``, taken so that two
turns can never run at once), numbers its own messages and events, and
writes each step of the turn as one :class:`TurnBatch` in one transaction:
few round trips, and never a half-written step.

:class:`TurnStore` is the interface the runtime writes through, tenant given
per call. Two implementations keep the same rows:

- :class:`~pilothouse.store.OrmTurnStore`, the reference: plain ORM sessions,
  easy to read and to trust;
- :class:`~pilothouse.store.SqlTurnStore`, the one deployments use: the same
  statements built once and run on the driver (``_fastsql``), in a whole
  transaction on the event loop for SQLite or on asyncpg's own transaction
  for PostgreSQL (``Database.transaction``).

``tests/runtime/test_turn_stores.py`` runs the same turns through both and
compares the stored rows.
"""

from __future__ import annotations

__all__ = [
    "STARTABLE",
    "NewAttachment",
    "NewEvent",
    "NewMessage",
    "NewOutboxMessage",
    "NewProcessed",
    "NewToolCall",
    "StoredMessage",
    "ToolCallOutcome",
    "TurnBatch",
    "TurnHandle",
    "TurnStore",
    "Usage",
    "outbox_row",
    "processed_row",
]

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from pilothouse._caller import Caller
from pilothouse.catalog._enums import (
    FinishReason,
    MessageRole,
    ProcessStatus,
    TimelineKind,
    ToolCallStatus,
)
from pilothouse.errors import ConflictError, InvalidStateError, NotFoundError
from pilothouse.store._base import utcnow
from pilothouse.store._text import storable

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from pilothouse.store._records import Conversation

#: Statuses from which a new user message may start a turn. ``CO`` is here
#: because a conversation takes many turns; each turn completes it again.
#: ``TE`` ends a turn (a cancel, a shutdown, questions that expired), not the
#: conversation: the user may go on, as after Ctrl-C in ``pilothouse chat``.
#: A turn whose message arrived before the cancel does not (``begin_turn``'s
#: ``arrived``).
STARTABLE = frozenset(
    {ProcessStatus.NOT_STARTED, ProcessStatus.COMPLETED, ProcessStatus.TERMINATED}
)


@dataclass(frozen=True, slots=True)
class NewOutboxMessage:
    """A command to write to the outbox with the step that suspends the conversation."""

    correlation_id: str
    call_id: str
    skill_name: str
    topic: str
    reply_to: str
    payload: dict[str, Any]
    deadline: datetime


@dataclass(frozen=True, slots=True)
class NewProcessed:
    """A completion applied by the step that records its result (same transaction)."""

    correlation_id: str
    outcome: str


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


@dataclass(frozen=True, slots=True)
class Usage:
    """Token and cost increments added to a conversation's totals."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    estimated_cost: Decimal = Decimal(0)


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A stored message as chat memory reads it, whatever the driver."""

    role: MessageRole
    content: str
    tool_call_id: str | None
    data: dict[str, Any] | None
    token_count: int | None


@dataclass
class TurnBatch:
    """Everything one step of a turn writes, committed together.

    The conversation's columns are set only by the fields given (None leaves
    a column as it is), and ``usage`` is added to its totals.

    Attributes:
        messages: appended in order.
        tool_calls: calls requested by the last assistant message of this
            batch (or of an earlier batch when ``messages`` has none).
        outcomes: results of earlier tool calls.
        events: timeline events (dropped when the conversation's audit is off).
        status: the conversation's new status.
        finish_reason: why the model stopped.
        response_model: the model that answered, as the provider named it.
        error_detail: why the turn failed.
        finished_at: when the turn ended.
        usage: token and cost increments.
        outbox: event commands to publish once this step is committed
            (written in the same transaction; see ``store/_outbox.py``).
        processed: event completions this step applies (their correlation
            ids enter ``event_processed`` with the result, never apart from it).
        ledger: work run on the same connection, in the same transaction,
            before the rows are written (a budget's settle rides on the write
            that records the call's usage instead of a transaction of its own;
            a turn's first step can carry its first model call's hold).
        cancelled: a caller cancelled the conversation while no turn of it
            ran: the database's time is recorded (``cancelled_at``), and a
            turn whose message arrived before it, still being prepared,
            ends ``TE`` instead of running (``begin_turn``'s ``arrived``).
        durable_with_next: the turn's next write makes this one durable: on
            PostgreSQL its commit does not wait for the write-ahead log to
            reach the disk, and the next write's commit, which waits, flushes
            this one's with it (the log is written in order). Set by the
            runtime on a turn's first step only when nothing of the turn
            reaches anyone, nor runs a tool, before its next write; a
            database crash in between loses the step and fails that write.
    """

    messages: list[NewMessage] = field(default_factory=lambda: [])
    tool_calls: list[NewToolCall] = field(default_factory=lambda: [])
    outcomes: list[ToolCallOutcome] = field(default_factory=lambda: [])
    events: list[NewEvent] = field(default_factory=lambda: [])
    status: ProcessStatus | None = None
    finish_reason: FinishReason | None = None
    response_model: str | None = None
    error_detail: str | None = None
    finished_at: datetime | None = None
    usage: Usage | None = None
    outbox: list[NewOutboxMessage] = field(default_factory=lambda: [])
    processed: list[NewProcessed] = field(default_factory=lambda: [])
    ledger: list[Callable[[Connection], None]] = field(default_factory=lambda: [])
    cancelled: bool = False
    durable_with_next: bool = False

    def changes(self) -> dict[str, Any]:
        """The conversation columns this batch sets, by column name."""
        values = {
            "status": self.status,
            "finish_reason": self.finish_reason,
            "response_model": self.response_model,
            "error_detail": self.error_detail,
            "finished_at": self.finished_at,
        }
        return {name: value for name, value in values.items() if value is not None}

    def touches_conversation(self) -> bool:
        """Whether the conversation row changes (its columns, totals or version)."""
        return (
            self.usage is not None
            or self.cancelled
            or any(
                value is not None
                for value in (
                    self.status,
                    self.finish_reason,
                    self.response_model,
                    self.error_detail,
                    self.finished_at,
                )
            )
        )

    def __bool__(self) -> bool:
        return bool(
            self.messages
            or self.tool_calls
            or self.outcomes
            or self.events
            or self.outbox
            or self.processed
            or self.ledger
            or self.touches_conversation()
        )


@dataclass
class TurnHandle:
    """A running turn's hold on its conversation and its sequence counters."""

    tenant: str
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
    previous_finished_at: datetime | None = None
    """When the conversation last ended, before the turn took it (and cleared it)."""
    memory: list[StoredMessage] = field(default_factory=lambda: [])
    """Messages sharing the memory id when the turn began (``read_memory``)."""
    catalog_revision: int = 0
    """The tenant's catalog revision when the turn began."""
    cancelled: bool = False
    """A caller cancelled the conversation after the turn's message arrived
    (``begin_turn``'s ``arrived``), before the turn took it: the turn must end
    ``TE`` without calling the model."""


class TurnStore(Protocol):
    """Creates conversations and writes the steps of their turns, for any tenant.

    Every method is one transaction. Implementations must store the same
    rows for the same calls (the differential suite checks it).

    Attributes:
        owner: the owner id of the process whose turns this store writes
            (:class:`~pilothouse.store.Leases`), set on each conversation a
            turn takes; the runtime sets it when None.
    """

    owner: str | None

    async def create(
        self,
        tenant: str,
        *,
        action_code: str,
        agent_code: str | None,
        memory_id: str | None = None,
        audit: bool | None = None,
        default_audit: bool = True,
        check_catalog: bool = False,
        caller: Caller | None = None,
    ) -> Conversation:
        """Record a new conversation in status ``NS``, after checking its action and agent.

        Args:
            tenant: the conversation's tenant.
            action_code: the action the conversation runs.
            agent_code: the agent running it, if any.
            memory_id: shares chat memory with other conversations; defaults
                to the conversation's own uuid.
            audit: whether its timeline is recorded; None follows the
                action's switch, then ``default_audit``.
            default_audit: the deployment's setting.
            check_catalog: check that the action and the agent exist and are
                active (off for ad-hoc actions, which the catalog lacks).
            caller: who started it (face and API key), kept on the row.

        Returns:
            The stored conversation (detached: it belongs to no session).

        Raises:
            NotFoundError: the action or the agent does not exist.
            InvalidStateError: the action or the agent is deactivated.
        """
        ...

    async def start_turn(
        self,
        tenant: str,
        conversation_uuid: str,
        *,
        action_code: str,
        agent_code: str | None,
        first: TurnBatch,
        memory_id: str | None = None,
        audit: bool | None = None,
        default_audit: bool = True,
        check_catalog: bool = False,
        caller: Caller | None = None,
        read_memory: bool = True,
    ) -> TurnHandle:
        """Record a new conversation already taken by its first turn, in one transaction.

        What :meth:`create` and :meth:`begin_turn` write, minus the moment in
        between: the checks of the action and agent, the conversation row (in
        ``RU``), the status event ``NS`` -> ``RU`` and ``first``; the memory
        is read when ``memory_id`` is shared with earlier conversations. A
        refused action or agent writes nothing; so does a uuid in use.

        Args:
            tenant: the conversation's tenant.
            conversation_uuid: the new conversation's uuid.
            action_code: the action the conversation runs.
            agent_code: the agent running it, if any.
            first: the turn's first step (usually the user's message).
            memory_id: shares chat memory with other conversations.
            audit: whether its timeline is recorded (as for :meth:`create`).
            default_audit: the deployment's setting.
            check_catalog: check the action and agent, and read the catalog
                revision.
            caller: who started it (face and API key), kept on the row.
            read_memory: read the messages of a shared ``memory_id`` (False:
                the caller read them already, and the handle has none).

        Raises:
            NotFoundError: the action or the agent does not exist.
            InvalidStateError: the action or the agent is deactivated.
        """
        ...

    async def begin_turn(
        self,
        tenant: str,
        conversation_uuid: str,
        *,
        allowed: Iterable[ProcessStatus] = STARTABLE,
        first: TurnBatch | None = None,
        read_memory: bool = False,
        arrived: float | None = None,
    ) -> TurnHandle:
        """Take the conversation for one turn, flipping it to ``RU``.

        One transaction: the read of the conversation, the flip, the status
        event and, when given, the turn's first step and the read of its
        memory (before that step is written).

        Args:
            tenant: the conversation's tenant.
            conversation_uuid: the conversation.
            allowed: statuses the turn may start from.
            first: the turn's first step (usually the user's message).
            read_memory: read every message sharing the conversation's memory
                id into :attr:`TurnHandle.memory`.
            arrived: when the turn's message arrived (``time.monotonic()``
                of this process). The conversation is still taken, but
                :attr:`TurnHandle.cancelled` says whether a caller cancelled
                it since (``TurnBatch.cancelled``): compared on the
                database's clock, the age of the message measured here, so
                the processes' clocks need not agree.

        Raises:
            NotFoundError: no such conversation for this tenant.
            InvalidStateError: the conversation is running or finished.
        """
        ...

    async def memory(self, tenant: str, memory_id: str) -> list[StoredMessage]:
        """Every message sharing ``memory_id``, oldest first (what ``read_memory`` reads)."""
        ...

    async def write(self, handle: TurnHandle, batch: TurnBatch) -> list[int]:
        """Write one step of a turn in one transaction.

        Returns:
            The sequences given to ``batch.messages``, in order.
        """
        ...

    async def codes(self, tenant: str, conversation_uuid: str) -> tuple[str, str | None]:
        """The conversation's action and agent codes.

        Raises:
            NotFoundError: no such conversation for this tenant.
        """
        ...


def storable_batch(batch: TurnBatch) -> TurnBatch:
    r"""``batch`` with model and tool text a database cannot keep escaped (see ``_text``).

    Callers' input was refused before the turn began; what is left is the
    model's or a tool's text: each NUL or lone surrogate becomes its
    ``\uXXXX`` escape and the message's data says ``text_escaped``, so the
    answer is stored rather than lost to a database error.
    """
    messages: list[NewMessage] | None = None
    for index, message in enumerate(batch.messages):
        content, escaped = storable(message.content)
        if escaped:
            messages = messages if messages is not None else list(batch.messages)
            data = {**(message.data or {}), "text_escaped": True}
            message = messages[index] = replace(message, content=content, data=data)
        if message.tool_call_id is not None:
            call_id, id_escaped = storable(message.tool_call_id)
            if id_escaped:
                messages = messages if messages is not None else list(batch.messages)
                messages[index] = replace(message, tool_call_id=call_id)
    # A model-given call id or tool name may hold a NUL too: escaped the same
    # way in the call and in its outcome, so the two still match.
    calls: list[NewToolCall] | None = None
    for index, call in enumerate(batch.tool_calls):
        call_id, id_escaped = storable(call.call_id)
        name, name_escaped = storable(call.name)
        if id_escaped or name_escaped:
            calls = calls if calls is not None else list(batch.tool_calls)
            calls[index] = replace(call, call_id=call_id, name=name)
    outcomes: list[ToolCallOutcome] | None = None
    for index, outcome in enumerate(batch.outcomes):
        result, escaped = storable(outcome.result)
        call_id, id_escaped = storable(outcome.call_id)
        if escaped or id_escaped:
            outcomes = outcomes if outcomes is not None else list(batch.outcomes)
            outcomes[index] = replace(outcome, result=result, call_id=call_id)
    detail = batch.error_detail
    if detail is not None:
        detail = storable(detail)[0]
    if messages is None and calls is None and outcomes is None and detail == batch.error_detail:
        return batch
    return replace(
        batch,
        messages=messages if messages is not None else batch.messages,
        tool_calls=calls if calls is not None else batch.tool_calls,
        outcomes=outcomes if outcomes is not None else batch.outcomes,
        error_detail=detail,
    )


def new_conversation(
    conversation_uuid: str,
    tenant: str,
    action_code: str,
    agent_code: str | None,
    memory_id: str | None,
    audit: bool | None,
    now: datetime,
    caller: Caller | None = None,
) -> dict[str, Any]:
    """The column values of a new conversation in status ``NS``, started by ``caller``."""
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
        "owner": None,
        "face": caller.face if caller else None,
        "caller_key_prefix": caller.key_prefix if caller else None,
        # Cut to the column: an over-long label must not lose the conversation.
        "caller_key_name": caller.key_name[:128] if caller and caller.key_name else None,
    }


def with_start_event(handle: TurnHandle, batch: TurnBatch, now: datetime) -> TurnBatch:
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


def catalog_refusal(kind: str, code: str, found: bool | None) -> None:
    """Refuse a missing (``found`` None) or inactive (False) action or agent.

    Raises:
        NotFoundError: it does not exist.
        InvalidStateError: it is inactive.
    """
    if found is None:
        raise NotFoundError(f"{kind} '{code}' not found")
    if not found:
        raise InvalidStateError(f"{kind} '{code}' is inactive; activate it to start conversations")


def uuid_in_use(conversation_uuid: str, exc: Exception) -> ConflictError | None:
    """The clear error for a new conversation whose uuid is taken, if ``exc`` is that.

    The unique constraint on the uuid is the only check (a look-up first would
    cost every first turn a query, and still race); the drivers report it as
    their own integrity errors, which name the constraint (PostgreSQL) or the
    column (SQLite).

    Args:
        conversation_uuid: the uuid the caller chose.
        exc: what the insert raised.

    Returns:
        A :class:`ConflictError` to raise instead, or None for any other error.
    """
    text = str(exc)
    if "uq_conversation_uuid" in text or "conversation.uuid" in text:
        return ConflictError(
            f"conversation '{conversation_uuid}' already exists; "
            "a new conversation needs a new uuid (or none, for a fresh one)"
        )
    return None


def refusal(conversation_uuid: str, status: ProcessStatus) -> str:
    """Why a turn cannot start from ``status``."""
    reasons = {
        ProcessStatus.RUNNING: "is running a turn; wait for it to finish or cancel it",
        ProcessStatus.WAITING: "is waiting for answers to its questions; submit them first",
        ProcessStatus.FAILED: "has failed and is finished; start a new conversation",
        # TE ends a turn, not the conversation: a new message goes on.
        ProcessStatus.TERMINATED: "was cancelled (TE); send it a new message to go on",
        ProcessStatus.KILLED: "was killed and is finished; start a new conversation",
    }
    reason = reasons.get(status, f"is in status {status.name} ({status.value})")
    return f"conversation '{conversation_uuid}' {reason}"


def processed_row(
    processed: NewProcessed, tenant: str | None, conversation_uuid: str | None, now: datetime
) -> dict[str, Any]:
    """The ``event_processed`` column values of ``processed``."""
    return {
        "correlation_id": processed.correlation_id,
        "tenant": tenant,
        "conversation_uuid": conversation_uuid,
        "outcome": processed.outcome,
        "processed_at": now,
        "duplicates": 0,
        "last_duplicate_at": None,
        "detail": None,
    }


def outbox_row(
    message: NewOutboxMessage, tenant: str, conversation_uuid: str, now: datetime
) -> dict[str, Any]:
    """The ``event_outbox`` column values of ``message``."""
    return {
        "correlation_id": message.correlation_id,
        "tenant": tenant,
        "conversation_uuid": conversation_uuid,
        "call_id": message.call_id,
        "skill_name": message.skill_name,
        "topic": message.topic,
        "reply_to": message.reply_to,
        "payload": message.payload,
        "created_at": now,
        "deadline": message.deadline,
        "published_at": None,
        "attempts": 0,
    }
