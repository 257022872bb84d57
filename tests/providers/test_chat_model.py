"""pilothouse's Chat Completions model sends and reads what pydantic-ai's OpenAIChatModel does.

For kinds ``openai-compatible`` and ``local`` the factory builds
``ChatCompletionsModel`` (``providers/_chat.py``), which speaks the wire
format itself instead of through the OpenAI SDK; its ``fallback()`` is
pydantic-ai's ``OpenAIChatModel`` on the same HTTP client. Here both make
the same calls on one recording transport: every request must be the same
HTTP request (URL, authorization, JSON body), and every answer, whole or
streamed, the same ``ModelResponse`` and the same stream events. An
upgrade of pydantic-ai that changes what its model sends or builds fails
here, not in production.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import httpx2
import pytest
from provider_helpers import model_spec
from pydantic_ai.direct import model_request, model_request_stream
from pydantic_ai.exceptions import ModelAPIError, ModelHTTPError, UnexpectedModelBehavior
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.output import OutputObjectDefinition
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition

from pilothouse.catalog._enums import ProviderKind
from pilothouse.errors import UnparseableResponseError
from pilothouse.providers import ModelFactory
from pilothouse.providers._chat import ChatCompletionsModel

pytestmark = pytest.mark.anyio

_STAMP = datetime(2026, 1, 1, tzinfo=UTC)


class _Upstream:
    """A transport that records each request and answers with the next canned body."""

    def __init__(self) -> None:
        self.requests: list[httpx2.Request] = []
        self.answer: tuple[int, bytes, str] = (200, b"{}", "application/json")

    async def handle(self, request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        self.requests.append(request)
        status, body, content_type = self.answer
        return httpx2.Response(status, content=body, headers={"content-type": content_type})


def _completion(message: dict[str, Any], **extra: Any) -> dict[str, Any]:
    completion: dict[str, Any] = {
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "created": 1_760_000_000,
        "model": "served-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 21, "completion_tokens": 5, "total_tokens": 26},
    }
    completion.update(extra)
    return completion


def _sse(*chunks: dict[str, Any], done: bool = True) -> bytes:
    lines = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks]
    if done:
        lines.append("data: [DONE]\n\n")
    return "".join(lines).encode()


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "created": 1_760_000_001,
        "model": "served-model",
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    chunk.update(extra)
    return chunk


async def _pair(
    upstream: _Upstream,
    model_name: str = "qwen2.5-coder",
    kind: ProviderKind = ProviderKind.OPENAI_COMPATIBLE,
) -> tuple[ChatCompletionsModel, Model, ModelFactory]:
    factory = ModelFactory(transport=httpx2.MockTransport(upstream.handle))
    spec = model_spec(kind, model_name, base_url="http://upstream.test/v1")
    model = await factory.model(spec)
    assert isinstance(model, ChatCompletionsModel)
    return model, model.fallback(), factory


def _same_request(upstream: _Upstream) -> dict[str, Any]:
    lean, sdk = upstream.requests[-2], upstream.requests[-1]
    assert lean.method == sdk.method == "POST"
    assert str(lean.url) == str(sdk.url) == "http://upstream.test/v1/chat/completions"
    assert lean.headers["authorization"] == sdk.headers["authorization"]
    assert lean.headers["content-type"] == sdk.headers["content-type"]
    lean_body, sdk_body = json.loads(lean.content), json.loads(sdk.content)
    assert lean_body == sdk_body
    return lean_body


def _stamped(response: ModelResponse) -> ModelResponse:
    return replace(response, timestamp=_STAMP)


_SYSTEM_USER: list[ModelMessage] = [
    ModelRequest(
        parts=[SystemPromptPart("You answer briefly."), UserPromptPart("Hello, Ünïcode ✓")]
    )
]
_TOOL_ROUND: list[ModelMessage] = [
    ModelRequest(parts=[SystemPromptPart("Use tools."), UserPromptPart("Weather in Oslo?")]),
    ModelResponse(
        parts=[
            TextPart("Let me look."),
            TextPart("One moment."),
            ToolCallPart("weather", {"city": "Oslo"}, tool_call_id="call_1"),
            ToolCallPart("weather", '{"city": "Bergen"}', tool_call_id="call_2"),
        ]
    ),
    ModelRequest(
        parts=[
            ToolReturnPart("weather", "rain", tool_call_id="call_1"),
            ToolReturnPart("weather", {"sky": "clear", "t": 3}, tool_call_id="call_2"),
        ]
    ),
    ModelResponse(parts=[TextPart("Rain in Oslo, clear in Bergen.")]),
    ModelRequest(parts=[UserPromptPart("And tomorrow?")]),
]
_INSTRUCTED: list[ModelMessage] = [
    ModelRequest(parts=[UserPromptPart("Hi")], instructions="Always answer in French."),
]
_TOOLS = [
    ToolDefinition(
        name="weather",
        description="The weather in a city.",
        parameters_json_schema={
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    ),
    ToolDefinition(name="noop", parameters_json_schema={"type": "object", "properties": {}}),
]
_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "score": {"type": "integer"}},
    "required": ["answer", "score"],
}
_PARAMETERS: dict[str, ModelRequestParameters] = {
    "text": ModelRequestParameters(allow_text_output=True),
    "function tools": ModelRequestParameters(function_tools=_TOOLS, allow_text_output=True),
    "native output": ModelRequestParameters(
        function_tools=_TOOLS,
        output_mode="native",
        output_object=OutputObjectDefinition(json_schema=_SCHEMA, name="output"),
        allow_text_output=False,
    ),
    "tool output": ModelRequestParameters(
        function_tools=_TOOLS,
        output_mode="tool",
        output_tools=[
            ToolDefinition(
                name="final_result",
                description="Give the final answer in the required structure.",
                parameters_json_schema=_SCHEMA,
            )
        ],
        allow_text_output=False,
    ),
}
_SETTINGS: dict[str, ModelSettings] = {
    "none": {},
    "every option": {
        "temperature": 0.2,
        "max_tokens": 256,
        "top_p": 0.9,
        "stop_sequences": ["END"],
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "seed": 7,
        "extra_body": {"top_k": 40},
        "openai_reasoning_effort": "low",  # pyright: ignore[reportAssignmentType]
    },
    "grammar": {
        "extra_body": {"response_format": {"type": "json_object", "schema": _SCHEMA}},
    },
}
_MODEL_NAMES = (
    "qwen2.5-coder",
    "llama3.2:latest",
    "mistralai/mistral-small-3.1",
    "meta-llama/Llama-3.1-8B-Instruct",
    "deepseek-chat",
    "gpt-4o-mini",
    # Families whose profiles cannot force a tool, or think: handed to
    # pydantic-ai's model or sent unforced, the same request either way.
    "anthropic/claude-3-7-sonnet-latest",
    "google/gemini-2.5-flash",
    "qwen/qwen3-32b",
)


@pytest.mark.parametrize("model_name", _MODEL_NAMES)
@pytest.mark.parametrize("parameters", sorted(_PARAMETERS))
@pytest.mark.parametrize("settings", sorted(_SETTINGS))
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_the_same_request_for_every_shape_the_runtime_sends(
    model_name: str, parameters: str, settings: str, stream: bool
) -> None:
    upstream = _Upstream()
    lean, sdk, factory = await _pair(upstream, model_name)
    assert lean.profile == sdk.profile
    if stream:
        upstream.answer = (200, _sse(_chunk({"content": "ok"}, "stop")), "text/event-stream")
    else:
        upstream.answer = (
            200,
            json.dumps(_completion({"role": "assistant", "content": "ok"})).encode(),
            "application/json",
        )
    for messages in (_SYSTEM_USER, _TOOL_ROUND, _INSTRUCTED):
        outcomes = [
            await _outcome(model, messages, _SETTINGS[settings], _PARAMETERS[parameters], stream)
            for model in (lean, sdk)
        ]
        # A request pydantic-ai refuses (native output on a profile without
        # it) is refused by both, with the same error, and nothing is sent.
        assert outcomes[0] == outcomes[1]
        if outcomes[0] is None:
            _same_request(upstream)
    await factory.aclose()


async def _outcome(
    model: Model,
    messages: list[ModelMessage],
    settings: ModelSettings,
    parameters: ModelRequestParameters,
    stream: bool,
) -> str | None:
    try:
        if stream:
            async with model_request_stream(
                model, messages, model_settings=settings, model_request_parameters=parameters
            ) as streamed:
                async for _ in streamed:
                    pass
        else:
            await model_request(
                model, messages, model_settings=settings, model_request_parameters=parameters
            )
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


_ANSWERS: dict[str, dict[str, Any]] = {
    "text": _completion({"role": "assistant", "content": "Paris."}),
    "think tags": _completion({"role": "assistant", "content": "<think>hmm</think>Paris."}),
    "reasoning field": _completion(
        {"role": "assistant", "content": "Paris.", "reasoning_content": "The capital..."}
    ),
    "tool calls": _completion(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "noop", "arguments": "{}"},
                },
            ],
        }
    ),
    "content parts": _completion(
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Par"}, {"type": "text", "text": "is."}],
        }
    ),
    "refusal": _completion({"role": "assistant", "content": None, "refusal": "I can't."}),
    "usage details": _completion(
        {"role": "assistant", "content": "ok"},
        usage={
            "prompt_tokens": 100,
            "completion_tokens": 40,
            "total_tokens": 140,
            "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": None},
            "completion_tokens_details": {"reasoning_tokens": 12, "accepted_prediction_tokens": 0},
        },
    ),
    "no usage, no created": _completion(
        {"role": "assistant", "content": "ok"}, usage=None, created=None
    ),
    "service tier": _completion({"role": "assistant", "content": "ok"}, service_tier="default"),
}


def _finish(answer: dict[str, Any], reason: str | None) -> dict[str, Any]:
    copy = json.loads(json.dumps(answer))
    copy["choices"][0]["finish_reason"] = reason
    return copy


_ANSWERS["no finish reason"] = _finish(_ANSWERS["text"], None)
_ANSWERS["unknown finish reason"] = _finish(_ANSWERS["text"], "guardrail_intervened")
_ANSWERS["length"] = _finish(_ANSWERS["text"], "length")


@pytest.mark.parametrize("answer", sorted(_ANSWERS))
async def test_the_same_response_for_every_answer(answer: str) -> None:
    upstream = _Upstream()
    lean, sdk, factory = await _pair(upstream)
    upstream.answer = (200, json.dumps(_ANSWERS[answer]).encode(), "application/json")
    parameters = _PARAMETERS["function tools"]
    got = [
        await model_request(model, _SYSTEM_USER, model_request_parameters=parameters)
        for model in (lean, sdk)
    ]
    assert _stamped(got[0]) == _stamped(got[1])
    await factory.aclose()


def _broken(path: Sequence[str | int], value: object) -> bytes:
    """The text answer with the value at ``path`` replaced (``KeyError``: removed)."""
    answer: Any = json.loads(json.dumps(_ANSWERS["text"]))
    target = answer
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return json.dumps(answer).encode()


_MESSAGE = ("choices", 0, "message")
_MALFORMED: dict[str, bytes] = {
    "no id": _broken(("id",), KeyError),
    "another object": _broken(("object",), "chat.completion.chunk"),
    "created as text": _broken(("created",), "yesterday"),
    "created with a fraction": _broken(("created",), 1.5),
    "model as a number": _broken(("model",), 7),
    "no choice index": _broken(("choices", 0, "index"), KeyError),
    "finish reason as a number": _broken(("choices", 0, "finish_reason"), 3),
    "no message": _broken(_MESSAGE, KeyError),
    "no role": _broken((*_MESSAGE, "role"), KeyError),
    "a user's message": _broken((*_MESSAGE, "role"), "user"),
    "content as a number": _broken((*_MESSAGE, "content"), 5),
    "refusal as a number": _broken((*_MESSAGE, "refusal"), 5),
    "tool calls as an object": _broken((*_MESSAGE, "tool_calls"), {"a": 1}),
    "usage as a list": _broken(("usage",), [1, 2]),
    "usage counts as text": _broken(("usage",), {"prompt_tokens": "1", "completion_tokens": 1}),
    "usage without a total": _broken(("usage",), {"prompt_tokens": 1, "completion_tokens": 1}),
    "usage details as text": _broken(
        ("usage",),
        {
            "prompt_tokens": 1,
            "completion_tokens": 1,
            "total_tokens": 2,
            "completion_tokens_details": {"reasoning_tokens": "x"},
        },
    ),
    "usage counts as whole floats": _broken(
        ("usage",), {"prompt_tokens": 1.0, "completion_tokens": 1, "total_tokens": 2}
    ),
    "created null": _broken(("created",), None),
}


@pytest.mark.parametrize("answer", sorted(_MALFORMED))
async def test_a_malformed_answer_is_refused_or_read_as_pydantic_ai_does(answer: str) -> None:
    # What pydantic-ai's validation refuses (an answer whose usage could not
    # be recorded, a message that is not the assistant's) is refused here
    # too, with the same exception; what it accepts is read the same.
    upstream = _Upstream()
    lean, sdk, factory = await _pair(upstream)
    upstream.answer = (200, _MALFORMED[answer], "application/json")
    outcomes: list[ModelResponse | str] = []
    for model in (lean, sdk):
        try:
            outcomes.append(_stamped(await model_request(model, _SYSTEM_USER)))
        except UnexpectedModelBehavior as exc:
            # The same verdict; pydantic may count the errors differently.
            outcomes.append(f"{type(exc).__name__}: {str(exc).split(':')[0]}")
    assert outcomes[0] == outcomes[1]
    await factory.aclose()


async def test_a_choice_that_is_not_an_object_is_unexpected_behaviour() -> None:
    # The SDK's path fails here with an AttributeError; this client says what is wrong.
    upstream = _Upstream()
    lean, _sdk, factory = await _pair(upstream)
    upstream.answer = (200, _broken(("choices", 0), "x"), "application/json")
    with pytest.raises(UnexpectedModelBehavior, match="chat completions endpoint"):
        await model_request(lean, _SYSTEM_USER)
    await factory.aclose()


_STREAMS: dict[str, bytes] = {
    "text": _sse(
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"content": "Hel"}),
        _chunk({"content": "lo."}),
        _chunk({}, "stop"),
        _chunk(None, usage={"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}),
    ),
    "think tags": _sse(
        _chunk({"content": "<think>"}),
        _chunk({"content": "pondering"}),
        _chunk({"content": "</think>"}),
        _chunk({"content": "\n\nAnswer."}, "stop"),
    ),
    "reasoning then text": _sse(
        _chunk({"reasoning_content": "Let me "}),
        _chunk({"reasoning_content": "think."}),
        _chunk({"content": " "}),
        _chunk({"content": "Done."}, "stop"),
    ),
    "tool calls": _sse(
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_x",
                        "type": "function",
                        "function": {"name": "weather", "arguments": ""},
                    }
                ]
            }
        ),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]}),
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "call_y",
                        "type": "function",
                        "function": {"name": "noop", "arguments": "{}"},
                    }
                ]
            }
        ),
        _chunk({}, "tool_calls"),
        _chunk(
            None,
            usage={
                "prompt_tokens": 30,
                "completion_tokens": 9,
                "total_tokens": 39,
                "completion_tokens_details": {"reasoning_tokens": 0},
            },
        ),
    ),
    "text then tool call": _sse(
        _chunk({"content": "Checking."}),
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "noop", "arguments": "{}"},
                    }
                ]
            }
        ),
        _chunk({}, "tool_calls"),
    ),
    "no finish reason, no done": _sse(_chunk({"content": "cut"}), done=False),
    "unknown finish reason": _sse(_chunk({"content": "x"}, "eos")),
    "refusal": _sse(_chunk({"refusal": "No."}), _chunk({}, "stop")),
    "keep-alive comments": b": ping\n\n" + _sse(_chunk({"content": "ok"}, "stop")),
}


@pytest.mark.parametrize("stream", sorted(_STREAMS))
async def test_the_same_events_and_response_for_every_stream(stream: str) -> None:
    upstream = _Upstream()
    lean, sdk, factory = await _pair(upstream)
    upstream.answer = (200, _STREAMS[stream], "text/event-stream")
    parameters = _PARAMETERS["function tools"]
    results: list[tuple[list[str], ModelResponse | str]] = []
    for model in (lean, sdk):
        events: list[str] = []
        try:
            async with model_request_stream(
                model, _SYSTEM_USER, model_request_parameters=parameters
            ) as streamed:
                events = [repr(event) async for event in streamed]
                results.append((events, _stamped(streamed.get())))
        except Exception as exc:
            # The wire layer refuses a cut stream under both, the same way.
            results.append((events, f"{type(exc).__name__}: {exc}"))
    assert results[0] == results[1]
    await factory.aclose()


_ERRORS: dict[str, tuple[int, bytes]] = {
    "rate limit": (
        429,
        b'{"error":{"message":"slow down","type":"rate_limit_error","code":"rate_limit_exceeded"}}',
    ),
    "bad request": (
        400,
        b'{"error":{"message":"bad","type":"invalid_request_error","param":"x","code":null}}',
    ),
    "auth": (
        401,
        b'{"error":{"message":"Incorrect API key","type":"invalid_request_error",'
        b'"code":"invalid_api_key"}}',
    ),
    "server text": (502, b"Bad gateway"),
    "overloaded": (503, b'{"error":{"message":"overloaded","type":"server_error"}}'),
    "model not found": (404, b'{"error":{"message":"no such model","code":"model_not_found"}}'),
}


@pytest.mark.parametrize("error", sorted(_ERRORS))
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_the_same_error_for_every_error_status(error: str, stream: bool) -> None:
    upstream = _Upstream()
    lean, sdk, factory = await _pair(upstream)
    status, body = _ERRORS[error]
    upstream.answer = (status, body, "application/json")
    raised: list[ModelHTTPError] = []
    for model in (lean, sdk):
        with pytest.raises(ModelHTTPError) as caught:
            if stream:
                async with model_request_stream(model, _SYSTEM_USER):
                    pass
            else:
                await model_request(model, _SYSTEM_USER)
        raised.append(caught.value)
    lean_error, sdk_error = raised
    assert type(lean_error) is type(sdk_error)
    assert lean_error.status_code == sdk_error.status_code == status
    assert lean_error.body == sdk_error.body
    assert lean_error.provider_error_code == sdk_error.provider_error_code
    assert lean_error.message == sdk_error.message
    await factory.aclose()


async def test_an_error_inside_a_stream_raises_the_same_error() -> None:
    upstream = _Upstream()
    lean, sdk, factory = await _pair(upstream)
    upstream.answer = (
        200,
        _sse(
            _chunk({"content": "par"}),
            {"error": {"message": "upstream died", "code": "server_error"}},
        ),
        "text/event-stream",
    )
    raised: list[ModelAPIError] = []
    for model in (lean, sdk):
        with pytest.raises(ModelAPIError) as caught:
            async with model_request_stream(model, _SYSTEM_USER) as streamed:
                async for _ in streamed:
                    pass
        raised.append(caught.value)
    assert type(raised[0]) is type(raised[1])
    assert raised[0].message == raised[1].message
    await factory.aclose()


async def test_an_empty_stream_is_refused_on_both() -> None:
    upstream = _Upstream()
    lean, sdk, factory = await _pair(upstream)
    upstream.answer = (200, b"data: [DONE]\n\n", "text/event-stream")
    for model in (lean, sdk):
        with pytest.raises(UnparseableResponseError, match="streamed no choices"):
            async with model_request_stream(model, _SYSTEM_USER):
                pass
    await factory.aclose()


_FALLBACK_MESSAGES: dict[str, Sequence[ModelMessage]] = {
    "an image": [
        ModelRequest(parts=[UserPromptPart(["Describe", "this"])]),
    ],
}


async def test_requests_it_does_not_build_go_to_pydantic_ai_and_load_the_sdk_then() -> None:
    upstream = _Upstream()
    upstream.answer = (200, json.dumps(_ANSWERS["text"]).encode(), "application/json")
    lean, _sdk, factory = await _pair(upstream)
    # A list-of-content prompt, a setting not in the model's own set.
    await model_request(lean, _FALLBACK_MESSAGES["an image"])
    await model_request(lean, _SYSTEM_USER, model_settings={"logit_bias": {"50256": -100}})
    bodies = [json.loads(request.content) for request in upstream.requests]
    assert bodies[0]["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Describe"}, {"type": "text", "text": "this"}],
        }
    ]
    assert bodies[1]["logit_bias"] == {"50256": -100}
    # Sent by the SDK: its own headers are on the request.
    assert any(name.lower().startswith("x-stainless") for name in upstream.requests[1].headers)
    await factory.aclose()


async def test_a_reasoning_profile_goes_to_pydantic_ai() -> None:
    upstream = _Upstream()
    upstream.answer = (200, json.dumps(_ANSWERS["text"]).encode(), "application/json")
    lean, _sdk, factory = await _pair(upstream, "o3-mini")
    with pytest.warns(UserWarning, match="Sampling parameters"):
        await model_request(lean, _SYSTEM_USER, model_settings={"temperature": 0.3})
    # pydantic-ai drops sampling settings for a reasoning model; so did this request.
    assert "temperature" not in json.loads(upstream.requests[0].content)
    assert any(name.lower().startswith("x-stainless") for name in upstream.requests[0].headers)
    await factory.aclose()


async def test_without_the_client_pydantic_ai_s_model_serves_and_the_log_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A pydantic-ai release without the private modules the client reads
    # must not take the provider down: its own model serves.
    monkeypatch.setitem(sys.modules, "pilothouse.providers._chat", None)
    upstream = _Upstream()
    upstream.answer = (200, json.dumps(_ANSWERS["text"]).encode(), "application/json")
    factory = ModelFactory(transport=httpx2.MockTransport(upstream.handle))
    spec = model_spec(
        ProviderKind.OPENAI_COMPATIBLE, "qwen2.5-coder", base_url="http://upstream.test/v1"
    )
    with caplog.at_level(logging.WARNING, logger="pilothouse.providers._factory"):
        model = await factory.model(spec)
    assert type(model).__name__ == "OpenAIChatModel"
    assert "cannot load with this pydantic-ai" in caplog.text
    answer = await model_request(model, _SYSTEM_USER)
    assert answer.parts == [TextPart("Paris.")]
    await factory.aclose()
