"""The final answer of a waiting ``run_action``, caller results for event calls, the sync facade.

Memory bus, SQLite and PostgreSQL; the real brokers run the same in
``tests/real/test_events_real.py``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from event_catalog import CATALOG, order_model
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pilothouse.api import Pilothouse, SyncPilothouse
from pilothouse.errors import InvalidFieldError, InvalidStateError
from pilothouse.events import (
    EventService,
    MemoryBus,
    RunAction,
    SkillCompletionEvent,
    Worker,
    encode,
)
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.types import Caller, MessageRole, ProcessStatus, ToolCallStatus

pytestmark = pytest.mark.anyio


@pytest.fixture
async def ph(database: Database) -> AsyncIterator[Pilothouse]:
    settings = Settings(database_url=database.url)
    async with Pilothouse(settings, database=database, model=order_model()) as facade:
        await facade.catalog.import_text(CATALOG)
        yield facade


def _action(correlation_id: str, order: str = "A-17") -> RunAction:
    return RunAction(
        action="ORDERS", input=order, correlation_id=correlation_id, reply_to="bpmn-replies"
    )


async def _replies(bus: MemoryBus, count: int) -> list[dict[str, Any]]:
    with anyio.fail_after(20):
        while len(bus.messages("bpmn-replies")) < count:
            await anyio.sleep(0.02)
    return [json.loads(m) for m in bus.messages("bpmn-replies")]


async def _handle_one(service: EventService, bus: MemoryBus, topic: str) -> str:
    async for delivery in bus.consume(topic, "actions"):
        return await service.handle_action(delivery)
    raise AssertionError("no run_action delivered")


async def _tool_messages(ph: Pilothouse, uuid: str) -> int:
    messages = await ph.query.get_conversation_messages(uuid)
    return sum(1 for m in messages if m.role is MessageRole.TOOL)


async def test_a_waiting_run_action_publishes_its_final_answer_when_the_worker_completes(
    ph: Pilothouse,
) -> None:
    bus = MemoryBus()
    service = EventService(ph, bus, action_topic="pilothouse-actions")
    worker = Worker(ph, bus)

    @worker.tool
    def lookup_order(order_id: str) -> dict[str, str]:
        return {"order_id": order_id, "status": "shipped"}

    await bus.publish("pilothouse-actions", encode(_action("bpmn-7")))
    async with anyio.create_task_group() as group:
        await group.start(service.run)
        await group.start(worker.run)
        await _replies(bus, 2)
        group.cancel_scope.cancel()
    waiting, final = await _replies(bus, 2)
    # The turn that waits on the worker is answered at once, marked not final.
    assert (waiting["status"], waiting["final"], waiting["correlationId"]) == (
        "WA",
        False,
        "bpmn-7",
    )
    assert waiting["finishReason"] == "TC"
    # The final answer: same correlation id, the model's answer from the result.
    assert (final["status"], final["final"], final["correlationId"]) == ("CO", True, "bpmn-7")
    assert final["conversationUuid"] == waiting["conversationUuid"]
    assert final["output"] == 'Status: {"order_id": "A-17", "status": "shipped"}'
    assert final["finishReason"] == "ST"
    assert final["aiMeta"]["aiGenerated"] is True and final["aiMeta"]["model"] == "order-model"
    assert final["error"] is None
    # Its usage is the whole conversation's: both turns' model calls.
    conversation = await ph.query.get_conversation(final["conversationUuid"])
    assert final["usage"] == {
        "inputTokens": conversation.input_tokens,
        "outputTokens": conversation.output_tokens,
        "totalTokens": conversation.input_tokens + conversation.output_tokens,
        "cost": "0",  # plain notation, never "0E-8"
        "usageEstimated": False,
    }
    assert final["usage"]["inputTokens"] > waiting["usage"]["inputTokens"] > 0
    # Started by the bus, without an API key.
    assert (conversation.face, conversation.caller_key_prefix) == ("bus", None)
    # Nothing is owed any more: a later relay round publishes nothing.
    assert await service.replies_once() == 0
    assert len(bus.messages("bpmn-replies")) == 2


async def test_the_final_answer_survives_a_restart_and_comes_from_a_caller_result(
    database: Database,
) -> None:
    bus = MemoryBus()
    settings = Settings(database_url=database.url)
    # The first process runs the action: it waits, answers WA, and stops.
    async with Pilothouse(settings, model=order_model()) as first:
        await first.catalog.import_text(CATALOG)
        await bus.publish("pilothouse-actions", encode(_action("bpmn-8", "B-2")))
        outcome = await _handle_one(EventService(first, bus), bus, "pilothouse-actions")
        assert outcome == "waiting"
    (waiting,) = await _replies(bus, 1)
    uuid = waiting["conversationUuid"]
    # Another process, later: a caller answers the event call over the API.
    async with Pilothouse(settings, model=order_model()) as second:
        service = EventService(second, bus)
        (call,) = (await second.query.get_transcript(uuid)).tool_calls
        resumed = await second.command.submit_tool_result(uuid, call.call_id, {"status": "late"})
        assert resumed.status is ProcessStatus.COMPLETED
        assert await service.replies_once() == 1
        assert await service.replies_once() == 0
        # The worker's completion that comes afterwards is counted, never applied.
        (command,) = await second.events.unpublished()  # no relay ran here
        late = await second.events.complete(command.correlation_id, result={"status": "shipped"})
        assert late.outcome == "duplicate"
        assert await _tool_messages(second, uuid) == 1
    replies = await _replies(bus, 2)
    final = replies[1]
    assert (final["correlationId"], final["status"], final["final"]) == ("bpmn-8", "CO", True)
    assert final["output"] == 'Status: {"status": "late"}'


async def test_a_claimed_final_answer_is_taken_over_only_after_the_lease(ph: Pilothouse) -> None:
    bus = MemoryBus()
    service = EventService(ph, bus)
    await bus.publish("actions", encode(_action("bpmn-9")))
    assert await _handle_one(service, bus, "actions") == "waiting"
    (waiting,) = await _replies(bus, 1)
    (command,) = await ph.events.unpublished()
    assert (await ph.events.complete(command.correlation_id, result="ok")).outcome == "applied"
    # A process claims the answer and dies before publishing it.
    (claimed,) = await ph.events.finished_replies(lease=120)
    assert claimed.correlation_id == "bpmn-9"
    assert claimed.result.conversation_uuid == waiting["conversationUuid"]
    assert await ph.events.finished_replies(lease=120) == []
    # Once the claim is older than the lease another process publishes it.
    (again,) = await ph.events.finished_replies(lease=0)
    assert again.correlation_id == "bpmn-9" and again.result.output == "Status: ok"
    await ph.events.replies_sent([again.correlation_id])
    assert await ph.events.finished_replies(lease=0) == []


async def test_a_duplicate_waiting_run_action_is_not_run_again_and_its_answer_comes_once(
    ph: Pilothouse,
) -> None:
    bus = MemoryBus()
    service = EventService(ph, bus)
    await bus.publish("actions", encode(_action("bpmn-10")))
    await bus.publish("actions", encode(_action("bpmn-10")))
    assert await _handle_one(service, bus, "actions") == "waiting"
    assert await _handle_one(service, bus, "actions") == "duplicate"
    (command,) = await ph.events.unpublished()
    await ph.events.complete(command.correlation_id, result="ok")
    assert await service.replies_once() == 1
    statuses = [(r["status"], r["final"]) for r in await _replies(bus, 2)]
    assert statuses == [("WA", False), ("CO", True)]


async def test_submit_tool_result_answers_an_event_call_and_the_late_completion_is_ignored(
    ph: Pilothouse,
) -> None:
    result = await ph.command.start_and_send("A-17", action="ORDERS")
    assert result.status is ProcessStatus.WAITING
    (call,) = result.tool_calls
    assert call.correlation_id is not None
    resumed = await ph.command.submit_tool_result(
        result.conversation_uuid, call.id, {"status": "handed over"}
    )
    assert resumed.status is ProcessStatus.COMPLETED
    assert resumed.output == 'Status: {"status": "handed over"}'
    late = await ph.events.complete(call.correlation_id, result={"status": "shipped"})
    assert late.outcome == "duplicate"
    assert await _tool_messages(ph, result.conversation_uuid) == 1
    (row,) = (await ph.query.get_transcript(result.conversation_uuid)).tool_calls
    assert row.status is ToolCallStatus.SUCCEEDED
    counts = await ph.events.counts()
    assert (counts["processed"], counts["duplicates"], counts["waiting"]) == (1, 1, 0)
    # A second result from the caller is refused, and applied nowhere.
    with pytest.raises(InvalidStateError, match="answered already"):
        await ph.command.submit_tool_result(result.conversation_uuid, call.id, "again")
    assert await _tool_messages(ph, result.conversation_uuid) == 1


async def test_a_caller_result_for_an_event_call_is_charged_to_its_key_and_names_it(
    ph: Pilothouse,
) -> None:
    budget = {"code": "PERKEY", "scope": "api_key", "period": "month", "turns": 1}
    await ph.catalog.create("budgets", budget)
    starter = ph.for_tenant(ph.tenant, caller=Caller("rest", "startkey", "starter"))
    result = await starter.command.start_and_send("A-17", action="ORDERS")
    assert result.status is ProcessStatus.WAITING
    (call,) = result.tool_calls
    # The starting key's one turn is spent; the answering key has its own.
    answerer = ph.for_tenant(ph.tenant, caller=Caller("jsonrpc", "answerkey", "reviewer"))
    resumed = await answerer.command.submit_tool_result(
        result.conversation_uuid, call.id, {"status": "handed over"}
    )
    assert resumed.status is ProcessStatus.COMPLETED
    timeline = (await ph.query.get_transcript(result.conversation_uuid)).timeline
    (given,) = [e.data for e in timeline if e.data.get("status") == "completion: submitted"]
    assert given["caller"] == {"face": "jsonrpc", "key_prefix": "answerkey", "key_name": "reviewer"}


async def test_a_result_for_an_event_call_the_bus_answered_is_refused_and_counted(
    ph: Pilothouse,
) -> None:
    result = await ph.command.start_and_send("A-17", action="ORDERS")
    (call,) = result.tool_calls
    assert call.correlation_id is not None
    applied = await ph.events.complete(call.correlation_id, result={"status": "shipped"})
    assert applied.outcome == "applied"
    with pytest.raises(InvalidStateError, match=r"answered already \(result\)"):
        await ph.command.submit_tool_result(result.conversation_uuid, call.id, "mine")
    assert await _tool_messages(ph, result.conversation_uuid) == 1
    messages = await ph.query.get_conversation_messages(result.conversation_uuid)
    assert messages[-1].content == 'Status: {"status": "shipped"}'
    assert (await ph.events.counts())["duplicates"] == 1


def test_the_sync_facade_drives_event_calls(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}")
    with SyncPilothouse(settings, model=order_model()) as ph:
        ph.catalog.import_text(CATALOG)
        result = ph.command.start_and_send("S-1", action="ORDERS")
        assert result.status is ProcessStatus.WAITING
        (command,) = ph.events.unpublished()
        assert command.payload["arguments"] == {"order_id": "S-1"}
        ph.events.mark_published([command.id])
        assert ph.events.counts()["unsent"] == 0
        applied = ph.events.complete(command.correlation_id, result={"status": "shipped"})
        assert applied.outcome == "applied" and applied.result is not None
        assert applied.result.status is ProcessStatus.COMPLETED
        assert ph.events.complete(command.correlation_id, result="again").outcome == "duplicate"
        assert ph.events.register_tools(_double) == ["_double"]
        run = ph.events.run_tool("_double", {"value": 21})
        assert (run.result, run.error) == (42, None)


def _double(value: int) -> int:
    """Double a number (a tool the sync facade registers)."""
    return value * 2


def _gated_model(limit: int, gate: anyio.Event, seen: dict[str, int]) -> FunctionModel:
    """Calls lookup_order (twice for "PAIR"); the answer after results waits at a gate.

    The gate opens once ``limit`` answers are being made at once, so the
    test sees how many resumes ran together without timing anything.
    """

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        del info
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            text = next(
                p.content
                for m in messages
                if isinstance(m, ModelRequest)
                for p in m.parts
                if isinstance(p, UserPromptPart) and isinstance(p.content, str)
            )
            orders = ["P-1", "P-2"] if text == "PAIR" else [text]
            calls = [
                ToolCallPart("lookup_order", {"order_id": o}, tool_call_id=f"call-{o}")
                for o in orders
            ]
            return ModelResponse(parts=list(calls))
        seen["active"] += 1
        seen["peak"] = max(seen["peak"], seen["active"])
        if seen["active"] >= limit:
            gate.set()
        with anyio.fail_after(30):
            await gate.wait()
        seen["active"] -= 1
        return ModelResponse(parts=[TextPart(f"Done {len(returns)}")])

    return FunctionModel(answer, model_name="gated")


async def test_completions_are_applied_concurrently_bounded_and_in_order_per_conversation(
    database: Database,
) -> None:
    gate, seen = anyio.Event(), {"active": 0, "peak": 0}
    settings = Settings(database_url=database.url)
    model = _gated_model(4, gate, seen)
    bus = MemoryBus()
    async with Pilothouse(settings, database=database, model=model) as ph:
        await ph.catalog.import_text(CATALOG)
        singles = [await ph.command.start_and_send(f"C-{i}", action="ORDERS") for i in range(8)]
        pair = await ph.command.start_and_send("PAIR", action="ORDERS")
        service = EventService(ph, bus, concurrency=4)
        # The pair's two completions first, then every single one, and one
        # duplicate: all taken from the bus while earlier ones still run.
        first, second = pair.tool_calls
        completions = [(first.correlation_id, "first"), (second.correlation_id, "second")]
        completions += [(r.tool_calls[0].correlation_id, "ok") for r in singles]
        completions.append((singles[0].tool_calls[0].correlation_id, "again"))
        for correlation, value in completions:
            assert correlation is not None
            await bus.publish(
                "agent-events",
                encode(SkillCompletionEvent(correlation_id=correlation, result=value)),
            )
        async with anyio.create_task_group() as group:
            await group.start(service.run)
            with anyio.fail_after(60):
                while (await ph.events.counts())["processed"] < 10:
                    await anyio.sleep(0.05)
                while service.metrics.completions.labels("duplicate")._value.get() < 1:
                    await anyio.sleep(0.05)
            group.cancel_scope.cancel()
        # Four resumes ran at once, never more.
        assert seen["peak"] == 4
        counts = await ph.events.counts()
        assert (counts["processed"], counts["duplicates"], counts["waiting"]) == (10, 1, 0)
        # The pair's completions were applied in delivery order, without ever
        # finding their conversation busy.
        assert service.metrics.completions.labels("busy")._value.get() == 0
        messages = await ph.query.get_conversation_messages(pair.conversation_uuid)
        assert [m.content for m in messages if m.role is MessageRole.TOOL] == ["first", "second"]
        assert messages[-1].content.startswith("Done")
        for single in singles:
            assert await _tool_messages(ph, single.conversation_uuid) == 1
            conversation = await ph.query.get_conversation(single.conversation_uuid)
            assert conversation.status is ProcessStatus.COMPLETED


def test_a_concurrency_below_one_is_refused() -> None:
    with pytest.raises(InvalidFieldError, match="concurrency"):
        EventService(
            Pilothouse(Settings(database_url="sqlite+aiosqlite://")), MemoryBus(), concurrency=0
        )
