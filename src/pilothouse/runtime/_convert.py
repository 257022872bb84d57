"""Conversions between the store's records and pydantic-ai's message types.

The model layer speaks pydantic-ai messages; the store keeps its own
immutable records. This module is the one place that maps between them, and
the one place that reads a model response into what a turn records.
"""

from __future__ import annotations

__all__ = [
    "OUTPUT_TOOL",
    "ParsedResponse",
    "attachment_content",
    "build_messages",
    "history_messages",
    "estimate_usage",
    "finish_reason_of",
    "parse_json_output",
    "parse_response",
]

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic_ai.messages import (
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserContent,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from pilothouse.catalog._enums import FinishReason, MessageRole
from pilothouse.memory import MESSAGE_OVERHEAD_TOKENS, MemoryMessage, TokenCounter
from pilothouse.store import NewAttachment

OUTPUT_TOOL = "final_result"
"""Name of the tool a function-calling model answers structured output with."""

_FINISH = {
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
    "tool_call": FinishReason.TOOL_CALLS,
    "error": FinishReason.OTHER,
}


def attachment_content(attachment: NewAttachment) -> UserContent:
    """Return the pydantic-ai content for one attachment."""
    if attachment.content is not None:
        return BinaryContent(data=attachment.content, media_type=attachment.media_type)
    url = attachment.url or ""
    if attachment.media_type.startswith("image/"):
        return ImageUrl(url=url, media_type=attachment.media_type)
    return DocumentUrl(url=url, media_type=attachment.media_type)


def _history_message(message: MemoryMessage) -> ModelMessage | None:
    if message.role is MessageRole.USER:
        return ModelRequest(parts=[UserPromptPart(message.content)])
    if message.role is MessageRole.QUESTION and message.tool_call_id:
        # The question is recorded for people (the UI, the audit); the model
        # asked it as its call's arguments. Sent again as its text, it stood
        # between the call and its result: a small model repeated it as its
        # answer, and OpenAI refuses a tool result that does not follow its call.
        return None
    if message.role in (MessageRole.ASSISTANT, MessageRole.QUESTION):
        parts: list[Any] = []
        if message.content:
            parts.append(TextPart(message.content))
        data = message.data or {}
        for call in data.get("tool_calls", ()):
            parts.append(
                ToolCallPart(
                    call["name"], dict(call.get("arguments") or {}), tool_call_id=call["id"]
                )
            )
        return ModelResponse(parts=parts) if parts else None
    if message.role is MessageRole.TOOL:
        data = message.data or {}
        return ModelRequest(
            parts=[
                ToolReturnPart(
                    tool_name=str(data.get("tool_name", "tool")),
                    content=message.content,
                    tool_call_id=message.tool_call_id or "",
                )
            ]
        )
    return None


def build_messages(
    system_prompt: str,
    history: Sequence[MemoryMessage],
    user_text: str,
    attachments: Sequence[NewAttachment] = (),
) -> list[ModelMessage]:
    """Return the request messages: system prompt, kept history, new user message."""
    messages: list[ModelMessage] = []
    for item in history:
        converted = _history_message(item)
        if converted is not None:
            messages.append(converted)
    content: str | list[UserContent] = user_text
    if attachments:
        content = [user_text, *(attachment_content(a) for a in attachments)]
    if content or not history or history[-1].role is not MessageRole.TOOL:
        messages.append(ModelRequest(parts=[UserPromptPart(content)]))
    # else: a continuation from tool results the caller sent (an OpenAI
    # client running its own tools): the request ends with those results, as
    # the provider expects, and no empty user message follows them.
    first = messages[0]
    system = SystemPromptPart(system_prompt)
    if isinstance(first, ModelRequest):
        head: list[ModelRequestPart] = [system, *first.parts]
        messages[0] = ModelRequest(parts=head)
    else:
        messages.insert(0, ModelRequest(parts=[system]))
    return messages


def history_messages(system_prompt: str, history: Sequence[MemoryMessage]) -> list[ModelMessage]:
    """Return the request messages for a resumed turn: system prompt and kept history."""
    messages: list[ModelMessage] = [ModelRequest(parts=[SystemPromptPart(system_prompt)])]
    for item in history:
        converted = _history_message(item)
        if converted is not None:
            messages.append(converted)
    return messages


@dataclass
class ParsedResponse:
    """What a model response means for the turn."""

    text: str
    thinking: str
    tool_calls: list[ToolCallPart] = field(default_factory=lambda: [])
    output_call: ToolCallPart | None = None


def parse_response(response: ModelResponse) -> ParsedResponse:
    """Split a response into text, reasoning, tool calls and the output-tool call."""
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[ToolCallPart] = []
    output_call: ToolCallPart | None = None
    for part in response.parts:
        if isinstance(part, TextPart):
            texts.append(part.content)
        elif isinstance(part, ThinkingPart):
            thinking.append(part.content)
        elif isinstance(part, ToolCallPart):
            if part.tool_name == OUTPUT_TOOL and output_call is None:
                output_call = part
            else:
                calls.append(part)
    return ParsedResponse("".join(texts), "\n".join(thinking), calls, output_call)


def finish_reason_of(response: ModelResponse, parsed: ParsedResponse) -> FinishReason:
    """Map the provider's finish reason to the reference code."""
    reason = response.finish_reason
    if parsed.output_call is not None and not parsed.tool_calls and reason == "tool_call":
        # The answer came through the output tool (the function-calling route
        # of structured output): the model finished its answer, as seed 000
        # records it, rather than asking for a tool.
        return FinishReason.STOP
    if reason is not None:
        return _FINISH.get(reason, FinishReason.OTHER)
    return FinishReason.TOOL_CALLS if parsed.tool_calls else FinishReason.STOP


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def parse_json_output(parsed: ParsedResponse, wrapped_list: bool) -> tuple[Any, str | None]:
    """Return the structured answer and an error, when it is not JSON at all.

    Args:
        parsed: the parsed response.
        wrapped_list: the output tool wraps a list answer as ``{"items": [...]}``.
    """
    if parsed.output_call is not None:
        arguments = parsed.output_call.args_as_dict()
        if wrapped_list:
            return arguments.get("items"), None
        return arguments, None
    text = parsed.text.strip()
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    value, problem = _loads_lenient(text)
    if problem is None and wrapped_list:
        return _unwrap_items(value), None
    return value, problem


def _unwrap_items(value: Any) -> Any:
    # Native JSON mode answers a list action as {"items": [...]}.
    if not isinstance(value, dict):
        return value
    mapping = cast("dict[str, Any]", value)
    return mapping.get("items", mapping)


def _loads_lenient(text: str) -> tuple[Any, str | None]:
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        # Small models often wrap JSON in prose; try the outermost bracket pair.
        for opener, closer in (("[", "]"), ("{", "}")):
            start, end = text.find(opener), text.rfind(closer)
            if 0 <= start < end:
                try:
                    return json.loads(text[start : end + 1]), None
                except json.JSONDecodeError:
                    continue
        return None, f"the answer is not valid JSON ({exc.msg} at position {exc.pos})"


def estimate_usage(
    messages: Sequence[ModelMessage], response: ModelResponse, counter: TokenCounter
) -> RequestUsage:
    """Count a call's tokens when the provider did not report them."""
    sent = 0
    for message in messages:
        for part in message.parts:
            content = getattr(part, "content", None)
            if isinstance(content, str):
                sent += counter.count(content) + MESSAGE_OVERHEAD_TOKENS
    received = 0
    for part in response.parts:
        if isinstance(part, TextPart | ThinkingPart):
            received += counter.count(part.content)
        elif isinstance(part, ToolCallPart):
            received += counter.count(part.args_as_json_str())
    return RequestUsage(input_tokens=sent, output_tokens=received)
