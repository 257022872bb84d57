from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import event, update

from pilothouse.catalog._enums import (
    FinishReason,
    MessageRole,
    ProcessStatus,
    TimelineKind,
    ToolCallStatus,
)
from pilothouse.errors import NotFoundError
from pilothouse.store import (
    Conversation,
    ConversationQueries,
    ConversationView,
    Database,
    NewAttachment,
    NewEvent,
    NewMessage,
    NewToolCall,
    SqlTurnStore,
    ToolCallOutcome,
    TurnBatch,
    Usage,
)

pytestmark = pytest.mark.anyio


async def _completed(
    db: Database,
    *,
    tenant: str = "default",
    action: str = "SUMMARIZE",
    agent: str | None = "ANALYST",
    memory_id: str | None = None,
    text: str = "hello",
) -> str:
    """A conversation with one full turn: user, assistant + tool call, tool, assistant."""
    writer = SqlTurnStore(db)
    conversation = await writer.create(
        tenant, action_code=action, agent_code=agent, memory_id=memory_id
    )
    handle = await writer.begin_turn(tenant, conversation.uuid)
    await writer.write(
        handle,
        TurnBatch(
            messages=[
                NewMessage(
                    MessageRole.USER,
                    text,
                    token_count=2,
                    attachments=(
                        NewAttachment("text/plain", content=b"abc", name="a.txt"),
                        NewAttachment("image/png", url="https://example.test/x.png"),
                    ),
                ),
                NewMessage(MessageRole.ASSISTANT, "", data={"tool_calls": 1}),
            ],
            tool_calls=[NewToolCall("c1", "get_weather", {"city": "Paris"})],
            events=[NewEvent(TimelineKind.REQUEST, {"model": "m"})],
            usage=Usage(input_tokens=10, output_tokens=3, estimated_cost=Decimal("0.00012")),
        ),
    )
    await writer.write(
        handle,
        TurnBatch(
            messages=[
                NewMessage(MessageRole.TOOL, "sunny", tool_call_id="c1"),
                NewMessage(MessageRole.ASSISTANT, f"answer to {text}"),
            ],
            outcomes=[ToolCallOutcome("c1", ToolCallStatus.SUCCEEDED, "sunny")],
            events=[NewEvent(TimelineKind.RESPONSE, {"finish": "ST"})],
            status=ProcessStatus.COMPLETED,
            finish_reason=FinishReason.STOP,
        ),
    )
    return conversation.uuid


async def _set_created(db: Database, uuid: str, when: datetime) -> None:
    async with db.sessions.begin() as session:
        await session.execute(
            update(Conversation)
            .where(Conversation.uuid == uuid)
            .values(created_at=when, version=Conversation.version + 1)
        )


async def test_get_returns_the_conversation_with_totals(database: Database) -> None:
    uuid = await _completed(database)
    conversation = await ConversationQueries(database, "default").get(uuid)
    assert conversation.status is ProcessStatus.COMPLETED
    assert (conversation.input_tokens, conversation.output_tokens) == (10, 3)
    assert conversation.estimated_cost == Decimal("0.00012")


async def test_unknown_uuid_is_not_found(database: Database) -> None:
    queries = ConversationQueries(database, "default")
    with pytest.raises(NotFoundError, match="conversation 'nope' not found"):
        await queries.get("nope")
    for method in (
        queries.messages,
        queries.attachments,
        queries.tool_calls,
        queries.timeline,
        queries.pending_questions,
        queries.transcript,
    ):
        with pytest.raises(NotFoundError, match="conversation 'nope' not found"):
            await method("nope")


async def test_other_tenants_uuid_is_just_not_found(database: Database) -> None:
    uuid = await _completed(database, tenant="alpha")
    beta = ConversationQueries(database, "beta")
    with pytest.raises(NotFoundError, match=f"conversation '{uuid}' not found"):
        await beta.get(uuid)
    with pytest.raises(NotFoundError):
        await beta.transcript(uuid)
    with pytest.raises(NotFoundError):
        await beta.messages(uuid)
    assert (await beta.list()).total == 0
    assert (await ConversationQueries(database, "alpha").list()).total == 1


async def test_messages_attachments_tool_calls_and_timeline_are_in_order(
    database: Database,
) -> None:
    uuid = await _completed(database)
    queries = ConversationQueries(database, "default")
    messages = await queries.messages(uuid)
    assert [(m.sequence, m.role) for m in messages] == [
        (1, MessageRole.USER),
        (2, MessageRole.ASSISTANT),
        (3, MessageRole.TOOL),
        (4, MessageRole.ASSISTANT),
    ]
    attachments = await queries.attachments(uuid)
    assert [(a.message_sequence, a.sequence, a.content) for a in attachments] == [
        (1, 1, b"abc"),
        (1, 2, None),
    ]
    calls = await queries.tool_calls(uuid)
    assert [(c.call_id, c.status, c.result) for c in calls] == [
        ("c1", ToolCallStatus.SUCCEEDED, "sunny")
    ]
    kinds = [e.kind for e in await queries.timeline(uuid)]
    assert kinds == [TimelineKind.STATUS_CHANGE, TimelineKind.REQUEST, TimelineKind.RESPONSE]


async def test_list_filters_by_agent_action_and_status(database: Database) -> None:
    first = await _completed(database, action="SUMMARIZE", agent="ANALYST")
    second = await _completed(database, action="TRANSLATE", agent="CLERK")
    writer = SqlTurnStore(database)
    fresh = await writer.create("default", action_code="SUMMARIZE", agent_code=None)
    queries = ConversationQueries(database, "default")

    assert {c.uuid for c in (await queries.list(action="SUMMARIZE")).items} == {first, fresh.uuid}
    assert [c.uuid for c in (await queries.list(agent="CLERK")).items] == [second]
    page = await queries.list(status=ProcessStatus.NOT_STARTED)
    assert ([c.uuid for c in page.items], page.total) == ([fresh.uuid], 1)
    assert (await queries.list(agent="CLERK", action="SUMMARIZE")).total == 0


async def test_list_filters_by_creation_time_and_pages_newest_first(database: Database) -> None:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    uuids: list[str] = []
    for day in range(5):
        uuid = await _completed(database, text=f"day {day}")
        await _set_created(database, uuid, base + timedelta(days=day))
        uuids.append(uuid)
    queries = ConversationQueries(database, "default")

    everything = await queries.list()
    assert [c.uuid for c in everything.items] == uuids[::-1]

    page = await queries.list(limit=2, offset=1)
    assert ([c.uuid for c in page.items], page.total) == ([uuids[3], uuids[2]], 5)
    assert (page.limit, page.offset) == (2, 1)
    assert (await queries.list(limit=2, offset=4)).items[0].uuid == uuids[0]
    assert (await queries.list(offset=10)).items == []

    window = await queries.list(
        created_from=base + timedelta(days=1), created_to=base + timedelta(days=3)
    )
    assert ([c.uuid for c in window.items], window.total) == ([uuids[2], uuids[1]], 2)


async def test_list_refuses_a_bad_page(database: Database) -> None:
    with pytest.raises(ValueError, match="limit"):
        await ConversationQueries(database, "default").list(limit=0)


async def test_pending_questions_are_those_after_the_last_answer_while_waiting(
    database: Database,
) -> None:
    writer = SqlTurnStore(database)
    conversation = await writer.create("default", action_code="PLAN", agent_code=None)
    queries = ConversationQueries(database, "default")
    handle = await writer.begin_turn("default", conversation.uuid)
    await writer.write(
        handle,
        TurnBatch(
            messages=[
                NewMessage(MessageRole.USER, "plan my trip"),
                NewMessage(MessageRole.QUESTION, "Where to?", data={"choices": ["Rome"]}),
            ],
            status=ProcessStatus.WAITING,
        ),
    )
    pending = await queries.pending_questions(conversation.uuid)
    assert [(q.sequence, q.content) for q in pending] == [(2, "Where to?")]

    # Answered, then two new questions: only the new ones are pending.
    handle = await writer.begin_turn("default", conversation.uuid, allowed=[ProcessStatus.WAITING])
    await writer.write(
        handle,
        TurnBatch(
            messages=[
                NewMessage(MessageRole.USER, "Rome"),
                NewMessage(MessageRole.QUESTION, "When?"),
                NewMessage(MessageRole.QUESTION, "Budget?"),
            ],
            status=ProcessStatus.WAITING,
        ),
    )
    pending = await queries.pending_questions(conversation.uuid)
    assert [q.content for q in pending] == ["When?", "Budget?"]

    handle = await writer.begin_turn("default", conversation.uuid, allowed=[ProcessStatus.WAITING])
    await writer.write(
        handle,
        TurnBatch(
            messages=[NewMessage(MessageRole.USER, "May, 1000 EUR")],
            status=ProcessStatus.COMPLETED,
        ),
    )
    assert await queries.pending_questions(conversation.uuid) == []


async def test_questions_are_not_pending_unless_waiting(database: Database) -> None:
    writer = SqlTurnStore(database)
    conversation = await writer.create("default", action_code="PLAN", agent_code=None)
    handle = await writer.begin_turn("default", conversation.uuid)
    await writer.write(
        handle,
        TurnBatch(
            messages=[NewMessage(MessageRole.QUESTION, "Where to?")],
            status=ProcessStatus.FAILED,
        ),
    )
    assert await ConversationQueries(database, "default").pending_questions(conversation.uuid) == []


async def test_memory_messages_span_conversations_sharing_a_memory_id(database: Database) -> None:
    first = await _completed(database, memory_id="mem-1", text="one")
    second = await _completed(database, memory_id="mem-1", text="two")
    await _completed(database, memory_id="mem-2", text="other")
    await _completed(database, tenant="elsewhere", memory_id="mem-1", text="foreign")
    queries = ConversationQueries(database, "default")

    messages = await queries.memory_messages("mem-1")
    assert len(messages) == 8
    assert [m.content for m in messages if m.role is MessageRole.USER] == ["one", "two"]
    owners = [m.conversation_id for m in messages]
    assert owners == sorted(owners)
    ids = {(await queries.get(uuid)).id for uuid in (first, second)}
    assert set(owners) == ids
    assert [m.sequence for m in messages[:4]] == [1, 2, 3, 4]

    window = await queries.memory_messages("mem-1", limit=3)
    assert [m.content for m in window] == ["", "sunny", "answer to two"]
    assert await queries.memory_messages("mem-unknown") == []


async def test_transcript_holds_everything_and_serializes_to_json(database: Database) -> None:
    uuid = await _completed(database)
    view = await ConversationQueries(database, "default").transcript(uuid)
    assert isinstance(view, ConversationView)
    assert view.status is ProcessStatus.COMPLETED
    assert [a.size for a in view.messages[0].attachments] == [3, None]

    document = json.loads(view.model_dump_json())
    assert document["uuid"] == uuid
    assert (document["status"], document["finish_reason"]) == ("CO", "ST")
    assert Decimal(document["estimated_cost"]) == Decimal("0.00012")
    assert document["agent_code"] == "ANALYST"
    assert [m["role"] for m in document["messages"]] == ["US", "AS", "TO", "AS"]
    first = document["messages"][0]
    assert set(first) >= {"sequence", "role", "content", "token_count", "created_at"}
    assert first["attachments"][0] == {
        "sequence": 1,
        "media_type": "text/plain",
        "name": "a.txt",
        "url": None,
        "size": 3,
        "created_at": first["attachments"][0]["created_at"],
    }
    assert document["tool_calls"][0]["arguments"] == {"city": "Paris"}
    assert document["tool_calls"][0]["status"] == "succeeded"
    assert [e["kind"] for e in document["timeline"]] == ["status_change", "request", "response"]
    assert view.model_dump(mode="json") == document


async def test_transcript_costs_a_fixed_number_of_statements(database: Database) -> None:
    small = await _completed(database)
    writer = SqlTurnStore(database)
    big = await writer.create("default", action_code="A", agent_code=None)
    handle = await writer.begin_turn("default", big.uuid)
    await writer.write(
        handle,
        TurnBatch(
            messages=[
                NewMessage(
                    MessageRole.USER, f"m{i}", attachments=(NewAttachment("text/plain", url="u"),)
                )
                for i in range(30)
            ]
        ),
    )
    queries = ConversationQueries(database, "default")
    counts: list[int] = []
    for uuid in (small, big.uuid):
        statements: list[str] = []

        def count(*args: object, log: list[str] = statements) -> None:
            log.append(str(args[2]))

        event.listen(database.engine.sync_engine, "before_cursor_execute", count)
        try:
            await queries.transcript(uuid)
        finally:
            event.remove(database.engine.sync_engine, "before_cursor_execute", count)
        counts.append(len([s for s in statements if s.lstrip().upper().startswith("SELECT")]))
    assert counts[0] == counts[1] == 5
