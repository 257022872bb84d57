"""The OpenAI-compatible endpoints: ``POST /v1/chat/completions`` and ``GET /v1/models``.

Every active action of the caller's tenant is a model (``action:<CODE>``, or
the plain ``<CODE>``), and so is every active agent with an active goal
action (``agent:<CODE>`` runs the goal action as that agent). A request is
one new conversation and one turn:

- system and developer messages become the caller's instruction, appended
  to the default instruction;
- the last message must be a user message: it is the turn's text (images
  become attachments);
- the earlier user/assistant/tool messages are replayed into the new
  conversation as chat memory (the action's memory strategy still trims
  them), unless the request names a memory id (``X-Pilothouse-Memory-Id``
  header, else the ``user`` field) whose memory already holds messages: then
  the server's record is the history and the request's copy is ignored.

Errors come back in OpenAI's shape, ``{"error": {message, type, param,
code}}``, with the status codes the official client maps to its exception
classes. See ``docs/openai-compatible.md``.
"""

from __future__ import annotations

__all__ = ["router"]

import json
import logging
import re
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Annotated, Any, cast

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from pilothouse.api import Pilothouse
from pilothouse.catalog._enums import ProcessStatus
from pilothouse.errors import NotFoundError, PilothouseError, ProviderError
from pilothouse.runtime import (
    RuntimeConfigError,
    TemplateError,
    TextDelta,
    ThinkingDelta,
    TurnEvent,
    TurnFinished,
    TurnResult,
)
from pilothouse.server._deps import State, principal_from_request
from pilothouse.server._openai_models import (
    ChatCompletionRequest,
    OpenAIError,
    TurnInput,
    chunk,
    completion,
    error_body,
    finish_reason,
    inline_schema,
    map_messages,
    parse_request,
    runtime_config,
    tool_calls,
    usage,
)
from pilothouse.server._problems import ProblemError
from pilothouse.server._replay import append_messages
from pilothouse.server._targets import Target, list_targets, resolve_target
from pilothouse.store import ConversationQueries, NewAttachment

logger = logging.getLogger(__name__)

router = APIRouter(tags=["openai-compatible"])

MEMORY_HEADER = "X-Pilothouse-Memory-Id"
_MEMORY_ID = re.compile(r"^[A-Za-z0-9._:@-]{1,64}$")
# The official client retries 408/409/429/5xx unless told not to; a failed
# turn is recorded and was already retried by the runner, so a client retry
# would only start another conversation.
_NO_RETRY = {"x-should-retry": "false"}


def _error_response(error: OpenAIError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers or None)


def _from_problem(problem: ProblemError) -> OpenAIError:
    headers = dict(problem.headers or {})
    if problem.status == 401:
        return OpenAIError(401, problem.detail, code="invalid_api_key", headers=headers)
    if problem.status == 429:
        return OpenAIError(
            429, problem.detail, type="requests", code="rate_limit_exceeded", headers=headers
        )
    return OpenAIError(problem.status, problem.detail, headers=headers)


def _from_pilothouse(error: PilothouseError) -> OpenAIError:
    if isinstance(error, NotFoundError):
        return OpenAIError(404, str(error), code="not_found")
    if isinstance(error, ProviderError):
        # A provider's message may echo URLs or headers: only its kind leaves.
        return OpenAIError(
            502,
            f"the model provider failed ({type(error).__name__})",
            type="api_error",
            code="upstream_error",
            headers=_NO_RETRY,
        )
    if isinstance(error, RuntimeConfigError | TemplateError):
        return OpenAIError(400, str(error), code="invalid_value")
    return OpenAIError(400, str(error))


async def _facade(request: Request, state: State) -> Pilothouse:
    try:
        principal = await principal_from_request(request, state)
    except ProblemError as problem:
        raise _from_problem(problem) from None
    return state.facade(principal.tenant)


async def _resolve(ph: Pilothouse, model: str) -> Target:
    target = await resolve_target(ph.database, ph.tenant, model)
    if target is None:
        # Inactive and other tenants' models are as absent as unknown ones.
        raise OpenAIError(
            404,
            f"The model '{model}' does not exist or you do not have access to it.",
            param="model",
            code="model_not_found",
        )
    return target


def _memory_id(header: str | None, user: str | None) -> str | None:
    for where, value in ((MEMORY_HEADER, header), ("user", user)):
        if value is None:
            continue
        if not _MEMORY_ID.match(value):
            raise OpenAIError(
                400,
                f"{where}: a memory id is 1 to 64 letters, digits or . _ : @ -",
                param="user" if where == "user" else None,
            )
        return value
    return None


def _input_data(target: Target, request: ChatCompletionRequest, text: str) -> dict[str, Any]:
    """Fill the prompt's placeholders: ``input_data`` first, the user's text for the rest.

    Without this, an action whose prompt has a ``{document}`` placeholder
    could not be called by a client that knows nothing but messages.
    """
    data = dict(request.input_data or {})
    for name in target.placeholders:
        data.setdefault(name, text)
    return data


async def _check(
    ph: Pilothouse,
    target: Target,
    turn_input: TurnInput,
    data: dict[str, Any],
    config: dict[str, Any],
) -> None:
    """Check the turn as the runner will run it, writing nothing.

    The compiled action the runner cached is used when it is of the catalog
    revision read with the target (the runner's own cache check, without
    reading the revision again); otherwise the runner compiles it.
    """
    compiled = ph.runner.compiler.cached(ph.tenant, target.action_code, target.agent_code)
    if compiled is not None and compiled.revision != target.revision:
        compiled = None
    await ph.runner.prepare(
        target.action_code,
        target.agent_code,
        turn_input.text,
        input_data=data,
        runtime_config=config,
        attachments=turn_input.attachments,
        compiled=compiled,
    )


@dataclass(frozen=True)
class _NewConversation:
    """What the turn needs to write its conversation itself (no history to replay)."""

    action_code: str
    agent_code: str | None


@dataclass
class _Turn:
    """A request, validated, with its conversation named.

    ``new`` is None when the conversation is already written (it holds the
    replayed history); otherwise the turn writes it, with the user's message,
    in the transaction that starts the turn.
    """

    ph: Pilothouse
    model: str
    uuid: str
    text: str
    attachments: list[NewAttachment]
    input_data: dict[str, Any]
    config: dict[str, Any]
    memory_id: str | None
    created: int
    new: _NewConversation | None


async def _start(
    ph: Pilothouse, request: ChatCompletionRequest, memory_header: str | None
) -> _Turn:
    target = await _resolve(ph, request.model)
    turn_input: TurnInput = map_messages(request.messages)
    memory_id = _memory_id(memory_header, request.user)
    config = runtime_config(request, turn_input.instruction)
    data = _input_data(target, request, turn_input.text)
    # Validate everything before writing anything: a bad request leaves no conversation.
    await _check(ph, target, turn_input, data, config)
    replay = bool(turn_input.history)
    if replay and memory_id is not None:
        queries = ConversationQueries(ph.database, ph.tenant)
        replay = not await queries.memory_messages(memory_id, limit=1)
    new: _NewConversation | None = None
    if replay:
        # The history must be in the conversation before the turn reads its
        # memory, so the conversation is written first.
        conversation = await ph.command.start_conversation(
            target.agent_code, target.action_code, memory_id=memory_id
        )
        conversation_uuid = conversation.uuid
        await append_messages(
            ph.runner.store,
            ph.tenant,
            conversation_uuid,
            turn_input.history,
            status=ProcessStatus.NOT_STARTED,
        )
    else:
        # Named now because the chunk ids carry it before the turn ends. The
        # turn writes the conversation with the user's message: one
        # transaction fewer, and a target refused by then writes nothing.
        conversation_uuid = str(uuid.uuid4())
        new = _NewConversation(target.action_code, target.agent_code)
    return _Turn(
        ph=ph,
        model=request.model,
        uuid=conversation_uuid,
        text=turn_input.text,
        attachments=turn_input.attachments,
        input_data=data,
        config=config,
        memory_id=memory_id,
        created=int(time.time()),
        new=new,
    )


async def _run(turn: _Turn) -> TurnResult:
    """Run the turn to its end; a new conversation is written as the turn starts."""
    ph = turn.ph
    if turn.new is not None:
        return await ph.command.start_and_send(
            turn.new.agent_code,
            turn.new.action_code,
            turn.text,
            memory_id=turn.memory_id,
            attachments=turn.attachments,
            input_data=turn.input_data,
            runtime_config=turn.config,
            conversation_uuid=turn.uuid,
        )
    if turn.attachments:
        return await ph.command.send_message_with_attachments(
            turn.uuid,
            turn.text,
            turn.attachments,
            input_data=turn.input_data,
            runtime_config=turn.config,
        )
    return await ph.command.send_message(
        turn.uuid, turn.text, input_data=turn.input_data, runtime_config=turn.config
    )


def _turn_events(turn: _Turn) -> AsyncGenerator[TurnEvent, None]:
    """Run the turn streamed, yielding its events; as :func:`_run`, for a new conversation too."""
    if turn.new is not None:
        events = turn.ph.command.start_and_stream(
            turn.new.agent_code,
            turn.new.action_code,
            turn.text,
            memory_id=turn.memory_id,
            attachments=turn.attachments,
            input_data=turn.input_data,
            runtime_config=turn.config,
            conversation_uuid=turn.uuid,
        )
    else:
        events = turn.ph.command.stream_message(
            turn.uuid,
            turn.text,
            attachments=turn.attachments,
            input_data=turn.input_data,
            runtime_config=turn.config,
        )
    # Typed as an iterator, it is an async generator (so it can be closed).
    return cast("AsyncGenerator[TurnEvent, None]", events)


_REQUEST_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": inline_schema(ChatCompletionRequest)}},
    }
}


# Errors in OpenAI's own shape, so the official client maps them to its
# exception classes; documented so the OpenAPI contract holds for them too.
_OPENAI_ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
            "required": ["message", "type"],
        }
    },
    "required": ["error"],
}


def _error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {
        status: {
            "description": "An error in OpenAI's shape",
            "content": {"application/json": {"schema": _OPENAI_ERROR}},
        }
        for status in statuses
    }


@router.post(
    "/v1/chat/completions",
    openapi_extra=_REQUEST_BODY,
    responses=_error_responses(400, 401, 404, 409, 413, 429, 502),
    summary="Run one turn of an action or agent, OpenAI chat-completions style",
    response_model=None,
)
async def chat_completions(
    request: Request,
    state: State,
    memory_header: Annotated[str | None, Header(alias=MEMORY_HEADER)] = None,
) -> Response:
    """Answer a chat completion, streamed (``stream: true``) as SSE chunks or not."""
    try:
        ph = await _facade(request, state)
        body = parse_request(await request.body())
        turn = await _start(ph, body, memory_header)
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(
                _stream(turn, include_usage),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        result = await _run(turn)
    except OpenAIError as error:
        return _error_response(error)
    except PilothouseError as error:
        return _error_response(_from_pilothouse(error))
    failure = _failure(result)
    if failure is not None:
        return _error_response(failure)
    return JSONResponse(completion(result, turn.model, turn.created, turn.memory_id))


def _failure(result: TurnResult) -> OpenAIError | None:
    if result.status is not ProcessStatus.FAILED:
        return None
    return OpenAIError(
        502,
        f"the turn failed: {result.error or 'unknown error'} "
        f"(conversation {result.conversation_uuid})",
        type="api_error",
        code="turn_failed",
        headers=_NO_RETRY,
    )


def _sse(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


async def _stream(turn: _Turn, include_usage: bool) -> AsyncIterator[bytes]:
    """Yield the turn as ``chat.completion.chunk`` events, then ``[DONE]``."""

    def make(delta: dict[str, Any] | None, **kwargs: Any) -> bytes:
        return _sse(
            chunk(turn.uuid, turn.model, turn.created, delta, with_usage=include_usage, **kwargs)
        )

    yield make({"role": "assistant", "content": ""})
    streamed_text = False
    finished: TurnResult | None = None
    events = _turn_events(turn)
    try:
        # aclosing: the turn's task group must be closed in this task, not
        # by the garbage collector in another one.
        async with aclosing(events):
            async for event in events:
                if isinstance(event, TextDelta):
                    streamed_text = True
                    yield make({"content": event.text})
                elif isinstance(event, ThinkingDelta):
                    # The name DeepSeek, vLLM and llama.cpp use for reasoning deltas.
                    yield make({"reasoning_content": event.text})
                elif isinstance(event, TurnFinished):
                    finished = event.result
    except PilothouseError as error:
        # A new conversation's catalog check runs as its turn starts, so a
        # target deactivated since the request was checked is refused here,
        # in the stream, rather than with an error status.
        failure = _from_pilothouse(error)
        yield _sse(error_body(failure.message, failure.type, failure.param, failure.code))
    if finished is not None:
        for data in _finish(finished, streamed_text, make, include_usage):
            yield data
    yield b"data: [DONE]\n\n"


def _finish(result: TurnResult, streamed_text: bool, make: Any, include_usage: bool) -> list[bytes]:
    """The chunks after the deltas: leftovers, tool calls, finish reason, usage.

    Tool calls are sent only here, from the result: those are the calls
    returned to the caller; calls the runtime executed itself are not the
    client's business.
    """
    failure = _failure(result)
    if failure is not None:
        return [_sse(error_body(failure.message, failure.type, failure.param, failure.code))]
    out: list[bytes] = []
    if not streamed_text and result.text:
        # The model was called without streaming (e.g. a local model with
        # tools cannot stream): the answer arrives as one delta.
        out.append(make({"content": result.text}))
    calls = tool_calls(result)
    if calls:
        out.append(make({"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]}))
    out.append(make({}, finish=finish_reason(result.finish_reason)))
    if include_usage:
        out.append(make(None, usage_value=usage(result)))
    return out


def _model_entry(model_id: str, created: float, description: str) -> dict[str, Any]:
    return {
        "id": model_id,
        "object": "model",
        "created": int(created),
        "owned_by": "pilothouse",
        "description": description,
    }


@router.get(
    "/v1/models",
    summary="List the actions and agents as OpenAI models",
    responses=_error_responses(401, 429),
)
async def list_models(request: Request, state: State) -> Response:
    """List every active action (``action:<CODE>``) and agent (``agent:<CODE>``)."""
    try:
        ph = await _facade(request, state)
    except OpenAIError as error:
        return _error_response(error)
    entries = [
        _model_entry(entry.model_id, entry.updated_at.timestamp(), entry.description)
        for entry in await list_targets(ph.database, ph.tenant)
    ]
    return JSONResponse({"object": "list", "data": entries})


@router.get(
    "/v1/models/{model_id}",
    summary="Describe one action or agent as an OpenAI model",
    responses=_error_responses(401, 404, 429),
)
async def retrieve_model(model_id: str, request: Request, state: State) -> Response:
    """Describe one model id (``action:<CODE>``, ``<CODE>`` or ``agent:<CODE>``)."""
    try:
        ph = await _facade(request, state)
        target = await _resolve(ph, model_id)
    except OpenAIError as error:
        return _error_response(error)
    return JSONResponse(_model_entry(model_id, target.updated_at.timestamp(), target.name))
