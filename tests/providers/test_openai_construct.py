"""Chat completions and chunks built by pilothouse equal the OpenAI SDK's own construction.

``providers/_openai_construct.py`` skips the SDK's per-call type walk; these
tests hold it to the SDK's result on every kind of payload the wire brings:
text, tool calls, usage, vendor extras (llama.cpp's ``timings``, DeepSeek's
``reasoning_content``), logprobs, annotations, custom tool calls, and
malformed values (wrong types, nulls, missing fields), and through the client
on a real HTTP exchange.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx2
import pytest
from openai._models import construct_type
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import BaseModel

from pilothouse.providers._openai_client import FastAsyncOpenAI
from pilothouse.providers._openai_construct import construct

pytestmark = pytest.mark.anyio

CHUNK = {
    "id": "chatcmpl-1",
    "object": "chat.completion.chunk",
    "created": 1_700_000_000,
    "model": "m",
    "system_fingerprint": "b4567-abc",
    "choices": [{"index": 0, "delta": {"content": "c1 "}, "finish_reason": None}],
}

CHUNKS: list[dict[str, Any]] = [
    CHUNK,
    {**CHUNK, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
    {
        **CHUNK,
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                },
                "finish_reason": None,
            }
        ],
    },
    {
        **CHUNK,
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"city"'}}]},
            }
        ],
    },
    {**CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    # The usage chunk, with details, and llama.cpp's own timings.
    {
        **CHUNK,
        "choices": [],
        "usage": {
            "prompt_tokens": 12,
            "completion_tokens": 3,
            "total_tokens": 15,
            "prompt_tokens_details": {"cached_tokens": 4},
            "completion_tokens_details": {"reasoning_tokens": 1},
        },
        "timings": {"prompt_n": 12, "predicted_ms": 31.5},
    },
    # DeepSeek / vLLM reasoning, an extra field of the delta.
    {**CHUNK, "choices": [{"index": 0, "delta": {"reasoning_content": "think"}}]},
    # Logprobs (a nested optional model) and a service tier.
    {
        **CHUNK,
        "service_tier": "default",
        "choices": [
            {
                "index": 0,
                "delta": {"content": "a"},
                "logprobs": {
                    "content": [{"token": "a", "logprob": -0.5, "bytes": [97], "top_logprobs": []}]
                },
            }
        ],
    },
    # Malformed: wrong types, nulls where values belong, unknown finish reason.
    {**CHUNK, "created": "yesterday", "model": 7},
    {**CHUNK, "choices": None},
    {**CHUNK, "choices": "none"},
    {**CHUNK, "choices": [None, {"index": "0", "delta": {"content": 5}}]},
    {**CHUNK, "choices": [{"index": 0, "delta": None, "finish_reason": "exploded"}]},
    {**CHUNK, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": "1"}]}}]},
    {**CHUNK, "choices": [{"index": 0, "delta": {"tool_calls": "x"}}]},
    {**CHUNK, "choices": [{"index": 0, "delta": {"role": "robot", "refusal": 3}}]},
    {**CHUNK, "usage": {"prompt_tokens": "12", "total_tokens": 12.0}},
    {"choices": [{"delta": {"content": "only this"}}]},
    {},
]

COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-2",
    "object": "chat.completion",
    "created": 1_700_000_000,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "Hello."},
            "logprobs": None,
        }
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
}

COMPLETIONS: list[dict[str, Any]] = [
    COMPLETION,
    {
        **COMPLETION,
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                        },
                        {"id": "call_2", "type": "custom", "custom": {"name": "g", "input": "x"}},
                    ],
                },
            }
        ],
    },
    {
        **COMPLETION,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": "See [1].",
                    "annotations": [
                        {
                            "type": "url_citation",
                            "url_citation": {
                                "start_index": 4,
                                "end_index": 7,
                                "title": "t",
                                "url": "https://example.com",
                            },
                        }
                    ],
                    "reasoning_content": "because",
                },
            }
        ],
        "timings": {"predicted_n": 2},
    },
    {**COMPLETION, "choices": [{"message": {"tool_calls": [{"type": "other", "id": 1}]}}]},
    {**COMPLETION, "choices": [{"message": "text"}], "usage": "lots"},
]


def _shape(value: Any) -> Any:
    """Every class, field, value, fields-set and extra of a constructed value."""
    if isinstance(value, BaseModel):
        return (
            type(value),
            sorted(value.model_fields_set),
            {name: _shape(v) for name, v in value.__dict__.items()},
            {name: _shape(v) for name, v in (value.model_extra or {}).items()},
        )
    if isinstance(value, list):
        return [_shape(v) for v in value]
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    return (type(value), value)


@pytest.mark.parametrize("payload", CHUNKS, ids=[str(i) for i in range(len(CHUNKS))])
def test_a_chunk_is_built_as_the_sdk_builds_it(payload: dict[str, Any]) -> None:
    ours = construct(ChatCompletionChunk, copy.deepcopy(payload))
    sdks = construct_type(type_=ChatCompletionChunk, value=copy.deepcopy(payload))
    assert _shape(ours) == _shape(sdks)


@pytest.mark.parametrize("payload", COMPLETIONS, ids=[str(i) for i in range(len(COMPLETIONS))])
def test_a_completion_is_built_as_the_sdk_builds_it(payload: dict[str, Any]) -> None:
    ours = construct(ChatCompletion, copy.deepcopy(payload))
    sdks = construct_type(type_=ChatCompletion, value=copy.deepcopy(payload))
    assert _shape(ours) == _shape(sdks)


def test_a_default_list_is_a_new_list_each_time() -> None:
    # A mutable default must never be shared between two constructions.
    first = construct(ChatCompletionChunk, {})
    second = construct(ChatCompletionChunk, {})
    assert first.choices is None and second.choices is None  # the SDK's default: no value
    message = construct(ChatCompletion, COMPLETION).choices[0].message
    assert message.content == "Hello." and message.tool_calls is None


async def test_the_client_builds_streamed_chunks_and_completions_the_same_way() -> None:
    """Through the client, on an HTTP exchange: the same objects as the stock SDK's."""
    stream = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in CHUNKS[:8]) + "data: [DONE]\n\n"

    def answer(request: httpx2.Request) -> httpx2.Response:
        if json.loads(request.content).get("stream"):
            return httpx2.Response(200, text=stream, headers={"content-type": "text/event-stream"})
        return httpx2.Response(200, json=COMPLETIONS[1])

    from openai import AsyncOpenAI

    def client(cls: type[AsyncOpenAI]) -> AsyncOpenAI:
        return cls(
            api_key="k",
            base_url="http://upstream.test/v1",
            http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(answer)),
        )

    seen: dict[str, Any] = {}
    for name, cls in (("ours", FastAsyncOpenAI), ("sdk", AsyncOpenAI)):
        async with client(cls) as api:
            completion = await api.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
            chunks = [
                chunk
                async for chunk in await api.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}], stream=True
                )
            ]
            seen[name] = (_shape(completion), [_shape(c) for c in chunks])
    assert len(seen["ours"][1]) == 8
    assert seen["ours"] == seen["sdk"]
