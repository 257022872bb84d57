"""Conversation routes: start, send (answer or Server-Sent Events), answer, cancel, read.

Everything is scoped to the API key's tenant; another tenant's conversation
is a 404, exactly as a missing one.

A message's turn runs while the request is open. With ``?stream=true`` the
answer is a ``text/event-stream`` whose events are::

    event: status     data: {"conversation_uuid", "old", "new"}
    event: delta      data: {"conversation_uuid", "text"}
    event: thinking   data: {"conversation_uuid", "text"}
    event: tool_call  data: {"conversation_uuid", "call_id", "name", "arguments"}
    event: retry      data: {"conversation_uuid", "attempt", "delay", "error"}
    event: finished   data: <the turn result: status, output, tokens, cost, ...>

``finished`` is always last and carries the same JSON the non-streaming
call returns. A request the turn refuses (unknown conversation, wrong
status, bad runtime config) is answered with a problem document before the
stream starts. A client that disconnects mid-stream cancels its turn, which
is recorded ``TE``.
"""

from __future__ import annotations

__all__ = ["router"]

import base64
import binascii
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Query, Response
from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    model_validator,
)

from pilothouse.errors import PilothouseError
from pilothouse.server._deps import CheckedJsonRoute, Facade
from pilothouse.server._problems import PROBLEM_RESPONSES, error_problem, problem_body
from pilothouse.types import (
    AttachmentInput,
    ConversationInfo,
    ConversationView,
    ProcessStatus,
    StatusChanged,
    TextDelta,
    ThinkingDelta,
    ToolCallFinished,
    ToolCallRequested,
    TurnEvent,
    TurnFinished,
    TurnRetry,
)

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

logger = logging.getLogger(__name__)

router = APIRouter(
    prefix="/v1/conversations",
    tags=["conversations"],
    responses=PROBLEM_RESPONSES,
    route_class=CheckedJsonRoute,
)


class _Body(BaseModel):
    # camelCase on the wire, snake_case accepted too; unknown fields refused
    # so a typo ("runtimeconfig") is a 422, not silently ignored.
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class StartConversation(_Body):
    """The body of ``POST /v1/conversations``."""

    action: str = Field(min_length=1, max_length=64, description="The action's code.")
    agent: str | None = Field(
        default=None, min_length=1, max_length=64, description="The agent's code, if any."
    )
    memory_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        validation_alias=AliasChoices("memoryId", "memory_id"),
        description="Share chat memory with earlier conversations of this memory id.",
    )


def _base64(value: object) -> object:
    # pydantic's Base64Bytes skips characters outside the alphabet ("!!!" would
    # be empty bytes); an attachment's data is decoded strictly or refused.
    if not isinstance(value, str):
        return value
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("is not valid base64 (standard alphabet, with padding)") from None


class AttachmentBody(_Body):
    """A file sent with a message: a URL or base64 bytes."""

    media_type: str = Field(
        min_length=1,
        max_length=128,
        validation_alias=AliasChoices("mediaType", "media_type"),
        description="e.g. image/png",
    )
    url: str | None = Field(default=None, min_length=1, max_length=4096)
    data: Annotated[bytes | None, BeforeValidator(_base64)] = Field(
        default=None,
        description="The bytes, base64-encoded.",
        json_schema_extra={"type": "string", "format": "base64"},
    )
    name: str | None = Field(default=None, max_length=255)

    @model_validator(mode="after")
    def _one_source(self) -> AttachmentBody:
        if (self.url is None) == (self.data is None):
            raise ValueError("give exactly one of 'url' or 'data'")
        return self

    def to_input(self) -> AttachmentInput:
        """Return the store's form of the attachment."""
        return AttachmentInput(
            media_type=self.media_type, url=self.url, content=self.data, name=self.name
        )


class SendMessage(_Body):
    """The body of ``POST /v1/conversations/{uuid}/messages``."""

    text: str = Field(description="The user's message.")
    attachments: list[AttachmentBody] = Field(default_factory=list[AttachmentBody], max_length=32)
    input_data: dict[str, Any] | None = Field(
        default=None,
        validation_alias=AliasChoices("inputData", "input_data"),
        description="Values for the action prompt's {placeholders}.",
    )
    runtime_config: dict[str, Any] | None = Field(
        default=None,
        validation_alias=AliasChoices("runtimeConfig", "runtime_config"),
        description="Per-call options (temperature, max_tokens, ...) and switches.",
    )


class SubmitAnswers(_Body):
    """The body of ``POST .../answers``."""

    answers: dict[str, str] = Field(description="The answer per pending question id.")


class SubmitToolResult(_Body):
    """The body of ``POST .../tool-results``."""

    tool_call_id: str = Field(
        min_length=1,
        max_length=128,
        validation_alias=AliasChoices("toolCallId", "tool_call_id"),
    )
    result: Any = Field(description="The tool's result (any JSON).")


class TurnResultBody(BaseModel):
    """What one turn produced (``TurnResult.as_json()``)."""

    conversation_uuid: str
    status: ProcessStatus
    finish_reason: str | None
    output: Any
    input_tokens: int
    output_tokens: int
    cost: str = Field(description="Estimated cost, a decimal string.")
    ai_meta: dict[str, Any] | None
    error: str | None
    tool_calls: list[dict[str, Any]]
    model: str | None = Field(
        default=None, description="The catalog code of the model that made the last call."
    )
    requested_model: str | None = Field(
        default=None,
        description="The model the turn asked for, when a downgrade budget switched it.",
    )
    sources: list[dict[str, Any]] = Field(
        default_factory=lambda: list[dict[str, Any]](),
        description=(
            "The chunks retrieval gave the model, numbered as in its prompt: n, collection,"
            " document_id, source, title, heading, chunk_id, position, similarity, score,"
            " cited (the answer cites it as [n]), text, pages."
        ),
    )


class CancelOutcome(BaseModel):
    """What ``POST .../cancel`` did."""

    cancelled_running_turn: bool = Field(
        description="True when a turn running in this service was aborted."
    )
    conversation: ConversationInfo


class ConversationPage(BaseModel):
    """One page of conversations, newest first."""

    items: list[ConversationInfo]
    total: int
    limit: int
    offset: int


def event_data(event: TurnEvent) -> tuple[str, dict[str, Any]]:
    """Return the SSE event name and JSON data of a turn event."""
    uuid = event.conversation_uuid
    if isinstance(event, TextDelta):
        return "delta", {"conversation_uuid": uuid, "text": event.text}
    if isinstance(event, ThinkingDelta):
        return "thinking", {"conversation_uuid": uuid, "text": event.text}
    if isinstance(event, ToolCallRequested):
        return "tool_call", {
            "conversation_uuid": uuid,
            "call_id": event.call_id,
            "name": event.name,
            "arguments": event.arguments,
        }
    if isinstance(event, ToolCallFinished):
        return "tool_result", {
            "conversation_uuid": uuid,
            "call_id": event.call_id,
            "name": event.name,
            "result": event.result,
        }
    if isinstance(event, StatusChanged):
        return "status", {"conversation_uuid": uuid, "old": event.old.value, "new": event.new.value}
    if isinstance(event, TurnRetry):
        return "retry", {
            "conversation_uuid": uuid,
            "attempt": event.attempt,
            "delay": event.delay,
            "error": event.error,
        }
    assert isinstance(event, TurnFinished)
    return "finished", event.result.as_json()


def _sse(name: str, data: dict[str, Any]) -> bytes:
    # One JSON line per event: JSON never contains a raw newline, so no
    # multi-line "data:" splitting is needed.
    return f"event: {name}\ndata: {json.dumps(data, default=str)}\n\n".encode()


class TurnStreamResponse(Response):
    """A Server-Sent Events response of one turn, run in the response's own task.

    The first event is awaited before the response starts, so a refused
    turn still becomes a problem document with its proper status (the
    exception propagates to the app's handlers). Everything runs in the one
    task that sends, so the turn's task group is entered and left in the
    same task and a failed send (the client left) cancels the turn.
    """

    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[TurnEvent]) -> None:
        super().__init__(
            status_code=200,
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            media_type=self.media_type,
        )
        # Response() declares "content-length: 0" for its empty body; a
        # stream has no length (chunked), so the header must go.
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        self._events = events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        events = self._events
        try:
            first = await anext(events)
        except StopAsyncIteration:
            first = None
        started = False
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            started = True
            if first is not None:
                await send(
                    {
                        "type": "http.response.body",
                        "body": _sse(*event_data(first)),
                        "more_body": True,
                    }
                )
                async for event in events:
                    chunk = _sse(*event_data(event))
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except PilothouseError as exc:
            logger.warning("turn stream ended by %s", type(exc).__name__)
            refused = error_problem(exc, title="Turn failed")
            body = problem_body(refused.status, refused.title, refused.detail)
            await send(
                {"type": "http.response.body", "body": _sse("error", body), "more_body": True}
            )
        finally:
            # Closing the generator cancels a turn still running (client gone).
            if isinstance(events, AsyncGenerator):
                await events.aclose()
        if started:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


def _conversation_info(row: Any) -> ConversationInfo:
    return ConversationInfo.model_validate(row)


@router.post("", status_code=201, summary="Start a conversation (status NS)")
async def start_conversation(body: StartConversation, ph: Facade) -> ConversationInfo:
    """Record a new conversation of an agent (optional) running an action."""
    conversation = await ph.command.start_conversation(
        action=body.action, agent=body.agent, memory_id=body.memory_id
    )
    return _conversation_info(conversation)


def _attachments(body: SendMessage) -> Sequence[AttachmentInput]:
    return [a.to_input() for a in body.attachments]


@router.post(
    "/{uuid}/messages",
    summary="Send a message: run one turn (JSON result, or SSE with ?stream=true)",
    response_model=TurnResultBody,
    responses={
        200: {
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
            "description": "The turn's result, or its events as Server-Sent Events.",
        }
    },
)
async def send_message(
    uuid: str,
    body: SendMessage,
    ph: Facade,
    stream: Annotated[bool, Query(description="Answer with Server-Sent Events.")] = False,
) -> Any:
    """Record the message, call the model, record and return the answer."""
    if stream:
        events = ph.command.stream_message(
            uuid,
            body.text,
            attachments=_attachments(body),
            input_data=body.input_data,
            runtime_config=body.runtime_config,
        )
        return TurnStreamResponse(events)
    result = await ph.command.send_message_with_attachments(
        uuid,
        body.text,
        _attachments(body),
        input_data=body.input_data,
        runtime_config=body.runtime_config,
    )
    return result.as_json()


@router.post(
    "/{uuid}/answers",
    summary="Answer the pending questions of a waiting (WA) conversation; the turn resumes",
    response_model=TurnResultBody,
)
async def submit_answers(uuid: str, body: SubmitAnswers, ph: Facade) -> Any:
    """Record the answers and resume the turn; returns the resumed turn's result."""
    return (await ph.command.submit_answers(uuid, body.answers)).as_json()


@router.post(
    "/{uuid}/tool-results",
    summary="Return the result of a custom-schema tool call; the turn resumes",
    response_model=TurnResultBody,
)
async def submit_tool_result(uuid: str, body: SubmitToolResult, ph: Facade) -> Any:
    """Record the tool result and resume the turn; returns the resumed turn's result."""
    result = await ph.command.submit_tool_result(uuid, body.tool_call_id, body.result)
    return result.as_json()


@router.post("/{uuid}/cancel", summary="Cancel the running turn, or terminate an idle conversation")
async def cancel(uuid: str, ph: Facade) -> CancelOutcome:
    """Abort the turn running in this service, else mark the conversation ``TE``."""
    await ph.query.get_conversation(uuid)  # 404 for another tenant's, before any write
    running = await ph.command.cancel(uuid)
    conversation = await ph.query.get_conversation(uuid)
    return CancelOutcome(
        cancelled_running_turn=running, conversation=_conversation_info(conversation)
    )


class MemoryCleared(BaseModel):
    """What ``DELETE .../memory`` did."""

    memory_id: str = Field(description="The chat memory cleared (shared by its conversations).")
    cleared: bool = Field(description="True: later turns see no message written before.")


@router.delete("/{uuid}/memory", summary="Clear the conversation's chat memory")
async def clear_memory(uuid: str, ph: Facade) -> MemoryCleared:
    """Later turns of every conversation sharing its memory see no earlier message.

    Nothing is deleted: the transcript shows a system message where the
    memory was cleared. 409 while a conversation of the memory runs or waits.
    """
    memory_id = (await ph.query.get_conversation(uuid)).memory_id
    return MemoryCleared(memory_id=memory_id, cleared=await ph.command.clear_memory(memory_id))


class RecoverBody(BaseModel):
    """What to do with a stuck conversation."""

    model_config = ConfigDict(extra="forbid")

    retry: StrictBool = Field(
        description="True: call the model again on the stored history; false: record it FA."
    )


@router.post("/{uuid}/recover", summary="Retry or fail a stuck (ST) conversation")
async def recover(uuid: str, body: RecoverBody, ph: Facade) -> ConversationInfo:
    """End a turn a crashed process left behind (status ``ST``): run it again, or fail it."""
    await ph.command.recover(uuid, retry=body.retry)
    return _conversation_info(await ph.query.get_conversation(uuid))


def _aware(moment: datetime | None) -> datetime | None:
    # A time without zone is read as UTC, the zone every stored time is in.
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)


@router.get("", summary="List conversations (filters, newest first, paginated)")
async def list_conversations(
    ph: Facade,
    agent: Annotated[str | None, Query(max_length=64)] = None,
    action: Annotated[str | None, Query(max_length=64)] = None,
    status: Annotated[ProcessStatus | None, Query(description="A status code, e.g. CO.")] = None,
    created_from: Annotated[
        datetime | None, Query(alias="from", description="Created at or after (ISO 8601).")
    ] = None,
    created_to: Annotated[
        datetime | None, Query(alias="to", description="Created before (ISO 8601).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
) -> ConversationPage:
    """Return ``{items, total, limit, offset}``."""
    page = await ph.query.list_conversations(
        agent=agent,
        action=action,
        status=status,
        created_from=_aware(created_from),
        created_to=_aware(created_to),
        limit=limit,
        offset=offset,
    )
    return ConversationPage(
        items=[_conversation_info(row) for row in page.items],
        total=page.total,
        limit=page.limit,
        offset=page.offset,
    )


@router.get("/{uuid}", summary="Read a conversation: messages, tool calls, attachments, timeline")
async def get_conversation(uuid: str, ph: Facade) -> ConversationView:
    """Return the whole transcript (attachment bytes stay in the store; ``size`` says how many)."""
    return await ph.query.get_transcript(uuid)
