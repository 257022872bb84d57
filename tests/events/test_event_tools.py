"""Event tools through the facade and the in-memory bus, on SQLite and PostgreSQL.

The real brokers (tansu, NATS JetStream) run the same round trip in
``tests/real/test_events_real.py``.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import anyio
import pytest
from event_catalog import CATALOG, hold_status, order_model, sums_model
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pilothouse.api import Pilothouse
from pilothouse.errors import CatalogValidationError, InvalidFieldError
from pilothouse.events import (
    BusError,
    EventService,
    MemoryBus,
    RunAction,
    SkillCompletionEvent,
    SkillInvocationEvent,
    Worker,
    decode,
    encode,
    open_bus,
)
from pilothouse.providers import ModelFactory, SecretResolver
from pilothouse.runtime import ActionCompiler, Runtime
from pilothouse.runtime._eventcalls import EventCalls
from pilothouse.settings import Settings
from pilothouse.store import Database, SqlTurnStore, StoredMessage, TurnBatch, TurnHandle
from pilothouse.types import ProcessStatus, ToolCallStatus

pytestmark = pytest.mark.anyio


@pytest.fixture
async def ph(database: Database) -> AsyncIterator[Pilothouse]:
    settings = Settings(database_url=database.url)
    async with Pilothouse(settings, database=database, model=order_model()) as facade:
        await facade.catalog.import_text(CATALOG)
        yield facade


async def _wait_for(ph: Pilothouse, uuid: str, status: ProcessStatus) -> None:
    with anyio.fail_after(20):
        while (await ph.query.get_conversation(uuid)).status is not status:
            await anyio.sleep(0.02)


async def test_event_tool_call_suspends_the_conversation_with_its_command_in_the_outbox(
    ph: Pilothouse,
) -> None:
    result = await ph.command.start_and_send("A-17", action="ORDERS")
    assert result.status is ProcessStatus.WAITING
    (call,) = result.tool_calls
    assert call.name == "lookup_order" and call.correlation_id
    assert result.as_json()["tool_calls"][0]["correlationId"] == call.correlation_id
    (command,) = await ph.events.unpublished()
    # Seed 002's names, plus tenant, conversation and deadline.
    assert command.payload["correlationId"] == call.correlation_id
    assert command.payload["skillName"] == "lookup_order"
    assert command.payload["arguments"] == {"order_id": "A-17"}
    assert command.payload["replyTo"] == "agent-events"
    assert command.payload["tenant"] == "default"
    assert command.payload["conversationId"] == result.conversation_uuid
    assert command.topic == "agent-commands"
    decoded = decode(json.dumps(command.payload).encode())
    assert isinstance(decoded, SkillInvocationEvent) and decoded.deadline is not None
    (row,) = (await ph.query.get_transcript(result.conversation_uuid)).tool_calls
    assert row.status is ToolCallStatus.RETURNED


async def test_round_trip_through_the_memory_bus_resumes_the_conversation(
    ph: Pilothouse,
) -> None:
    bus = MemoryBus()
    service = EventService(ph, bus)
    worker = Worker(ph, bus)

    @worker.tool
    def lookup_order(order_id: str) -> dict[str, str]:
        return {"order_id": order_id, "status": "shipped"}

    result = await ph.command.start_and_send("A-17", action="ORDERS")
    async with anyio.create_task_group() as group:
        await group.start(service.run)
        await group.start(worker.run)
        await _wait_for(ph, result.conversation_uuid, ProcessStatus.COMPLETED)
        group.cancel_scope.cancel()
    conversation = await ph.query.get_conversation(result.conversation_uuid)
    assert conversation.status is ProcessStatus.COMPLETED
    (row,) = (await ph.query.get_transcript(result.conversation_uuid)).tool_calls
    assert row.status is ToolCallStatus.SUCCEEDED
    assert json.loads(row.result or "") == {"order_id": "A-17", "status": "shipped"}
    counts = await ph.events.counts()
    assert counts == {"commands": 1, "unsent": 0, "processed": 1, "duplicates": 0, "waiting": 0}
    (completion,) = bus.messages("agent-events")
    assert json.loads(completion)["correlationId"] == result.tool_calls[0].correlation_id


async def test_a_duplicate_completion_is_recorded_and_never_applied_twice(
    ph: Pilothouse,
) -> None:
    result = await ph.command.start_and_send("A-17", action="ORDERS")
    correlation = result.tool_calls[0].correlation_id
    assert correlation is not None
    first = await ph.events.complete(correlation, result={"status": "shipped"})
    second = await ph.events.complete(correlation, result={"status": "lost"})
    assert (first.outcome, second.outcome) == ("applied", "duplicate")
    assert first.result is not None and first.result.output == 'Status: {"status": "shipped"}'
    messages = await ph.query.get_conversation_messages(result.conversation_uuid)
    assert sum(1 for m in messages if m.role.value == "TO") == 1
    counts = await ph.events.counts()
    assert (counts["processed"], counts["duplicates"]) == (1, 1)


async def test_a_deadline_ends_the_call_with_a_timeout_the_model_sees_and_a_late_one_is_ignored(
    ph: Pilothouse,
) -> None:
    await ph.catalog.import_text(CATALOG.replace("timeout: 120", "timeout: 0.05"))
    result = await ph.command.start_and_send("A-17", action="ORDERS")
    await anyio.sleep(0.1)
    assert await ph.events.expire() == 1
    conversation = await ph.query.get_conversation(result.conversation_uuid)
    assert conversation.status is ProcessStatus.COMPLETED
    (row,) = (await ph.query.get_transcript(result.conversation_uuid)).tool_calls
    assert row.status is ToolCallStatus.FAILED
    assert (row.result or "").startswith("tool.exec.timeout: no completion for 'lookup_order'")
    messages = await ph.query.get_conversation_messages(result.conversation_uuid)
    assert messages[-1].content.startswith("Status: tool.exec.timeout")
    correlation = result.tool_calls[0].correlation_id
    assert correlation is not None
    late = await ph.events.complete(correlation, result="shipped")
    assert late.outcome == "duplicate"
    assert await ph.events.expire() == 0


async def test_a_conversation_left_running_after_its_completion_is_continued(
    database: Database,
) -> None:
    # As if the process died between applying the completion and the end of
    # the model call it made: the result is recorded, the conversation RU.
    settings = Settings(database_url=database.url)
    async with Pilothouse(settings, database=database, model=_looks_up_then_ships()) as ph:
        await ph.catalog.import_text(CATALOG)
        await _left_running_is_continued(ph, database)


def _looks_up_then_ships() -> FunctionModel:
    """A model that calls lookup_order once, then answers "Shipped." for ever."""
    answers = iter([ToolCallPart("lookup_order", {"order_id": "A-17"}, tool_call_id="c1")])

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[next(answers, TextPart("Shipped."))])

    return FunctionModel(model)


async def _left_running_is_continued(ph: Pilothouse, database: Database) -> None:
    from datetime import UTC, datetime

    result = await ph.command.start_and_send("A-17", action="ORDERS")
    correlation = result.tool_calls[0].correlation_id
    assert correlation is not None
    await ph.events.complete(correlation, result={"status": "shipped"})
    await hold_status(
        database,
        result.conversation_uuid,
        ProcessStatus.RUNNING,
        updated_at=datetime(2020, 1, 1, tzinfo=UTC),
    )
    assert await ph.events.recover(older_than=3600) == 1
    conversation = await ph.query.get_conversation(result.conversation_uuid)
    assert conversation.status is ProcessStatus.COMPLETED
    messages = await ph.query.get_conversation_messages(result.conversation_uuid)
    assert sum(1 for m in messages if m.role.value == "TO") == 1
    assert [m.content for m in messages[-2:]] == ["Shipped.", "Shipped."]
    assert await ph.events.recover(older_than=3600) == 0


class _Died(BaseException):
    """The process died: nothing after it reaches the store."""


class _DiesAfterTake(SqlTurnStore):
    """A store whose process dies once a turn has taken its conversation."""

    dead = False

    async def begin_turn(self, *args: Any, **kwargs: Any) -> TurnHandle:
        if self.dead:
            raise _Died
        handle = await super().begin_turn(*args, **kwargs)
        self.dead = True
        return handle

    async def memory(self, tenant: str, memory_id: str) -> list[StoredMessage]:
        if self.dead:
            raise _Died
        return await super().memory(tenant, memory_id)

    async def write(self, handle: TurnHandle, batch: TurnBatch) -> list[int]:
        if self.dead:
            raise _Died
        return await super().write(handle, batch)


async def test_a_completion_is_applied_with_the_take_so_a_death_right_after_is_recovered(
    database: Database,
) -> None:
    # The kill test's stall (CI, twice): a process killed between taking the
    # conversation (RU) and writing the completion's reply left it RU with
    # nothing marked applied: the redelivered completion found it busy and
    # the sweep had nothing applied to go on from. The take now writes both.
    settings = Settings(database_url=database.url)
    async with Pilothouse(settings, database=database, model=_looks_up_then_ships()) as ph:
        await ph.catalog.import_text(CATALOG)
        result = await ph.command.start_and_send("A-17", action="ORDERS")
        correlation = result.tool_calls[0].correlation_id
        assert correlation is not None
        factory = ModelFactory()
        dying = _DiesAfterTake(database)
        runtime = Runtime(
            database=database,
            models=factory,
            compiler=ActionCompiler(database, SecretResolver(env={}, secrets_file=None)),
            store=dying,
            model_override=_looks_up_then_ships(),
        )
        try:
            with pytest.raises(_Died):
                await EventCalls(database, runtime.runner).complete(
                    correlation, result={"status": "shipped"}
                )
        finally:
            await runtime.aclose()
            await factory.aclose()
        assert dying.dead
        left = await ph.query.get_transcript(result.conversation_uuid)
        assert left.status is ProcessStatus.RUNNING
        assert [c.status for c in left.tool_calls] == [ToolCallStatus.SUCCEEDED]
        # Applied: the redelivery is a duplicate, and the sweep goes on with it.
        assert (await ph.events.complete(correlation, result="again")).outcome == "duplicate"
        assert await ph.events.recover(older_than=0) == 1
        messages = await ph.query.get_conversation_messages(result.conversation_uuid)
        assert [m.content for m in messages if m.role.value == "TO"] == ['{"status": "shipped"}']
        assert messages[-1].content == "Shipped."
        assert (await ph.query.get_conversation(result.conversation_uuid)).status is (
            ProcessStatus.COMPLETED
        )


async def test_an_unknown_correlation_id_is_recorded_once(ph: Pilothouse) -> None:
    assert (await ph.events.complete("nope", result=1)).outcome == "unknown"
    assert (await ph.events.complete("nope", result=1)).outcome == "duplicate"


async def test_a_skill_with_execution_event_sends_its_tools_to_the_bus(
    database: Database,
) -> None:
    bus = MemoryBus()
    settings = Settings(database_url=database.url)
    async with Pilothouse(settings, database=database, model=sums_model()) as ph:
        await ph.catalog.import_text(CATALOG)
        service, worker = EventService(ph, bus), Worker(ph, bus)
        result = await ph.command.start_and_send("2 + 40?", action="SUMS")
        assert result.status is ProcessStatus.WAITING
        assert [c.name for c in result.tool_calls] == ["add"]
        assert await service.relay_once() == 1
        # The worker runs the catalog's python tool (event_catalog:add).
        async for delivery in bus.consume("agent-commands", worker.group):
            assert await worker.handle(delivery) == "ok"
            break
        async for delivery in bus.consume("agent-events", service.group):
            assert await service.handle_completion(delivery) == "applied"
            break
        conversation = await ph.query.get_conversation(result.conversation_uuid)
        assert conversation.status is ProcessStatus.COMPLETED
        messages = await ph.query.get_conversation_messages(result.conversation_uuid)
        assert messages[-1].content == "Sum: 42"


async def test_a_failing_command_is_dead_lettered_after_n_attempts_and_answered(
    ph: Pilothouse,
) -> None:
    bus = MemoryBus()
    worker = Worker(ph, bus, attempts=3)
    runs: list[str] = []

    @worker.tool
    def lookup_order(order_id: str) -> str:
        runs.append(order_id)
        raise RuntimeError("warehouse offline")

    result = await ph.command.start_and_send("A-17", action="ORDERS")
    await EventService(ph, bus).relay_once()
    async for delivery in bus.consume("agent-commands", worker.group):
        assert await worker.handle(delivery) == "dead_letter"
        break
    assert runs == ["A-17"] * 3
    assert len(bus.messages("agent-commands.dlq")) == 1
    (reply,) = bus.messages("agent-events")
    completion = decode(reply)
    assert isinstance(completion, SkillCompletionEvent)
    assert completion.error is not None and "warehouse offline" in completion.error
    assert "dead-lettered after 3 attempts" in completion.error
    applied = await ph.events.complete(completion.correlation_id, error=completion.error)
    assert applied.outcome == "applied"
    (row,) = (await ph.query.get_transcript(result.conversation_uuid)).tool_calls
    assert row.status is ToolCallStatus.FAILED
    text = worker.metrics.registry.get_sample_value(
        "pilothouse_worker_commands_total",
        {"topic": "agent-commands", "outcome": "dead_letter"},
    )
    assert text == 1


async def test_an_unreadable_command_goes_straight_to_the_dead_letter_topic(
    ph: Pilothouse,
) -> None:
    bus = MemoryBus()
    worker = Worker(ph, bus)
    await bus.publish("agent-commands", b"{not json")
    async for delivery in bus.consume("agent-commands", worker.group):
        assert await worker.handle(delivery) == "invalid"
        break
    assert bus.messages("agent-commands.dlq") == [b"{not json"]
    assert bus.messages("agent-events") == []


async def test_run_action_is_answered_by_turn_finished_and_a_duplicate_is_not_run(
    database: Database,
) -> None:
    bus = MemoryBus()
    settings = Settings(database_url=database.url)
    model = FunctionModel(lambda messages, info: _text("Done."), model_name="m")
    async with Pilothouse(settings, database=database, model=model) as ph:
        await ph.catalog.import_text(CATALOG)
        service = EventService(ph, bus, action_topic="pilothouse-actions")
        command = RunAction(
            action="ORDERS",
            input="How is A-17?",
            memory_id="client-7",
            correlation_id="bpmn-1",
            reply_to="bpmn-replies",
        )
        await bus.publish("pilothouse-actions", encode(command))
        await bus.publish("pilothouse-actions", encode(command))
        outcomes: list[str] = []
        async for delivery in bus.consume("pilothouse-actions", "g"):
            outcomes.append(await service.handle_action(delivery))
            if len(outcomes) == 2:
                break
        assert outcomes == ["finished", "duplicate"]
        (reply,) = bus.messages("bpmn-replies")
        finished = json.loads(reply)
        assert finished["type"] == "turn_finished"
        assert finished["correlationId"] == "bpmn-1"
        assert (finished["status"], finished["output"]) == ("CO", "Done.")
        assert set(finished["usage"]) == {
            "inputTokens",
            "outputTokens",
            "totalTokens",
            "cost",
            "usageEstimated",
        }
        assert finished["usage"]["cost"] == "0"
        assert finished["aiMeta"]["aiGenerated"] is True
        conversation = await ph.query.get_conversation(finished["conversationUuid"])
        assert conversation.memory_id == "client-7"


async def test_run_action_for_an_unknown_action_answers_failed(ph: Pilothouse) -> None:
    bus = MemoryBus()
    service = EventService(ph, bus)
    await bus.publish(
        "actions",
        json.dumps({"action": "NOPE", "correlationId": "x1", "replyTo": "out"}).encode(),
    )
    async for delivery in bus.consume("actions", "g"):
        assert await service.handle_action(delivery) == "refused"
        break
    finished = json.loads(bus.messages("out")[0])
    assert finished["status"] == "FA" and finished["error"].startswith("not_found")


async def test_catalog_refuses_an_unknown_event_tool_setting(ph: Pilothouse) -> None:
    with pytest.raises(CatalogValidationError, match="replyTo"):
        await ph.catalog.import_text(CATALOG.replace("reply_to: agent-events", "replyTo: x"))


def test_open_bus_refuses_an_unknown_scheme_and_a_kafka_option_elsewhere() -> None:
    with pytest.raises(InvalidFieldError, match="unknown bus 'amqp://x'"):
        open_bus("amqp://x")
    with pytest.raises(InvalidFieldError, match="only Kafka"):
        open_bus("nats://127.0.0.1:4222", session_timeout=2)
    assert isinstance(open_bus("memory://"), MemoryBus)
    # A URL's credentials never reach an error.
    with pytest.raises(InvalidFieldError) as refused:
        open_bus("amqp://alice:s3cret@x")
    assert "s3cret" not in str(refused.value)
    assert "amqp://***@x" in str(refused.value)


async def test_nats_with_no_server_fails_fast_in_one_line_without_its_credentials(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Before: nats-py retried the first connection for ever and logged a
    # traceback for every attempt, two a second (`pilothouse events` hung).
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    bus = open_bus(f"nats://alice:s3cret@127.0.0.1:{port}")
    caplog.set_level(logging.DEBUG, logger="pilothouse.events.nats")
    caplog.set_level(logging.DEBUG, logger="nats")
    with anyio.fail_after(30), pytest.raises(BusError, match="cannot connect") as failed:
        await bus.start()
    assert f"nats://***@127.0.0.1:{port}" in str(failed.value)
    logged = [r for r in caplog.records if r.name.startswith(("nats", "pilothouse.events.nats"))]
    assert logged, "the failed attempts were not said"
    # The same failure is said once, without a traceback, and no secret.
    assert len(logged) == 1
    assert all(r.exc_info is None for r in logged)
    assert all("s3cret" not in r.getMessage() for r in logged)
    await bus.close()


def _text(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)])


async def test_a_completion_found_busy_is_handed_back_and_applied_once_the_turn_ends(
    database: Database,
) -> None:
    # Left unacknowledged, a Kafka group would see it again only at its next
    # rebalance: the conversation waited on it for as long (hours). Handed
    # back, it comes again after each busy_retry until the other turn ends.
    settings = Settings(database_url=database.url)
    bus = MemoryBus()
    async with Pilothouse(settings, database=database, model=order_model()) as ph:
        await ph.catalog.import_text(CATALOG)
        result = await ph.command.start_and_send("A-17", action="ORDERS")
        correlation = result.tool_calls[0].correlation_id
        assert correlation is not None
        # Another process's turn holds the conversation.
        await hold_status(database, result.conversation_uuid, ProcessStatus.RUNNING)
        await bus.publish(
            "agent-events",
            encode(SkillCompletionEvent(correlation_id=correlation, result={"status": "shipped"})),
        )
        service = EventService(ph, bus, busy_retry=0.05)
        busy = service.metrics.completions.labels("busy")
        async with anyio.create_task_group() as group:
            await group.start(service.run)
            with anyio.fail_after(30):
                while busy._value.get() < 3:  # delivered, found busy, handed back: three times
                    await anyio.sleep(0.02)
            await hold_status(database, result.conversation_uuid, ProcessStatus.WAITING)
            with anyio.fail_after(30):
                while (await ph.events.counts())["processed"] < 1:
                    await anyio.sleep(0.02)
            group.cancel_scope.cancel()
        counts = await ph.events.counts()
        assert (counts["processed"], counts["duplicates"], counts["waiting"]) == (1, 0, 0)
        assert service.metrics.completions.labels("applied")._value.get() == 1
        messages = await ph.query.get_conversation_messages(result.conversation_uuid)
        assert [m.content for m in messages if m.role.value == "TO"] == ['{"status": "shipped"}']
        conversation = await ph.query.get_conversation(result.conversation_uuid)
        assert conversation.status is ProcessStatus.COMPLETED


@pytest.mark.parametrize(
    "field", ["poll_interval", "sweep_interval", "busy_retry", "recover_after"]
)
@pytest.mark.parametrize("value", [0, -1.0, float("inf"), float("nan"), "5", True])
def test_event_service_refuses_a_pace_that_is_not_a_positive_number_of_seconds(
    field: str, value: object
) -> None:
    ph = Pilothouse(Settings(database_url="sqlite+aiosqlite://"))
    with pytest.raises(InvalidFieldError, match=f"{field}: must be a positive number of seconds"):
        pace: dict[str, Any] = {field: value}
        EventService(ph, MemoryBus(), **pace)


def test_worker_refuses_a_timeout_or_attempts_it_cannot_honour() -> None:
    ph = Pilothouse(Settings(database_url="sqlite+aiosqlite://"))
    with pytest.raises(InvalidFieldError, match="timeout: must be a positive number of seconds"):
        Worker(ph, MemoryBus(), timeout=0)
    with pytest.raises(InvalidFieldError, match="attempts: must be at least 1, not 0"):
        Worker(ph, MemoryBus(), attempts=0)


async def test_the_memory_bus_delivers_a_handed_back_message_again_first_in_line() -> None:
    bus = MemoryBus()
    for value in (b"one", b"two", b"three"):
        await bus.publish("t", value)
    stream = bus.consume("t", "g")
    async with aclosing(stream):
        first = await anext(stream)
        second = await anext(stream)
        await first.ack()
        await second.redeliver()
        await second.redeliver()  # twice: still one copy
        again = await anext(stream)
        assert again.value == b"two"
        await again.ack()
        last = await anext(stream)
        assert last.value == b"three"
    # Stopped with "three" unacknowledged: it goes back once, and handing it
    # back after the stop adds no second copy.
    await last.redeliver()
    stream = bus.consume("t", "g")
    async with aclosing(stream):
        assert (await anext(stream)).value == b"three"
        await bus.publish("t", b"four")
        assert (await anext(stream)).value == b"four"
