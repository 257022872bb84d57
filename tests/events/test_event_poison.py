"""Messages that are malformed, oversized or make their handler raise, on SQLite and PostgreSQL.

None of them stops the consumer: a bad ``run_action`` is answered ``FA``
naming its field, one whose handling raises is handed back and, after
``max_deliver`` deliveries, dead-lettered and answered; completions are
read tolerantly. The same through real NATS in ``tests/real/test_events_poison_real.py``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from event_catalog import CATALOG, order_model
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pilothouse.api import Pilothouse
from pilothouse.errors import InvalidFieldError
from pilothouse.events import (
    EventService,
    MemoryBus,
    SkillCompletionEvent,
    SkillInvocationEvent,
    Worker,
    decode,
    encode,
)
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.types import ProcessStatus, ToolCallStatus

pytestmark = pytest.mark.anyio

ACTIONS = "pilothouse-actions"
REPLIES = "bpmn-replies"


def _done(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("Done.")])


@pytest.fixture
async def ph(database: Database) -> AsyncIterator[Pilothouse]:
    settings = Settings(database_url=database.url)
    model = FunctionModel(_done, model_name="m")
    async with Pilothouse(settings, database=database, model=model) as facade:
        await facade.catalog.import_text(CATALOG)
        yield facade


def run_action(correlation_id: str, **fields: Any) -> bytes:
    message = {
        "type": "run_action",
        "action": "ORDERS",
        "input": "How is A-17?",
        "correlationId": correlation_id,
        "replyTo": REPLIES,
        **fields,
    }
    return json.dumps(message).encode()


async def answered(service: EventService, bus: MemoryBus, count: int) -> dict[str, dict[str, Any]]:
    """Run the service until ``count`` answers are on the reply topic; them by correlation id."""
    async with anyio.create_task_group() as group:
        await group.start(service.run)
        with anyio.fail_after(20):
            while len(bus.messages(REPLIES)) < count:
                await anyio.sleep(0.02)
        group.cancel_scope.cancel()
    answers = [json.loads(value) for value in bus.messages(REPLIES)]
    return {answer["correlationId"]: answer for answer in answers}


async def test_a_too_long_memory_id_or_tenant_is_answered_failed_and_the_next_is_run(
    ph: Pilothouse,
) -> None:
    # On PostgreSQL the 100-character memoryId failed the insert
    # (varchar(64)) and the exception stopped the service; on SQLite it
    # was kept. Now both refuse it, naming the field as the message wrote it.
    bus = MemoryBus()
    service = EventService(ph, bus, action_topic=ACTIONS)
    await bus.publish(ACTIONS, run_action("long-memory", memoryId="m" * 100))
    await bus.publish(ACTIONS, run_action("long-tenant", tenant="t" * 40))
    await bus.publish(ACTIONS, run_action("valid", memoryId="client-7"))
    answers = await answered(service, bus, 3)
    memory = answers["long-memory"]
    assert memory["status"] == "FA"
    assert memory["error"] == "invalid_input: memoryId: String should have at most 64 characters"
    tenant = answers["long-tenant"]
    assert tenant["status"] == "FA"
    assert tenant["error"] == "invalid_input: tenant: String should have at most 32 characters"
    assert (answers["valid"]["status"], answers["valid"]["output"]) == ("CO", "Done.")
    # Set aside where an operator can read them, as they came.
    assert bus.messages(f"{ACTIONS}.dlq") == [
        run_action("long-memory", memoryId="m" * 100),
        run_action("long-tenant", tenant="t" * 40),
    ]


async def test_the_facade_refuses_a_memory_id_longer_than_its_column(ph: Pilothouse) -> None:
    with pytest.raises(InvalidFieldError, match="memory_id: is 65 characters long"):
        await ph.command.start_and_send("Hi", action="ORDERS", memory_id="m" * 65)
    assert (await ph.query.list_conversations()).total == 0


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        (
            {"input": 42},
            "invalid_input: input: must be text or an object of the prompt's placeholders, not 42",
        ),
        ({"priority": "high"}, "invalid_input: priority: unknown field; remove it"),
        ({"memoryID": "client-7"}, "invalid_input: memoryID: unknown field; remove it"),
    ],
)
async def test_an_invalid_run_action_is_answered_failed_naming_the_field(
    ph: Pilothouse, fields: dict[str, Any], error: str
) -> None:
    bus = MemoryBus()
    service = EventService(ph, bus, action_topic=ACTIONS)
    await bus.publish(ACTIONS, run_action("bad", **fields))
    await bus.publish(ACTIONS, run_action("next"))
    answers = await answered(service, bus, 2)
    assert answers["bad"]["status"] == "FA"
    assert answers["bad"]["error"].startswith(error), answers["bad"]["error"]
    assert answers["next"]["status"] == "CO"
    assert (await ph.query.list_conversations()).total == 1
    assert bus.messages(f"{ACTIONS}.dlq") == [run_action("bad", **fields)]


async def test_a_run_action_whose_handling_raises_is_dead_lettered_after_max_deliver(
    ph: Pilothouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stands for what a database error or a bug does: the handler raises.
    handled: list[str] = []
    start = type(ph.command).start_and_send

    async def poisoned(self: Any, text: str, **kwargs: Any) -> Any:
        handled.append(text)
        if text == "poison":
            raise RuntimeError("the handler broke")
        return await start(self, text, **kwargs)

    monkeypatch.setattr(type(ph.command), "start_and_send", poisoned)
    bus = MemoryBus()
    service = EventService(ph, bus, action_topic=ACTIONS, max_deliver=3)
    await bus.publish(ACTIONS, run_action("poison", input="poison"))
    await bus.publish(ACTIONS, run_action("valid"))
    answers = await answered(service, bus, 2)
    assert handled.count("poison") == 3
    assert bus.messages(f"{ACTIONS}.dlq") == [run_action("poison", input="poison")]
    assert answers["poison"]["status"] == "FA"
    assert answers["poison"]["error"] == (
        "internal: the run_action could not be handled in 3 deliveries; "
        f"it was dead-lettered on {ACTIONS}.dlq"
    )
    assert answers["valid"]["status"] == "CO"


async def test_a_completion_whose_handling_raises_is_dead_lettered_and_the_next_applied(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(database_url=database.url)
    async with Pilothouse(settings, database=database, model=order_model()) as ph:
        await ph.catalog.import_text(CATALOG)
        waiting = await ph.command.start_and_send("A-17", action="ORDERS")
        correlation = waiting.tool_calls[0].correlation_id
        assert correlation is not None
        attempts: list[str] = []
        complete = type(ph.events).complete

        async def poisoned(self: Any, correlation_id: str, **kwargs: Any) -> Any:
            attempts.append(correlation_id)
            if correlation_id == "poison":
                raise RuntimeError("the handler broke")
            return await complete(self, correlation_id, **kwargs)

        monkeypatch.setattr(type(ph.events), "complete", poisoned)
        bus = MemoryBus()
        service = EventService(ph, bus, max_deliver=2)
        poison = b'{"correlationId": "poison", "result": 1}'
        await bus.publish("agent-events", poison)
        await bus.publish(
            "agent-events", b'{"correlationId": "%s", "result": "ok"}' % correlation.encode()
        )
        async with anyio.create_task_group() as group:
            await group.start(service.run)
            with anyio.fail_after(20):
                while (await ph.query.get_conversation(waiting.conversation_uuid)).status is not (
                    ProcessStatus.COMPLETED
                ) or not bus.messages("agent-events.dlq"):
                    await anyio.sleep(0.02)
            group.cancel_scope.cancel()
        assert attempts.count("poison") == 2
        assert bus.messages("agent-events.dlq") == [poison]


@pytest.mark.parametrize(
    "shape",
    [
        # One field more than pilothouse writes.
        {"type": "SkillCompletionEvent", "result": {"status": "shipped"}, "timestamp": 1764921600},
        # Seed 002's worker: no type, its command's skillName and arguments echoed.
        {"skillName": "lookup_order", "arguments": {"order_id": "A-17"}, "result": "shipped"},
        # The same as a CloudEvents envelope (structured mode).
        {
            "specversion": "1.0",
            "id": "e-1",
            "source": "/workers/orders",
            "type": "com.example.SkillCompletionEvent",
            "data": {"result": "shipped"},
        },
    ],
    ids=["extra-field", "seed-echo", "cloudevents"],
)
async def test_a_completion_is_read_tolerantly_and_applied(
    database: Database, shape: dict[str, Any]
) -> None:
    settings = Settings(database_url=database.url)
    async with Pilothouse(settings, database=database, model=order_model()) as ph:
        await ph.catalog.import_text(CATALOG)
        waiting = await ph.command.start_and_send("A-17", action="ORDERS")
        correlation = waiting.tool_calls[0].correlation_id
        assert correlation is not None
        if "data" in shape:
            shape = {**shape, "data": {**shape["data"], "correlationId": correlation}}
        else:
            shape = {**shape, "correlationId": correlation}
        value = json.dumps(shape).encode()
        assert isinstance(decode(value), SkillCompletionEvent)
        bus = MemoryBus()
        service = EventService(ph, bus)
        await bus.publish("agent-events", value)
        async for delivery in bus.consume("agent-events", "g"):
            assert await service.handle_completion(delivery) == "applied"
            break
        conversation = await ph.query.get_conversation(waiting.conversation_uuid)
        assert conversation.status is ProcessStatus.COMPLETED
        (row,) = (await ph.query.get_transcript(waiting.conversation_uuid)).tool_calls
        assert row.status is ToolCallStatus.SUCCEEDED


@pytest.mark.parametrize("value", [0, -1, 2.5, True])
async def test_max_deliver_must_be_a_whole_number_of_deliveries(ph: Pilothouse, value: Any) -> None:
    with pytest.raises(InvalidFieldError, match="max_deliver: must be a whole number"):
        EventService(ph, MemoryBus(), max_deliver=value)


async def test_a_worker_answers_an_unreadable_command_and_dead_letters_one_that_raises(
    ph: Pilothouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[str] = []

    async def poisoned(self: Any, name: str, arguments: Any, **kwargs: Any) -> Any:
        runs.append(name)
        raise RuntimeError("the handler broke")

    monkeypatch.setattr(type(ph.events), "run_tool", poisoned)
    bus = MemoryBus()
    worker = Worker(ph, bus, max_deliver=2)
    unreadable = b'{"type": "SkillInvocationEvent", "correlationId": "c-1", "replyTo": "out"}'
    poison = encode(SkillInvocationEvent(correlation_id="c-2", skill_name="add", reply_to="out"))
    await bus.publish("agent-commands", unreadable)
    await bus.publish("agent-commands", poison)
    async with anyio.create_task_group() as group:
        await group.start(worker.run)
        with anyio.fail_after(20):
            while len(bus.messages("agent-commands.dlq")) < 2:
                await anyio.sleep(0.02)
        group.cancel_scope.cancel()
    assert bus.messages("agent-commands.dlq") == [unreadable, poison]
    assert runs == ["add", "add"]
    unreadable_answer, poison_answer = [json.loads(value) for value in bus.messages("out")]
    assert unreadable_answer["correlationId"] == "c-1"
    assert unreadable_answer["error"] == "tool.exec.error: invalid_input: skillName: Field required"
    assert poison_answer["correlationId"] == "c-2"
    assert poison_answer["error"] == (
        "tool.exec.error: internal: the command could not be handled in 2 deliveries; "
        "it was dead-lettered on agent-commands.dlq"
    )


@pytest.mark.parametrize(
    "value",
    [b"{not json", b'{"correlationId": ""}', b"[1, 2]", b'{"type": "nope"}'],
    ids=["not-json", "empty-id", "not-an-object", "unknown-type"],
)
async def test_a_message_on_the_reply_topic_that_is_no_completion_is_dead_lettered(
    ph: Pilothouse, value: bytes
) -> None:
    bus = MemoryBus()
    service = EventService(ph, bus)
    await bus.publish("agent-events", value)
    async for delivery in bus.consume("agent-events", "g"):
        assert await service.handle_completion(delivery) == "invalid"
        break
    assert bus.messages("agent-events.dlq") == [value]
