"""The transform-free OpenAI clients send what the SDK's own clients send."""

from __future__ import annotations

import json
import typing
from collections.abc import Callable
from typing import Any

import httpx2
import pydantic
import pytest
from openai import AsyncAzureOpenAI, AsyncOpenAI
from openai import _utils as openai_utils
from openai._utils import PropertyInfo
from openai.resources.chat.completions import completions as completions_module
from openai.types.chat import completion_create_params
from provider_helpers import chat_completion
from pydantic_ai.messages import (
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition

from pilothouse.providers._openai_client import (
    FastAsyncAzureOpenAI,
    FastAsyncOpenAI,
    plain_json,
)

pytestmark = pytest.mark.anyio

_ANSWER = chat_completion("hi", "m")
_STREAM = (
    b'data: {"id":"c1","object":"chat.completion.chunk","created":0,"model":"m",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}\n\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","created":0,"model":"m",'
    b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


class _Recorder:
    """An HTTP transport that records each request and answers like the API."""

    def __init__(self) -> None:
        self.requests: list[httpx2.Request] = []

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        if json.loads(request.content).get("stream"):
            return httpx2.Response(
                200, content=_STREAM, headers={"content-type": "text/event-stream"}
            )
        return httpx2.Response(200, json=_ANSWER)

    def wire(self) -> list[tuple[str, str, list[tuple[str, str]], Any]]:
        """What went over the wire, minus the headers that differ per client instance.

        The body is compared as JSON: the SDK writes ``model``, ``stream``
        and ``messages`` first, the fast path in the caller's order.
        """
        varying = {"x-stainless-retry-count", "x-stainless-read-timeout"}
        return [
            (
                r.method,
                str(r.url),
                sorted((k, v) for k, v in r.headers.items() if k.lower() not in varying),
                json.loads(r.content),
            )
            for r in self.requests
        ]


def _clients(
    stock: Callable[..., Any], fast: Callable[..., Any], **kwargs: Any
) -> tuple[Any, Any, _Recorder, _Recorder]:
    seen_stock, seen_fast = _Recorder(), _Recorder()
    a = stock(
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(seen_stock.handle)),
        max_retries=0,
        **kwargs,
    )
    b = fast(
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(seen_fast.handle)),
        max_retries=0,
        **kwargs,
    )
    return a, b, seen_stock, seen_fast


_TOOLS = [
    ToolDefinition(
        name=f"tool_{i:02d}",
        description=f"Tool number {i}",
        parameters_json_schema={
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    )
    for i in range(20)
]

_CONVERSATION: list[ModelMessage] = [
    ModelRequest(
        parts=[
            SystemPromptPart("You are terse."),
            UserPromptPart(["What is in this picture?", ImageUrl("https://example.test/a.png")]),
        ]
    ),
    ModelResponse(
        parts=[TextPart("Let me look."), ToolCallPart("tool_00", {"city": "Graz"}, "c1")]
    ),
    ModelRequest(parts=[ToolReturnPart("tool_00", {"rain": True}, "c1")]),
]

_CASES: dict[str, tuple[list[ModelMessage], ModelSettings, ModelRequestParameters]] = {
    "plain": (
        [ModelRequest(parts=[SystemPromptPart("Be brief."), UserPromptPart("Hello")])],
        ModelSettings(max_tokens=256),
        ModelRequestParameters(),
    ),
    "tools and history": (
        _CONVERSATION,
        ModelSettings(temperature=0.2, extra_headers={"x-trace": "t1"}, extra_body={"seed": 7}),
        ModelRequestParameters(function_tools=_TOOLS),
    ),
}


@pytest.mark.parametrize("case", sorted(_CASES))
@pytest.mark.parametrize("stream", [False, True], ids=["request", "stream"])
async def test_pydantic_ai_requests_are_identical(
    case: str, stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    stock, fast, seen_stock, seen_fast = _clients(
        AsyncOpenAI, FastAsyncOpenAI, api_key="sk-test", base_url="http://upstream.test/v1"
    )
    messages, settings, params = _CASES[case]
    answers: list[str] = []
    transformed: list[object] = []
    # The SDK's own function, by its public home; the patch replaces the name
    # the completions module calls.
    sdk_transform = openai_utils.async_maybe_transform

    async def counting(data: object, expected_type: object) -> object:
        transformed.append(data)
        return await sdk_transform(data, expected_type)

    monkeypatch.setattr(completions_module, "async_maybe_transform", counting)
    for client in (stock, fast):
        model = OpenAIChatModel("gpt-test", provider=OpenAIProvider(openai_client=client))
        if stream:
            async with model.request_stream(messages, settings, params) as response:
                async for _ in response:
                    pass
            answers.append(str(response.get().parts))
        else:
            answers.append(str((await model.request(messages, settings, params)).parts))
    assert answers[0] == answers[1]
    assert answers[0].count("hi") == 1
    assert len(transformed) == 1, "the fast client must not call the SDK's transform"
    assert len(seen_fast.requests) == 1
    assert seen_fast.wire() == seen_stock.wire()


async def test_azure_requests_are_identical() -> None:
    stock, fast, seen_stock, seen_fast = _clients(
        AsyncAzureOpenAI,
        FastAsyncAzureOpenAI,
        api_key="az-test",
        azure_endpoint="https://res.openai.azure.test",
        azure_deployment="dep",
        api_version="2024-10-21",
    )
    for client in (stock, fast):
        await client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "Hi"}], max_tokens=5
        )
    assert "/deployments/dep/chat/completions" in str(seen_fast.requests[0].url)
    assert seen_fast.wire() == seen_stock.wire()


async def test_a_body_that_is_not_plain_json_takes_the_sdks_transform() -> None:
    class Format(pydantic.BaseModel):
        type: str = "json_object"

    stock, fast, seen_stock, seen_fast = _clients(
        AsyncOpenAI, FastAsyncOpenAI, api_key="sk-test", base_url="http://upstream.test/v1"
    )
    for client in (stock, fast):
        await client.chat.completions.create(
            model="gpt-test",
            # A tuple and a pydantic model: the SDK turns them into a list and a dict.
            messages=({"role": "user", "content": "Hi"},),
            response_format=Format(type="json_object"),
        )
    assert json.loads(seen_fast.requests[0].content)["response_format"] == {"type": "json_object"}
    assert seen_fast.wire() == seen_stock.wire()


async def test_a_pydantic_class_as_response_format_is_refused_like_the_sdk() -> None:
    class Answer(pydantic.BaseModel):
        text: str

    fast = FastAsyncOpenAI(api_key="sk-test", base_url="http://upstream.test/v1")
    with pytest.raises(TypeError, match="parse"):
        await fast.chat.completions.create(
            model="gpt-test",
            messages=[{"role": "user", "content": "Hi"}],
            response_format=Answer,  # type: ignore[arg-type]
        )


def test_plain_json() -> None:
    assert plain_json({"a": [1, 2.5, "x", None, True, {"b": []}]})
    assert not plain_json({"a": (1, 2)})
    assert not plain_json({1: "non-string key"})
    assert not plain_json({"a": pydantic.create_model("Format", type=(str, "x"))()})


def _transforming(annotation: Any, seen: set[int]) -> list[str]:
    """Aliases and formats the SDK's transform would apply anywhere under ``annotation``."""
    if id(annotation) in seen:
        return []
    seen.add(id(annotation))
    found: list[str] = []
    for meta in getattr(annotation, "__metadata__", ()):
        if isinstance(meta, PropertyInfo) and (meta.alias or meta.format):
            found.append(repr(meta))
    if typing.is_typeddict(annotation):
        for inner in typing.get_type_hints(annotation, include_extras=True).values():
            found += _transforming(inner, seen)
    for inner in typing.get_args(annotation):
        found += _transforming(inner, seen)
    return found


def test_chat_completion_parameters_have_no_alias_or_format() -> None:
    # The premise of the fast path: with no alias or format anywhere in the
    # parameters, the SDK's transform of a plain-JSON body is the identity.
    for params in (
        completion_create_params.CompletionCreateParamsNonStreaming,
        completion_create_params.CompletionCreateParamsStreaming,
    ):
        assert _transforming(params, set()) == []
