"""The reference turn store: the same rows through plain ORM sessions.

Each method is one ``sessions.begin()`` block that reads and writes mapped
objects, with nothing built ahead and no driver-level path: the version a
reader checks :class:`~pilothouse.store.SqlTurnStore` against
(``tests/runtime/test_turn_stores.py`` runs the same turns through both and
compares the rows). It is also a working store for a database the fast path
was never measured on; it costs several times the fast one per step.
"""

from __future__ import annotations

__all__ = ["OrmTurnStore"]

import uuid as uuid_module
from collections.abc import Iterable
from dataclasses import replace

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.exc import StaleDataError

from pilothouse._caller import Caller
from pilothouse.catalog._enums import MessageRole, ProcessStatus, ToolCallStatus
from pilothouse.catalog._models import Action, Agent, CatalogRevision
from pilothouse.errors import InvalidStateError, NotFoundError
from pilothouse.store._base import utcnow
from pilothouse.store._engine import Database
from pilothouse.store._outbox import EventOutbox, EventProcessed
from pilothouse.store._records import (
    Attachment,
    Conversation,
    Message,
    TimelineEvent,
    ToolCall,
    memory_order,
)
from pilothouse.store._steps import arrival, arrival_values
from pilothouse.store._tables import conversation_table
from pilothouse.store._turnstore import (
    STARTABLE,
    StoredMessage,
    TurnBatch,
    TurnHandle,
    catalog_refusal,
    new_conversation,
    outbox_row,
    processed_row,
    refusal,
    storable_batch,
    uuid_in_use,
    with_start_event,
)


class OrmTurnStore:
    """The :class:`~pilothouse.store.TurnStore` on ORM sessions (the reference).

    Args:
        database: the store's database.
        owner: the process's owner id, written on every conversation a turn takes.
    """

    def __init__(self, database: Database, *, owner: str | None = None) -> None:
        self._db = database
        self.owner = owner

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
        """Record a new conversation in status ``NS`` (see :class:`TurnStore`)."""
        async with self._db.sessions.begin() as session:
            conversation, _ = await _new(
                session,
                str(uuid_module.uuid4()),
                tenant,
                action_code,
                agent_code,
                memory_id,
                audit,
                default_audit,
                check_catalog,
                caller=caller,
            )
        return conversation

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
        """Record a new conversation already taken by its first turn (see :class:`TurnStore`)."""
        try:
            async with self._db.sessions.begin() as session:
                conversation, revision = await _new(
                    session,
                    conversation_uuid,
                    tenant,
                    action_code,
                    agent_code,
                    memory_id,
                    audit,
                    default_audit,
                    check_catalog,
                    running=True,
                    owner=self.owner,
                    caller=caller,
                )
                handle = TurnHandle(
                    tenant=tenant,
                    conversation_id=conversation.id,
                    uuid=conversation.uuid,
                    action_code=action_code,
                    agent_code=agent_code,
                    memory_id=conversation.memory_id,
                    audit=conversation.audit,
                    next_message=1,
                    next_event=1,
                    catalog_revision=revision,
                )
                if read_memory and handle.memory_id != handle.uuid:
                    handle.memory = await _memory(session, tenant, handle.memory_id)
                assert conversation.started_at is not None
                await _write(
                    session, handle, with_start_event(handle, first, conversation.started_at)
                )
        except Exception as exc:
            conflict = uuid_in_use(conversation_uuid, exc)
            if conflict is None:
                raise
            raise conflict from exc
        for work in first.ledger:
            # On the store's own driver path, as for a step (see write).
            await self._db.transaction(work)
        return handle

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
        """Take the conversation for one turn, flipping it to ``RU`` (see :class:`TurnStore`)."""
        events = list(first.events) if first is not None else []
        try:
            handle = await self._begin(
                tenant, conversation_uuid, frozenset(allowed), first, read_memory, arrived
            )
        except StaleDataError:
            # The version check of the ORM's UPDATE: the conversation changed
            # since it was read. A cancel another process committed in
            # between is taken as the read would have seen it (the turn ends
            # TE); otherwise another turn took it first. Read again, only on
            # this failure path.
            if first is not None:
                first.events = events  # without the start event of the take that failed
            try:
                handle = await self._begin(
                    tenant,
                    conversation_uuid,
                    frozenset(allowed),
                    first,
                    read_memory,
                    arrived,
                    only_cancelled=True,
                )
            except StaleDataError as exc:
                raise InvalidStateError(refusal(conversation_uuid, ProcessStatus.RUNNING)) from exc
        for work in first.ledger if first is not None else ():
            await self._db.transaction(work)
        return handle

    async def _begin(
        self,
        tenant: str,
        conversation_uuid: str,
        allowed: frozenset[ProcessStatus],
        first: TurnBatch | None,
        read_memory: bool,
        arrived: float | None,
        *,
        only_cancelled: bool = False,
    ) -> TurnHandle:
        async with self._db.sessions.begin() as session:
            return await _begin(
                session,
                tenant,
                conversation_uuid,
                allowed,
                first,
                read_memory,
                self.owner,
                arrived,
                only_cancelled=only_cancelled,
            )

    async def memory(self, tenant: str, memory_id: str) -> list[StoredMessage]:
        """Every message sharing ``memory_id``, oldest first."""
        async with self._db.sessions() as session:
            return await _memory(session, tenant, memory_id)

    async def write(self, handle: TurnHandle, batch: TurnBatch) -> list[int]:
        """Write one step of a turn in one transaction (its ledger work in one after it).

        The ledger's statements run on the store's own driver path, which
        the ORM's session does not offer: after the step, so a step that
        fails leaves them to the next write, never runs them twice.
        """
        ledger, batch = batch.ledger, replace(batch, ledger=[])
        sequences: list[int] = []
        if batch:
            async with self._db.sessions.begin() as session:
                sequences = await _write(session, handle, batch)
        for work in ledger:
            await self._db.transaction(work)
        return sequences

    async def codes(self, tenant: str, conversation_uuid: str) -> tuple[str, str | None]:
        """The conversation's action and agent codes."""
        async with self._db.sessions() as session:
            conversation = await _conversation(session, tenant, conversation_uuid)
            return conversation.action_code, conversation.agent_code


async def _conversation(session: AsyncSession, tenant: str, uuid: str) -> Conversation:
    found = await session.scalar(
        select(Conversation).where(Conversation.uuid == uuid, Conversation.tenant == tenant)
    )
    if found is None:
        raise NotFoundError(f"conversation '{uuid}' not found")
    return found


async def _new(
    session: AsyncSession,
    conversation_uuid: str,
    tenant: str,
    action_code: str,
    agent_code: str | None,
    memory_id: str | None,
    audit: bool | None,
    default_audit: bool,
    check_catalog: bool,
    *,
    running: bool = False,
    owner: str | None = None,
    caller: Caller | None = None,
) -> tuple[Conversation, int]:
    """Check the catalog and add the conversation; returns it and the catalog revision."""
    action_audit, revision = None, 0
    if check_catalog:
        action = (
            await session.execute(
                select(Action.active, Action.audit).where(
                    Action.tenant == tenant, Action.code == action_code
                )
            )
        ).first()
        catalog_refusal("action", action_code, None if action is None else bool(action.active))
        assert action is not None
        if agent_code is not None:
            agent = await session.scalar(
                select(Agent.active).where(Agent.tenant == tenant, Agent.code == agent_code)
            )
            catalog_refusal("agent", agent_code, None if agent is None else bool(agent))
        action_audit = None if action.audit is None else bool(action.audit)
        revision = int(
            await session.scalar(
                select(CatalogRevision.revision).where(CatalogRevision.tenant == tenant)
            )
            or 0
        )
    now = utcnow()
    values = new_conversation(
        conversation_uuid, tenant, action_code, agent_code, memory_id, audit, now, caller
    )
    if values["audit"] is None:
        values["audit"] = default_audit if action_audit is None else action_audit
    values["audit"] = bool(values["audit"])
    if running:
        values["status"] = ProcessStatus.RUNNING
        values["started_at"] = now
        # Owned from the insert: set after the flush it would be an UPDATE
        # (and a version the fast store does not write).
        values["owner"] = owner
    conversation = Conversation(**values)
    session.add(conversation)
    await session.flush()
    return conversation, revision


async def _begin(
    session: AsyncSession,
    tenant: str,
    conversation_uuid: str,
    allowed: frozenset[ProcessStatus],
    first: TurnBatch | None,
    read_memory: bool,
    owner: str | None,
    arrived: float | None,
    *,
    only_cancelled: bool = False,
) -> TurnHandle:
    """Take the conversation (see ``begin_turn``).

    ``only_cancelled``: a take again after one failed, allowed only when a
    caller cancelled the conversation since the message arrived.
    """
    conversation = await _conversation(session, tenant, conversation_uuid)
    status = conversation.status
    if status not in allowed:
        raise InvalidStateError(refusal(conversation_uuid, status))
    cancelled = False
    if arrived is not None:
        # On the database's clock, as the fast store compares it.
        server_clock = _server_clock(session)
        columns = conversation_table.c
        cancelled = bool(
            await session.scalar(
                select(columns.cancelled_at > arrival(server_clock)).where(
                    columns.id == conversation.id
                ),
                arrival_values(arrived, server_clock=server_clock),
            )
        )
    if only_cancelled and not cancelled:
        raise InvalidStateError(refusal(conversation_uuid, ProcessStatus.RUNNING))

    owned = Message.conversation_id == conversation.id
    last_message = await session.scalar(select(func.max(Message.sequence)).where(owned))
    last_event = await session.scalar(
        select(func.max(TimelineEvent.sequence)).where(
            TimelineEvent.conversation_id == conversation.id
        )
    )
    last_assistant = await session.scalar(
        select(func.max(Message.sequence)).where(owned, Message.role == MessageRole.ASSISTANT)
    )
    revision = await session.scalar(
        select(CatalogRevision.revision).where(CatalogRevision.tenant == tenant)
    )
    now = utcnow()
    finished_at = conversation.finished_at
    # The mapper's version column guards the flip: the UPDATE matches only the
    # version read here, so of two concurrent turns one fails its flush.
    conversation.status = ProcessStatus.RUNNING
    conversation.started_at = conversation.started_at or now
    conversation.finished_at = None
    conversation.error_detail = None
    conversation.owner = owner
    conversation.updated_at = now
    await session.flush()
    handle = TurnHandle(
        tenant=tenant,
        conversation_id=conversation.id,
        uuid=conversation.uuid,
        action_code=conversation.action_code,
        agent_code=conversation.agent_code,
        memory_id=conversation.memory_id,
        audit=conversation.audit,
        next_message=(last_message or 0) + 1,
        next_event=(last_event or 0) + 1,
        last_assistant_sequence=last_assistant,
        previous_status=status,
        previous_finished_at=finished_at,
        catalog_revision=int(revision or 0),
        cancelled=cancelled,
    )
    if read_memory:
        handle.memory = await _memory(session, tenant, handle.memory_id)
    await _write(session, handle, with_start_event(handle, first or TurnBatch(), now))
    return handle


async def _memory(session: AsyncSession, tenant: str, memory_id: str) -> list[StoredMessage]:
    rows = await session.execute(
        select(
            Message.role, Message.content, Message.tool_call_id, Message.data, Message.token_count
        )
        .join(Conversation, Conversation.id == Message.conversation_id)
        .where(Conversation.tenant == tenant, Conversation.memory_id == memory_id)
        .order_by(*memory_order())
    )
    return [StoredMessage(*row) for row in rows]


async def _write(session: AsyncSession, handle: TurnHandle, batch: TurnBatch) -> list[int]:
    batch = storable_batch(batch)
    now = utcnow()
    sequences: list[int] = []
    for message in batch.messages:
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
        session.add_all(
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
            for index, attachment in enumerate(message.attachments, start=1)
        )
        sequences.append(sequence)
    if batch.tool_calls:
        owner = handle.last_assistant_sequence
        if owner is None:
            raise InvalidStateError("tool calls recorded before any assistant message")
        session.add_all(
            ToolCall(
                conversation_id=handle.conversation_id,
                message_sequence=owner,
                call_id=call.call_id,
                name=call.name,
                arguments=dict(call.arguments),
                status=ToolCallStatus.REQUESTED,
                result=None,
                created_at=now,
                finished_at=None,
            )
            for call in batch.tool_calls
        )
    if batch.outcomes:
        await session.flush()
    for outcome in batch.outcomes:
        calls = await session.scalars(
            select(ToolCall).where(
                ToolCall.conversation_id == handle.conversation_id,
                ToolCall.call_id == outcome.call_id,
            )
        )
        for call in calls:
            call.status = outcome.status
            call.result = outcome.result
            call.finished_at = now
    if batch.events and handle.audit:
        for item in batch.events:
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
    session.add_all(
        EventOutbox(**outbox_row(m, handle.tenant, handle.uuid, now)) for m in batch.outbox
    )
    session.add_all(
        EventProcessed(**processed_row(p, handle.tenant, handle.uuid, now)) for p in batch.processed
    )
    if batch.cancelled:
        # Not mapped (see Conversation): the database's time, as the fast store sets it.
        columns = conversation_table.c
        await session.execute(
            update(conversation_table)
            .where(columns.id == handle.conversation_id)
            .values(cancelled_at=func.statement_timestamp() if _server_clock(session) else now)
        )
    if batch.touches_conversation():
        conversation = await session.get_one(Conversation, handle.conversation_id)
        for name, value in batch.changes().items():
            setattr(conversation, name, value)
        usage = batch.usage
        if usage is not None:
            conversation.input_tokens += usage.input_tokens
            conversation.output_tokens += usage.output_tokens
            conversation.cached_tokens += usage.cached_tokens
            conversation.reasoning_tokens += usage.reasoning_tokens
            conversation.estimated_cost += usage.estimated_cost
        # Set even when nothing else changed, so the version moves as the
        # fast store's UPDATE moves it.
        conversation.updated_at = now
    await session.flush()
    return sequences


def _server_clock(session: AsyncSession) -> bool:
    """Whether the database keeps its own clock (PostgreSQL) rather than this host's (SQLite)."""
    return session.get_bind().dialect.name == "postgresql"
