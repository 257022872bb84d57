"""The OpenAI chat-completions wire format: requests in, responses and chunks out.

Everything here is pure: validating a request body, mapping its messages
onto one pilothouse turn, and shaping a :class:`TurnResult` or turn events
into OpenAI's ``chat.completion`` and ``chat.completion.chunk`` objects. The
routes in :mod:`pilothouse.server._openai` do the I/O around it.
"""

from __future__ import annotations

__all__ = [
    "ChatCompletionRequest",
    "OpenAIError",
    "TurnInput",
    "chunk",
    "completion",
    "error_body",
    "finish_reason",
    "inline_schema",
    "load_body",
    "map_messages",
    "parse_request",
    "runtime_config",
    "tool_calls",
    "usage",
]

import base64
import binascii
import json
import mimetypes
import re
from dataclasses import dataclass, field
from typing import Any, Literal, cast
from urllib.parse import urlparse

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
)

from pilothouse.api import loads_json
from pilothouse.errors import InvalidFieldError
from pilothouse.types import (
    AttachmentInput,
    FinishReason,
    MessageInput,
    MessageRole,
    ReasoningEffort,
    TurnResult,
    cost_text,
)

_FINISH = {
    FinishReason.STOP: "stop",
    FinishReason.LENGTH: "length",
    FinishReason.TOOL_CALLS: "tool_calls",
    FinishReason.CONTENT_FILTER: "content_filter",
    # OpenAI has no "other"; the answer ended normally as far as a client can tell.
    FinishReason.OTHER: "stop",
}


class OpenAIError(Exception):
    """An error answered in OpenAI's shape ``{"error": {message, type, param, code}}``.

    Args:
        status: the HTTP status (the official client picks its exception class by it).
        message: what is wrong, naming the field.
        type: OpenAI's error type, e.g. ``invalid_request_error``.
        param: the offending request field, when there is one.
        code: a machine-readable code, e.g. ``model_not_found``.
        headers: extra response headers (``WWW-Authenticate``, ``Retry-After``).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """Return the JSON body of the error response."""
        return error_body(self.message, self.type, self.param, self.code)


def error_body(
    message: str, type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """Return OpenAI's error object: ``{"error": {message, type, param, code}}``."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


class _Wire(BaseModel):
    # Inside messages, clients echo fields of earlier responses (refusal,
    # annotations, audio): tolerated there. At the top level parse_request
    # refuses every parameter pilothouse does not honour (_NEUTRAL below).
    model_config = ConfigDict(extra="allow")


_NEUTRAL: dict[str, tuple[object, ...]] = {
    "logprobs": (False,),
    "top_logprobs": (0,),
    "logit_bias": ({},),
    "metadata": ({},),
    "modalities": (["text"],),
    "service_tier": ("auto", "default"),
    # pilothouse records every conversation (audit): store=false cannot be honoured.
    "store": (True,),
}
"""OpenAI parameters pilothouse accepts only at the values that ask for nothing it does not do."""

_OPENAI_UNHONOURED = frozenset(
    {
        "seed",
        "audio",
        "prediction",
        "functions",
        "function_call",
        "web_search_options",
        "verbosity",
        "prompt_cache_key",
        "safety_identifier",
    }
)
"""OpenAI chat-completion parameters pilothouse knows and does not honour at any value."""


def _refuse_unhonoured(data: dict[str, Any]) -> None:
    """Refuse a top-level parameter pilothouse would otherwise accept and ignore.

    A null is what a client that serializes every field sends for one it
    does not use: accepted. OpenAI itself refuses an unknown parameter with
    "Unrecognized request argument supplied"; so does pilothouse.

    Raises:
        OpenAIError: 400 naming the parameter.
    """
    for name, value in data.items():
        if name in ChatCompletionRequest.model_fields or value is None:
            continue
        if value in _NEUTRAL.get(name, ()):
            continue
        if name == "store":
            reason = (
                "pilothouse records every conversation for audit; store=false cannot be honoured"
            )
        elif name in _NEUTRAL:
            allowed = " or ".join(json.dumps(v) for v in _NEUTRAL[name])
            reason = f"not supported by pilothouse (only {allowed} or null)"
        elif name in _OPENAI_UNHONOURED:
            reason = "not supported by pilothouse: leave it out"
        else:
            raise OpenAIError(400, f"Unrecognized request argument supplied: {name}", param=name)
        raise OpenAIError(400, f"{name}: {reason}", param=name)


class ImageUrl(_Wire):
    """The ``image_url`` member of an image content part."""

    url: str = Field(min_length=1)


class ContentPart(_Wire):
    """One part of a message's content: text or an image."""

    type: str
    text: str | None = None
    image_url: ImageUrl | None = None


class FunctionCall(_Wire):
    """The function of a tool call in an earlier assistant message."""

    name: str
    arguments: str = "{}"


class ToolCallIn(_Wire):
    """A tool call in an earlier assistant message."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Wire):
    """One message of the request."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None


class FunctionDef(_Wire):
    """The ``function`` of a client-defined tool."""

    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None


class ToolIn(_Wire):
    """A client-defined tool: its calls are returned to the client as ``tool_calls``."""

    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Wire):
    """``tool_choice.function``: the tool the model must call."""

    name: str = Field(min_length=1, max_length=64)


class NamedToolChoice(_Wire):
    """``tool_choice`` naming one function: the model must call it."""

    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(_Wire):
    """``response_format.json_schema``: the schema the answer must match."""

    name: str = Field(min_length=1, max_length=64)
    schema_: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: StrictBool | None = None


class ResponseFormat(_Wire):
    """``response_format``: plain text, any JSON object, or JSON matching a schema."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StreamOptions(_Wire):
    """``stream_options``: only ``include_usage`` has a meaning here."""

    include_usage: StrictBool = False


class ChatCompletionRequest(_Wire):
    """The body of ``POST /v1/chat/completions`` (the fields pilothouse honors).

    ``input_data`` is a pilothouse extension (``extra_body`` in the official
    client): values for the action prompt's ``{placeholders}``.
    """

    model: str = Field(min_length=1, max_length=200)
    messages: list[ChatMessage] = Field(min_length=1)
    temperature: StrictFloat | None = Field(default=None, ge=0, le=2)
    top_p: StrictFloat | None = Field(default=None, ge=0, le=1)
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    presence_penalty: StrictFloat | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: StrictFloat | None = Field(default=None, ge=-2, le=2)
    reasoning_effort: ReasoningEffort | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    n: StrictInt | None = Field(default=None, ge=1, le=1)
    user: str | None = Field(default=None, max_length=64)
    tools: list[ToolIn] | None = Field(default=None, max_length=128)
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: StrictBool | None = None
    response_format: ResponseFormat | None = None
    input_data: dict[str, Any] | None = None


def _location(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def load_body(raw: bytes) -> Any:
    """Read a JSON body and hold every value to the input rules (``loads_json``).

    Raises:
        OpenAIError: 400, not JSON, or naming the field whose value is refused
            (a NUL character, an integer beyond 64 bits, NaN).
    """
    try:
        return loads_json(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise OpenAIError(400, f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise OpenAIError(400, "the request body nests too deeply") from None
    except InvalidFieldError as exc:
        raise OpenAIError(400, str(exc), param=exc.field) from None


def parse_request(raw: bytes) -> ChatCompletionRequest:
    """Validate a request body.

    Raises:
        OpenAIError: 400 naming the first offending field.
    """
    data = load_body(raw)
    if not isinstance(data, dict):
        raise OpenAIError(400, "the request body must be a JSON object")
    _refuse_unhonoured(cast("dict[str, Any]", data))
    try:
        return ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        param = _location(error["loc"])
        message = error["msg"]
        if param.startswith("tool_choice"):
            message = (
                "must be 'auto', 'none', 'required' or "
                '{"type": "function", "function": {"name": "<one of tools>"}}'
            )
            param = "tool_choice"
        elif param == "n":
            message = "only n=1 is supported"
        raise OpenAIError(400, f"{param}: {message}", param=param) from None


def _continuation(
    instructions: list[str], conversation: list[tuple[int, ChatMessage]]
) -> TurnInput:
    """A request that ends with tool results: the turn continues from them.

    The client ran the calls of its own tools and sends their results; every
    message is history and the turn has no new user text.
    """
    tool_names: dict[str, str] = {}
    history = [
        replayed
        for index, message in conversation
        if (replayed := _replayed(message, index, tool_names)) is not None
    ]
    for index, message in conversation:
        if message.role == "tool" and message.tool_call_id not in tool_names:
            raise OpenAIError(
                400,
                f"messages[{index}].tool_call_id: no earlier assistant message has a tool "
                f"call with id '{message.tool_call_id}'",
                param=f"messages[{index}].tool_call_id",
            )
    return TurnInput(instruction="\n\n".join(instructions) or None, history=history, text="")


@dataclass
class TurnInput:
    """One request's messages as one pilothouse turn.

    Attributes:
        instruction: the system and developer messages, joined; the caller's
            instruction appended to the default.
        history: the earlier user, assistant and tool messages, to replay
            into chat memory.
        text: the last user message's text.
        attachments: its images.
    """

    instruction: str | None
    history: list[MessageInput]
    text: str
    attachments: list[AttachmentInput] = field(default_factory=lambda: [])


def _text(message: ChatMessage, index: int) -> tuple[str, list[AttachmentInput]]:
    content = message.content
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    texts: list[str] = []
    attachments: list[AttachmentInput] = []
    for number, part in enumerate(content):
        where = f"messages[{index}].content[{number}]"
        if part.type == "text" and part.text is not None:
            texts.append(part.text)
        elif part.type == "image_url" and part.image_url is not None:
            attachments.append(_image(part.image_url.url, where))
        else:
            raise OpenAIError(
                400,
                f"{where}: content part type '{part.type}' is not supported (text, image_url)",
                param=where,
            )
    return "\n".join(texts), attachments


def _image(url: str, where: str) -> AttachmentInput:
    if url.startswith("data:"):
        header, _, payload = url[5:].partition(",")
        media_type, _, encoding = header.partition(";")
        if encoding != "base64" or not media_type.startswith("image/"):
            raise OpenAIError(
                400, f"{where}: a data URL must be a base64 image", param=f"{where}.image_url"
            )
        try:
            content = base64.b64decode(payload, validate=True)
        except binascii.Error:
            raise OpenAIError(
                400, f"{where}: the data URL is not valid base64", param=f"{where}.image_url"
            ) from None
        return AttachmentInput(media_type, content=content)
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise OpenAIError(
            400, f"{where}: image_url must be an http(s) or data URL", param=f"{where}.image_url"
        )
    guessed = mimetypes.guess_type(parsed.path)[0]
    media_type = guessed if guessed and guessed.startswith("image/") else "image/jpeg"
    return AttachmentInput(media_type, url=url)


def _replayed(message: ChatMessage, index: int, tool_names: dict[str, str]) -> MessageInput | None:
    text, _ = _text(message, index)
    if message.role == "user":
        return MessageInput(MessageRole.USER, text, data={"replayed": True})
    if message.role == "assistant":
        data: dict[str, Any] = {"replayed": True}
        if message.tool_calls:
            calls: list[dict[str, Any]] = []
            for call in message.tool_calls:
                tool_names[call.id] = call.function.name
                try:
                    arguments = json.loads(call.function.arguments or "{}")
                except json.JSONDecodeError:
                    arguments = {"raw": call.function.arguments}
                calls.append({"id": call.id, "name": call.function.name, "arguments": arguments})
            data["tool_calls"] = calls
        return MessageInput(MessageRole.ASSISTANT, text, data=data)
    if message.role == "tool":
        call_id = message.tool_call_id or ""
        return MessageInput(
            MessageRole.TOOL,
            text,
            tool_call_id=call_id,
            data={"replayed": True, "tool_name": tool_names.get(call_id, message.name or "tool")},
        )
    return None


def map_messages(messages: list[ChatMessage]) -> TurnInput:
    """Map a request's messages onto one turn.

    System and developer messages become the caller's instruction; the last
    message must be a user message and is the turn's text; every message
    before it becomes replayable history.

    Raises:
        OpenAIError: 400 when the last message is not a user message or is empty.
    """
    instructions: list[str] = []
    conversation: list[tuple[int, ChatMessage]] = []
    for index, message in enumerate(messages):
        if message.role in ("system", "developer"):
            text, attachments = _text(message, index)
            if attachments:
                raise OpenAIError(
                    400,
                    f"messages[{index}]: a {message.role} message cannot carry images",
                    param=f"messages[{index}].content",
                )
            if text.strip():
                instructions.append(text)
        else:
            conversation.append((index, message))
    if conversation and conversation[-1][1].role == "tool":
        return _continuation(instructions, conversation)
    if not conversation or conversation[-1][1].role != "user":
        raise OpenAIError(
            400,
            "messages: the last message (after system messages) must be a user message",
            param="messages",
        )
    last_index, last = conversation[-1]
    text, attachments = _text(last, last_index)
    if not text.strip() and not attachments:
        raise OpenAIError(
            400,
            f"messages[{last_index}].content: the user message is empty",
            param=f"messages[{last_index}].content",
        )
    tool_names: dict[str, str] = {}
    history = [
        replayed
        for index, message in conversation[:-1]
        if (replayed := _replayed(message, index, tool_names)) is not None
    ]
    return TurnInput(
        instruction="\n\n".join(instructions) or None,
        history=history,
        text=text,
        attachments=attachments,
    )


def runtime_config(
    request: ChatCompletionRequest, instruction: str | None, *, user_memory: bool = False
) -> dict[str, Any]:
    """Return the turn's runtime config: the request's options and the instruction.

    With ``user_memory`` (the deployment's ``openai_user_memory``) the
    request's ``user`` is also the turn's scoped-memory user.
    """
    config: dict[str, Any] = {
        "temperature": request.temperature,
        "top_p": request.top_p,
        # max_completion_tokens is the newer name; it wins when both are sent.
        "max_tokens": request.max_completion_tokens or request.max_tokens,
        "stop": [request.stop] if isinstance(request.stop, str) else request.stop,
        "presence_penalty": request.presence_penalty,
        "frequency_penalty": request.frequency_penalty,
        "reasoning_effort": request.reasoning_effort,
    }
    config = {key: value for key, value in config.items() if value is not None}
    if request.tools and request.tool_choice != "none":
        config["client_tools"] = [
            {
                "name": tool.function.name,
                "description": tool.function.description or "",
                "parameters": tool.function.parameters or {"type": "object", "properties": {}},
            }
            for tool in request.tools
        ]
        if request.parallel_tool_calls is False:
            config["parallel_tool_calls"] = False
        if request.tool_choice == "required":
            config["tool_choice"] = "required"
        elif isinstance(request.tool_choice, NamedToolChoice):
            config["tool_choice"] = _named_choice(request, request.tool_choice.function.name)
    elif request.tool_choice is not None and request.tool_choice not in ("auto", "none"):
        raise OpenAIError(
            400,
            "tool_choice: a forced tool call needs tools; send the tools, or drop tool_choice",
            param="tool_choice",
        )
    output_schema = response_schema(request.response_format)
    if output_schema is not None:
        config["output_schema"] = output_schema
    if instruction is not None:
        config["instruction"] = instruction
        config["instruction_mode"] = "append"
    if request.user is not None:
        # OpenAI's end-user id: recorded with the message, never a memory id
        # (it must not replace the history the request carries).
        config["end_user"] = request.user
        if user_memory:
            config["user_id"] = request.user
    return config


def _named_choice(request: ChatCompletionRequest, name: str) -> dict[str, Any]:
    names = [tool.function.name for tool in request.tools or []]
    if name not in names:
        raise OpenAIError(
            400,
            f"tool_choice.function.name: '{name}' is not among the tools ({', '.join(names)})",
            param="tool_choice.function.name",
        )
    return {"type": "function", "function": {"name": name}}


def response_schema(response_format: ResponseFormat | None) -> dict[str, Any] | None:
    """Return the output schema a ``response_format`` asks for (None for text).

    ``json_object`` asks for any JSON object; ``json_schema`` for one that
    matches its schema.

    Raises:
        OpenAIError: 400 for ``json_schema`` without its schema.
    """
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return {"type": "object"}
    if response_format.json_schema is None:
        raise OpenAIError(
            400,
            "response_format: type 'json_schema' needs a 'json_schema' member {name, schema}",
            param="response_format.json_schema",
        )
    return response_format.json_schema.schema_


def finish_reason(reason: FinishReason | None) -> str:
    """Return OpenAI's ``finish_reason`` for a pilothouse finish reason."""
    return _FINISH.get(reason, "stop") if reason is not None else "stop"


def usage(result: TurnResult) -> dict[str, int]:
    """Return OpenAI's usage object for a turn."""
    return {
        "prompt_tokens": result.input_tokens,
        "completion_tokens": result.output_tokens,
        "total_tokens": result.input_tokens + result.output_tokens,
    }


def tool_calls(result: TurnResult) -> list[dict[str, Any]]:
    """Return the calls returned to the caller, in OpenAI's ``tool_calls`` shape."""
    return [
        {
            "id": call.id,
            "type": "function",
            "function": {
                "name": call.name,
                "arguments": json.dumps(call.arguments or {}, ensure_ascii=False),
            },
        }
        for call in result.tool_calls
    ]


_CITATION = re.compile(r"\[(\d{1,3})\]")


def citation_annotations(result: TurnResult) -> list[dict[str, Any]]:
    """The answer's ``[n]`` citations as OpenAI ``url_citation`` annotations.

    Each marker the answer writes for a source it was given becomes one
    annotation over the marker's characters, naming the source's document
    (its URL or path) and title, as OpenAI's own answers cite web pages.
    """
    if not result.sources:
        return []
    given = {source.n: source for source in result.sources}
    found: list[dict[str, Any]] = []
    for match in _CITATION.finditer(result.text):
        source = given.get(int(match.group(1)))
        if source is None:
            continue
        found.append(
            {
                "type": "url_citation",
                "url_citation": {
                    "start_index": match.start(),
                    "end_index": match.end(),
                    "url": source.source,
                    "title": source.title or source.source,
                },
            }
        )
    return found


def completion(
    result: TurnResult, model: str, created: int, memory_id: str | None
) -> dict[str, Any]:
    """Return the ``chat.completion`` object for a finished turn.

    The ``pilothouse`` member (ignored by OpenAI clients) names the recorded
    conversation, its memory id, the turn's estimated cost and the
    ``sources`` retrieval gave the model; the message's ``annotations``
    are the answer's ``[n]`` citations of them.
    """
    calls = tool_calls(result)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": result.text if result.text or not calls else None,
        "refusal": None,
        "annotations": citation_annotations(result),
    }
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{result.conversation_uuid}",
        "object": "chat.completion",
        "created": created,
        "model": model_that_ran(result, model),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason(result.finish_reason),
                "logprobs": None,
            }
        ],
        "usage": usage(result),
        "system_fingerprint": None,
        "pilothouse": {
            "conversation_uuid": result.conversation_uuid,
            "memory_id": memory_id,
            "status": result.status.value,
            "cost": cost_text(result.cost),
            "usage_estimated": result.usage_estimated,
            "sources": [source.to_dict() for source in result.sources],
            "model": result.model,
            "requested_model": result.requested_model,
        },
    }


def model_that_ran(result: TurnResult, requested: str) -> str:
    """The ``model`` member: the id the client asked for, unless a budget switched models.

    A ``downgrade`` budget's turn names the catalog model that answered, as
    OpenAI names the model version that served a request; the ``pilothouse``
    member keeps the model the turn asked for.
    """
    if result.requested_model is None or result.model is None:
        return requested
    return result.model


def chunk(
    conversation_uuid: str,
    model: str,
    created: int,
    delta: dict[str, Any] | None,
    *,
    finish: str | None = None,
    with_usage: bool = False,
    usage_value: dict[str, int] | None = None,
    extension: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Return one ``chat.completion.chunk``.

    Args:
        conversation_uuid: names the completion (``chatcmpl-<uuid>``).
        model: the model id the client asked for.
        created: the completion's creation time (seconds).
        delta: the choice's delta; None for the usage-only chunk (no choices).
        finish: the finish reason on the last content chunk.
        with_usage: the client asked for usage, so every chunk carries a
            ``usage`` member (null until the last).
        usage_value: the usage for the usage-only chunk.
        extension: the ``pilothouse`` member (the last content chunk's sources).
    """
    body: dict[str, Any] = {
        "id": f"chatcmpl-{conversation_uuid}",
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": []
        if delta is None
        else [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }
    if with_usage:
        body["usage"] = usage_value
    if extension is not None:
        body["pilothouse"] = extension
    return body


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """Return the model's JSON schema with its ``$defs`` inlined.

    The route reads the raw body (to answer errors in OpenAI's shape), so the
    schema goes into the OpenAPI document by hand, where ``#/$defs`` refs
    would not resolve.
    """
    schema = model.model_json_schema()
    definitions = cast("dict[str, Any]", schema.pop("$defs", {}))

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            mapping = cast("dict[str, Any]", node)
            ref = mapping.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(definitions[ref.removeprefix("#/$defs/")])
            return {key: resolve(value) for key, value in mapping.items()}
        if isinstance(node, list):
            return [resolve(item) for item in cast("list[Any]", node)]
        return node

    return cast("dict[str, Any]", resolve(schema))
