"""The turn store deployments use: each statement built once, run on the driver.

Writes go through SQLAlchemy Core on the tables, not the ORM unit of work:
every step of every turn passes here, and the ORM's flush bookkeeping cost
several times the statements themselves (measured in ``docs/benchmarks.md``).
The statements on a turn's path are built when the store is, and run through
``_fastsql`` (straight on pysqlite's cursor or asyncpg's connection), each
method in one ``Database.transaction``: on the event loop for SQLite, in one
asyncpg transaction for PostgreSQL. Appended rows of one kind go in one
executemany. :class:`~pilothouse.store.OrmTurnStore` is the reference these
rows are compared with.
"""

from __future__ import annotations

__all__ = ["SqlTurnStore"]

import uuid as uuid_module
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import (
    Connection,
    Insert,
    bindparam,
    func,
    insert,
    select,
    update,
)

from pilothouse._caller import Caller
from pilothouse.catalog._enums import MessageRole, ProcessStatus
from pilothouse.catalog._tables import action_table, agent_table, catalog_revision_table
from pilothouse.errors import InvalidStateError, NotFoundError
from pilothouse.store._base import utcnow
from pilothouse.store._engine import Database
from pilothouse.store._fastsql import (
    BoundUpdate,
    Query,
    Statement,
    execute,
    executemany,
    fetch,
    insert_one,
)
from pilothouse.store._steps import (
    OneStatement,
    StepRows,
    arrival,
    arrival_values,
    change_update,
    first_fits,
    step_rows,
    take_update,
)
from pilothouse.store._tables import (
    attachment_table,
    conversation_table,
    event_outbox_table,
    event_processed_table,
    memory_order,
    message_table,
    timeline_event_table,
    tool_call_table,
)
from pilothouse.store._turnstore import (
    STARTABLE,
    StoredMessage,
    TurnBatch,
    TurnHandle,
    catalog_refusal,
    new_conversation,
    refusal,
    storable_batch,
    uuid_in_use,
    with_start_event,
)

if TYPE_CHECKING:
    from pilothouse.store._records import Conversation

_CONVERSATION = conversation_table
_MESSAGE = message_table
_ATTACHMENT = attachment_table
_TOOL_CALL = tool_call_table
_EVENT = timeline_event_table
_OUTBOX = event_outbox_table
_PROCESSED = event_processed_table
_ACTION = action_table.c
_AGENT = agent_table.c
_REVISION = catalog_revision_table.c


class _Found(NamedTuple):
    """The conversation a turn takes, with where its numbering stands."""

    id: int
    uuid: str
    action_code: str
    agent_code: str | None
    memory_id: str
    audit: bool
    status: ProcessStatus
    started_at: datetime | None
    finished_at: datetime | None
    next_message: int | None
    next_event: int | None
    last_assistant: int | None
    catalog_revision: int | None
    cancelled: bool | None
    """Cancelled by a caller since the turn's message arrived (NULL: not, or no arrival)."""
    cancelled_at: datetime | None
    """When a caller last cancelled it while no turn ran: the take matches only this value."""


class _ActionCheck(NamedTuple):
    active: bool
    audit: bool | None
    catalog_revision: int | None
    agent_active: bool | None


def _pair(first: Any, second: Any) -> tuple[Any, Any]:
    return first, second


@dataclass(frozen=True)
class _Statements:
    """The statements on every turn's path.

    Built once per store, they keep their compiled plans (see ``_fastsql``)
    and SQLAlchemy's cache key, which it otherwise computes from the
    expression tree on every execution.
    """

    insert_conversation: Statement
    insert_message: Statement
    insert_event: Statement
    insert_attachment: Insert
    insert_tool_call: Insert
    action_check: Query[_ActionCheck]
    take: Statement
    begin: Query[_Found]
    memory: Query[StoredMessage]
    codes: Query[tuple[str, str | None]]


def _build_statements(server_clock: bool) -> _Statements:
    conversation, message = _CONVERSATION.c, _MESSAGE.c
    return _Statements(
        insert_conversation=Statement(insert(_CONVERSATION)),
        insert_message=Statement(insert(_MESSAGE)),
        insert_event=Statement(insert(_EVENT)),
        insert_attachment=insert(_ATTACHMENT),
        insert_tool_call=insert(_TOOL_CALL),
        action_check=Query(
            select(
                _ACTION.active,
                _ACTION.audit,
                select(_REVISION.revision)
                .where(_REVISION.tenant == bindparam("b_tenant"))
                .scalar_subquery()
                .label("catalog_revision"),
                # The agent's switch in the same statement (NULL when none is named).
                select(_AGENT.active)
                .where(_AGENT.tenant == bindparam("b_tenant"), _AGENT.code == bindparam("b_agent"))
                .scalar_subquery()
                .label("agent_active"),
            ).where(_ACTION.tenant == bindparam("b_tenant"), _ACTION.code == bindparam("b_code")),
            _ActionCheck,
        ),
        take=Statement(take_update()),
        begin=Query(_begin_statement(server_clock), _Found),
        memory=Query(
            select(
                message.role,
                message.content,
                message.tool_call_id,
                message.data,
                message.token_count,
            )
            .join(_CONVERSATION, conversation.id == message.conversation_id)
            .where(
                conversation.tenant == bindparam("b_tenant"),
                conversation.memory_id == bindparam("b_memory_id"),
            )
            .order_by(*memory_order()),
            StoredMessage,
        ),
        codes=Query(
            select(conversation.action_code, conversation.agent_code).where(
                conversation.uuid == bindparam("b_uuid"),
                conversation.tenant == bindparam("b_tenant"),
            ),
            _pair,
        ),
    )


def _begin_statement(server_clock: bool) -> Any:
    """The conversation with its next message/event numbers, in one statement.

    It also tells whether a caller cancelled the conversation after the
    turn's message arrived (on the database's clock, :func:`arrival`).
    """
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
        conversation.finished_at,
        _max_of(_MESSAGE.c.sequence, _MESSAGE.c.conversation_id).label("next_message"),
        _max_of(_EVENT.c.sequence, _EVENT.c.conversation_id).label("next_event"),
        _max_of(
            _MESSAGE.c.sequence,
            _MESSAGE.c.conversation_id,
            _MESSAGE.c.role == MessageRole.ASSISTANT,
        ).label("last_assistant"),
        # The catalog revision, so a turn can check the compiled action it
        # took from a cache without a statement of its own.
        select(_REVISION.revision)
        .where(_REVISION.tenant == conversation.tenant)
        .correlate(_CONVERSATION)
        .scalar_subquery()
        .label("catalog_revision"),
        (conversation.cancelled_at > arrival(server_clock)).label("cancelled"),
        conversation.cancelled_at,
    ).where(conversation.uuid == bindparam("uuid"), conversation.tenant == bindparam("tenant"))


def _max_of(column: Any, owner: Any, *conditions: Any) -> Any:
    """A scalar subquery: the largest ``column`` of the outer conversation's rows."""
    return (
        select(func.max(column))
        .where(owner == _CONVERSATION.c.id, *conditions)
        .correlate(_CONVERSATION)
        .scalar_subquery()
    )


class SqlTurnStore:
    """The :class:`~pilothouse.store.TurnStore` on the driver's fast path.

    One per database, shared by every tenant and every turn of the process.

    Args:
        database: the store's database.
        owner: the process's owner id (:class:`~pilothouse.store.Leases`),
            written on every conversation a turn takes.
    """

    def __init__(self, database: Database, *, owner: str | None = None) -> None:
        self._db = database
        self.owner = owner
        self._statements = _build_statements(database.is_asyncpg)
        self._changes: dict[tuple[str, ...], Statement] = {}
        # On PostgreSQL a step is one statement where it fits (see _steps).
        self._one = OneStatement() if database.is_asyncpg else None

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
        values = new_conversation(
            str(uuid_module.uuid4()),
            tenant,
            action_code,
            agent_code,
            memory_id,
            audit,
            utcnow(),
            caller,
        )
        conversation_id, values["audit"] = await self._db.transaction(
            self._insert_conversation, values, default_audit, check_catalog
        )
        # The mapped class (and with it the ORM) only here: what returns a
        # Conversation row; a turn (start_turn) never does.
        from pilothouse.store._records import Conversation

        return Conversation(id=conversation_id, **values)

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
        now = utcnow()
        values = new_conversation(
            conversation_uuid, tenant, action_code, agent_code, memory_id, audit, now, caller
        )
        values["status"] = ProcessStatus.RUNNING
        values["started_at"] = now
        values["owner"] = self.owner
        try:
            if self._one is not None and first_fits(first, carries=check_catalog):
                return await self._db.statements(
                    self._start_one, values, default_audit, check_catalog, first, read_memory
                )
            return await self._db.transaction(
                self._start_turn, values, default_audit, check_catalog, first, read_memory
            )
        except Exception as exc:
            conflict = uuid_in_use(conversation_uuid, exc)
            if conflict is None:
                raise
            raise conflict from exc

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
        allowed = frozenset(allowed)
        if self._one is not None and first_fits(first):
            return await self._db.statements(
                self._begin_one, tenant, conversation_uuid, allowed, first, read_memory, arrived
            )
        return await self._db.transaction(
            self._begin, tenant, conversation_uuid, allowed, first, read_memory, arrived
        )

    async def memory(self, tenant: str, memory_id: str) -> list[StoredMessage]:
        """Every message sharing ``memory_id``, oldest first."""
        # One read: on SQLite it takes no write lock (no BEGIN IMMEDIATE).
        return await self._db.statement(self._memory, tenant, memory_id)

    async def write(self, handle: TurnHandle, batch: TurnBatch) -> list[int]:
        """Write one step of a turn in one transaction."""
        if not batch:
            return []
        step = step_rows(handle, storable_batch(batch), utcnow())
        if batch.ledger:
            (also,) = batch.ledger if len(batch.ledger) == 1 else (None,)
            if (
                self._one is not None
                and isinstance(also, BoundUpdate)
                and not step.is_empty()
                and step.fits(first=False)
            ):
                # One UPDATE (a budget's settle) rides in the step's statement.
                await self._db.statements(self._write_one, step, also)
                return step.sequences
            await self._db.transaction(self._write_ledger, handle, step, batch.ledger)
            return step.sequences
        if step.is_empty():
            return step.sequences
        if self._one is not None and step.fits(first=False):
            await self._db.statements(self._write_one, step)
        else:
            await self._db.transaction(self._write_rows, handle, step)
        return step.sequences

    async def codes(self, tenant: str, conversation_uuid: str) -> tuple[str, str | None]:
        """The conversation's action and agent codes."""
        rows = await self._db.statements(
            fetch, self._statements.codes, {"b_uuid": conversation_uuid, "b_tenant": tenant}
        )
        if not rows:
            raise NotFoundError(f"conversation '{conversation_uuid}' not found")
        return rows[0]

    # What follows runs inside the transaction, on its connection.

    def _insert_conversation(
        self,
        connection: Connection,
        values: dict[str, Any],
        default_audit: bool,
        check_catalog: bool,
    ) -> tuple[int, bool]:
        """Check the action and agent, then insert; returns the id and the audit switch."""
        action_audit = None
        if check_catalog:
            action_audit, _ = self._check_catalog(
                connection, values["tenant"], values["action_code"], values["agent_code"]
            )
        if values["audit"] is None:
            values["audit"] = default_audit if action_audit is None else action_audit
        conversation_id = insert_one(connection, self._statements.insert_conversation, values)
        return conversation_id, bool(values["audit"])

    def _start_turn(
        self,
        connection: Connection,
        values: dict[str, Any],
        default_audit: bool,
        check_catalog: bool,
        first: TurnBatch,
        read_memory: bool,
    ) -> TurnHandle:
        tenant = values["tenant"]
        action_audit, revision = None, 0
        if check_catalog:
            action_audit, revision = self._check_catalog(
                connection, tenant, values["action_code"], values["agent_code"]
            )
        if values["audit"] is None:
            values["audit"] = default_audit if action_audit is None else action_audit
        handle = TurnHandle(
            tenant=tenant,
            conversation_id=insert_one(connection, self._statements.insert_conversation, values),
            uuid=values["uuid"],
            action_code=values["action_code"],
            agent_code=values["agent_code"],
            memory_id=values["memory_id"],
            audit=bool(values["audit"]),
            next_message=1,
            next_event=1,
            catalog_revision=revision,
        )
        if read_memory and handle.memory_id != handle.uuid:
            # Shared memory: earlier conversations' messages; a conversation of
            # its own has none yet.
            handle.memory = self._memory(connection, tenant, handle.memory_id)
        self._write(connection, handle, with_start_event(handle, first, values["started_at"]))
        return handle

    def _check_catalog(
        self, connection: Connection, tenant: str, action: str, agent: str | None
    ) -> tuple[bool | None, int]:
        """Refuse a missing or inactive action or agent.

        Returns:
            The action's audit switch and the tenant's catalog revision.
        """
        # Only the columns the checks need: the full Action row would eager-load
        # its whole graph (model, schemas, tools, ...).
        rows = fetch(
            connection,
            self._statements.action_check,
            {"b_tenant": tenant, "b_code": action, "b_agent": agent},
        )
        found = rows[0] if rows else None
        catalog_refusal("action", action, None if found is None else bool(found.active))
        assert found is not None
        if agent is not None:
            active = found.agent_active
            catalog_refusal("agent", agent, None if active is None else bool(active))
        audit = None if found.audit is None else bool(found.audit)
        return audit, int(found.catalog_revision or 0)

    def _found(
        self,
        connection: Connection,
        tenant: str,
        conversation_uuid: str,
        allowed: frozenset[ProcessStatus],
        arrived: float | None,
    ) -> _Found:
        """The conversation a turn takes, refused when missing or not in an allowed status."""
        # One statement reads the conversation and where its numbering stands:
        # a turn's start is on every turn's path. It compares a cancel with
        # the message's arrival too: the take that follows fails if the
        # conversation changes in between (its status and ``cancelled_at``
        # are in its WHERE), and only then is it read again.
        values = {
            "uuid": conversation_uuid,
            "tenant": tenant,
            **arrival_values(arrived, server_clock=self._db.is_asyncpg),
        }
        rows = fetch(connection, self._statements.begin, values)
        found = rows[0] if rows else None
        if found is None:
            raise NotFoundError(f"conversation '{conversation_uuid}' not found")
        if found.status not in allowed:
            raise InvalidStateError(refusal(conversation_uuid, found.status))
        return found

    def _cancelled_since(
        self,
        connection: Connection,
        tenant: str,
        conversation_uuid: str,
        allowed: frozenset[ProcessStatus],
        arrived: float | None,
    ) -> _Found:
        """The conversation read again after a take matched nothing, if a cancel explains it.

        Only on that failure path, so no turn pays a statement for it. A
        cancel another process committed between the read and the take
        (the conversation terminated, ``cancelled_at`` moved past the
        message's arrival) is taken as the read would have seen it: the turn
        takes the conversation and ends ``TE`` with no model call. Anything
        else is what refused the take before: another turn took it.

        Raises:
            InvalidStateError: the conversation was not cancelled since the
                message arrived (or is in a status no turn takes).
        """
        found = self._found(connection, tenant, conversation_uuid, allowed, arrived)
        if not found.cancelled:
            raise InvalidStateError(refusal(conversation_uuid, ProcessStatus.RUNNING))
        return found

    @staticmethod
    def _taken(tenant: str, found: _Found) -> TurnHandle:
        return TurnHandle(
            tenant=tenant,
            conversation_id=found.id,
            uuid=found.uuid,
            action_code=found.action_code,
            agent_code=found.agent_code,
            memory_id=found.memory_id,
            audit=found.audit,
            next_message=int(found.next_message or 0) + 1,
            next_event=int(found.next_event or 0) + 1,
            last_assistant_sequence=found.last_assistant,
            previous_status=found.status,
            previous_finished_at=found.finished_at,
            catalog_revision=int(found.catalog_revision or 0),
            cancelled=bool(found.cancelled),
        )

    def _take_values(self, found: _Found, now: datetime) -> dict[str, Any]:
        return {
            "b_id": found.id,
            "b_status": found.status,
            "b_started": found.started_at or now,
            "b_now": now,
            "b_owner": self.owner,
            "b_cancelled_at": found.cancelled_at,
        }

    def _begin(
        self,
        connection: Connection,
        tenant: str,
        conversation_uuid: str,
        allowed: frozenset[ProcessStatus],
        first: TurnBatch | None,
        read_memory: bool,
        arrived: float | None,
    ) -> TurnHandle:
        found = self._found(connection, tenant, conversation_uuid, allowed, arrived)
        now = utcnow()
        # The status in the WHERE clause makes the flip atomic: of two concurrent
        # turns, exactly one sees its UPDATE match.
        while execute(connection, self._statements.take, self._take_values(found, now)) != 1:
            found = self._cancelled_since(connection, tenant, conversation_uuid, allowed, arrived)
        handle = self._taken(tenant, found)
        if read_memory:
            handle.memory = self._memory(connection, tenant, handle.memory_id)
        self._write(connection, handle, with_start_event(handle, first or TurnBatch(), now))
        return handle

    def _begin_one(
        self,
        connection: Connection,
        tenant: str,
        conversation_uuid: str,
        allowed: frozenset[ProcessStatus],
        first: TurnBatch | None,
        read_memory: bool,
        arrived: float | None,
    ) -> TurnHandle:
        """:meth:`_begin` on PostgreSQL: the take and the first step in one statement.

        The reads come first, each committing on its own; the take writes the
        step's rows only when its UPDATE matched, all or nothing.
        """
        found = self._found(connection, tenant, conversation_uuid, allowed, arrived)
        assert self._one is not None
        first = first or TurnBatch()
        lazy = first.durable_with_next
        events = list(first.events)
        while True:
            now = utcnow()
            handle = self._taken(tenant, found)
            if read_memory:
                # Read before the take: a turn that ran in between would also have
                # moved the numbering, and the take's rows would then be refused.
                handle.memory = self._memory(connection, tenant, handle.memory_id)
            # Numbered from this read: a take again leads with its own start event.
            first.events = list(events)
            step = step_rows(handle, storable_batch(with_start_event(handle, first, now)), now)
            values = {**step.parameters(), **self._take_values(found, now)}
            if fetch(connection, self._one.take(step, lazy=lazy), values):
                return handle
            found = self._cancelled_since(connection, tenant, conversation_uuid, allowed, arrived)

    def _start_one(
        self,
        connection: Connection,
        values: dict[str, Any],
        default_audit: bool,
        check_catalog: bool,
        first: TurnBatch,
        read_memory: bool,
    ) -> TurnHandle:
        """:meth:`_start_turn` on PostgreSQL: check, conversation and first step, one statement."""
        tenant = values["tenant"]
        given = values["audit"]
        if given is None and not check_catalog:
            values["audit"] = default_audit
        handle = TurnHandle(
            tenant=tenant,
            conversation_id=0,  # the statement returns it
            uuid=values["uuid"],
            action_code=values["action_code"],
            agent_code=values["agent_code"],
            memory_id=values["memory_id"],
            # Unknown until the action's switch is read: the start event's row
            # goes in the statement, written only when the audit is on.
            audit=True if values["audit"] is None else bool(values["audit"]),
            next_message=1,
            next_event=1,
        )
        if read_memory and handle.memory_id != handle.uuid:
            handle.memory = self._memory(connection, tenant, handle.memory_id)
        now = values["started_at"]
        step = step_rows(handle, storable_batch(with_start_event(handle, first, now)), now)
        assert self._one is not None
        parameters = {**step.parameters(), **{f"c_{k}": v for k, v in values.items()}}
        lazy = first.durable_with_next
        if not check_catalog:
            start = self._one.start(step, values, lazy=lazy)
            handle.conversation_id = fetch(connection, start, parameters)[0]
            return handle
        parameters.update(
            b_tenant=tenant,
            b_code=values["action_code"],
            b_agent=values["agent_code"],
            b_default_audit=default_audit,
        )
        check = self._statements.action_check.statement
        # The step's ledger work (a budget's hold), made in the same statement.
        also = first.ledger[0] if first.ledger else None
        assert also is None or isinstance(also, BoundUpdate), "checked by first_fits"
        if also is not None:
            parameters.update(also.values)
        query = self._one.checked_start(
            step, values, check, lazy=lazy, also=None if also is None else also.statement
        )
        rows = fetch(connection, query, parameters)
        found = rows[0] if rows else None
        if also is not None and found is not None and found.id is not None:
            also.matched.append(int(found.held or 0))
        if found is None or found.id is None:
            # Refused: nothing was written; say why as the separate check does.
            action = values["action_code"]
            catalog_refusal("action", action, None if found is None else bool(found.active))
            assert found is not None
            active = found.agent_active
            catalog_refusal("agent", values["agent_code"], None if active is None else bool(active))
            raise InvalidStateError("the catalog changed while the conversation started; retry")
        handle.conversation_id = found.id
        handle.catalog_revision = int(found.catalog_revision or 0)
        if not found.conversation_audit:
            handle.audit = False
            handle.next_event = 1  # the start event's row was not written
        return handle

    def _memory(self, connection: Connection, tenant: str, memory_id: str) -> list[StoredMessage]:
        return fetch(
            connection, self._statements.memory, {"b_tenant": tenant, "b_memory_id": memory_id}
        )

    def _write(self, connection: Connection, handle: TurnHandle, batch: TurnBatch) -> list[int]:
        """Write ``batch`` on ``connection``, inside the caller's transaction.

        Its ledger work runs first, in the same transaction: a turn's first
        step can carry the turn's first budget hold.
        """
        for work in batch.ledger:
            work(connection)
        step = step_rows(handle, storable_batch(batch), utcnow())
        self._write_rows(connection, handle, step)
        return step.sequences

    def _write_ledger(
        self,
        connection: Connection,
        handle: TurnHandle,
        step: StepRows,
        ledger: list[Callable[[Connection], None]],
    ) -> None:
        """Run the batch's ledger work, then write ``step``, in one transaction."""
        for work in ledger:
            work(connection)
        if not step.is_empty():
            self._write_rows(connection, handle, step)

    def _write_one(
        self, connection: Connection, step: StepRows, also: BoundUpdate | None = None
    ) -> None:
        """Write ``step`` as one statement (PostgreSQL), with ``also`` in it when given."""
        assert self._one is not None
        if also is None:
            execute(connection, self._one.write(step), step.parameters())
            return
        parameters = {**step.parameters(), **also.values}
        execute(connection, self._one.write(step, also.statement), parameters)

    def _write_rows(self, connection: Connection, handle: TurnHandle, step: StepRows) -> None:
        """Write ``step`` statement by statement, inside the caller's transaction."""
        statements = self._statements
        rows = step.rows
        now = step.now

        def owned(name: str) -> list[dict[str, Any]]:
            return [{"conversation_id": handle.conversation_id, **row} for row in rows[name]]

        if "message" in rows:
            executemany(connection, statements.insert_message, owned("message"))
        if "attachment" in rows:
            connection.execute(statements.insert_attachment, owned("attachment"))
        if "tool_call" in rows:
            connection.execute(statements.insert_tool_call, owned("tool_call"))
        for call_id, status, result in step.outcomes:
            connection.execute(
                update(_TOOL_CALL)
                .where(
                    _TOOL_CALL.c.conversation_id == handle.conversation_id,
                    _TOOL_CALL.c.call_id == call_id,
                )
                .values(status=status, result=result, finished_at=now)
            )
        if "event" in rows:
            executemany(connection, statements.insert_event, owned("event"))
        if "outbox" in rows:
            connection.execute(insert(_OUTBOX), rows["outbox"])
        if "processed" in rows:
            connection.execute(insert(_PROCESSED), rows["processed"])
        if step.changes is not None:
            parameters = {**step.conversation, "b_now": now}
            execute(connection, self._change_statement(step.changes), parameters)

    def _change_statement(self, changed: tuple[str, ...]) -> Statement:
        """The conversation's UPDATE for one set of changed columns, built once per set."""
        found = self._changes.get(changed)
        if found is not None:
            return found
        statement = Statement(change_update(changed, server_clock=self._db.is_asyncpg))
        self._changes[changed] = statement
        return statement
