"""A turn cancelled in its tool loop: what the record keeps of each round.

Cancelled while its tools run, the model's answer asked for tools and they
were started: a tool may have acted (sent a mail, moved money) before the
cancel reached it. The record must hold the answer with its calls, the result
of every call that finished, and each unfinished one as cancelled. Cancelled
in the model call after a round, the interrupted text is that call's alone:
the earlier answer's text is in its own message already.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import anyio
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from test_tool_loop import FakeSource, events, start, stored

from pilothouse.catalog._enums import MessageRole, ProcessStatus, TimelineKind, ToolCallStatus
from pilothouse.runtime import Runner, TextDelta, TurnEvent, TurnResult
from pilothouse.store import Database
from pilothouse.testing import Calls, ScriptedModel, ToolCall

pytestmark = pytest.mark.anyio

RunnerFactory = Callable[..., Runner]


async def test_a_cancel_while_tools_run_records_the_calls_and_what_finished(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    started = anyio.Event()

    async def hang(arguments: Mapping[str, Any]) -> str:
        started.set()
        await anyio.sleep(30)
        return "never"

    # explode answers at once here (the fake's echo); get_weather hangs.
    source = FakeSource({"get_weather": hang})
    model = ScriptedModel(
        [
            Calls(
                (
                    ToolCall("explode", {"city": "Oslo"}, call_id="done1"),
                    ToolCall("get_weather", {"city": "Rome"}, call_id="hang1"),
                )
            )
        ]
    )
    uuid = await start(catalog, "TOOLS")
    runner = make_runner(model, tool_source=source)
    results: list[TurnResult] = []

    async def run() -> None:
        results.append(await runner.send_message(uuid, "Go"))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await started.wait()
        await anyio.sleep(0.05)
        assert await runner.cancel(uuid)
    (result,) = results
    assert result.status is ProcessStatus.TERMINATED
    conversation, messages, calls = await stored(catalog, uuid)
    assert conversation.status is ProcessStatus.TERMINATED
    answer = next(m for m in messages if m.role is MessageRole.ASSISTANT)
    assert answer.data is not None
    assert [c["id"] for c in answer.data["tool_calls"]] == ["done1", "hang1"]
    # The turn's one model call wrote it: its output is the turn's.
    assert answer.token_count == conversation.output_tokens
    tool_messages = {m.tool_call_id: m for m in messages if m.role is MessageRole.TOOL}
    assert tool_messages["done1"].content == "sunny in Oslo"
    by_id = {c.call_id: c for c in calls}
    assert by_id["done1"].status is ToolCallStatus.SUCCEEDED
    assert by_id["done1"].result == "sunny in Oslo"
    assert by_id["hang1"].status is ToolCallStatus.FAILED
    assert (by_id["hang1"].result or "").startswith("tool.exec.cancelled")
    executions = {
        e.data["call_id"]: e.data
        for e in await events(catalog, uuid)
        if e.kind is TimelineKind.TOOL_EXECUTION
    }
    assert executions["done1"]["status"] == "succeeded"
    assert executions["hang1"]["error_code"] == "tool.exec.cancelled"
    # The TurnResult reports the same calls as the record.
    assert {(r.id, r.status) for r in result.call_records} == {
        ("done1", ToolCallStatus.SUCCEEDED),
        ("hang1", ToolCallStatus.FAILED),
    }


async def test_a_cancel_in_the_call_after_a_tool_round_records_only_that_calls_text(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    calls = [0]

    async def stream(
        messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | dict[int, DeltaToolCall]]:
        calls[0] += 1
        if calls[0] == 1:
            yield "Let me check. "
            yield {0: DeltaToolCall("get_weather", '{"city": "Oslo"}', tool_call_id="w1")}
            return
        for word in ["It ", "is ", "sunny ", "and ", "warm."]:
            await anyio.sleep(0.02)
            yield word

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise AssertionError("this model only streams")

    model = FunctionModel(answer, stream_function=stream, model_name="scripted")
    uuid = await start(catalog, "TOOLS")
    runner = make_runner(model, tool_source=FakeSource({}))
    seen: list[str] = []

    async def on_event(event: TurnEvent) -> None:
        if isinstance(event, TextDelta):
            seen.append(event.text)
            if len(seen) == 3:
                await runner.cancel(uuid)

    result = await runner.send_message(
        uuid, "Weather?", on_event=on_event, runtime_config={"stream": True}
    )
    assert result.status is ProcessStatus.TERMINATED
    assert seen == ["Let me check. ", "It ", "is "]
    _, messages, _ = await stored(catalog, uuid)
    answers = [(m.content, m.data or {}) for m in messages if m.role is MessageRole.ASSISTANT]
    assert [text for text, _ in answers] == ["Let me check. ", "It is "]
    assert "tool_calls" in answers[0][1] and answers[1][1]["interrupted"] is True
    assert result.text == "It is "
    (cancel,) = [e.data for e in await events(catalog, uuid) if e.kind is TimelineKind.CANCEL]
    assert cancel["partial_chars"] == len("It is ")
