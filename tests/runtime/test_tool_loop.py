"""The governed tool loop: repair, policy, overrides, concurrency, skills, questions."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any

import anyio
import pytest
from pydantic_ai.messages import ModelRequest, ToolReturnPart
from sqlalchemy import select

from pilothouse.catalog._enums import (
    ExecutionPolicy,
    FinishReason,
    MessageRole,
    ProcessStatus,
    TimelineKind,
    ToolCallStatus,
    ToolKind,
)
from pilothouse.catalog._models import McpClient, Tool
from pilothouse.errors import InvalidStateError
from pilothouse.runtime import Question, ReturnedCall, Runner, ToolCallRecord
from pilothouse.runtime._hitl import AnswerError, Resumption
from pilothouse.store import Conversation, Database, Message, SqlTurnStore, TimelineEvent
from pilothouse.store._records import ToolCall as ToolCallRow
from pilothouse.testing import Calls, Reply, ScriptedModel, ToolCall
from pilothouse.tools import ExecutableTool, ToolContext, ToolDefinition, ToolResult

pytestmark = pytest.mark.anyio

RunnerFactory = Callable[..., Runner]
Behaviour = Callable[[Mapping[str, Any]], Awaitable[str]]


class FakeTool:
    """An ExecutableTool whose behaviour the test decides, recording each call."""

    def __init__(self, row: Tool, behaviour: Behaviour) -> None:
        self.definition = ToolDefinition(row.name, row.description or "", dict(row.input_schema))
        self.kind = ToolKind.PYTHON
        self.policy = row.policy
        self.calls: list[dict[str, Any]] = []
        self._behaviour = behaviour

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        self.calls.append(dict(arguments))
        return ToolResult(await self._behaviour(arguments))


class FakeSource:
    def __init__(self, behaviours: dict[str, Behaviour]) -> None:
        self.behaviours = behaviours
        self.tools: dict[str, FakeTool] = {}

    async def tool(self, row: Tool) -> ExecutableTool:
        if row.name not in self.tools:
            self.tools[row.name] = FakeTool(row, self.behaviours.get(row.name, _echo))
        return self.tools[row.name]

    async def service_tools(self, row: Any) -> list[ExecutableTool]:
        raise AssertionError("no service tools here")

    async def mcp_tools(self, row: McpClient) -> list[ExecutableTool]:
        return []

    async def mcp_tool(self, row: McpClient, name: str) -> ExecutableTool:
        raise AssertionError("no MCP here")


async def _echo(arguments: Mapping[str, Any]) -> str:
    return f"sunny in {arguments.get('city')}"


async def start(db: Database, action: str) -> str:
    return (await SqlTurnStore(db).create("default", action_code=action, agent_code=None)).uuid


async def stored(db: Database, uuid: str) -> tuple[Conversation, list[Message], list[ToolCallRow]]:
    async with db.sessions() as session:
        conversation = await session.scalar(select(Conversation).where(Conversation.uuid == uuid))
        assert conversation is not None
        messages = list(
            await session.scalars(
                select(Message)
                .where(Message.conversation_id == conversation.id)
                .order_by(Message.sequence)
            )
        )
        calls = list(
            await session.scalars(
                select(ToolCallRow)
                .where(ToolCallRow.conversation_id == conversation.id)
                .order_by(ToolCallRow.id)
            )
        )
        return conversation, messages, calls


async def events(db: Database, uuid: str) -> list[TimelineEvent]:
    async with db.sessions() as session:
        conversation = await session.scalar(select(Conversation).where(Conversation.uuid == uuid))
        assert conversation is not None
        return list(
            await session.scalars(
                select(TimelineEvent)
                .where(TimelineEvent.conversation_id == conversation.id)
                .order_by(TimelineEvent.sequence)
            )
        )


def offered(model: ScriptedModel, call: int) -> list[str]:
    return [t.name for t in model.requests[call].info.function_tools]


async def test_tool_result_goes_back_to_the_model_and_everything_is_recorded(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    source = FakeSource({})
    model = ScriptedModel([ToolCall("get_weather", {"city": "Paris"}, call_id="w1"), "Sunny."])
    uuid = await start(catalog, "TOOLS")
    result = await make_runner(model, tool_source=source).send_message(uuid, "Weather?")
    assert (result.status, result.output) == (ProcessStatus.COMPLETED, "Sunny.")
    assert source.tools["get_weather"].calls == [{"city": "Paris"}]
    returned = model.requests[1].messages[-1]
    assert isinstance(returned, ModelRequest)
    part = returned.parts[0]
    assert isinstance(part, ToolReturnPart)
    assert (part.tool_call_id, part.content) == ("w1", "sunny in Paris")
    _, messages, calls = await stored(catalog, uuid)
    assert [m.role for m in messages] == [
        MessageRole.SYSTEM,
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
        MessageRole.ASSISTANT,
    ]
    assert messages[3].tool_call_id == "w1"
    assert [(c.call_id, c.status, c.result) for c in calls] == [
        ("w1", ToolCallStatus.SUCCEEDED, "sunny in Paris")
    ]
    assert TimelineKind.TOOL_EXECUTION in [e.kind for e in await events(catalog, uuid)]
    # Every action offers its tools plus AskUserQuestion.
    assert "get_weather" in offered(model, 0) and "AskUserQuestion" in offered(model, 0)


@pytest.mark.parametrize(
    ("call", "repair"),
    [
        (
            ToolCall("get_weather", json.dumps('{"city": "Paris"}'), call_id="s1"),
            "arguments encoded twice as a JSON string",
        ),
        (ToolCall("get_weather", {"city": "Paris"}, call_id=""), "missing id: generated"),
        (
            Reply('I will call {"name": "get_weather", "arguments": {"city": "Paris"}}'),
            "flat call: nested under function",
        ),
        (
            Reply('{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}'),
            "missing type: function",
        ),
    ],
)
async def test_malformed_calls_are_repaired_and_run(
    catalog: Database, make_runner: RunnerFactory, call: Any, repair: str
) -> None:
    source = FakeSource({})
    model = ScriptedModel([call, "Done."])
    uuid = await start(catalog, "TOOLS")
    result = await make_runner(model, tool_source=source).send_message(uuid, "Weather?")
    assert result.status is ProcessStatus.COMPLETED
    assert source.tools["get_weather"].calls == [{"city": "Paris"}]
    executions = [e for e in await events(catalog, uuid) if e.kind is TimelineKind.TOOL_EXECUTION]
    assert repair in executions[0].data["repairs"]


async def test_ordinary_string_arguments_are_not_recorded_as_a_repair(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    source = FakeSource({})
    model = ScriptedModel([ToolCall("get_weather", '{"city": "Paris"}', call_id="s1"), "Done."])
    uuid = await start(catalog, "TOOLS")
    result = await make_runner(model, tool_source=source).send_message(uuid, "Weather?")
    assert result.status is ProcessStatus.COMPLETED
    assert source.tools["get_weather"].calls == [{"city": "Paris"}]
    executions = [e for e in await events(catalog, uuid) if e.kind is TimelineKind.TOOL_EXECUTION]
    assert "repairs" not in executions[0].data


async def test_missing_arguments_become_an_empty_object_then_fail_validation(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    source = FakeSource({})
    model = ScriptedModel([ToolCall("get_weather", None, call_id="m1"), "ok"])
    uuid = await start(catalog, "TOOLS")
    await make_runner(model, tool_source=source).send_message(uuid, "x")
    feedback = str(getattr(model.requests[1].messages[-1].parts[0], "content", ""))
    assert "invalid arguments: (arguments): 'city' is a required property" in feedback
    assert "get_weather" not in source.tools or source.tools["get_weather"].calls == []


async def test_calls_that_never_validate_fail_after_the_retry_limit(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    model = ScriptedModel(
        [ToolCall("get_weather", {"town": "x"}, call_id=f"b{i}") for i in range(3)]
    )
    uuid = await start(catalog, "TOOLS")
    result = await make_runner(model, tool_source=FakeSource({})).send_message(uuid, "x")
    assert result.status is ProcessStatus.FAILED
    assert result.error is not None and result.error.startswith("tool calls could not be repaired")
    conversation, messages, _ = await stored(catalog, uuid)
    assert conversation.status is ProcessStatus.FAILED
    assert messages[1].role is MessageRole.USER  # nothing lost


async def test_authorized_tool_never_runs_without_an_authorizer(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    moved: list[Mapping[str, Any]] = []

    async def transfer(arguments: Mapping[str, Any]) -> str:
        moved.append(arguments)
        return "done"

    source = FakeSource({"transfer_money": transfer})
    model = ScriptedModel(
        [ToolCall("transfer_money", {"account": "X", "amount": 5}, call_id="t1"), "Refused."]
    )
    uuid = await start(catalog, "TOOLS")
    await make_runner(model, tool_source=source).send_message(uuid, "Pay")
    assert moved == []
    _, _, calls = await stored(catalog, uuid)
    assert calls[0].status is ToolCallStatus.DENIED
    assert calls[0].result is not None and calls[0].result.startswith("tool.exec.denied")


@pytest.mark.parametrize(("verdict", "runs"), [(True, True), (False, False)])
async def test_authorizer_decides_every_execution(
    catalog: Database, make_runner: RunnerFactory, verdict: bool, runs: bool
) -> None:
    moved: list[Mapping[str, Any]] = []
    asked: list[tuple[str, dict[str, Any]]] = []

    async def transfer(arguments: Mapping[str, Any]) -> str:
        moved.append(arguments)
        return "done"

    async def authorizer(name: str, arguments: Mapping[str, Any]) -> bool:
        asked.append((name, dict(arguments)))
        return verdict

    model = ScriptedModel(
        [ToolCall("transfer_money", {"account": "X", "amount": 5}, call_id="t1"), "ok"]
    )
    uuid = await start(catalog, "TOOLS")
    runner = make_runner(
        model, tool_source=FakeSource({"transfer_money": transfer}), authorizer=authorizer
    )
    await runner.send_message(uuid, "Pay")
    assert asked == [("transfer_money", {"account": "X", "amount": 5})]
    assert bool(moved) is runs
    _, _, calls = await stored(catalog, uuid)
    assert calls[0].status is (ToolCallStatus.SUCCEEDED if runs else ToolCallStatus.DENIED)


async def test_parameter_override_rewrites_arguments_and_is_audited(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    source = FakeSource({})
    model = ScriptedModel([ToolCall("get_weather", {"city": "Paris"}, call_id="o1"), "ok"])
    uuid = await start(catalog, "TOOLS")
    await make_runner(model, tool_source=source).send_message(
        uuid, "x", runtime_config={"toolParameterOverride": {"parameter": "city", "value": "Rome"}}
    )
    assert source.tools["get_weather"].calls == [{"city": "Rome"}]
    execution = next(
        e for e in await events(catalog, uuid) if e.kind is TimelineKind.TOOL_EXECUTION
    )
    assert execution.data["overrides"] == [{"parameter": "city", "by": "parameter"}]


async def test_override_by_value_substring(catalog: Database, make_runner: RunnerFactory) -> None:
    source = FakeSource({})
    model = ScriptedModel([ToolCall("get_weather", {"city": "Paris, FR"}, call_id="o2"), "ok"])
    uuid = await start(catalog, "TOOLS")
    await make_runner(model, tool_source=source).send_message(
        uuid, "x", runtime_config={"toolParameterOverride": [{"contains": "FR", "value": "Lyon"}]}
    )
    assert source.tools["get_weather"].calls == [{"city": "Lyon"}]


async def test_independent_calls_run_concurrently_and_results_keep_call_order(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    both_started = anyio.Event()
    started: list[str] = []

    async def meet(arguments: Mapping[str, Any]) -> str:
        started.append(str(arguments["city"]))
        if len(started) == 2:
            both_started.set()
        # Sequential execution would wait here forever (and fail the timeout).
        await both_started.wait()
        return f"at {arguments['city']}"

    source = FakeSource({"get_weather": meet})
    both = Calls(
        (
            ToolCall("get_weather", {"city": "Oslo"}, call_id="a"),
            ToolCall("get_weather", {"city": "Bern"}, call_id="b"),
        )
    )
    model = ScriptedModel([both, "ok"])
    uuid = await start(catalog, "TOOLS")
    with anyio.fail_after(5):
        await make_runner(model, tool_source=source).send_message(uuid, "x")
    returned = model.requests[1].messages[-1]
    assert isinstance(returned, ModelRequest)
    assert [getattr(p, "tool_call_id", None) for p in returned.parts] == ["a", "b"]


async def test_hanging_and_raising_tools_become_recorded_tool_errors(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    async def hang(arguments: Mapping[str, Any]) -> str:
        await anyio.sleep(30)
        return "never"

    async def explode(arguments: Mapping[str, Any]) -> str:
        raise RuntimeError("kaboom")

    source = FakeSource({"slow_lookup": hang, "explode": explode})
    model = ScriptedModel(
        [
            ToolCall("slow_lookup", {"city": "x"}, call_id="h1"),
            ToolCall("explode", {"city": "x"}, call_id="e1"),
            "Both failed.",
        ]
    )
    uuid = await start(catalog, "TOOLS")
    result = await make_runner(model, tool_source=source).send_message(uuid, "x")
    assert result.status is ProcessStatus.COMPLETED
    _, _, calls = await stored(catalog, uuid)
    assert [(c.status, (c.result or "").split(":")[0]) for c in calls] == [
        (ToolCallStatus.FAILED, "tool.exec.timeout"),
        (ToolCallStatus.FAILED, "tool.exec.error"),
    ]


async def test_schema_tool_call_is_returned_and_its_result_resumes_the_loop(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    model = ScriptedModel([ToolCall("extract_invoice", {"total": 42}, call_id="i1"), "Thanks."])
    runner = make_runner(model, tool_source=FakeSource({}))
    uuid = await start(catalog, "TOOLS")
    result = await runner.send_message(uuid, "Extract")
    assert (result.status, result.finish_reason) == (
        ProcessStatus.COMPLETED,
        FinishReason.TOOL_CALLS,
    )
    assert result.tool_calls == (ReturnedCall("i1", "extract_invoice", {"total": 42}),)
    # On the wire the call keeps its JSON shape.
    assert result.as_json()["tool_calls"] == [
        {"id": "i1", "name": "extract_invoice", "arguments": {"total": 42}}
    ]
    assert result.call_records == (
        ToolCallRecord(
            "i1",
            "extract_invoice",
            {"total": 42},
            ToolCallStatus.RETURNED,
            "returned to the caller",
        ),
    )
    resumption = Resumption(catalog, "default", runner)
    resumed = await resumption.submit_tool_result(uuid, "i1", {"stored": True})
    assert (resumed.status, resumed.output) == (ProcessStatus.COMPLETED, "Thanks.")
    last = model.requests[1].messages[-1]
    assert '{"stored": true}' in str(last)
    with pytest.raises(InvalidStateError, match="is not waiting for a result"):
        await resumption.submit_tool_result(uuid, "i1", "again")


async def test_question_pauses_and_answers_resume_even_in_a_new_runner(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    ask = ToolCall(
        "AskUserQuestion",
        {"questions": [{"id": "size", "question": "Which size?", "choices": ["S", "M"]}]},
        call_id="q1",
    )
    asking = ScriptedModel([ask])
    first = make_runner(asking, tool_source=FakeSource({}))
    uuid = await start(catalog, "TOOLS")
    paused = await first.send_message(uuid, "Order a shirt")
    assert paused.status is ProcessStatus.WAITING
    assert paused.output == {
        "questions": [{"id": "size", "question": "Which size?", "choices": ["S", "M"]}]
    }
    assert paused.questions == (Question("size", "Which size?", ("S", "M"), "q1"),)
    conversation, messages, _ = await stored(catalog, uuid)
    assert conversation.status is ProcessStatus.WAITING
    assert messages[-1].role is MessageRole.QUESTION

    # A new runner, as after a restart: the state lives in the store.
    model = ScriptedModel(["Ordered size M."])
    second = make_runner(model, tool_source=FakeSource({}))
    resumption = Resumption(catalog, "default", second)
    with pytest.raises(AnswerError, match="must be one of 'S', 'M'"):
        await resumption.submit_answers(uuid, {"size": "XL"})
    with pytest.raises(AnswerError, match="no pending question with id 'colour'"):
        await resumption.submit_answers(uuid, {"size": "M", "colour": "red"})
    done = await resumption.submit_answers(uuid, {"size": "M"})
    assert (done.status, done.output) == (ProcessStatus.COMPLETED, "Ordered size M.")
    assert "Which size?" in str(model.requests[0].messages[-1])
    # The answers reach the model as text to go on from, not as a JSON object
    # (which a small model echoed as its reply).
    (reply,) = model.requests[0].messages[-1].parts
    assert isinstance(reply, ToolReturnPart)
    assert reply.content == (
        'User has answered your questions: "Which size?"="M". '
        "You can now continue with the user's answers in mind."
    )
    # The call right after the answers does not offer the question tool
    # again: a small model given the answers otherwise asked once more.
    assert "AskUserQuestion" in {t.name for t in asking.requests[0].info.function_tools}
    assert "AskUserQuestion" not in {t.name for t in model.requests[0].info.function_tools}
    kinds = [e.kind for e in await events(catalog, uuid)]
    assert TimelineKind.HUMAN_ANSWER in kinds
    with pytest.raises(InvalidStateError, match="is not waiting for answers"):
        await resumption.submit_answers(uuid, {"size": "S"})


async def test_unanswered_questions_expire_and_terminate(
    catalog: Database, make_runner: RunnerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pilothouse.runtime import _hitl
    from pilothouse.store._base import utcnow

    ask = ToolCall("AskUserQuestion", {"question": "Which size?"}, call_id="q1")
    runner = make_runner(ScriptedModel([ask]), tool_source=FakeSource({}))
    uuid = await start(catalog, "TOOLS")
    await runner.send_message(uuid, "Order")
    later = utcnow() + timedelta(seconds=301)
    monkeypatch.setattr(_hitl, "utcnow", lambda: later)
    resumption = Resumption(catalog, "default", runner)
    assert await resumption.expire_waiting() == 1
    conversation, _, _ = await stored(catalog, uuid)
    assert conversation.status is ProcessStatus.TERMINATED


async def test_skills_are_disclosed_progressively(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    source = FakeSource({})
    model = ScriptedModel(
        [
            ToolCall("use_skill", {"skill": "TRAVEL"}, call_id="s1"),
            ToolCall("book_flight", {"city": "Oslo"}, call_id="f1"),
            "Booked.",
            "Next trip noted.",
        ]
    )
    runner = make_runner(model, tool_source=source)
    uuid = await start(catalog, "SKILLED")
    result = await runner.send_message(uuid, "Book me a flight")
    assert result.output == "Booked."
    assert offered(model, 0) == ["use_skill", "AskUserQuestion"]
    # TRAVEL depends on GEO: both skills' tools arrive after activation.
    assert set(offered(model, 1)) >= {"book_flight", "find_city"}
    assert "Plan the trip step by step." in str(model.requests[1].messages[-1])
    assert source.tools["book_flight"].calls == [{"city": "Oslo"}]
    await runner.send_message(uuid, "And next week?")
    assert "book_flight" in offered(model, 3)  # still active in the next turn


async def test_policy_default_of_catalog_tools_is_kept(catalog: Database) -> None:
    async with catalog.sessions() as session:
        rows = (await session.execute(select(Tool.name, Tool.policy))).all()
    policies = {name: policy for name, policy in rows}
    assert policies["transfer_money"] is ExecutionPolicy.AUTHORIZED
    assert policies["get_weather"] is ExecutionPolicy.ALLOW


@pytest.mark.parametrize(("amount", "runs"), [(40, True), (400, False)])
async def test_a_catalog_tool_can_be_the_authorizer(
    catalog: Database, make_runner: RunnerFactory, amount: int, runs: bool
) -> None:
    from pilothouse.providers import SecretResolver
    from pilothouse.runtime._authorize import CatalogToolAuthorizer
    from pilothouse.runtime._toolset import CatalogToolSource

    moved: list[Mapping[str, Any]] = []

    async def transfer(arguments: Mapping[str, Any]) -> str:
        moved.append(arguments)
        return "done"

    real_tools = CatalogToolSource(SecretResolver(env={}))
    authorizer = CatalogToolAuthorizer(catalog, "default", "APPROVE", real_tools)
    model = ScriptedModel(
        [ToolCall("transfer_money", {"account": "X", "amount": amount}, call_id="t1"), "ok"]
    )
    uuid = await start(catalog, "TOOLS")
    runner = make_runner(
        model, tool_source=FakeSource({"transfer_money": transfer}), authorizer=authorizer
    )
    await runner.send_message(uuid, "Pay")
    await real_tools.aclose()
    assert bool(moved) is runs
    _, _, calls = await stored(catalog, uuid)
    assert calls[0].status is (ToolCallStatus.SUCCEEDED if runs else ToolCallStatus.DENIED)


async def test_content_filter_on_input_ends_with_cf_before_any_model_call(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    model = ScriptedModel([])
    uuid = await start(catalog, "FILTERED")
    result = await make_runner(model).send_message(uuid, "Tell me about Project Falcon.")
    assert (result.status, result.finish_reason) == (
        ProcessStatus.COMPLETED,
        FinishReason.CONTENT_FILTER,
    )
    assert model.requests == []
    conversation, messages, _ = await stored(catalog, uuid)
    assert conversation.finish_reason is FinishReason.CONTENT_FILTER
    assert [m.role for m in messages] == [MessageRole.SYSTEM, MessageRole.USER]


async def test_content_filter_on_output_ends_with_cf(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    model = ScriptedModel(["Project Falcon launches in May."])
    uuid = await start(catalog, "FILTERED")
    result = await make_runner(model).send_message(uuid, "What launches in May?")
    assert result.finish_reason is FinishReason.CONTENT_FILTER
    assert result.error is not None and "term 'project falcon'" in result.error


async def test_cached_answer_costs_no_second_model_call(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    model = ScriptedModel([Reply("Forty-two.", input_tokens=50, output_tokens=5)])
    runner = make_runner(model)
    first = await runner.send_message(await start(catalog, "CACHED"), "The answer?")
    second = await runner.send_message(await start(catalog, "CACHED"), "The answer?")
    assert first.output == second.output == "Forty-two."
    assert len(model.requests) == 1
    assert (second.input_tokens, second.output_tokens) == (0, 0)


async def test_call_ids_an_upstream_reuses_across_rounds_and_turns_are_stored_unique(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    source = FakeSource({})
    model = ScriptedModel(
        [
            ToolCall("get_weather", {"city": "Paris"}, call_id="call_0"),
            ToolCall("get_weather", {"city": "Rome"}, call_id="call_0"),
            "Done.",
            ToolCall("get_weather", {"city": "Oslo"}, call_id="call_0"),
            "Done again.",
        ]
    )
    uuid = await start(catalog, "TOOLS")
    runner = make_runner(model, tool_source=source)
    first = await runner.send_message(uuid, "Paris and Rome?")
    second = await runner.send_message(uuid, "Oslo?")
    assert (first.status, second.status) == (ProcessStatus.COMPLETED, ProcessStatus.COMPLETED)
    _, _, calls = await stored(catalog, uuid)
    assert [c.arguments["city"] for c in calls] == ["Paris", "Rome", "Oslo"]
    assert calls[0].call_id == "call_0" and len({c.call_id for c in calls}) == 3
    executions = [e for e in await events(catalog, uuid) if e.kind is TimelineKind.TOOL_EXECUTION]
    assert executions[1].data["repairs"] == ["duplicate id: call_0 recorded as a new one"]
