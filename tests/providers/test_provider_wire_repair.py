"""Repairs on the wire (seed 001), unit by unit: whole answers and streamed events."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pilothouse.errors import UnparseableResponseError
from pilothouse.providers import translate_error, wire_notes
from pilothouse.providers._wire import (
    repair_completion,
    repair_message,
    repair_message_stream,
    repair_stream,
)

pytestmark = pytest.mark.anyio


def _body(calls: list[Any]) -> bytes:
    message = {"role": "assistant", "content": None, "tool_calls": calls}
    return json.dumps({"choices": [{"index": 0, "message": message}]}).encode()


def _calls(body: bytes) -> list[dict[str, Any]]:
    return json.loads(body)["choices"][0]["message"]["tool_calls"]


def test_a_missing_id_becomes_repaired_time_index() -> None:
    with wire_notes() as notes:
        [call] = _calls(repair_completion(_body([{"function": {"name": "f", "arguments": "{}"}}])))
    assert call["id"].startswith("repaired-") and call["id"].endswith("-0")
    assert call["type"] == "function"
    assert notes.repairs[call["id"]] == ["missing type: function", "missing id: generated"]


def test_a_well_formed_answer_is_passed_on_byte_for_byte() -> None:
    body = _body([{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}])
    with wire_notes() as notes:
        assert repair_completion(body) is body
    assert notes.repairs == {}


def test_a_call_without_a_name_is_kept_for_the_loop_to_report() -> None:
    [call] = _calls(repair_completion(_body([{"id": "c", "type": "function", "arguments": 5}])))
    assert call["function"] == {"arguments": "5", "name": ""}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"<html>", "is not JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"choices": []}', "no choices"),
        (b'{"id": "x"}', "no choices"),
        (b'{"error": {"message": "model busy"}}', 'no choices: {"message": "model busy"}'),
    ],
)
def test_unreadable_answers_raise_unparseable(body: bytes, message: str) -> None:
    with pytest.raises(UnparseableResponseError, match=message):
        repair_completion(body)


def test_a_wrapped_wire_error_translates_to_unparseable() -> None:
    def wrapped() -> ConnectionError:
        try:
            repair_completion(b"nope")
        except UnparseableResponseError as inner:
            outer = ConnectionError("sdk wrapper")
            outer.__cause__ = inner
            return outer
        raise AssertionError("not raised")

    assert isinstance(translate_error(wrapped()), UnparseableResponseError)


async def _lines(*lines: str) -> AsyncIterator[str]:
    for line in lines:
        yield line


async def _collect(*lines: str) -> list[str]:
    return [piece.decode() async for piece in repair_stream(_lines(*lines))]


async def test_streamed_flat_calls_without_index_get_one_each() -> None:
    first = {"choices": [{"delta": {"tool_calls": [{"name": "f", "arguments": {"a": 1}}]}}]}
    second = {"choices": [{"delta": {"tool_calls": [{"name": "g"}]}, "finish_reason": "stop"}]}
    with wire_notes() as notes:
        out = await _collect(f"data: {json.dumps(first)}", "", f"data: {json.dumps(second)}")
    calls = [json.loads(line[6:])["choices"][0]["delta"]["tool_calls"][0] for line in out[::2]]
    assert [c["index"] for c in calls] == [0, 1]
    assert calls[0]["function"] == {"name": "f", "arguments": '{"a": 1}'}
    assert len(notes.repairs) == 2


async def test_a_stream_cut_before_its_end_raises_unparseable() -> None:
    chunk = {"choices": [{"delta": {"content": "ACK"}, "finish_reason": None}]}
    with pytest.raises(UnparseableResponseError, match="ended before"):
        await _collect(f"data: {json.dumps(chunk)}", "")


async def test_a_stream_event_that_is_not_json_raises_unparseable() -> None:
    with pytest.raises(UnparseableResponseError, match="streamed event is not JSON"):
        await _collect("data: {oops", "")


async def test_done_without_finish_reason_is_a_complete_stream() -> None:
    text = 'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}'
    assert await _collect(": comment", text, "data: [DONE]") == [
        ": comment\n",
        f"{text}\n",
        "data: [DONE]\n",
    ]


async def test_a_stream_without_any_choice_raises_unparseable() -> None:
    with pytest.raises(UnparseableResponseError, match="no choices"):
        await _collect('data: {"id": "x", "choices": []}', "", "data: [DONE]")


def _message(content: Any) -> bytes:
    return json.dumps({"type": "message", "content": content}).encode()


def test_anthropic_tool_use_gets_an_id_and_an_object_input() -> None:
    blocks = [
        {"type": "text", "text": "calling"},
        {"type": "tool_use", "name": "f", "arguments": '{"a": 1}'},
        {"type": "tool_use", "id": "t2", "name": "g"},
        {"type": "tool_use", "id": "t3", "name": "h", "input": "{not json"},
    ]
    with wire_notes() as notes:
        content = json.loads(repair_message(_message(blocks)))["content"]
    assert content[1]["id"].endswith("-1") and content[1]["input"] == {"a": 1}
    assert content[2]["input"] == {}
    assert content[3]["input"] == "{not json"  # passed on for the loop to report
    assert notes.repairs["t2"] == ["missing arguments: {}"]
    assert notes.repairs[content[1]["id"]] == [
        "arguments given for input",
        "input given as a JSON string: parsed",
        "missing id: generated",
    ]


def test_an_anthropic_answer_without_content_raises_unparseable() -> None:
    with pytest.raises(UnparseableResponseError, match="no content list"):
        repair_message(b'{"type": "message"}')


async def test_an_anthropic_stream_cut_before_message_stop_raises_unparseable() -> None:
    start = {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use"}}
    lines = ["event: content_block_start", f"data: {json.dumps(start)}", ""]

    async def collect() -> list[bytes]:
        return [piece async for piece in repair_message_stream(_lines(*lines))]

    with pytest.raises(UnparseableResponseError, match="no message_stop"):
        await collect()
    done = [*lines, 'data: {"type": "message_stop"}']
    out = [piece async for piece in repair_message_stream(_lines(*done))]
    assert json.loads(out[1][6:])["content_block"]["id"].startswith("repaired-")


def test_a_call_that_is_not_an_object_is_kept_without_a_name() -> None:
    with wire_notes() as notes:
        [call] = _calls(repair_completion(_body(["get_weather(Paris)"])))
    assert call["function"] == {"name": "", "arguments": '"get_weather(Paris)"'}
    assert notes.repairs[call["id"]][0] == "not an object: kept as a call without a name"


def test_a_key_the_provider_echoes_in_an_unreadable_answer_is_masked() -> None:
    body = b'{"error": {"message": "bad key my-plain-key-123"}}'
    with pytest.raises(UnparseableResponseError) as raised:
        repair_completion(body)
    translated = translate_error(raised.value, secrets=["my-plain-key-123"])
    assert translated is not None and "my-plain-key-123" not in str(translated)
