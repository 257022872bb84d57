"""The local chat handler's model-free parts: reading calls, streaming, the request gate.

The handler itself runs against real models in tests/real/test_local_model.py
(SmolLM2, prompted path) and tests/real/test_local_default_model.py (Qwen,
native path).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from pilothouse.providers._llama_chat import _prompted_messages, _Watch
from pilothouse.providers._llama_decode import StopFilter
from pilothouse.providers._llama_server import BadRequest, RequestGate, adapt_request
from pilothouse.providers._local import choose_threads
from pilothouse.providers._toolcall_text import (
    TextCall,
    calls_in_text,
    json_call,
    marked_calls,
    opening_name,
    written_call,
)

NAMES = ["get_weather", "get_time"]
PARIS = TextCall("get_weather", {"city": "Paris"})


@pytest.mark.parametrize(
    "value",
    [
        {"name": "get_weather", "arguments": {"city": "Paris"}},
        {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"name": "get_weather", "parameters": {"city": "Paris"}},
        {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
    ],
)
def test_every_common_call_shape_reads_the_same(value: dict[str, Any]) -> None:
    assert json_call(value) == PARIS


def test_missing_or_empty_arguments_are_an_empty_object() -> None:
    assert json_call({"name": "get_time"}) == TextCall("get_time", {})
    assert json_call({"name": "get_time", "arguments": ""}) == TextCall("get_time", {})


@pytest.mark.parametrize(
    "value",
    [
        {"arguments": {}},
        {"name": ""},
        {"name": "f", "arguments": "not json"},
        {"name": "f", "arguments": [1, 2]},
        ["get_weather"],
        "get_weather",
    ],
)
def test_values_that_are_not_calls(value: object) -> None:
    assert json_call(value) is None


def test_an_answer_that_is_only_calls_reads_as_calls() -> None:
    plain = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    fenced = f"```json\n{plain}\n```"
    listed = f'[{plain}, {{"name": "get_time", "arguments": {{"timezone": "UTC"}}}}]'
    assert calls_in_text(plain, NAMES) == [PARIS]
    assert calls_in_text(fenced, NAMES) == [PARIS]
    assert calls_in_text(listed, NAMES) == [PARIS, TextCall("get_time", {"timezone": "UTC"})]


@pytest.mark.parametrize(
    "text",
    [
        "The weather in Paris is sunny.",
        '{"name": "count_to_five", "arguments": {}}',  # not an offered tool
        '{"competitors": [{"name": "Orbital Express"}]}',  # a JSON answer, not a call
        '{"name": "get_weather", "arguments": {"city": "Paris"}} and then text',
    ],
)
def test_other_answers_are_not_calls(text: str) -> None:
    assert calls_in_text(text, NAMES) is None


def test_a_call_followed_by_more_text_is_still_written_as_a_call() -> None:
    echoed = '{"name": "get_weather", "arguments": {"city": "Paris"}}\n{"response": "18 C"}'
    assert written_call(echoed) == PARIS
    assert written_call("Sunny, 18 C.") is None


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ('{"name": "count_from_one', None),
        ('{"name": "count_from_one_to_five", "argu', "count_from_one_to_five"),
        ('```json\n{\n  "name": "get_time"', "get_time"),
        ('[{"type": "function", "function": {"name": "get_weather"', "get_weather"),
        ('{"competitors": [', None),
    ],
)
def test_the_name_a_json_call_opens_with_is_seen_early(text: str, name: str | None) -> None:
    assert opening_name(text) == name


def test_marked_calls_with_and_without_their_closing_tag() -> None:
    text = (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        "<tool_call>\nnot json\n</tool_call>\n"
        '<tool_call>\n{"name": "get_time", "arguments": {}}'
    )
    calls, invalid = marked_calls(text)
    assert calls == [PARIS, TextCall("get_time", {})]
    assert invalid == ["not json"]


def feed_all(watch: _Watch, pieces: list[str]) -> str:
    return "".join(watch.feed(p) for p in pieces)


def test_watch_streams_text_but_holds_back_what_may_open_a_call() -> None:
    watch = _Watch("<tool_call>", NAMES)
    assert feed_all(watch, ["Sure", ", let me check", " <tool"]) == "Sure, let me check "
    assert watch.state == "text"
    assert watch.feed("_call>") == ""
    assert watch.state == "call"


def test_watch_sees_a_call_at_the_start_and_json_answers() -> None:
    marked = _Watch("<tool_call>", NAMES)
    assert feed_all(marked, ["\n", "<tool_call>"]) == ""
    assert marked.state == "call"
    json_answer = _Watch("<tool_call>", NAMES)
    assert feed_all(json_answer, ['{"name": ', '"get_weather"', ', "arguments": {}}']) == ""
    assert json_answer.state == "json"
    assert json_answer.pending == '{"name": "get_weather", "arguments": {}}'


def test_watch_flags_a_call_to_a_tool_that_is_not_offered() -> None:
    watch = _Watch("<tool_call>", NAMES)
    feed_all(watch, ['{"name": "count', '_to_five", '])
    assert watch.state == "stray"


def test_stop_filter_cuts_at_a_stop_sequence_split_over_pieces() -> None:
    stops = StopFilter(["END"])
    out = [stops.feed("one tw"), stops.feed("o E"), stops.feed("ND three")]
    assert "".join(out) == "one two "
    assert stops.stopped
    assert stops.feed("more") == ""
    assert stops.flush() == ""


def test_stop_filter_releases_a_held_prefix_that_was_not_a_stop() -> None:
    stops = StopFilter(["END"])
    assert stops.feed("the E") == "the "
    assert stops.flush() == "E"
    assert not stops.stopped


def test_prompted_history_turns_calls_and_results_into_text() -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    messages = _prompted_messages(
        [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
        ],
        tools,
    )
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0]["content"].startswith("Be brief.\n\nYou can call these functions:")
    assert "functions.get_weather:" in messages[0]["content"]
    assert messages[1]["content"] == "Weather in Paris?"
    assert messages[2]["content"] == 'functions.get_weather:\n{"city": "Paris"}'
    assert messages[3]["content"] == "Result of functions.get_weather:\n18 C"


def test_request_gate_maps_fields_llama_cpp_would_ignore() -> None:
    payload: dict[str, Any] = {
        "messages": [
            {"role": "assistant", "content": None, "tool_calls": []},
            {"role": "assistant", "tool_calls": []},
        ],
        "max_completion_tokens": 40,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "out", "schema": {"type": "object"}, "strict": True},
        },
    }
    adapt_request(payload, chat=True, own_handler=True)
    assert payload["max_tokens"] == 40
    assert "max_completion_tokens" not in payload
    assert payload["response_format"] == {"type": "json_object", "schema": {"type": "object"}}
    assert [m["content"] for m in payload["messages"]] == ["", ""]


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        ({"max_tokens": 5, "max_completion_tokens": 6}, "max_completion_tokens"),
        ({"n": 3}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"logit_bias": {"1": 5}}, "logit_bias"),
        ({"response_format": {"type": "json_schema", "json_schema": {}}}, "response_format"),
        (
            {
                "tools": [{"type": "function", "function": {"name": "a"}}],
                "tool_choice": {"type": "function", "function": {"name": "b"}},
            },
            "tool_choice",
        ),
    ],
)
def test_request_gate_refuses_fields_it_cannot_honour(payload: dict[str, Any], param: str) -> None:
    with pytest.raises(BadRequest) as raised:
        adapt_request(payload, chat=True, own_handler=True)
    assert raised.value.param == param


def test_request_gate_leaves_other_chat_formats_their_own_features() -> None:
    payload: dict[str, Any] = {"logprobs": True, "max_completion_tokens": 7}
    adapt_request(payload, chat=True, own_handler=False)
    assert payload == {"logprobs": True, "max_tokens": 7}


@pytest.mark.anyio
async def test_request_gate_rewrites_the_body_the_app_reads() -> None:
    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        seen.append((dict(scope["headers"]).get(b"content-length"), message["body"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    gate = RequestGate(app, own_handler=True)
    transport = httpx.ASGITransport(app=gate)
    async with httpx.AsyncClient(transport=transport, base_url="http://local") as client:
        ok = await client.post("/v1/chat/completions", json={"max_completion_tokens": 3})
        refused = await client.post("/v1/chat/completions", json={"n": 2})
        other = await client.post("/v1/embeddings", json={"n": 2})
    assert ok.status_code == 200
    length, body = seen[0]
    assert json.loads(body) == {"max_tokens": 3}
    assert length == str(len(body)).encode()
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "n"
    assert other.status_code == 200  # not a completion: passed through untouched
    assert json.loads(seen[1][1]) == {"n": 2}


@pytest.mark.anyio
async def test_request_gate_asks_for_the_served_model_so_the_answer_names_it() -> None:
    # llama-cpp-python echoes the request's model name in its answer: the
    # gate puts the served file's id there, whatever the caller asked for.
    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(json.loads((await receive())["body"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    gate = RequestGate(app, own_handler=True, model_id="qwen2.5-coder-0.5b-instruct-q4_k_m")
    transport = httpx.ASGITransport(app=gate)
    async with httpx.AsyncClient(transport=transport, base_url="http://local") as client:
        await client.post("/v1/chat/completions", json={"model": "SmolLM2-135M-Instruct"})
    assert seen == [{"model": "qwen2.5-coder-0.5b-instruct-q4_k_m"}]


@pytest.mark.parametrize(
    ("cores", "busy", "threads"),
    [(2, 0.0, 1), (2, 1.5, 1), (8, 0.2, 7), (8, 5.0, 3), (8, 12.0, 1), (1, 0.0, 1)],
)
def test_threads_follow_the_free_cores_keeping_one(cores: int, busy: float, threads: int) -> None:
    assert choose_threads(cores, busy) == threads
