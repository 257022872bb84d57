"""start_and_send: a new conversation and its first turn, one transaction before the model."""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import anyio
import pytest
from sqlalchemy import func, select
from test_runner import rows, system_text

from pilothouse.api import Pilothouse
from pilothouse.catalog import Action
from pilothouse.catalog._enums import MessageRole, ProcessStatus, TimelineKind
from pilothouse.catalog._repository import bump_revision
from pilothouse.errors import InvalidStateError, NotFoundError
from pilothouse.runtime import TextDelta, TurnEvent, TurnFinished
from pilothouse.settings import Settings
from pilothouse.store import Conversation, Database
from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio


def _record(conversation: Conversation, messages: list[Any], events: list[Any]) -> Any:
    """What a turn recorded, without ids, uuids and clocks."""
    return (
        (
            conversation.action_code,
            conversation.agent_code,
            conversation.status,
            conversation.audit,
            conversation.input_tokens,
            conversation.output_tokens,
            conversation.finish_reason,
            conversation.started_at is not None,
            conversation.finished_at is not None,
        ),
        [(m.sequence, m.role, m.content, m.token_count) for m in messages],
        [
            (e.sequence, e.kind, {k: v for k, v in e.data.items() if k not in ("run_id", "ms")})
            for e in events
        ],
    )


async def _count(db: Database) -> int:
    async with db.sessions() as session:
        return int(await session.scalar(select(func.count()).select_from(Conversation)) or 0)


async def test_it_records_what_start_conversation_then_send_message_record(
    catalog: Database,
) -> None:
    model = ScriptedModel(["Acme makes rockets.", "Acme makes rockets."])
    async with Pilothouse(Settings(), database=catalog, model=model) as ph:
        two_calls = await ph.command.start_conversation(action="SUMBRAND", agent="ANALYST")
        await ph.command.send_message(two_calls.uuid, "Summarize Acme.")
        one_call = await ph.command.start_and_send(
            "Summarize Acme.", action="SUMBRAND", agent="ANALYST"
        )
    assert one_call.status is ProcessStatus.COMPLETED
    assert one_call.output == "Acme makes rockets."
    assert one_call.conversation_uuid != two_calls.uuid
    first = _record(*await rows(catalog, two_calls.uuid))
    second = _record(*await rows(catalog, one_call.conversation_uuid))
    assert second == first
    # The status change NS -> RU is on the timeline, as after start + send.
    assert {"from": "NS", "to": "RU"} in [e[2] for e in second[2]]
    assert [m[1] for m in second[1]] == [
        MessageRole.SYSTEM,
        MessageRole.USER,
        MessageRole.ASSISTANT,
    ]
    assert system_text(model, 0) == system_text(model, 1)


async def test_the_conversation_takes_further_turns(catalog: Database) -> None:
    model = ScriptedModel(["one", "two"])
    async with Pilothouse(Settings(), database=catalog, model=model) as ph:
        result = await ph.command.start_and_send("first", action="SUMBRAND", agent="ANALYST")
        again = await ph.command.send_message(result.conversation_uuid, "second")
    assert again.status is ProcessStatus.COMPLETED
    _, messages, _ = await rows(catalog, result.conversation_uuid)
    # The system prompt is recorded once: it did not change between the turns.
    assert messages[0].role is MessageRole.SYSTEM
    assert [m.content for m in messages[1:]] == ["first", "one", "second", "two"]
    # The second request carried the first turn as history.
    assert "first" in repr(model.requests[1].messages)


@pytest.mark.parametrize(
    ("agent", "action", "error", "match"),
    [
        ("ANALYST", "NOPE", NotFoundError, "action 'NOPE' not found"),
        ("NOBODY", "SUMBRAND", NotFoundError, "agent 'NOBODY' not found"),
    ],
)
async def test_an_unknown_action_or_agent_writes_nothing(
    catalog: Database, agent: str, action: str, error: type[Exception], match: str
) -> None:
    model = ScriptedModel(["never"])
    async with Pilothouse(Settings(), database=catalog, model=model) as ph:
        before = await _count(catalog)
        with pytest.raises(error, match=match):
            await ph.command.start_and_send("hello", action=action, agent=agent)
    assert await _count(catalog) == before
    assert model.requests == []


async def test_an_action_deactivated_after_it_was_cached_writes_nothing(
    catalog: Database,
) -> None:
    # The compilation is cached by the first call; the check that refuses the
    # second runs in the transaction that would write the conversation.
    model = ScriptedModel(["first", "never"])
    async with Pilothouse(Settings(), database=catalog, model=model) as ph:
        await ph.command.start_and_send("one", action="SUMBRAND", agent="ANALYST")
        async with catalog.sessions.begin() as session:
            action = await session.scalar(select(Action).where(Action.code == "SUMBRAND"))
            assert action is not None
            action.active = False
            await bump_revision(session, "default")
        before = await _count(catalog)
        with pytest.raises(InvalidStateError, match="inactive"):
            await ph.command.start_and_send("two", action="SUMBRAND", agent="ANALYST")
    assert await _count(catalog) == before
    assert len(model.requests) == 1


async def test_a_catalog_change_after_caching_reaches_the_turn(catalog: Database) -> None:
    model = ScriptedModel(["first", "second"])
    async with Pilothouse(Settings(), database=catalog, model=model) as ph:
        await ph.command.start_and_send("one", action="SUMBRAND", agent="ANALYST")
        async with catalog.sessions.begin() as session:
            action = await session.scalar(select(Action).where(Action.code == "SUMBRAND"))
            assert action is not None
            action.prompt = "Translate the brand document into French."
            await bump_revision(session, "default")
        result = await ph.command.start_and_send("two", action="SUMBRAND", agent="ANALYST")
    assert result.status is ProcessStatus.COMPLETED
    assert "Translate the brand document into French." in system_text(model, 1)


async def test_a_shared_memory_id_brings_the_earlier_conversation(catalog: Database) -> None:
    model = ScriptedModel(["Noted: blue.", "It is blue.", "I do not know."])
    async with Pilothouse(Settings(), database=catalog, model=model) as ph:
        first = await ph.command.start_and_send(
            "My colour is blue.", action="SUMBRAND", agent="ANALYST", memory_id="customer-7"
        )
        second = await ph.command.start_and_send(
            "What is my colour?", action="SUMBRAND", agent="ANALYST", memory_id="customer-7"
        )
        other = await ph.command.start_and_send(
            "What is my colour?", action="SUMBRAND", agent="ANALYST"
        )
    assert first.conversation_uuid != second.conversation_uuid
    assert "My colour is blue." in repr(model.requests[1].messages)
    assert "Noted: blue." in repr(model.requests[1].messages)
    assert other.status is ProcessStatus.COMPLETED
    assert "blue" not in repr(model.requests[2].messages)


async def test_audit_off_writes_no_timeline(catalog: Database) -> None:
    model = ScriptedModel(["quiet"])
    async with Pilothouse(Settings(), database=catalog, model=model) as ph:
        result = await ph.command.start_and_send(
            "hello", action="SUMBRAND", agent="ANALYST", audit=False
        )
    conversation, messages, events = await rows(catalog, result.conversation_uuid)
    assert conversation.audit is False
    assert events == []
    assert [m.content for m in messages][1:] == ["hello", "quiet"]


async def test_start_and_stream_yields_deltas_then_the_result(catalog: Database) -> None:
    model = ScriptedModel([Reply("alpha beta gamma")])
    async with Pilothouse(Settings(), database=catalog, model=model) as ph:
        events: list[TurnEvent] = [
            e async for e in ph.command.start_and_stream("go", action="SUMBRAND", agent="ANALYST")
        ]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "alpha beta gamma"
    finished = events[-1]
    assert isinstance(finished, TurnFinished)
    assert finished.result.status is ProcessStatus.COMPLETED
    _, messages, _ = await rows(catalog, finished.result.conversation_uuid)
    assert [m.content for m in messages][1:] == ["go", "alpha beta gamma"]


async def test_a_reader_that_lags_makes_the_streamed_turn_wait(catalog: Database) -> None:
    # 3,000 deltas, far more than the hand-over holds (1,024): while the
    # reader sleeps the turn must wait for it, not finish into a growing
    # buffer; every delta then arrives, in order.
    words = [f"w{i}" for i in range(3000)]
    model = ScriptedModel([Reply(" ".join(words))])
    texts: list[str] = []
    finished: TurnFinished | None = None
    async with (
        Pilothouse(Settings(), database=catalog, model=model) as ph,
        aclosing(ph.command.start_and_stream("go", action="SUMBRAND", agent="ANALYST")) as stream,
    ):
        first = await anext(stream)
        while not isinstance(first, TextDelta):
            first = await anext(stream)
        texts.append(first.text)
        await anyio.sleep(0.3)
        waiting = await ph.query.get_conversation(first.conversation_uuid)
        assert waiting.status is ProcessStatus.RUNNING
        async for event in stream:
            if isinstance(event, TextDelta):
                texts.append(event.text)
            elif isinstance(event, TurnFinished):
                finished = event
    assert "".join(texts) == " ".join(words)
    assert finished is not None
    assert finished.result.status is ProcessStatus.COMPLETED


async def test_leaving_a_stream_early_stops_its_turn_and_not_its_reader(
    catalog: Database,
) -> None:
    # The reader stops after the first delta of a turn that is still
    # streaming (a delta every 50 ms): closing the stream cancels the turn,
    # which is recorded TE before the close returns; the reader's own task
    # goes on (the stream used to cancel it, from the task that finalized
    # the generator, some time later).
    model = ScriptedModel([Reply(" ".join(["tick"] * 100), chunk_delay=0.05)] * 2)
    async with Pilothouse(Settings(), database=catalog, model=model) as ph:
        uuid = ""
        async with aclosing(
            ph.command.start_and_stream("go", action="SUMBRAND", agent="ANALYST")
        ) as stream:
            async for event in stream:
                if isinstance(event, TextDelta):
                    uuid = event.conversation_uuid
                    break
        stopped = await ph.query.get_conversation(uuid)
        assert stopped.status is ProcessStatus.TERMINATED
        # Still alive, and the same client can start another stream.
        await anyio.sleep(0.3)
        async with aclosing(
            ph.command.start_and_stream("again", action="SUMBRAND", agent="ANALYST")
        ) as again:
            async for event in again:
                if isinstance(event, TextDelta):
                    break
    _, _, events = await rows(catalog, uuid)
    assert [e.kind for e in events][-2:] == [TimelineKind.CANCEL, TimelineKind.STATUS_CHANGE]
