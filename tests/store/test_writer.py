from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import pytest
from sqlalchemy import select

from pilothouse.catalog._enums import MessageRole, ProcessStatus, TimelineKind, ToolCallStatus
from pilothouse.errors import ConflictError, InvalidStateError, NotFoundError
from pilothouse.store import (
    AppendOnlyViolation,
    Conversation,
    Database,
    Message,
    NewAttachment,
    NewEvent,
    NewMessage,
    NewToolCall,
    OrmTurnStore,
    SqlTurnStore,
    StoredMessage,
    TimelineEvent,
    ToolCallOutcome,
    TurnBatch,
    TurnStore,
    Usage,
)
from pilothouse.store._records import Attachment, ToolCall

pytestmark = pytest.mark.anyio

StoreFactory = Callable[[Database], TurnStore]


@pytest.fixture(params=[SqlTurnStore, OrmTurnStore], ids=["sql", "orm"])
def turn_store(request: pytest.FixtureRequest) -> StoreFactory:
    """Each test runs on the fast store and on the ORM reference."""
    return request.param


async def test_new_conversation_is_not_started_and_owns_its_memory(
    database: Database, turn_store: StoreFactory
) -> None:
    writer = turn_store(database)
    conversation = await writer.create("default", action_code="SUMBRAND", agent_code="ANALYST")
    assert conversation.status is ProcessStatus.NOT_STARTED
    assert conversation.memory_id == conversation.uuid


async def test_turn_writes_one_step_with_sequences_usage_and_events(
    database: Database, turn_store: StoreFactory
) -> None:
    writer = turn_store(database)
    conversation = await writer.create("default", action_code="A", agent_code=None, memory_id="m-1")
    handle = await writer.begin_turn("default", conversation.uuid)
    sequences = await writer.write(
        handle,
        TurnBatch(
            messages=[
                NewMessage(
                    MessageRole.USER,
                    "hello",
                    attachments=(NewAttachment("text/plain", content=b"x", name="a.txt"),),
                ),
                NewMessage(MessageRole.ASSISTANT, "", data={"tool_calls": 1}),
            ],
            tool_calls=[NewToolCall("c1", "get_weather", {"city": "Paris"})],
            events=[NewEvent(TimelineKind.REQUEST, {"model": "m"})],
            usage=Usage(input_tokens=10, output_tokens=3, estimated_cost=Decimal("0.5")),
        ),
    )
    assert sequences == [1, 2]
    await writer.write(
        handle,
        TurnBatch(
            messages=[NewMessage(MessageRole.TOOL, "sunny", tool_call_id="c1")],
            outcomes=[ToolCallOutcome("c1", ToolCallStatus.SUCCEEDED, "sunny")],
            status=ProcessStatus.COMPLETED,
            usage=Usage(input_tokens=5, estimated_cost=Decimal("0.25")),
        ),
    )
    async with database.sessions() as session:
        row = await session.scalar(
            select(Conversation).where(Conversation.uuid == conversation.uuid)
        )
        assert row is not None
        assert (row.status, row.input_tokens, row.output_tokens) == (ProcessStatus.COMPLETED, 15, 3)
        assert row.estimated_cost == Decimal("0.75")
        roles = (await session.scalars(select(Message.role).order_by(Message.sequence))).all()
        assert roles == [MessageRole.USER, MessageRole.ASSISTANT, MessageRole.TOOL]
        call = await session.scalar(select(ToolCall))
        assert call is not None
        assert (call.message_sequence, call.status, call.result) == (
            2,
            ToolCallStatus.SUCCEEDED,
            "sunny",
        )
        kinds = (
            await session.scalars(select(TimelineEvent.kind).order_by(TimelineEvent.sequence))
        ).all()
        assert kinds == [TimelineKind.STATUS_CHANGE, TimelineKind.REQUEST]
        attachment = await session.scalar(select(Attachment))
        assert attachment is not None and attachment.content == b"x"


async def test_second_turn_cannot_start_while_one_runs(
    database: Database, turn_store: StoreFactory
) -> None:
    writer = turn_store(database)
    conversation = await writer.create("default", action_code="A", agent_code=None)
    await writer.begin_turn("default", conversation.uuid)
    with pytest.raises(InvalidStateError, match="is running a turn"):
        await writer.begin_turn("default", conversation.uuid)


async def test_turn_numbers_continue_after_earlier_turns(
    database: Database, turn_store: StoreFactory
) -> None:
    writer = turn_store(database)
    conversation = await writer.create("default", action_code="A", agent_code=None)
    handle = await writer.begin_turn("default", conversation.uuid)
    await writer.write(
        handle,
        TurnBatch(
            messages=[NewMessage(MessageRole.USER, "1"), NewMessage(MessageRole.ASSISTANT, "2")],
            status=ProcessStatus.COMPLETED,
        ),
    )
    again = await writer.begin_turn("default", conversation.uuid)
    assert (again.next_message, again.next_event, again.last_assistant_sequence) == (3, 3, 2)


async def test_failed_conversation_refuses_new_turns(
    database: Database, turn_store: StoreFactory
) -> None:
    writer = turn_store(database)
    conversation = await writer.create("default", action_code="A", agent_code=None)
    handle = await writer.begin_turn("default", conversation.uuid)
    await writer.write(handle, TurnBatch(status=ProcessStatus.FAILED))
    with pytest.raises(InvalidStateError, match="has failed and is finished"):
        await writer.begin_turn("default", conversation.uuid)


async def test_audit_off_records_no_timeline(database: Database, turn_store: StoreFactory) -> None:
    writer = turn_store(database)
    conversation = await writer.create("default", action_code="A", agent_code=None, audit=False)
    handle = await writer.begin_turn("default", conversation.uuid)
    await writer.write(handle, TurnBatch(events=[NewEvent(TimelineKind.REQUEST)]))
    async with database.sessions() as session:
        assert (await session.scalars(select(TimelineEvent))).all() == []


async def test_other_tenant_cannot_take_the_conversation(
    database: Database, turn_store: StoreFactory
) -> None:
    conversation = await turn_store(database).create("acme", action_code="A", agent_code=None)
    with pytest.raises(NotFoundError):
        await turn_store(database).begin_turn("globex", conversation.uuid)


async def test_messages_and_events_refuse_update_and_delete(
    database: Database, turn_store: StoreFactory
) -> None:
    writer = turn_store(database)
    conversation = await writer.create("default", action_code="A", agent_code=None)
    handle = await writer.begin_turn("default", conversation.uuid)
    await writer.write(handle, TurnBatch(messages=[NewMessage(MessageRole.USER, "original")]))
    async with database.sessions() as session:
        message = await session.scalar(select(Message))
        assert message is not None
        message.content = "rewritten"
        with pytest.raises(AppendOnlyViolation):
            await session.flush()
        await session.rollback()
        event = await session.scalar(select(TimelineEvent))
        assert event is not None
        await session.delete(event)
        with pytest.raises(AppendOnlyViolation):
            await session.flush()


async def test_of_two_concurrent_turns_exactly_one_takes_the_conversation(
    database: Database, turn_store: StoreFactory
) -> None:
    import anyio

    store = turn_store(database)
    conversation = await store.create("default", action_code="A", agent_code=None)
    outcomes: list[str] = []

    async def take() -> None:
        try:
            await store.begin_turn("default", conversation.uuid)
            outcomes.append("taken")
        except InvalidStateError:
            outcomes.append("refused")

    async with anyio.create_task_group() as group:
        group.start_soon(take)
        group.start_soon(take)
    assert sorted(outcomes) == ["refused", "taken"]


async def test_memory_reads_the_same_typed_rows_through_either_store(
    database: Database, turn_store: StoreFactory
) -> None:
    store = turn_store(database)
    first = await store.create("default", action_code="A", agent_code=None, memory_id="shared")
    handle = await store.begin_turn(
        "default",
        first.uuid,
        first=TurnBatch(messages=[NewMessage(MessageRole.USER, "hello", token_count=1)]),
    )
    await store.write(
        handle,
        TurnBatch(
            messages=[NewMessage(MessageRole.ASSISTANT, "hi", data={"ai": {"n": 1}})],
            status=ProcessStatus.COMPLETED,
        ),
    )
    second = await store.create("default", action_code="A", agent_code=None, memory_id="shared")
    taken = await store.begin_turn("default", second.uuid, read_memory=True)
    expected = [
        StoredMessage(MessageRole.USER, "hello", None, None, 1),
        StoredMessage(MessageRole.ASSISTANT, "hi", None, {"ai": {"n": 1}}, None),
    ]
    assert taken.memory == expected
    assert await store.memory("default", "shared") == expected
    # Another tenant's memory id is another memory.
    assert await store.memory("globex", "shared") == []
    assert await store.codes("default", second.uuid) == ("A", None)
    with pytest.raises(NotFoundError):
        await store.codes("globex", second.uuid)


async def test_start_turn_with_a_uuid_in_use_writes_nothing(
    database: Database, turn_store: StoreFactory
) -> None:
    store = turn_store(database)
    first = TurnBatch(messages=[NewMessage(MessageRole.USER, "x")])
    handle = await store.start_turn("default", "u-1", action_code="A", agent_code=None, first=first)
    assert (handle.next_message, handle.previous_status) == (2, ProcessStatus.NOT_STARTED)
    with pytest.raises(ConflictError, match="conversation 'u-1' already exists"):
        await store.start_turn(
            "default",
            "u-1",
            action_code="A",
            agent_code=None,
            first=TurnBatch(messages=[NewMessage(MessageRole.USER, "y")]),
        )
    async with database.sessions() as session:
        contents = (await session.scalars(select(Message.content))).all()
    assert contents == ["x"]
