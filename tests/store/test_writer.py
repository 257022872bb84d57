from __future__ import annotations

from decimal import Decimal

import pytest
from sqlalchemy import select

from pilothouse.catalog._enums import MessageRole, ProcessStatus, TimelineKind, ToolCallStatus
from pilothouse.errors import InvalidStateError, NotFoundError
from pilothouse.store import (
    AppendOnlyViolation,
    Conversation,
    Database,
    Message,
    NewAttachment,
    NewEvent,
    NewMessage,
    NewToolCall,
    SqlTurnStore,
    TimelineEvent,
    ToolCallOutcome,
    TurnBatch,
    Usage,
)
from pilothouse.store._records import Attachment, ToolCall

pytestmark = pytest.mark.anyio


async def test_new_conversation_is_not_started_and_owns_its_memory(database: Database) -> None:
    writer = SqlTurnStore(database)
    conversation = await writer.create("default", action_code="SUMBRAND", agent_code="ANALYST")
    assert conversation.status is ProcessStatus.NOT_STARTED
    assert conversation.memory_id == conversation.uuid


async def test_turn_writes_one_step_with_sequences_usage_and_events(database: Database) -> None:
    writer = SqlTurnStore(database)
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


async def test_second_turn_cannot_start_while_one_runs(database: Database) -> None:
    writer = SqlTurnStore(database)
    conversation = await writer.create("default", action_code="A", agent_code=None)
    await writer.begin_turn("default", conversation.uuid)
    with pytest.raises(InvalidStateError, match="is running a turn"):
        await writer.begin_turn("default", conversation.uuid)


async def test_turn_numbers_continue_after_earlier_turns(database: Database) -> None:
    writer = SqlTurnStore(database)
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


async def test_failed_conversation_refuses_new_turns(database: Database) -> None:
    writer = SqlTurnStore(database)
    conversation = await writer.create("default", action_code="A", agent_code=None)
    handle = await writer.begin_turn("default", conversation.uuid)
    await writer.write(handle, TurnBatch(status=ProcessStatus.FAILED))
    with pytest.raises(InvalidStateError, match="has failed and is finished"):
        await writer.begin_turn("default", conversation.uuid)


async def test_audit_off_records_no_timeline(database: Database) -> None:
    writer = SqlTurnStore(database)
    conversation = await writer.create("default", action_code="A", agent_code=None, audit=False)
    handle = await writer.begin_turn("default", conversation.uuid)
    await writer.write(handle, TurnBatch(events=[NewEvent(TimelineKind.REQUEST)]))
    async with database.sessions() as session:
        assert (await session.scalars(select(TimelineEvent))).all() == []


async def test_other_tenant_cannot_take_the_conversation(database: Database) -> None:
    conversation = await SqlTurnStore(database).create("acme", action_code="A", agent_code=None)
    with pytest.raises(NotFoundError):
        await SqlTurnStore(database).begin_turn("globex", conversation.uuid)


async def test_messages_and_events_refuse_update_and_delete(database: Database) -> None:
    writer = SqlTurnStore(database)
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
