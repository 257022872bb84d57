"""A streamed Chat Completions answer, read from server-sent events without the OpenAI SDK.

:class:`ChatCompletionsStream` gives the events and the final
``ModelResponse`` pydantic-ai's ``OpenAIStreamedResponse`` gives for the
same stream (its text, thinking and tool-call deltas through the same parts
manager, its usage, finish reason and provider details), reading each
chunk's JSON as it is instead of building the SDK's objects from it.
"""

from __future__ import annotations

__all__ = ["ChatCompletionsStream", "first_chunk"]

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, cast

import httpx2
from pydantic_ai import _model_errors
from pydantic_ai._utils import now_utc
from pydantic_ai.exceptions import ModelAPIError, UnexpectedModelBehavior
from pydantic_ai.messages import ModelResponseStreamEvent, PartStartEvent, TextPart, ThinkingPart
from pydantic_ai.models import StreamedResponse
from pydantic_ai.profiles import DEFAULT_THINKING_TAGS, ModelProfile

from pilothouse.providers._chat_wire import (
    FINISH_REASONS,
    chat_usage,
    joined_text,
    json_object,
    timestamp_of,
)

Chunk = dict[str, Any]


async def _events(response: httpx2.Response, model_name: list[str]) -> AsyncIterator[Chunk]:
    """The stream's chunks, decoded; an error object in the stream raises as the SDK path does.

    ``model_name`` holds the name errors give: the request's until the first
    chunk names the served model (as pydantic-ai names it).
    """
    data: list[str] = []
    lines = response.aiter_lines()
    async for line in lines:
        if line:
            if line.startswith(":"):
                continue  # an SSE comment (a keep-alive)
            name, _, value = line.partition(":")
            if name == "data":
                data.append(value[1:] if value.startswith(" ") else value)
            continue
        if not data:
            continue
        text = "\n".join(data)
        data.clear()
        if text.startswith("[DONE]"):
            # Read to the end, as the OpenAI SDK does: the wire layer
            # (providers/_wire.py) checks the stream as a whole there.
            async for _ in lines:
                pass
            return
        yield _decoded(text, model_name[0])


def _decoded(text: str, model_name: str) -> Chunk:
    try:
        chunk = json.loads(text)
    except ValueError as exc:
        raise ModelAPIError(
            model_name=model_name, message=f"Failed to decode response as JSON: {exc}"
        ) from exc
    if not isinstance(chunk, dict):
        raise UnexpectedModelBehavior(f"a streamed chunk is not a JSON object: {text[:200]}")
    chunk = cast("Chunk", chunk)
    error: object = chunk.get("error")
    if error:
        # The OpenAI SDK raises APIError for it, which pydantic-ai maps so.
        fields = json_object(error)
        message = fields.get("message") if fields is not None else None
        if not isinstance(message, str) or not message:
            message = "An error occurred during streaming"
        raise _model_errors.stream_error(model_name, message, error)
    return chunk


async def first_chunk(
    response: httpx2.Response, model_name: str
) -> tuple[AsyncIterator[Chunk], Chunk]:
    """Read the stream's first chunk; return the rest (starting with it again) and it.

    Raises:
        UnexpectedModelBehavior: the stream ended before its first chunk.
    """
    names = [model_name]
    events = _events(response, names)
    try:
        first = await anext(events)
    except StopAsyncIteration:
        raise UnexpectedModelBehavior(
            "Streamed response ended without content or tool calls"
        ) from None
    names[0] = str(first.get("model") or model_name)
    return _again(first, events), first


async def _again(first: Chunk, rest: AsyncIterator[Chunk]) -> AsyncIterator[Chunk]:
    yield first
    async for chunk in rest:
        yield chunk


@dataclass
class ChatCompletionsStream(StreamedResponse):
    """A streamed Chat Completions answer (``OpenAIStreamedResponse``'s events and result)."""

    _model_name: str
    _model_profile: ModelProfile
    _chunks: AsyncIterator[Chunk]
    _response: httpx2.Response
    _provider_name: str
    _provider_url: str
    _provider_timestamp: datetime | None = None
    _timestamp: datetime = field(default_factory=now_utc)
    _usage_received: bool | None = field(default=False, init=False)
    _content_generation: int = field(default=0, init=False)
    _reasoning_generation: int = field(default=0, init=False)
    _held_text_whitespace: str = field(default="", init=False)
    _awaiting_text_after_reasoning: bool = field(default=False, init=False)
    _has_refusal: bool = field(default=False, init=False)
    _refusal_text: str = field(default="", init=False)
    _has_finish_reason: bool = field(default=False, init=False)

    async def close_stream(self) -> None:
        """Close the HTTP response (a stream abandoned early)."""
        await self._response.aclose()

    async def _get_event_iterator(self) -> AsyncIterator[ModelResponseStreamEvent]:
        async for chunk in self._chunks:
            self._read_header(chunk)
            choices = chunk.get("choices")
            if not choices or not isinstance(choices, list):
                continue  # the final usage-only chunk
            choice = json_object(cast("list[Any]", choices)[0])
            if choice is None:
                continue
            for event in self._choice_events(choice):
                yield event
        self._finish()

    def _read_header(self, chunk: Chunk) -> None:
        """What a chunk says besides its choice: time, usage, ids, model, tier."""
        if self._provider_timestamp is None:
            created = timestamp_of(chunk.get("created"))
            if created is not None:
                self._provider_timestamp = created
                self._detail("timestamp", created)
        usage = chunk.get("usage")
        if usage is not None:
            # pydantic-ai adds an empty usage for each chunk without one;
            # adding nothing is the same sum.
            mapped = chat_usage(usage, self._provider_name, self._provider_url, self.model_name)
            self._add_usage(mapped, reported=True)
        if chunk.get("id"):
            self.provider_response_id = chunk["id"]
        if chunk.get("model"):
            self._model_name = chunk["model"]
        for name in ("moderation", "service_tier"):
            if chunk.get(name):
                self._detail(name, chunk[name])

    def _choice_events(self, choice: Chunk) -> Iterator[ModelResponseStreamEvent]:
        raw_finish = choice.get("finish_reason")
        self._has_finish_reason = self._has_finish_reason or bool(raw_finish)
        delta = json_object(choice.get("delta"))
        if delta is None:
            return
        refusal = delta.get("refusal")
        if refusal:
            self._has_refusal = True
            self.finish_reason = "content_filter"
            self._refusal_text += str(refusal)
            return
        if raw_finish and not self._has_refusal:
            self.finish_reason = FINISH_REASONS.get(raw_finish)
            self._detail("finish_reason", raw_finish)
        yield from self._thinking_delta(delta)
        yield from self._text_delta(delta)
        yield from self._tool_call_delta(delta)

    def _finish(self) -> None:
        if self._refusal_text:
            self._detail("refusal", self._refusal_text)
        if (
            self._model_profile.get("openai_chat_streaming_requires_finish_reason", False)
            and not self._has_finish_reason
            and not self.cancelled
        ):
            raise ModelAPIError(
                model_name=self.model_name,
                message="Streamed response ended without a `finish_reason`",
            )
        if not self._has_finish_reason and not self._has_refusal and not self.cancelled:
            # Some OpenAI-compatible servers never send a finish reason.
            self.finish_reason = "stop"

    def _detail(self, name: str, value: object) -> None:
        self.provider_details = {**(self.provider_details or {}), name: value}

    def _advance_part_boundary(self, source: Literal["reasoning", "content", "tool"]) -> None:
        if source != "reasoning":
            self._reasoning_generation += 1
            self._awaiting_text_after_reasoning = False
        # Keep the content key while it names a ThinkingPart so closing tags keep their context.
        if source != "content" and isinstance(
            self._parts_manager.get_part_by_vendor_id(("content", self._content_generation)),
            TextPart,
        ):
            self._content_generation += 1
            self._awaiting_text_after_reasoning = source == "reasoning"

    def _thinking_delta(self, delta: dict[str, Any]) -> Iterator[ModelResponseStreamEvent]:
        custom = self._model_profile.get("openai_chat_thinking_field", None)
        for name in (custom, "reasoning", "reasoning_content"):
            if not name:
                continue
            reasoning = delta.get(name)
            if not reasoning or not isinstance(reasoning, str):
                continue
            for event in self._parts_manager.handle_thinking_delta(
                vendor_part_id=("reasoning", name, self._reasoning_generation),
                id=name,
                content=reasoning,
                provider_name=self.provider_name,
            ):
                if isinstance(event, PartStartEvent):
                    self._advance_part_boundary("reasoning")
                yield event
            break

    def _text_delta(self, delta: dict[str, Any]) -> Iterator[ModelResponseStreamEvent]:
        content = delta.get("content")
        if isinstance(content, list):
            content = joined_text(cast("list[Any]", content))
        if not isinstance(content, str) or not content:
            return
        emitted = False
        for event in self._parts_manager.handle_text_delta(
            vendor_part_id=("content", self._content_generation),
            content=content,
            thinking_tags=self._model_profile.get("thinking_tags", DEFAULT_THINKING_TAGS),
            ignore_leading_whitespace=self._model_profile.get(
                "ignore_streamed_leading_whitespace", False
            ),
        ):
            emitted = True
            if isinstance(event, PartStartEvent):
                self._advance_part_boundary("content")
                if isinstance(event.part, ThinkingPart):
                    event.part.id = "content"
                    event.part.provider_name = self.provider_name
                elif isinstance(event.part, TextPart) and self._held_text_whitespace:
                    event.part.content = self._held_text_whitespace + event.part.content
                    self._held_text_whitespace = ""
            yield event
        if not emitted and content.isspace() and self._awaiting_text_after_reasoning:
            # As pydantic-ai: whitespace dropped right after reasoning that
            # interrupted a text part is held for the next text part.
            self._held_text_whitespace += content

    def _tool_call_delta(self, delta: dict[str, Any]) -> Iterator[ModelResponseStreamEvent]:
        calls = delta.get("tool_calls")
        if not isinstance(calls, list):
            return
        for item in cast("list[Any]", calls):
            call = json_object(item)
            if call is None:
                continue
            function = json_object(call.get("function"))
            extra = call.get("extra_content")
            details = {"extra_content": extra} if extra else None
            for event in self._parts_manager.handle_tool_call_delta_events(
                vendor_part_id=call.get("index"),
                tool_name=function.get("name") if function is not None else None,
                args=function.get("arguments") if function is not None else None,
                tool_call_id=call.get("id"),
                provider_name=self.provider_name if details else None,
                provider_details=details,
            ):
                if isinstance(event, PartStartEvent):
                    self._advance_part_boundary("tool")
                yield event

    @property
    def model_name(self) -> str:
        """The model's name, as the stream names it."""
        return self._model_name

    @property
    def provider_name(self) -> str:
        """The provider's name."""
        return self._provider_name

    @property
    def provider_url(self) -> str:
        """The provider's base URL."""
        return self._provider_url

    @property
    def timestamp(self) -> datetime:
        """When the answer started."""
        return self._timestamp
