"""OpenAI SDK clients whose chat completions skip the SDK's body transform and type walk.

``AsyncCompletions.create`` passes every request body through
``async_maybe_transform``: a walk of the body against the parameters'
TypedDict annotations that renames aliased keys and formats dates and files.
Chat-completion parameters have neither aliases nor formats, so for a body
of plain JSON values the walk only drops omitted arguments; but it inspects
``typing`` annotations at every node, which costs about 1.1 ms of CPU for a
plain request and 4.5 ms for one carrying 20 tool schemas (measured here,
see ``docs/benchmarks.md``): more than the rest of pydantic-ai's model layer.

These clients send such a body as it is, through the SDK's own documented
``post``, with the same request options ``create`` builds. A body holding
anything but plain JSON values (a pydantic model, a tuple, a file) takes the
SDK's own path. ``tests/providers/test_openai_client.py`` checks that both
paths send the same HTTP request (URL, headers, JSON body; only the order of
the body's keys differs), so an SDK release that changes the glue fails the
tests instead of changing the wire.

Responses and streamed chunks of chat completions are built by
:func:`~pilothouse.providers._openai_construct.construct`: the SDK's own
unchecked construction with its per-class type walk done once (about 150 µs
of CPU saved per streamed chunk).
"""

from __future__ import annotations

__all__ = ["FastAsyncAzureOpenAI", "FastAsyncOpenAI", "plain_json"]

import inspect
from functools import cache
from typing import Any, cast

from httpx2 import URL
from openai import AsyncAzureOpenAI, AsyncOpenAI, AsyncStream
from openai._base_client import make_request_options
from openai._compat import PYDANTIC_V1, cached_property
from openai._types import NotGiven, Omit
from openai.resources.chat import AsyncChat
from openai.resources.chat.completions import AsyncCompletions
from openai.resources.chat.completions.completions import validate_response_format
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from pilothouse.providers._openai_construct import construct
from pilothouse.providers._urls import KeptMerges

_REQUEST_OPTIONS = ("extra_headers", "extra_query", "extra_body", "timeout")
"""Arguments of ``create`` that are request options, not body fields."""

_SCALARS = (str, int, float, bool, type(None))

_CONSTRUCTED: tuple[type, ...] = () if PYDANTIC_V1 else (ChatCompletionChunk, ChatCompletion)
"""Response models built without the SDK's per-call type walk (pydantic 2 only)."""


def plain_json(value: object) -> bool:
    """Tell whether ``value`` is made only of dicts, lists, strings, numbers, booleans and None.

    For such values the SDK's transform of chat-completion parameters is the
    identity, so skipping it changes nothing that is sent.
    """
    kind = type(value)
    if kind in _SCALARS:
        return True
    if kind is dict:
        return all(
            type(k) is str and plain_json(v) for k, v in cast("dict[Any, Any]", value).items()
        )
    if kind is list:
        return all(plain_json(v) for v in cast("list[Any]", value))
    return False


@cache
def _security() -> dict[str, Any]:
    """The ``security`` request option ``create`` passes, on SDK releases that have it."""
    if "security" in inspect.signature(make_request_options).parameters:
        return {"security": {"bearer_auth": True}}
    return {}


class _FastCompletions(AsyncCompletions):
    """Chat completions that post a plain-JSON body without the SDK's transform."""

    async def create(self, **params: Any) -> Any:
        """Create a chat completion: the SDK's ``create``, minus the body transform."""
        options = {name: params.pop(name) for name in _REQUEST_OPTIONS if name in params}
        body = {
            key: value for key, value in params.items() if not isinstance(value, (NotGiven, Omit))
        }
        if not plain_json(body):
            sdk_create: Any = super().create
            return await sdk_create(**params, **options)
        validate_response_format(params.get("response_format"))
        stream = bool(body.get("stream"))
        return await self._post(
            "/chat/completions",
            body=body,
            options=make_request_options(**options, **_security()),
            cast_to=ChatCompletion,
            stream=stream,
            stream_cls=AsyncStream[ChatCompletionChunk],
        )


class _FastChat(AsyncChat):
    @cached_property
    def completions(self) -> AsyncCompletions:
        """Chat completions without the body transform."""
        return _FastCompletions(self._client)


def _constructs(client: AsyncOpenAI, data: object, cast_to: Any) -> bool:
    """Whether :func:`construct` builds this response (a chat completion or chunk, unchecked)."""
    return (
        cast_to in _CONSTRUCTED and type(data) is dict and not client._strict_response_validation  # pyright: ignore[reportPrivateUsage]
    )


class FastAsyncOpenAI(AsyncOpenAI):
    """``AsyncOpenAI`` whose ``chat.completions.create`` skips the body transform.

    It also keeps the merge of each request path with its ``base_url``
    (``providers/_urls.py``): the same URL, parsed once.
    """

    _prepared: KeptMerges[str, URL] | None = None
    """Each path's merged URL, with the ``base_url`` it was merged with."""

    def _prepare_url(self, url: str) -> URL:
        prepared = self._prepared
        if prepared is None:
            prepared = self._prepared = KeptMerges()
        return prepared.merged(url, self.base_url, super()._prepare_url)

    def _process_response_data(self, *, data: object, cast_to: Any, response: Any) -> Any:
        if _constructs(self, data, cast_to):
            return construct(cast_to, cast("dict[str, Any]", data))
        return super()._process_response_data(data=data, cast_to=cast_to, response=response)

    @property
    def user_agent(self) -> str:
        """The stock client's user agent: the SDK names the client class in it."""
        return f"AsyncOpenAI/Python {self._version}"

    @cached_property
    def chat(self) -> AsyncChat:
        """Chat resources: completions without the body transform."""
        return _FastChat(self)


class FastAsyncAzureOpenAI(AsyncAzureOpenAI):
    """``AsyncAzureOpenAI`` whose ``chat.completions.create`` skips the body transform."""

    def _process_response_data(self, *, data: object, cast_to: Any, response: Any) -> Any:
        if _constructs(self, data, cast_to):
            return construct(cast_to, cast("dict[str, Any]", data))
        return super()._process_response_data(data=data, cast_to=cast_to, response=response)

    @property
    def user_agent(self) -> str:
        """The stock client's user agent: the SDK names the client class in it."""
        return f"AsyncAzureOpenAI/Python {self._version}"

    @cached_property
    def chat(self) -> AsyncChat:
        """Chat resources: completions without the body transform."""
        return _FastChat(self)
