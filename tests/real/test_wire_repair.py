"""Tool calls repaired on the wire (seed 001), against a real HTTP upstream on loopback.

The upstream (``fault_upstream``) sends each malformed shape a real server
sent, whole and streamed; every turn must run the tool, answer, end ``CO``,
and record the arguments the model sent. Answers that cannot be read at all
(a 200 body that is not JSON) are retried.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from fault_upstream import Reply, Upstream, chunk, completion, running_upstream, text_stream

from pilothouse.api import Pilothouse
from pilothouse.catalog._enums import MessageRole, ProcessStatus, TimelineKind, ToolCallStatus
from pilothouse.runtime import TurnEvent, TurnFinished
from pilothouse.settings import Settings

pytestmark = [pytest.mark.real, pytest.mark.anyio]

CATALOG = """\
providers:
  - code: MOCK
    kind: openai-compatible
    base_url: {base_url}
models:
  - code: MOCKMODEL
    provider: MOCK
    model_name: mock
    capabilities: [FC, SR]
configurations:
  - code: QUIK
    max_tokens: 64
    retry_count: 2
    retry_delay: 0.01
tools:
  - code: WEATHER
    name: get_weather
    kind: python
    implementation: "real_tools:get_weather"
    description: Get the current weather in a city.
  - code: TIME
    name: get_time
    kind: python
    implementation: "real_tools:get_time"
    description: Get the current time.
actions:
  - code: WEATHER
    model: MOCKMODEL
    configuration: QUIK
    prompt: Answer with the tools.
    tools: [WEATHER, TIME]
    ask_user: false
"""

ARGS = {"city": "Paris"}
ARGS_JSON = json.dumps(ARGS)
ANSWER = "It is sunny in Paris."

# Each malformed shape of one call, as real servers sent them.
WHOLE_SHAPES: dict[str, dict[str, Any]] = {
    "missing_id": {"type": "function", "function": {"name": "get_weather", "arguments": ARGS_JSON}},
    "missing_type": {"id": "call_7", "function": {"name": "get_weather", "arguments": ARGS_JSON}},
    "flat": {"name": "get_weather", "arguments": ARGS},
    "object_arguments": {
        "id": "call_7",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ARGS},
    },
    "missing_arguments": {"id": "call_7", "type": "function", "function": {"name": "get_time"}},
}
REPAIRS = {
    "missing_id": ["missing id: generated"],
    "missing_type": ["missing type: function"],
    "flat": [
        "flat call: nested under function",
        "arguments given as an object: sent on as a JSON string",
        "missing type: function",
        "missing id: generated",
    ],
    "object_arguments": ["arguments given as an object: sent on as a JSON string"],
    "missing_arguments": ["missing arguments: {}"],
}


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with running_upstream() as up:
        yield up


@pytest.fixture
async def ph(tmp_path: Path, upstream: Upstream) -> AsyncIterator[Pilothouse]:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(CATALOG.format(base_url=upstream.base_url), encoding="utf-8")
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'wire.db'}")
    async with Pilothouse(settings) as facade:
        await facade.catalog.import_files([catalog])
        yield facade


def _expected(shape: str) -> tuple[str, dict[str, Any], str]:
    if shape == "missing_arguments":
        return "get_time", {}, "It is 12:00 UTC."
    return "get_weather", ARGS, "It is 21 degrees and sunny in Paris."


async def _check_turn(ph: Pilothouse, uuid: str, upstream: Upstream, shape: str) -> None:
    name, arguments, result = _expected(shape)
    transcript = await ph.query.get_transcript(uuid)
    assert transcript.status == ProcessStatus.COMPLETED.value, transcript
    [call] = transcript.tool_calls
    assert (call.name, call.arguments, call.status) == (
        name,
        arguments,
        ToolCallStatus.SUCCEEDED.value,
    )
    tool = [m for m in transcript.messages if m.role == MessageRole.TOOL.value]
    assert tool[0].content == result
    assistant = [m for m in transcript.messages if m.role == MessageRole.ASSISTANT.value]
    assert assistant[-1].content == ANSWER
    executions = [e.data for e in transcript.timeline if e.kind is TimelineKind.TOOL_EXECUTION]
    assert executions[0].get("repairs", []) == REPAIRS[shape]
    if shape == "missing_id":
        assert call.call_id.startswith("repaired-")
    # The tool's result went back to the model under the call's id.
    second = upstream.requests[1]["messages"]
    sent_call = second[-2]["tool_calls"][0]
    assert second[-1] == {"role": "tool", "tool_call_id": sent_call["id"], "content": result}
    assert json.loads(sent_call["function"]["arguments"]) == arguments


@pytest.mark.parametrize("shape", list(WHOLE_SHAPES))
async def test_malformed_call_not_streamed_is_repaired_and_runs(
    ph: Pilothouse, upstream: Upstream, shape: str
) -> None:
    upstream.script(Reply(completion(None, [WHOLE_SHAPES[shape]])), Reply(completion(ANSWER)))
    conversation = await ph.command.start_conversation(action="WEATHER")
    result = await ph.command.send_message(
        conversation.uuid, "Weather?", runtime_config={"stream": False}
    )
    assert result.status is ProcessStatus.COMPLETED, result.error
    await _check_turn(ph, conversation.uuid, upstream, shape)


def _streamed(shape: str) -> list[Any]:
    """The malformed call as streamed deltas: opened, then arguments in pieces."""
    call = json.loads(json.dumps(WHOLE_SHAPES[shape]))
    start: dict[str, Any] = {"index": 0, **call}
    if shape == "flat":
        start = {"name": "get_weather", "arguments": ARGS}  # no index either
        return [chunk({"role": "assistant", "tool_calls": [start]}), chunk({}, "tool_calls")]
    rest: list[Any] = []
    function = start.get("function", {})
    arguments = function.pop("arguments", None)
    if isinstance(arguments, str):
        rest = [
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[:5]}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[5:]}}]}),
        ]
    elif arguments is not None:
        function["arguments"] = arguments
    return [
        chunk({"role": "assistant", "tool_calls": [start]}),
        *rest,
        chunk({}, "tool_calls"),
    ]


@pytest.mark.parametrize("shape", list(WHOLE_SHAPES))
async def test_malformed_call_streamed_is_repaired_and_runs(
    ph: Pilothouse, upstream: Upstream, shape: str
) -> None:
    upstream.script(
        Reply(events=_streamed(shape)), Reply(events=text_stream("It is ", "sunny in Paris."))
    )
    conversation = await ph.command.start_conversation(action="WEATHER")
    events: list[TurnEvent] = [
        e
        async for e in ph.command.stream_message(
            conversation.uuid, "Weather?", runtime_config={"stream": True}
        )
    ]
    finished = events[-1]
    assert isinstance(finished, TurnFinished)
    assert upstream.requests[0]["stream"] is True
    await _check_turn(ph, conversation.uuid, upstream, shape)


async def test_invalid_call_is_fed_back_with_the_expected_format_and_recorded_as_sent(
    ph: Pilothouse, upstream: Upstream
) -> None:
    bad = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": "{city: Paris"},
    }
    nameless = {"id": "call_2", "type": "function", "function": {"arguments": ARGS_JSON}}
    good = {
        "id": "call_3",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ARGS_JSON},
    }
    upstream.script(
        Reply(completion(None, [bad, nameless])),
        Reply(completion(None, [good])),
        Reply(completion(ANSWER)),
    )
    conversation = await ph.command.start_conversation(action="WEATHER")
    result = await ph.command.send_message(
        conversation.uuid, "Weather?", runtime_config={"stream": False}
    )
    assert result.status is ProcessStatus.COMPLETED, result.error
    transcript = await ph.query.get_transcript(conversation.uuid)
    by_id = {c.call_id: c for c in transcript.tool_calls}
    assert by_id["call_1"].arguments == {"raw": "{city: Paris"}
    assert by_id["call_2"].arguments == ARGS
    assert by_id["call_3"].status == ToolCallStatus.SUCCEEDED.value
    feedback = {
        m["tool_call_id"]: json.loads(m["content"])["error"]
        for m in upstream.requests[1]["messages"]
        if m["role"] == "tool"
    }
    assert feedback["call_1"].startswith(
        "tool.call.invalid: Tool call 0 (get_weather): arguments are not valid JSON"
    )
    assert feedback["call_2"].startswith("tool.call.invalid: Tool call 1: missing function name")
    assert all('Please ensure the format: {"id"' in text for text in feedback.values())


async def test_ordinary_string_arguments_are_not_recorded_as_repaired(
    ph: Pilothouse, upstream: Upstream
) -> None:
    good = {
        "id": "call_3",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ARGS_JSON},
    }
    upstream.script(Reply(completion(None, [good])), Reply(completion(ANSWER)))
    conversation = await ph.command.start_conversation(action="WEATHER")
    result = await ph.command.send_message(
        conversation.uuid, "Weather?", runtime_config={"stream": False}
    )
    assert result.status is ProcessStatus.COMPLETED, result.error
    transcript = await ph.query.get_transcript(conversation.uuid)
    executions = [e.data for e in transcript.timeline if e.kind is TimelineKind.TOOL_EXECUTION]
    assert "repairs" not in executions[0]


async def test_a_200_body_that_is_not_json_is_retried_with_linear_backoff(
    ph: Pilothouse, upstream: Upstream
) -> None:
    upstream.script(
        Reply(b"<html>bad gateway</html>", content_type="text/html"),
        Reply(b"not json", content_type="application/json"),
        Reply(completion(ANSWER)),
    )
    conversation = await ph.command.start_conversation(action="WEATHER")
    result = await ph.command.send_message(
        conversation.uuid, "Weather?", runtime_config={"stream": False}
    )
    assert result.status is ProcessStatus.COMPLETED, result.error
    assert result.output == ANSWER
    transcript = await ph.query.get_transcript(conversation.uuid)
    errors = [e.data for e in transcript.timeline if e.kind is TimelineKind.ERROR]
    assert [e["error"] for e in errors] == ["UnparseableResponseError"] * 2
    retries = [e.data["delay"] for e in transcript.timeline if e.kind is TimelineKind.RETRY]
    assert retries == [0.01, 0.02]  # linear: delay × attempt


ANTHROPIC_CATALOG = """\
providers:
  - code: CLDL
    kind: anthropic
    api_key: "@secrets(CLAUDE_KEY)"
    base_url: {base_url}
models:
  - code: CLAUDEMOCK
    provider: CLDL
    model_name: mock
    capabilities: [FC, SR]
configurations:
  - code: QUIK
    max_tokens: 64
    retry_count: 2
    retry_delay: 0.01
tools:
  - code: WEATHER
    name: get_weather
    kind: python
    implementation: "real_tools:get_weather"
    description: Get the current weather in a city.
actions:
  - code: WEATHER
    model: CLAUDEMOCK
    configuration: QUIK
    prompt: Answer with the tools.
    tools: [WEATHER]
    ask_user: false
"""


def _message(content: list[Any], stop: str) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "mock",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 3},
    }


def _message_stream(block: dict[str, Any], deltas: list[dict[str, Any]], stop: str) -> Reply:
    start = _message([], stop)
    start["stop_reason"] = None
    events: list[Any] = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": block},
        *({"type": "content_block_delta", "index": 0, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 3},
        },
        {"type": "message_stop"},
    ]
    return Reply(events=events, done=False, named=True)


@pytest.fixture
async def claude(tmp_path: Path, upstream: Upstream) -> AsyncIterator[Pilothouse]:
    catalog = tmp_path / "catalog.yaml"
    root = upstream.base_url.removesuffix("/v1")
    catalog.write_text(ANTHROPIC_CATALOG.format(base_url=root), encoding="utf-8")
    secrets = tmp_path / "secrets.env"
    secrets.write_text("CLAUDE_KEY=sk-ant-test-0000\n", encoding="utf-8")
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'claude.db'}", secrets_file=secrets
    )
    async with Pilothouse(settings) as facade:
        await facade.catalog.import_files([catalog])
        yield facade


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_tool_use_without_id_and_with_string_input_is_repaired(
    claude: Pilothouse, upstream: Upstream, stream: bool
) -> None:
    if stream:
        upstream.script(
            _message_stream(
                {"type": "tool_use", "name": "get_weather", "input": {}},
                [{"type": "input_json_delta", "partial_json": ARGS_JSON}],
                "tool_use",
            ),
            _message_stream(
                {"type": "text", "text": ""}, [{"type": "text_delta", "text": ANSWER}], "end_turn"
            ),
        )
    else:
        upstream.script(
            Reply(
                _message(
                    [{"type": "tool_use", "name": "get_weather", "input": ARGS_JSON}], "tool_use"
                )
            ),
            Reply(_message([{"type": "text", "text": ANSWER}], "end_turn")),
        )
    conversation = await claude.command.start_conversation(action="WEATHER")
    result = await claude.command.send_message(
        conversation.uuid, "Weather?", runtime_config={"stream": stream}
    )
    assert result.status is ProcessStatus.COMPLETED, result.error
    assert upstream.paths[0] == "/v1/messages"
    assert upstream.requests[0].get("stream", False) is stream
    transcript = await claude.query.get_transcript(conversation.uuid)
    [call] = transcript.tool_calls
    assert (call.name, call.arguments) == ("get_weather", ARGS)
    assert call.call_id.startswith("repaired-")
    executions = [e.data for e in transcript.timeline if e.kind is TimelineKind.TOOL_EXECUTION]
    expected = (
        ["missing id: generated"]
        if stream
        else [
            "input given as a JSON string: parsed",
            "missing id: generated",
        ]
    )
    assert executions[0]["repairs"] == expected
    assert str(result.output) == ANSWER


async def test_a_streamed_call_without_a_name_is_fed_back_not_dropped(
    ph: Pilothouse, upstream: Upstream
) -> None:
    nameless = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"arguments": ARGS_JSON},
    }
    good = {"index": 0, **WHOLE_SHAPES["object_arguments"], "id": "call_2"}
    upstream.script(
        Reply(
            events=[chunk({"role": "assistant", "tool_calls": [nameless]}), chunk({}, "tool_calls")]
        ),
        Reply(events=[chunk({"role": "assistant", "tool_calls": [good]}), chunk({}, "tool_calls")]),
        Reply(events=text_stream(ANSWER)),
    )
    conversation = await ph.command.start_conversation(action="WEATHER")
    result = await ph.command.send_message(
        conversation.uuid, "Weather?", runtime_config={"stream": True}
    )
    assert result.status is ProcessStatus.COMPLETED, result.error
    transcript = await ph.query.get_transcript(conversation.uuid)
    by_id = {c.call_id: c for c in transcript.tool_calls}
    assert by_id["call_1"].arguments == ARGS  # recorded as sent
    assert by_id["call_1"].status == ToolCallStatus.FAILED.value
    assert by_id["call_2"].status == ToolCallStatus.SUCCEEDED.value
