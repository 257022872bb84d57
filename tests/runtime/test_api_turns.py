"""The public facade drives the run loop: async, streamed and sync."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from runtime_catalog import seed_catalog

from pilothouse.api import AttachmentInput, Pilothouse, SyncPilothouse
from pilothouse.catalog._enums import MessageRole, ProcessStatus
from pilothouse.runtime import TextDelta, TurnEvent, TurnFinished
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio


async def test_send_message_through_the_facade(catalog: Database) -> None:
    model = ScriptedModel(["A tidy summary."])
    async with Pilothouse(Settings(), database=catalog, model=model) as ph:
        conversation = await ph.command.start_conversation(action="SUMBRAND", agent="ANALYST")
        result = await ph.command.send_message(conversation.uuid, "Acme builds rockets.")
        assert (result.status, result.output) == (ProcessStatus.COMPLETED, "A tidy summary.")
        messages = await ph.query.get_conversation_messages(conversation.uuid)
        # The assembled system prompt is recorded first (seed 000's SY role).
        assert [m.role for m in messages] == [
            MessageRole.SYSTEM,
            MessageRole.USER,
            MessageRole.ASSISTANT,
        ]


async def test_attachments_are_recorded_and_sent(catalog: Database) -> None:
    model = ScriptedModel(["Seen."])
    async with Pilothouse(Settings(), database=catalog, model=model) as ph:
        conversation = await ph.command.start_conversation(action="SUMBRAND")
        await ph.command.send_message_with_attachments(
            conversation.uuid,
            "Summarize the attached file.",
            [AttachmentInput("text/plain", content=b"Acme brand book", name="brand.txt")],
        )
        transcript = await ph.query.get_transcript(conversation.uuid)
        assert transcript.messages[1].attachments[0].media_type == "text/plain"
    user_part = model.requests[0].messages[-1].parts[-1]
    assert "BinaryContent" in repr(user_part)


async def test_stream_message_yields_deltas_then_the_result(catalog: Database) -> None:
    model = ScriptedModel([Reply("alpha beta gamma")])
    async with Pilothouse(Settings(), database=catalog, model=model) as ph:
        conversation = await ph.command.start_conversation(action="SUMBRAND", agent="ANALYST")
        events: list[TurnEvent] = [
            e async for e in ph.command.stream_message(conversation.uuid, "go")
        ]
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == "alpha beta gamma"
    assert isinstance(events[-1], TurnFinished)
    assert events[-1].result.status is ProcessStatus.COMPLETED


async def test_a_stream_longer_than_the_event_buffer_loses_nothing(catalog: Database) -> None:
    # 1,500 deltas against a buffer of 1,024, read slowly: the turn waits for
    # room instead of dropping deltas.
    words = [f"w{i}" for i in range(1500)]
    model = ScriptedModel([Reply(" ".join(words))])
    async with Pilothouse(Settings(), database=catalog, model=model) as ph:
        conversation = await ph.command.start_conversation(action="SUMBRAND", agent="ANALYST")
        deltas: list[str] = []
        async for event in ph.command.stream_message(conversation.uuid, "go"):
            if isinstance(event, TextDelta):
                deltas.append(event.text)
                if len(deltas) == 1:
                    await anyio.sleep(0.05)
    assert len(deltas) > 1024
    assert "".join(deltas) == " ".join(words)


async def test_facade_cancel_aborts_a_running_turn(catalog: Database) -> None:
    model = ScriptedModel([Reply("word " * 100, chunk_delay=0.02)])
    async with Pilothouse(Settings(), database=catalog, model=model) as ph:
        conversation = await ph.command.start_conversation(action="SUMBRAND", agent="ANALYST")
        results = []
        streaming = anyio.Event()

        def on_event(event: TurnEvent) -> None:
            if isinstance(event, TextDelta):
                streaming.set()

        ph.subscribe(on_event, conversation_uuid=conversation.uuid)

        async def run() -> None:
            results.append(await ph.command.send_message(conversation.uuid, "go"))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await streaming.wait()
            assert await ph.command.cancel(conversation.uuid) is True
        assert results[0].status is ProcessStatus.TERMINATED
        stored = await ph.query.get_conversation(conversation.uuid)
        assert stored.status is ProcessStatus.TERMINATED


def test_sync_wrapper_sends_messages(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'sync.db'}")

    async def seed() -> None:
        db = Database(settings.database_url)
        await db.ensure_schema()
        await seed_catalog(db)
        await db.dispose()

    anyio.run(seed)
    with SyncPilothouse(settings, model=ScriptedModel(["Synchronous answer."])) as ph:
        conversation = ph.command.start_conversation(action="SUMBRAND", agent="ANALYST")
        result = ph.command.send_message(conversation.uuid, "hello")
        assert result.output == "Synchronous answer."
