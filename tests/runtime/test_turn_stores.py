"""The same turns through each TurnStore store the same rows.

``OrmTurnStore`` (plain ORM sessions) is the reference; ``SqlTurnStore`` is
the fast path deployments use: its statements run on pysqlite's cursor in a
whole transaction on the event loop (the SQLite file), or on asyncpg's own
transaction (PostgreSQL). Each scenario runs through both,  in the same
catalog, and the conversations' rows (conversation columns,
messages, attachments, tool calls, timeline) must be equal once ids,
uuids and clocks are set aside. The model's requests must be equal too:
they show that both read the same memory.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from sqlalchemy import func, select

from pilothouse.catalog._views import ToolRecord
from pilothouse.errors import ConflictError, ProviderServerError
from pilothouse.providers import ModelFactory, SecretResolver
from pilothouse.runtime import ActionCompiler, Runner, Runtime, TextDelta, TurnEvent
from pilothouse.runtime._hitl import Resumption
from pilothouse.store import (
    Attachment,
    Conversation,
    Database,
    Message,
    NewAttachment,
    OrmTurnStore,
    SqlTurnStore,
    TimelineEvent,
    ToolCall,
    TurnStore,
)
from pilothouse.testing import Fail, Json, Reply, ScriptedModel
from pilothouse.testing import ToolCall as CallStep
from pilothouse.tools import ExecutableTool, ToolContext, ToolDefinition, ToolResult

pytestmark = pytest.mark.anyio

STORES: dict[str, Callable[[Database], TurnStore]] = {"orm": OrmTurnStore, "sql": SqlTurnStore}


class Weather:
    """Every catalog tool, answering the weather."""

    def __init__(self, row: ToolRecord) -> None:
        self.definition = ToolDefinition(row.name, row.description or "", dict(row.input_schema))
        self.kind = row.kind
        self.policy = row.policy

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult(f"sunny in {arguments.get('city')}")


class WeatherSource:
    async def tool(self, row: ToolRecord) -> ExecutableTool:
        return Weather(row)

    async def service_tools(self, row: Any) -> list[ExecutableTool]:
        raise AssertionError("no service tools here")

    async def mcp_tools(self, row: Any) -> list[ExecutableTool]:
        return []

    async def mcp_tool(self, row: Any, name: str) -> ExecutableTool:
        raise AssertionError("no MCP here")


async def _no_sleep(_: float) -> None:
    return None


Scenario = Callable[[Runner, ScriptedModel], Awaitable[None]]


async def _start_with_attachment(runner: Runner, model: ScriptedModel) -> None:
    await runner.start_and_send(
        "SUMBRAND",
        "ANALYST",
        "Summarize the brand.",
        attachments=[NewAttachment("text/plain", content=b"Acme", name="brand.txt")],
        input_data={"audience": "board"},
    )


async def _tools(runner: Runner, model: ScriptedModel) -> None:
    conversation = await runner.store.create(runner.tenant, action_code="TOOLS", agent_code=None)
    await runner.send_message(conversation.uuid, "Weather in Paris and Oslo?")
    await runner.send_message(conversation.uuid, "And Rome?")


async def _question_and_answer(runner: Runner, model: ScriptedModel) -> None:
    result = await runner.start_and_send("TOOLS", None, "Order a shirt")
    resumption = Resumption(runner.runtime.database, runner.tenant, runner)
    await resumption.submit_answers(result.conversation_uuid, {"size": "M"})


async def _returned_call(runner: Runner, model: ScriptedModel) -> None:
    result = await runner.start_and_send("TOOLS", None, "Extract the invoice")
    resumption = Resumption(runner.runtime.database, runner.tenant, runner)
    await resumption.submit_tool_result(result.conversation_uuid, "i1", {"stored": True})


async def _failure(runner: Runner, model: ScriptedModel) -> None:
    await runner.start_and_send("SUMBRAND", "ANALYST", "x")


async def _invalid_output_then_valid(runner: Runner, model: ScriptedModel) -> None:
    await runner.start_and_send("COMPETITORS", None, "Acme competes with Globex.")


async def _cancel(runner: Runner, model: ScriptedModel) -> None:
    seen: list[str] = []

    async def on_event(event: TurnEvent) -> None:
        if isinstance(event, TextDelta):
            seen.append(event.text)
            if len(seen) == 3:
                await runner.cancel(event.conversation_uuid)

    await runner.start_and_send("SUMBRAND", "ANALYST", "x", on_event=on_event)
    idle = await runner.store.create(runner.tenant, action_code="SUMBRAND", agent_code=None)
    await runner.cancel(idle.uuid)


async def _shared_memory(runner: Runner, model: ScriptedModel) -> None:
    memory = "memory-of-" + type(runner.store).__name__
    await runner.start_and_send("SUMBRAND", "ANALYST", "hello", memory_id=memory)
    second = await runner.store.create(
        runner.tenant, action_code="SUMBRAND", agent_code="ANALYST", memory_id=memory
    )
    await runner.send_message(second.uuid, "what did I say?")
    await runner.start_and_send("SUMBRAND", "ANALYST", "and now?", memory_id=memory)


SCENARIOS: dict[str, tuple[Scenario, Callable[[], list[Any]]]] = {
    "start": (_start_with_attachment, lambda: ["Acme makes rockets."]),
    "tools": (
        _tools,
        lambda: [
            CallStep("get_weather", {"city": "Paris"}, call_id="w1"),
            CallStep("get_weather", '{"city": "Oslo"}', call_id="w2"),
            "Sunny in both.",
            CallStep("nope_tool", {"city": "Rome"}, call_id="w3"),
            CallStep("get_weather", {"city": "Rome"}, call_id="w4"),
            "Sunny in Rome.",
        ],
    ),
    "question": (
        _question_and_answer,
        lambda: [
            CallStep(
                "AskUserQuestion",
                {"questions": [{"id": "size", "question": "Which size?", "choices": ["S", "M"]}]},
                call_id="q1",
            ),
            "Ordered size M.",
        ],
    ),
    "returned": (
        _returned_call,
        lambda: [CallStep("extract_invoice", {"total": 42}, call_id="i1"), "Thanks."],
    ),
    "failure": (_failure, lambda: [Fail(ProviderServerError("upstream 502"))] * 3),
    "invalid-output": (
        _invalid_output_then_valid,
        lambda: [Json({"name": 1}), Json([{"name": "Globex", "reason": "rockets"}])],
    ),
    "cancel": (_cancel, lambda: [Reply("word " * 50, chunk_delay=0.02)]),
    "memory": (_shared_memory, lambda: ["noted", "you said hello", "twice"]),
}


async def _rows(db: Database, after: int) -> list[Any]:
    """The conversations after id ``after`` with their rows, without ids, uuids and clocks."""
    async with db.sessions() as session:
        conversations = list(
            await session.scalars(
                select(Conversation).where(Conversation.id > after).order_by(Conversation.id)
            )
        )
        out: list[Any] = []
        for c in conversations:
            uuids = {c.uuid: "<uuid>"}
            owned = Message.conversation_id == c.id
            messages = await session.scalars(
                select(Message).where(owned).order_by(Message.sequence)
            )
            attachments = await session.scalars(
                select(Attachment)
                .where(Attachment.conversation_id == c.id)
                .order_by(Attachment.message_sequence, Attachment.sequence)
            )
            calls = await session.scalars(
                select(ToolCall).where(ToolCall.conversation_id == c.id).order_by(ToolCall.id)
            )
            events = await session.scalars(
                select(TimelineEvent)
                .where(TimelineEvent.conversation_id == c.id)
                .order_by(TimelineEvent.sequence)
            )
            out.append(
                {
                    "conversation": (
                        c.tenant,
                        c.action_code,
                        c.agent_code,
                        c.status,
                        c.finish_reason,
                        c.response_model,
                        c.input_tokens,
                        c.output_tokens,
                        c.cached_tokens,
                        c.reasoning_tokens,
                        c.estimated_cost,
                        c.error_detail,
                        "own" if c.memory_id == c.uuid else "shared",
                        c.audit,
                        c.started_at is None,
                        c.finished_at is None,
                        c.version,
                    ),
                    "messages": [
                        (
                            m.sequence,
                            m.role,
                            m.content,
                            m.token_count,
                            m.tool_call_id,
                            _clean(m.data, uuids),
                        )
                        for m in messages
                    ],
                    "attachments": [
                        (a.message_sequence, a.sequence, a.media_type, a.name, a.url, a.content)
                        for a in attachments
                    ],
                    "tool_calls": [
                        (
                            t.message_sequence,
                            t.call_id,
                            t.name,
                            t.arguments,
                            t.status,
                            t.result,
                            t.finished_at is None,
                        )
                        for t in calls
                    ],
                    "timeline": [(e.sequence, e.kind, _clean(e.data, uuids)) for e in events],
                }
            )
        return out


_VARYING = frozenset({"runId", "generatedAt", "ms", "delay", "first_token_ms"})


def _clean(value: Any, uuids: Mapping[str, str]) -> Any:
    """``value`` without what differs from run to run (clocks, run ids, uuids)."""
    if isinstance(value, dict):
        return {key: _clean(item, uuids) for key, item in value.items() if key not in _VARYING}
    if isinstance(value, list):
        return [_clean(item, uuids) for item in value]
    if isinstance(value, str):
        return uuids.get(value, value)
    return value


def _requests(model: ScriptedModel) -> list[Any]:
    """What the model was sent, part by part, without timestamps."""

    def parts(messages: list[ModelMessage]) -> list[Any]:
        return [
            (type(part).__name__, str(getattr(part, "content", getattr(part, "args", ""))))
            for message in messages
            for part in message.parts
        ]

    return [parts(request.messages) for request in model.requests]


async def _run(catalog: Database, kind: str, name: str) -> tuple[list[Any], list[Any]]:
    """Run a scenario through one store; its conversations' rows and the model's requests."""
    async with catalog.sessions() as session:
        after = int(await session.scalar(select(func.max(Conversation.id))) or 0)
    scenario, script = SCENARIOS[name]
    model = ScriptedModel(script())
    factory = ModelFactory()
    runtime = Runtime(
        database=catalog,
        models=factory,
        compiler=ActionCompiler(catalog, SecretResolver(env={}, secrets_file=None)),
        store=STORES[kind](catalog),
        model_override=model,
        tool_source=WeatherSource(),
        sleep=_no_sleep,
    )
    try:
        await scenario(runtime.runner("default"), model)
    finally:
        await runtime.aclose()
        await factory.aclose()
    return await _rows(catalog, after), _requests(model)


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_both_stores_record_the_same_rows(catalog: Database, name: str) -> None:
    reference = await _run(catalog, "orm", name)
    fast = await _run(catalog, "sql", name)
    assert reference[0], "the scenario recorded nothing"
    assert fast[0] == reference[0]
    assert fast[1] == reference[1]


@pytest.mark.parametrize("kind", list(STORES))
async def test_a_new_conversation_with_a_uuid_in_use_is_a_conflict_and_writes_nothing(
    catalog: Database, kind: str
) -> None:
    model = ScriptedModel([Reply("first"), Reply("second")])
    factory = ModelFactory()
    runtime = Runtime(
        database=catalog,
        models=factory,
        compiler=ActionCompiler(catalog, SecretResolver(env={}, secrets_file=None)),
        store=STORES[kind](catalog),
        model_override=model,
        tool_source=WeatherSource(),
        sleep=_no_sleep,
    )
    uuid = "0b3a5c1e-5f0e-4d7e-9a8b-1c2d3e4f5a6b"
    try:
        runner = runtime.runner("default")
        await runner.start_and_send("SUMBRAND", None, "hello", conversation_uuid=uuid)
        with pytest.raises(ConflictError, match="already exists; a new conversation needs a new"):
            await runner.start_and_send("SUMBRAND", None, "again", conversation_uuid=uuid)
    finally:
        await runtime.aclose()
        await factory.aclose()
    async with catalog.sessions() as session:
        conversations = await session.scalar(
            select(func.count()).select_from(Conversation).where(Conversation.uuid == uuid)
        )
        messages = list(
            await session.scalars(
                select(Message.content)
                .join(Conversation, Message.conversation_id == Conversation.id)
                .where(Conversation.uuid == uuid)
            )
        )
    assert conversations == 1
    assert "again" not in messages
    assert "hello" in messages
