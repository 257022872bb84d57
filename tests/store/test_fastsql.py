"""The driver-level path for a turn's statements stores what SQLAlchemy would.

On SQLite the writer runs its statements on the driver's cursor (see
``pilothouse.store._fastsql``); on PostgreSQL through SQLAlchemy. These tests
run on both and compare the stored bytes with rows the ORM writes itself.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from sqlalchemy import select, text

from pilothouse.catalog._enums import MessageRole, ProcessStatus, TimelineKind
from pilothouse.errors import InvalidStateError
from pilothouse.store import (
    Conversation,
    Database,
    Message,
    NewEvent,
    NewMessage,
    NewToolCall,
    SqlTurnStore,
    TimelineEvent,
    TurnBatch,
    Usage,
)

pytestmark = pytest.mark.anyio


async def test_rows_written_by_the_turn_path_read_back_exactly(database: Database) -> None:
    writer = SqlTurnStore(database)
    conversation = await writer.create("default", action_code="A", agent_code=None)
    handle = await writer.begin_turn(
        "default",
        conversation.uuid,
        first=TurnBatch(messages=[NewMessage(MessageRole.USER, "héllo", token_count=2)]),
    )
    at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    await writer.write(
        handle,
        TurnBatch(
            messages=[
                NewMessage(MessageRole.ASSISTANT, "hi", data={"ai": {"runId": "r", "n": [1, 2]}})
            ],
            events=[NewEvent(TimelineKind.RESPONSE, {"tokens": 3, "note": "ü"}, at=at)],
            status=ProcessStatus.COMPLETED,
            response_model="m",
            usage=Usage(input_tokens=10, output_tokens=3, estimated_cost=Decimal("0.00012")),
        ),
    )

    async with database.sessions() as session:
        row = await session.scalar(select(Conversation).where(Conversation.uuid == handle.uuid))
        assert row is not None
        messages = list(
            await session.scalars(
                select(Message).where(Message.conversation_id == row.id).order_by(Message.sequence)
            )
        )
        events = list(
            await session.scalars(
                select(TimelineEvent)
                .where(TimelineEvent.conversation_id == row.id)
                .order_by(TimelineEvent.sequence)
            )
        )
    assert row.status is ProcessStatus.COMPLETED
    assert (row.input_tokens, row.output_tokens, row.response_model) == (10, 3, "m")
    assert row.estimated_cost == Decimal("0.00012")
    assert row.audit is True
    assert row.started_at is not None and row.started_at.tzinfo is not None
    assert [(m.sequence, m.role, m.content) for m in messages] == [
        (1, MessageRole.USER, "héllo"),
        (2, MessageRole.ASSISTANT, "hi"),
    ]
    assert messages[1].data == {"ai": {"runId": "r", "n": [1, 2]}}
    assert [e.kind for e in events] == [TimelineKind.STATUS_CHANGE, TimelineKind.RESPONSE]
    assert events[1].data == {"tokens": 3, "note": "ü"}
    assert events[1].created_at == at


async def test_stored_values_have_the_orm_s_own_format(database: Database) -> None:
    # A message the ORM writes and one the turn path writes must be stored
    # alike (types, datetime text, enum codes), or queries would mix formats.
    writer = SqlTurnStore(database)
    conversation = await writer.create("default", action_code="A", agent_code=None)
    handle = await writer.begin_turn(
        "default",
        conversation.uuid,
        first=TurnBatch(messages=[NewMessage(MessageRole.USER, "fast")]),
    )
    async with database.sessions.begin() as session:
        session.add(
            Message(
                conversation_id=handle.conversation_id,
                sequence=handle.next_message,
                role=MessageRole.USER,
                content="orm",
                data={"k": 1},
            )
        )
    async with database.engine.connect() as connection:
        stored = (
            await connection.execute(
                text(
                    "SELECT content, role, typeof(created_at), length(created_at),"
                    " typeof(sequence) FROM message WHERE conversation_id = :id ORDER BY sequence"
                    if database.is_sqlite
                    else "SELECT content, role, pg_typeof(created_at)::text, 0,"
                    " pg_typeof(sequence)::text FROM message WHERE conversation_id = :id"
                    " ORDER BY sequence"
                ),
                {"id": handle.conversation_id},
            )
        ).all()
    fast, orm = (tuple(row)[1:] for row in stored)
    assert fast == orm
    assert stored[0][1] == "US"


async def test_a_step_that_fails_midway_leaves_nothing_behind(database: Database) -> None:
    writer = SqlTurnStore(database)
    conversation = await writer.create("default", action_code="A", agent_code=None)
    handle = await writer.begin_turn("default", conversation.uuid)
    before = handle.next_message
    # The user message is written first, then the tool calls are refused
    # (no assistant message owns them): the whole step must roll back.
    with pytest.raises(InvalidStateError):
        await writer.write(
            handle,
            TurnBatch(
                messages=[NewMessage(MessageRole.USER, "lost?")],
                tool_calls=[NewToolCall("c1", "t", {})],
            ),
        )
    async with database.sessions() as session:
        count = len(
            list(
                await session.scalars(
                    select(Message).where(Message.conversation_id == handle.conversation_id)
                )
            )
        )
    assert count == before - 1


async def test_the_turn_path_stores_what_core_stores(database: Database) -> None:
    # The same rows written by the turn path and by SQLAlchemy Core must read
    # back as the same text, column by column: JSON (a None included, which
    # SQLAlchemy stores as JSON 'null'), enum codes, numerics and datetimes.
    from sqlalchemy import insert, update

    writer = SqlTurnStore(database)
    handle = await writer.start_turn(
        "default",
        "11111111-1111-1111-1111-111111111111",
        action_code="A",
        agent_code=None,
        first=TurnBatch(messages=[NewMessage(MessageRole.USER, "fast")]),
    )
    at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    batch = TurnBatch(
        messages=[
            NewMessage(MessageRole.ASSISTANT, "a", token_count=1, data={"k": [1, "é"]}),
            NewMessage(MessageRole.TOOL, "b", tool_call_id="c1", data=None),
        ],
        events=[NewEvent(TimelineKind.RESPONSE, {"n": 1.5}, at=at)],
    )
    sequences = await writer.write(handle, batch)
    core = [
        {
            "conversation_id": handle.conversation_id,
            "sequence": sequence + 10,
            "role": message.role,
            "content": message.content,
            "token_count": message.token_count,
            "tool_call_id": message.tool_call_id,
            "data": message.data,
            "created_at": at,
        }
        for sequence, message in zip(sequences, batch.messages, strict=True)
    ]
    async with database.engine.begin() as connection:
        await connection.execute(insert(Message), core)
        # The turn path stamps its own time; Core's typed UPDATE sets the same.
        await connection.execute(
            update(Message)
            .where(Message.conversation_id == handle.conversation_id, Message.sequence < 10)
            .values(created_at=at)
        )
        columns = "role, content, token_count, tool_call_id, data, created_at"
        if not database.is_sqlite:
            columns = ", ".join(f"{name}::text" for name in columns.split(", "))
        stored = (
            await connection.execute(
                text(
                    f"SELECT sequence, {columns} FROM message"
                    " WHERE conversation_id = :id AND sequence > 1 ORDER BY sequence"
                ),
                {"id": handle.conversation_id},
            )
        ).all()
        # An event keeps the time it is given: compared as written.
        await connection.execute(
            insert(TimelineEvent),
            {
                "conversation_id": handle.conversation_id,
                "sequence": 99,
                "kind": TimelineKind.RESPONSE,
                "data": {"n": 1.5},
                "created_at": at,
            },
        )
        cast = "" if database.is_sqlite else "::text"
        events = (
            await connection.execute(
                text(
                    f"SELECT kind{cast}, data{cast}, created_at{cast} FROM timeline_event"
                    " WHERE conversation_id = :id AND kind = 'response' ORDER BY sequence"
                ),
                {"id": handle.conversation_id},
            )
        ).all()
    fast, orm = stored[:2], stored[2:]
    assert [tuple(row)[1:] for row in fast] == [tuple(row)[1:] for row in orm]
    assert fast[1][5] == "null"
    assert len(events) == 2 and tuple(events[0]) == tuple(events[1])


def test_a_plan_binds_in_parameter_order_through_the_types_processors() -> None:
    """Values are picked in one call, processed where the type has a processor, checked."""
    from sqlalchemy import (
        JSON,
        Column,
        Integer,
        MetaData,
        String,
        Table,
        bindparam,
        create_engine,
        update,
    )

    from pilothouse.store._fastsql import Statement

    table = Table(
        "t", MetaData(), Column("id", Integer), Column("name", String), Column("data", JSON)
    )
    several = Statement(
        update(table)
        .where(table.c.id == bindparam("k"))
        .values(name=bindparam("n"), data=bindparam("d", type_=JSON()))
    )
    one = Statement(update(table).where(table.c.id == bindparam("k")).values(id=table.c.id + 1))
    engine = create_engine("sqlite://")
    with engine.connect() as connection:
        plan = several.plan(connection, ())
        # Parameter order is the SQL's, not the caller's; JSON goes through its processor.
        assert plan.parameters({"d": {"a": 1}, "k": 7, "n": "x"}) == ("x", '{"a": 1}', 7)
        # None through the processor too: JSON stores the text 'null'.
        assert plan.parameters({"d": None, "k": 7, "n": None}) == (None, "null", 7)
        with pytest.raises(KeyError, match=r"no value for parameter 'k' of: UPDATE t"):
            plan.parameters({"d": 1, "n": "x"})
        single = one.plan(connection, ())
        # A literal of the statement's own (the 1 of id + 1) is bound as well.
        assert single.parameters({"k": 3}) == (1, 3)
        with pytest.raises(KeyError, match=r"no value for parameter 'k' of: UPDATE t"):
            single.parameters({"n": 3})
    engine.dispose()
