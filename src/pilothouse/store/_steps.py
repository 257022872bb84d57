"""A turn's step as rows, and on PostgreSQL as one statement.

:func:`step_rows` turns a :class:`TurnBatch` into the rows it appends (and
numbers them on the handle); the turn store writes them statement by
statement in one transaction, or, on PostgreSQL, as one statement:
:class:`OneStatement` joins every part of a step in data-modifying ``WITH``
clauses (``WITH m AS (INSERT INTO message ...), e AS (INSERT INTO
timeline_event ...) UPDATE conversation ...``). PostgreSQL runs a single
statement atomically without BEGIN and COMMIT, so a step that cost
BEGIN, a round trip per table and COMMIT costs one round trip, whole or not
at all. The rows and their values are the same as the statement by
statement path's (the same columns, the same bind processors).

Rows of one step's parts reach the statement as ``INSERT ... SELECT`` of
bound values, so a part can take the conversation's id from another part
(the conversation a first turn inserts, or the take of a turn's start) and
is written only when that part wrote its row.
"""

from __future__ import annotations

__all__ = [
    "MAX_ROWS",
    "CheckedStart",
    "OneStatement",
    "StepRows",
    "arrival",
    "arrival_values",
    "change_update",
    "first_fits",
    "lazy_commit",
    "step_rows",
    "take_update",
]

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple, TypeVar, cast

from sqlalchemy import (
    CTE,
    ColumnElement,
    Float,
    Insert,
    Select,
    Table,
    Update,
    and_,
    bindparam,
    exists,
    func,
    insert,
    literal_column,
    null,
    or_,
    select,
    true,
    union_all,
    update,
)

from pilothouse.catalog._enums import MessageRole, ProcessStatus, ToolCallStatus
from pilothouse.errors import InvalidStateError
from pilothouse.store._base import utcnow
from pilothouse.store._fastsql import BoundUpdate, Query, Statement
from pilothouse.store._tables import (
    attachment_table,
    conversation_table,
    event_outbox_table,
    event_processed_table,
    message_table,
    timeline_event_table,
    tool_call_table,
)
from pilothouse.store._turnstore import TurnBatch, TurnHandle, outbox_row, processed_row
from pilothouse.store._types import UtcDateTime

USAGE_COLUMNS = (
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "estimated_cost",
)

MAX_ROWS = 32
"""Rows of one kind that one statement takes; a larger step goes statement by statement.

It bounds the statement's parameters (PostgreSQL takes at most 32767) and
the number of statement shapes each connection prepares.
"""

# The parts of a step, in the order the statement by statement path writes them.
_PARTS: tuple[tuple[str, Table, bool], ...] = (
    ("message", message_table, True),
    ("attachment", attachment_table, True),
    ("tool_call", tool_call_table, True),
    ("event", timeline_event_table, True),
    ("outbox", event_outbox_table, False),
    ("processed", event_processed_table, False),
)
"""Name, table, and whether its rows carry the conversation's id."""


@dataclass
class StepRows:
    """What one step writes, as column values.

    Attributes:
        conversation_id: the conversation's id (0 for one not yet inserted).
        sequences: the numbers of the appended messages.
        rows: each part's rows by part name (``message``, ``event``, ...);
            the conversation's id is left out of them (the statement sets it).
        outcomes: tool call outcomes (call id, status, result).
        changes: the conversation's changed columns, when it changes.
        conversation: the conversation UPDATE's parameters (``b_...``).
        now: when the step is written.
    """

    conversation_id: int
    sequences: list[int]
    rows: dict[str, list[dict[str, Any]]]
    outcomes: list[tuple[str, ToolCallStatus, str]]
    changes: tuple[str, ...] | None
    conversation: dict[str, Any] = field(default_factory=lambda: {})
    now: datetime | None = None

    def shape(self) -> tuple[Any, ...]:
        """What decides the statement's text: each part's row count, the changes."""
        return (
            tuple(len(self.rows.get(name, ())) for name, _, _ in _PARTS),
            len(self.outcomes),
            self.changes,
        )

    def fits(self, *, first: bool) -> bool:
        """Whether one statement can write these rows.

        Args:
            first: the step that takes the conversation (its UPDATE or
                INSERT), which then may not change the conversation again
                nor update tool calls.
        """
        if any(len(rows) > MAX_ROWS for rows in self.rows.values()):
            return False
        if len(self.outcomes) > MAX_ROWS:
            return False
        if first:
            return not self.outcomes and self.changes is None
        # An outcome's UPDATE would not see a call inserted by the same statement.
        return not (self.outcomes and self.rows.get("tool_call"))

    def parameters(self) -> dict[str, Any]:
        """Every bound value of the one statement, by parameter name."""
        values: dict[str, Any] = dict(self.conversation)
        for name, rows in self.rows.items():
            for index, row in enumerate(rows):
                for key, value in row.items():
                    values[f"{name}{index}_{key}"] = value
        for index, (call_id, status, result) in enumerate(self.outcomes):
            values[f"outcome{index}_call_id"] = call_id
            values[f"outcome{index}_status"] = status
            values[f"outcome{index}_result"] = result
        values["b_now"] = self.now
        values["b_id"] = self.conversation_id
        return values

    def is_empty(self) -> bool:
        """Whether the step writes nothing."""
        return not any(self.rows.values()) and not self.outcomes and self.changes is None


def step_rows(handle: TurnHandle, batch: TurnBatch, now: datetime) -> StepRows:
    """The rows ``batch`` appends to the handle's conversation, numbered on the handle.

    Raises:
        InvalidStateError: tool calls with no assistant message before them.
    """
    sequences: list[int] = []
    messages: list[dict[str, Any]] = []
    attachments: list[dict[str, Any]] = []
    for message in batch.messages:
        sequence = handle.next_message
        handle.next_message += 1
        if message.role is MessageRole.ASSISTANT:
            handle.last_assistant_sequence = sequence
        messages.append(
            {
                "sequence": sequence,
                "role": message.role,
                "content": message.content,
                "token_count": message.token_count,
                "tool_call_id": message.tool_call_id,
                "data": dict(message.data) if message.data is not None else None,
                "created_at": now,
            }
        )
        attachments.extend(
            {
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
    rows: dict[str, list[dict[str, Any]]] = {"message": messages, "attachment": attachments}
    if batch.tool_calls:
        owner = handle.last_assistant_sequence
        if owner is None:
            raise InvalidStateError("tool calls recorded before any assistant message")
        rows["tool_call"] = [
            {
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
        ]
    if batch.events and handle.audit:
        events: list[dict[str, Any]] = []
        for item in batch.events:
            events.append(
                {
                    "sequence": handle.next_event,
                    "kind": item.kind,
                    "data": dict(item.data),
                    "created_at": item.at,
                }
            )
            handle.next_event += 1
        rows["event"] = events
    rows["outbox"] = [outbox_row(m, handle.tenant, handle.uuid, now) for m in batch.outbox]
    rows["processed"] = [processed_row(p, handle.tenant, handle.uuid, now) for p in batch.processed]
    step = StepRows(
        conversation_id=handle.conversation_id,
        sequences=sequences,
        rows={name: found for name, found in rows.items() if found},
        outcomes=[(o.call_id, o.status, o.result) for o in batch.outcomes],
        changes=None,
        now=now,
    )
    if batch.touches_conversation():
        changes = batch.changes()
        parameters: dict[str, Any] = {f"b_{name}": value for name, value in changes.items()}
        usage = batch.usage
        for name in USAGE_COLUMNS:
            parameters[f"b_add_{name}"] = 0 if usage is None else getattr(usage, name)
        parameters["b_id"] = handle.conversation_id
        # ``cancelled_at`` takes the database's time, not a bound value.
        step.changes = tuple(changes) + (("cancelled_at",) if batch.cancelled else ())
        step.conversation = parameters
    return step


def first_fits(batch: TurnBatch | None, *, carries: bool = False) -> bool:
    """Whether a turn's first step, with its start event, fits one statement with the take.

    ``carries``: the statement can carry one :class:`BoundUpdate` of the
    step's ledger work (a new conversation's checked start).
    """
    if batch is None:
        return True
    if batch.outcomes or batch.touches_conversation():
        return False
    ledger = batch.ledger
    if ledger and not (carries and len(ledger) == 1 and isinstance(ledger[0], BoundUpdate)):
        return False
    counts = (
        len(batch.messages),
        sum(len(message.attachments) for message in batch.messages),
        len(batch.tool_calls),
        len(batch.events) + 1,
        len(batch.outbox),
        len(batch.processed),
    )
    return max(counts) <= MAX_ROWS


def change_update(changed: Sequence[str], *, server_clock: bool) -> Update:
    """The conversation's UPDATE for one set of changed columns.

    Usage columns are always incremented (by zero when unused), so the few
    kinds of batch share a handful of statements. ``cancelled_at`` is set to
    the database's time (``server_clock``: PostgreSQL's; else the step's
    ``b_now``, SQLite's clock being its process's host's).
    """
    columns = conversation_table.c
    values: dict[str, Any] = {
        name: bindparam(f"b_{name}") for name in changed if name != "cancelled_at"
    }
    if "cancelled_at" in changed:
        values["cancelled_at"] = func.statement_timestamp() if server_clock else bindparam("b_now")
    for name in USAGE_COLUMNS:
        values[name] = columns[name] + bindparam(f"b_add_{name}", type_=columns[name].type)
    values["version"] = columns.version + 1
    values["updated_at"] = bindparam("b_now")
    return update(conversation_table).where(columns.id == bindparam("b_id")).values(values)


def arrival(server_clock: bool) -> ColumnElement[Any]:
    """When a turn's message arrived, on the database's clock.

    PostgreSQL (``server_clock``): the statement's time less the message's
    age (``b_age`` seconds) measured by the turn's process on its monotonic
    clock, so it is compared with ``cancelled_at`` (also the server's time)
    on one clock whatever the processes' clocks say. The age runs until the
    statement is sent, not until it starts: the arrival it gives is no
    earlier than the true one, so a message sent after a cancel is never
    taken for one the cancel meant. SQLite: ``b_arrived``, on the clock of
    the host, which every process sharing the file is on.
    """
    if server_clock:
        age = bindparam("b_age", type_=Float)
        return func.statement_timestamp() - literal_column("interval '1 second'") * age
    return bindparam("b_arrived", type_=UtcDateTime)


def arrival_values(arrived: float | None, *, server_clock: bool) -> dict[str, Any]:
    """The parameters of :func:`arrival` for a message that arrived at ``arrived``.

    ``arrived`` is ``time.monotonic()`` at the message's arrival; None (a
    turn no message started) gives NULL, which no cancel follows.
    """
    age = None if arrived is None else max(0.0, time.monotonic() - arrived)
    if server_clock:
        return {"b_age": age}
    return {"b_arrived": None if age is None else utcnow() - timedelta(seconds=age)}


def take_update() -> Update:
    """The UPDATE that takes a conversation for a turn; the status in its WHERE makes it atomic.

    It matches only the ``cancelled_at`` its read saw (``b_cancelled_at``):
    a cancel committed in between may leave the status as it was (``TE``),
    and the turn must then learn of it rather than take the conversation.
    """
    conversation = conversation_table.c
    return (
        update(conversation_table)
        .where(
            conversation.id == bindparam("b_id"),
            conversation.status == bindparam("b_status"),
            conversation.cancelled_at.is_not_distinct_from(
                bindparam("b_cancelled_at", type_=UtcDateTime)
            ),
        )
        .values(
            status=ProcessStatus.RUNNING,
            started_at=bindparam("b_started"),
            finished_at=None,
            error_detail=None,
            owner=bindparam("b_owner"),
            version=conversation.version + 1,
            updated_at=bindparam("b_now"),
        )
    )


def _insert_part(
    name: str,
    table: Table,
    keys: Sequence[str],
    count: int,
    conversation_id: ColumnElement[Any] | None,
    source: CTE | None,
    condition: ColumnElement[Any] | None = None,
) -> Insert:
    """``INSERT ... SELECT`` of ``count`` rows of bound values (one row per row of ``source``)."""
    selects: list[Any] = []
    for index in range(count):
        columns: list[Any] = []
        if conversation_id is not None:
            columns.append(conversation_id.label("conversation_id"))
        columns.extend(
            bindparam(f"{name}{index}_{key}", type_=table.c[key].type).label(key) for key in keys
        )
        query = select(*columns)
        if source is not None:
            query = query.select_from(source)
        if condition is not None:
            query = query.where(condition)
        selects.append(query)
    names = (["conversation_id"] if conversation_id is not None else []) + list(keys)
    body = selects[0] if count == 1 else union_all(*selects)
    return insert(table).from_select(names, body, include_defaults=False)


def _outcome_update(index: int) -> Update:
    calls = tool_call_table.c
    return (
        update(tool_call_table)
        .where(
            calls.conversation_id == bindparam("b_id"),
            calls.call_id == bindparam(f"outcome{index}_call_id", type_=calls.call_id.type),
        )
        .values(
            status=bindparam(f"outcome{index}_status", type_=calls.status.type),
            result=bindparam(f"outcome{index}_result", type_=calls.result.type),
            finished_at=bindparam("b_now"),
        )
    )


_Query = TypeVar("_Query", bound="Select[*tuple[Any, ...]]")


class OneStatement:
    """The one-statement form of each step shape, built once per shape.

    One per turn store; PostgreSQL only (data-modifying ``WITH`` clauses).
    """

    def __init__(self) -> None:
        self._writes: dict[tuple[Any, ...], Statement] = {}
        self._starts: dict[tuple[Any, ...], Query[int]] = {}
        self._takes: dict[tuple[Any, ...], Query[int]] = {}
        self._checked: dict[tuple[Any, ...], Query[CheckedStart]] = {}

    def _parts(
        self,
        step: StepRows,
        conversation_id: ColumnElement[Any],
        source: CTE | None,
        audited: ColumnElement[Any] | None = None,
    ) -> list[Insert | Update]:
        parts: list[Insert | Update] = []
        for name, table, owned in _PARTS:
            rows = step.rows.get(name)
            if not rows:
                continue
            part = _insert_part(
                name,
                table,
                tuple(rows[0]),
                len(rows),
                conversation_id if owned else None,
                source,
                audited if name == "event" else None,
            )
            parts.append(part)
        parts.extend(_outcome_update(index) for index in range(len(step.outcomes)))
        return parts

    def write(self, step: StepRows, also: Statement | None = None) -> Statement:
        """The statement that writes ``step`` on a conversation its turn holds (``b_id``).

        ``also``: an UPDATE of another table made in the same statement (a
        budget's settle), its parameters named apart from the step's.
        """
        key = (step.shape(), tuple(tuple(rows[0]) for rows in step.rows.values()), also)
        found = self._writes.get(key)
        if found is not None:
            return found
        parts: list[Any] = []
        if also is not None:
            parts.append(also.statement)
        parts += self._parts(step, bindparam("b_id", type_=conversation_table.c.id.type), None)
        if step.changes is not None:
            parts.append(change_update(step.changes, server_clock=True))
        main = parts.pop()
        ctes = [part.cte(f"w_part{index}") for index, part in enumerate(parts)]
        statement = Statement(main.add_cte(*ctes) if ctes else main)
        self._writes[key] = statement
        return statement

    def start(
        self, step: StepRows, conversation: Mapping[str, Any], *, lazy: bool = False
    ) -> Query[int]:
        """The statement that inserts a conversation (``c_...``) with its first step.

        It returns the new conversation's id. ``lazy``: its commit does not
        wait for the log's flush (see :func:`lazy_commit`).
        """
        key = (
            tuple(conversation),
            step.shape(),
            tuple(tuple(r[0]) for r in step.rows.values()),
            lazy,
        )
        found = self._starts.get(key)
        if found is not None:
            return found
        columns = conversation_table.c
        new = (
            insert(conversation_table)
            .values({k: bindparam(f"c_{k}", type_=columns[k].type) for k in conversation})
            .returning(columns.id)
            .cte("w_conversation")
        )
        parts = self._parts(step, new.c.id, new)
        ctes = [part.cte(f"w_part{index}") for index, part in enumerate(parts)]
        query = Query(lazy_commit(select(new.c.id).add_cte(*ctes), lazy), _first)
        self._starts[key] = query
        return query

    def checked_start(
        self,
        step: StepRows,
        conversation: Mapping[str, Any],
        check: Any,
        *,
        lazy: bool = False,
        also: Statement | None = None,
    ) -> Query[CheckedStart]:
        """:meth:`start` behind the catalog check, in the same statement.

        ``check`` is the catalog check's SELECT (action, revision, agent).
        The conversation is inserted only when the action is active and the
        named agent (``b_agent``) is too; its audit switch is the one given
        (``c_audit``), else the action's, else ``b_default_audit``; the
        timeline rows are written only when it is on. The statement returns
        the check's columns with the new id and audit switch (NULL when
        refused), and no row when the action does not exist. ``lazy`` as
        for :meth:`start`. ``also``: an UPDATE of another table (a budget's
        hold) made only when the conversation is inserted; the statement
        then returns the rows it matched (``held``).
        """
        key = (
            tuple(conversation),
            step.shape(),
            tuple(tuple(r[0]) for r in step.rows.values()),
            lazy,
            also,
        )
        found = self._checked.get(key)
        if found is not None:
            return found
        columns = conversation_table.c
        checked = check.cte("w_check")
        keys = [k for k in conversation if k != "audit"]
        audit = func.coalesce(
            bindparam("c_audit", type_=columns.audit.type),
            checked.c.audit,
            bindparam("b_default_audit", type_=columns.audit.type),
        )
        agent = bindparam("b_agent", type_=columns.agent_code.type)
        allowed = and_(checked.c.active, or_(agent.is_(None), checked.c.agent_active))
        values = select(
            *[bindparam(f"c_{k}", type_=columns[k].type).label(k) for k in keys],
            audit.label("audit"),
        ).where(allowed)
        new = (
            insert(conversation_table)
            .from_select([*keys, "audit"], values, include_defaults=False)
            .returning(columns.id, columns.audit)
            .cte("w_conversation")
        )
        parts = self._parts(step, new.c.id, new, new.c.audit)
        ctes = [part.cte(f"w_part{index}") for index, part in enumerate(parts)]
        held: Any = null()
        if also is not None:
            update_ = cast(Update, also.statement)
            # Only with the conversation: a refused start holds nothing.
            alongside: CTE = update_.where(exists(select(new.c.id))).returning(true()).cte("w_also")
            ctes.append(alongside)
            held = select(func.count()).select_from(alongside).scalar_subquery()
        query = Query(
            lazy_commit(
                select(
                    checked.c.active,
                    checked.c.audit,
                    checked.c.catalog_revision,
                    checked.c.agent_active,
                    new.c.id,
                    new.c.audit,
                    held.label("held"),
                )
                .select_from(checked.outerjoin(new, true()))
                .add_cte(*ctes),
                lazy,
            ),
            CheckedStart,
        )
        self._checked[key] = query
        return query

    def take(self, step: StepRows, *, lazy: bool = False) -> Query[int]:
        """The statement that takes a conversation (``b_id``, ``b_status``) with a first step.

        It returns the conversation's id when it took it, no row when the
        status had changed; the step's rows are written only with the take.
        ``lazy`` as for :meth:`start`.
        """
        key = (step.shape(), tuple(tuple(rows[0]) for rows in step.rows.values()), lazy)
        found = self._takes.get(key)
        if found is not None:
            return found
        taken = take_update().returning(conversation_table.c.id).cte("w_take")
        parts = self._parts(step, taken.c.id, taken)
        ctes = [part.cte(f"w_part{index}") for index, part in enumerate(parts)]
        query = Query(lazy_commit(select(taken.c.id).add_cte(*ctes), lazy), _first)
        self._takes[key] = query
        return query


def lazy_commit(query: _Query, lazy: bool) -> _Query:
    """``query``, whose commit does not wait for the log's flush when ``lazy``.

    The statement runs on its own (no BEGIN), so its transaction is the
    statement's: ``set_config(..., true)`` turns ``synchronous_commit`` off
    until its commit, which reads it, and then it reverts. The commit is
    visible at once; the next synchronous commit of any session flushes the
    log up to its own record, this one's included.
    """
    if not lazy:
        return query
    relaxed = func.set_config("synchronous_commit", "off", true())
    return query.where(relaxed.is_not(None))


def _first(value: Any) -> Any:
    return value


class CheckedStart(NamedTuple):
    """What :meth:`OneStatement.checked_start` returns: the check, and the new row."""

    active: bool
    audit: bool | None
    catalog_revision: int | None
    agent_active: bool | None
    id: int | None
    """The new conversation's id; None when the check refused it."""
    conversation_audit: bool | None
    held: int | None = None
    """The rows the statement's other UPDATE matched (None: it carried none)."""
