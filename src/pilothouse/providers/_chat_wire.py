"""What :class:`~pilothouse.providers._chat.ChatCompletionsModel` reads off the wire.

Sending, HTTP errors, usage, finish reasons and timestamps, mapped to the
exceptions and values pydantic-ai's ``OpenAIChatModel`` gives for the same
bytes (its ``map_api_errors``, ``map_usage`` and ``CHAT_FINISH_REASON_MAP``,
read through the OpenAI SDK's own error and response objects there).
"""

from __future__ import annotations

__all__ = [
    "FINISH_REASONS",
    "chat_usage",
    "content_text",
    "joined_text",
    "json_object",
    "raise_for_status",
    "sent",
    "status_error",
    "timestamp_of",
    "validated",
]

import json
from collections.abc import Mapping
from datetime import datetime
from functools import cache
from typing import Any, Literal, NotRequired, cast

import httpx2
from pydantic import TypeAdapter, ValidationError
from pydantic_ai import _model_errors
from pydantic_ai._utils import number_to_datetime
from pydantic_ai.exceptions import (
    ModelHTTPError,
    ModelRequestRejectedError,
    UnexpectedModelBehavior,
)
from pydantic_ai.messages import FinishReason
from pydantic_ai.models import (
    _suggest_known_model_id_from_provider_error,  # pyright: ignore[reportPrivateUsage]
)
from pydantic_ai.usage import RequestUsage
from typing_extensions import TypedDict

FINISH_REASONS: Mapping[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_call",
    "content_filter": "content_filter",
    "function_call": "tool_call",
}
"""Chat Completions finish reasons as pydantic-ai names them; any other maps to None."""

_TOKEN_KEYS = frozenset(
    {"prompt_tokens", "completion_tokens", "input_tokens", "output_tokens", "total_tokens"}
)


async def sent(
    client: httpx2.AsyncClient, request: httpx2.Request, model_name: str, *, stream: bool
) -> httpx2.Response:
    """Send ``request``; a failure to get an answer is the error the SDK path raises.

    The OpenAI SDK turns a timeout into ``APITimeoutError`` and any other
    failure of the send into ``APIConnectionError`` (the cause kept), which
    pydantic-ai maps to ``ModelTimeoutError`` and ``ModelConnectionError``:
    the same here, so the runtime's translation and retry see one thing.
    """
    try:
        return await client.send(request, stream=stream)
    except httpx2.TimeoutException as exc:
        raise _model_errors.connection_error(
            model_name, "Request timed out.", exc, timeout=True
        ) from exc
    except Exception as exc:
        raise _model_errors.connection_error(
            model_name, "Connection error.", exc, timeout=False
        ) from exc


async def raise_for_status(response: httpx2.Response, model_name: str, namespace: str) -> None:
    """Raise the ``ModelHTTPError`` pydantic-ai raises for an error status (closing the response).

    Args:
        response: the answer, whole or streamed.
        model_name: names the model in the error.
        namespace: the provider's model id namespace (its name).
    """
    if response.status_code < 400:
        return
    try:
        await response.aread()
    finally:
        await response.aclose()
    raise status_error(response, model_name, namespace)


def status_error(response: httpx2.Response, model_name: str, namespace: str) -> ModelHTTPError:
    """The error for an answer with an error status, read as the OpenAI SDK reads it."""
    text = response.text.strip()
    body: object = text
    try:
        body = json.loads(text)
    except ValueError:
        message = text or f"Error code: {response.status_code}"
    else:
        message = f"Error code: {response.status_code} - {body}"
    # The SDK keeps the inner error object as the exception's body.
    outer = json_object(body)
    if outer is not None:
        body = outer.get("error", outer)
    fields = json_object(body) or {}
    code, kind = fields.get("code"), fields.get("type")
    category = _model_errors.openai_compatible_category(response.status_code, code, kind, message)
    if namespace == "zai":
        category = _model_errors.zai_code_category(code) or category
    elif namespace == "moonshotai":
        category = _model_errors.moonshot_type_category(kind) or category
    if response.status_code == 403 and _flags_input(fields.get("metadata")):
        category = ModelRequestRejectedError
    suggested = None
    if code == "model_not_found":
        suggested = _suggest_known_model_id_from_provider_error(namespace, model_name)
    return ModelHTTPError.for_category(
        category,
        status_code=response.status_code,
        model_name=model_name,
        body=body,
        headers=dict(response.headers),
        suggested_model_id=suggested,
        provider_error_code=code,
        provider_error_type=kind,
    )


def _flags_input(metadata: object) -> bool:
    # OpenRouter answers flagged input with a 403 carrying its moderation result.
    return isinstance(metadata, dict) and ("flagged_input" in metadata or "reasons" in metadata)


def json_object(value: object) -> dict[str, Any] | None:
    """``value`` as a JSON object, or None when it is anything else."""
    return cast("dict[str, Any]", value) if isinstance(value, dict) else None


class _Function(TypedDict):
    name: str
    arguments: str


class _ToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: _Function


class _Message(TypedDict):
    role: Literal["assistant"]
    content: NotRequired[str | list[Any] | None]
    refusal: NotRequired[str | None]
    tool_calls: NotRequired[list[_ToolCall] | None]
    annotations: NotRequired[list[Any] | None]
    audio: NotRequired[dict[str, Any] | None]
    function_call: NotRequired[dict[str, Any] | None]


class _Choice(TypedDict):
    index: int
    message: _Message
    finish_reason: NotRequired[str | None]
    logprobs: NotRequired[dict[str, Any] | None]


class _CompletionDetails(TypedDict, total=False):
    accepted_prediction_tokens: int | None
    audio_tokens: int | None
    reasoning_tokens: int | None
    rejected_prediction_tokens: int | None


class _PromptDetails(TypedDict, total=False):
    audio_tokens: int | None
    cached_tokens: int | None


class _Usage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    completion_tokens_details: NotRequired[_CompletionDetails | None]
    prompt_tokens_details: NotRequired[_PromptDetails | None]


class ChatCompletion(TypedDict):
    # Named as the SDK's model is: validation errors name it.
    id: str
    object: Literal["chat.completion"]
    created: int | None
    model: str
    choices: list[_Choice]
    usage: NotRequired[_Usage | None]
    service_tier: NotRequired[str | None]
    system_fingerprint: NotRequired[str | None]
    metadata: NotRequired[dict[str, Any] | None]


@cache
def _completion_adapter() -> TypeAdapter[ChatCompletion]:
    # Built on the first answer, not at import.
    return TypeAdapter(ChatCompletion)


def validated(data: object, system: str) -> dict[str, Any]:
    """Check a chat completion as pydantic-ai validates it (``LenientChatCompletion``).

    The fields the OpenAI SDK's model declares are checked for presence and
    type as pydantic checks them (a usage count that is not a number, a
    missing ``id``, a choice without an assistant message are refused); a
    missing ``created`` or finish reason and list ``content`` pass, as they
    do there. Other fields pass unchecked.

    Args:
        data: the decoded body.
        system: the provider's name, for the message.

    Returns:
        The same object.

    Raises:
        UnexpectedModelBehavior: the body is not a valid chat completion.
    """
    invalid = f"Invalid response from {system} chat completions endpoint"
    if not isinstance(data, dict):
        raise UnexpectedModelBehavior(f"{invalid}, expected JSON data")
    try:
        _completion_adapter().validate_python(data)
    except ValidationError as exc:
        raise UnexpectedModelBehavior(f"{invalid}: {exc}") from exc
    return cast("dict[str, Any]", data)


def content_text(content: str | list[Any] | None) -> str:
    """A validated message's ``content`` as text (a list of parts joined, as pydantic-ai does)."""
    if isinstance(content, list):
        return joined_text(content)
    return content or ""


def joined_text(parts: list[Any]) -> str:
    """The text of a list of content parts (strings and ``{"type": "text"}`` parts)."""
    texts: list[str] = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif (item := json_object(part)) is not None:
            text = item.get("text")
            if item.get("type") == "text" and isinstance(text, str):
                texts.append(text)
    return "".join(texts)


def timestamp_of(created: object) -> datetime | None:
    """The provider's ``created`` as a datetime; none for a missing or zero one."""
    if isinstance(created, int | float) and not isinstance(created, bool) and created:
        return number_to_datetime(created)
    return None


def _without_none(value: object) -> Any:
    if (mapping := json_object(value)) is not None:
        return {k: _without_none(v) for k, v in mapping.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in cast("list[Any]", value)]
    return value


def chat_usage(usage: object, provider: str, provider_url: str, model: str) -> RequestUsage:
    """The ``RequestUsage`` pydantic-ai maps from a completion's (or chunk's) ``usage``.

    Args:
        usage: the ``usage`` object as received, or None.
        provider: the provider's name, for the price lookup.
        provider_url: the provider's base URL, for the price lookup.
        model: the model's name, for the price lookup.

    Returns:
        The usage, with every other integer the server reported in ``details``.
    """
    if json_object(usage) is None:
        return RequestUsage(unmeasured_requests=1)
    data: dict[str, Any] = _without_none(usage)
    details = {k: v for k, v in data.items() if k not in _TOKEN_KEYS and isinstance(v, int)}
    completion_details = json_object(data.get("completion_tokens_details"))
    if completion_details is not None:
        details.update(completion_details)
    request_usage = RequestUsage.extract(
        {"model": model, "usage": data},
        provider=provider,
        provider_url=provider_url,
        provider_fallback="openai",
        api_flavor="chat",
        details=details,
    )
    prompt_details = json_object(data.get("prompt_tokens_details"))
    if prompt_details is not None:
        cache_write = prompt_details.get("cache_write_tokens")
        if isinstance(cache_write, int):
            request_usage.cache_write_tokens = cache_write
    return request_usage
