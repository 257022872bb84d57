"""The OpenAI-compatible endpoints: ``/v1/chat/completions``, ``/v1/models``, ``/v1/embeddings``.

Every active action of the caller's tenant is a model (``action:<CODE>``, or
the plain ``<CODE>``), and so is every active agent with an active goal
action (``agent:<CODE>`` runs the goal action as that agent). A request is
one new conversation and one turn:

- system and developer messages become the caller's instruction, appended
  to the default instruction;
- the last message must be a user message: it is the turn's text (images
  become attachments);
- the earlier user/assistant/tool messages are replayed into the new
  conversation and are the turn's history, whole, whatever the action's
  memory strategy (the client chose them), unless the request names a
  memory id (``X-Pilothouse-Memory-Id`` header) whose memory already holds
  messages: then the server's record is the history and the request's copy
  is ignored. The ``user`` field is the end user's id, recorded with the
  message; it never names memory.

``POST /v1/embeddings`` embeds texts with a catalog embedding model (a
model with capability ``EM``, named by its code), in OpenAI's request and
response shape (``encoding_format`` float or base64).

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
from pilothouse.errors import ErrorCategory, PilothouseError
from pilothouse.server._deps import State, principal_from_request
from pilothouse.server._openai_models import (
    ChatCompletionRequest,
    OpenAIError,
    TurnInput,
    chunk,
    citation_annotations,
    completion,
    error_body,
    finish_reason,
    inline_schema,
    load_body,
    map_messages,
    model_that_ran,
    parse_request,
    runtime_config,
    tool_calls,
    usage,
)
from pilothouse.server._problems import error_headers
from pilothouse.types import (
    AttachmentInput,
    ProcessStatus,
    Target,
    TextDelta,
    ThinkingDelta,
    TurnEvent,
    TurnFinished,
    TurnResult,
    TurnRetry,
)

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


# The one map of this face: the HTTP status, OpenAI error type and code of
# each error category. The official client picks its exception class by the
# status. Invalid state is a 400, not a 409: the client retries 409s, and a
# request refused for its action's state would only be refused again.
_ERRORS: dict[ErrorCategory, tuple[int, str, str]] = {
    ErrorCategory.INVALID_INPUT: (400, "invalid_request_error", "invalid_value"),
    ErrorCategory.NOT_FOUND: (404, "invalid_request_error", "not_found"),
    ErrorCategory.INVALID_STATE: (400, "invalid_request_error", "invalid_state"),
    ErrorCategory.CONFLICT: (409, "invalid_request_error", "conflict"),
    ErrorCategory.UNAUTHORIZED: (401, "invalid_request_error", "invalid_api_key"),
    ErrorCategory.FORBIDDEN: (403, "invalid_request_error", "permission_denied"),
    ErrorCategory.RATE_LIMITED: (429, "requests", "rate_limit_exceeded"),
    # OpenAI's own answer when an account's quota is spent: clients stop
    # retrying on this code, as they should for a spent budget.
    ErrorCategory.BUDGET_EXCEEDED: (429, "insufficient_quota", "insufficient_quota"),
    ErrorCategory.UNAVAILABLE: (503, "api_error", "service_unavailable"),
    ErrorCategory.UPSTREAM: (502, "api_error", "upstream_error"),
    ErrorCategory.INTERNAL: (500, "api_error", "internal_error"),
}


def _from_pilothouse(error: PilothouseError) -> OpenAIError:
    status, kind, code = _ERRORS[error.category]
    headers = error_headers(error)
    if status >= 409 and not headers:
        # A provider failure was already retried by the runner, and a
        # conflict would be met again: the client must not retry on its own.
        headers = dict(_NO_RETRY)
    return OpenAIError(status, error.public_message, type=kind, code=code, headers=headers)


async def _facade(request: Request, state: State) -> Pilothouse:
    principal = await principal_from_request(request, state)
    return state.facade(principal.tenant, principal.caller("openai"))


async def _resolve(ph: Pilothouse, model: str) -> Target:
    target = await ph.query.find_target(model)
    if target is None:
        # Inactive and other tenants' models are as absent as unknown ones.
        raise OpenAIError(
            404,
            f"The model '{model}' does not exist or you do not have access to it.",
            param="model",
            code="model_not_found",
        )
    return target


def _memory_id(header: str | None) -> str | None:
    if header is not None and not _MEMORY_ID.match(header):
        raise OpenAIError(
            400, f"{MEMORY_HEADER}: a memory id is 1 to 64 letters, digits or . _ : @ -"
        )
    return header


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
    """Check the turn as it will run, writing nothing.

    A compilation of the catalog revision read with the target is used
    without reading the revision again.
    """
    await ph.command.check_message(
        turn_input.text,
        action=target.action_code,
        agent=target.agent_code,
        attachments=turn_input.attachments,
        input_data=data,
        runtime_config=config,
        catalog_revision=target.revision,
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
    attachments: list[AttachmentInput]
    input_data: dict[str, Any]
    config: dict[str, Any]
    memory_id: str | None
    created: int
    new: _NewConversation | None


async def _start(
    ph: Pilothouse,
    request: ChatCompletionRequest,
    memory_header: str | None,
    *,
    user_memory: bool = False,
) -> _Turn:
    target = await _resolve(ph, request.model)
    turn_input: TurnInput = map_messages(request.messages)
    memory_id = _memory_id(memory_header)
    config = runtime_config(request, turn_input.instruction, user_memory=user_memory)
    data = _input_data(target, request, turn_input.text)
    # Validate everything before writing anything: a bad request leaves no conversation.
    await _check(ph, target, turn_input, data, config)
    if memory_id is not None:
        action = await ph.query.find_action_by_code(target.action_code)
        if action is not None and action.memory_strategy is None:
            # The header asks for server memory the action does not keep:
            # refused rather than silently ignored.
            raise OpenAIError(
                400,
                f"{MEMORY_HEADER}: action '{target.action_code}' has no memory strategy, so "
                "it keeps no memory; send the history in messages, or give the action a "
                "memory_strategy",
            )
    replay = bool(turn_input.history)
    if replay and memory_id is not None:
        latest = await ph.query.get_memory_messages(memory_id, limit=1)
        # A memory cleared explicitly ends with its marker: it is empty.
        replay = not latest or bool((latest[0].data or {}).get("memory_cleared"))
    new: _NewConversation | None = None
    if replay:
        # The history must be in the conversation before the turn reads its
        # memory, so the conversation is written first.
        conversation = await ph.command.start_conversation(
            action=target.action_code,
            agent=target.agent_code,
            memory_id=memory_id,
            history=turn_input.history,
        )
        conversation_uuid = conversation.uuid
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
            turn.text,
            action=turn.new.action_code,
            agent=turn.new.agent_code,
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
            turn.text,
            action=turn.new.action_code,
            agent=turn.new.agent_code,
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
    return events


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
        turn = await _start(ph, body, memory_header, user_memory=state.server.openai_user_memory)
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
    # Every chunk names the model that ran: a downgrade budget switches it
    # before the call, and the deltas say so. The role chunk waits for the
    # first one, so it names that model too.
    shown = [turn.model]
    opened = [False]

    def opening() -> bytes:
        """The role chunk, once, before whatever the stream sends first."""
        if opened[0]:
            return b""
        opened[0] = True
        role = {"role": "assistant", "content": ""}
        return _sse(chunk(turn.uuid, shown[0], turn.created, role, with_usage=include_usage))

    def make(delta: dict[str, Any] | None, **kwargs: Any) -> bytes:
        return opening() + _sse(
            chunk(turn.uuid, shown[0], turn.created, delta, with_usage=include_usage, **kwargs)
        )

    streamed_text = False
    finished: TurnResult | None = None
    events = _turn_events(turn)
    text = _SentText()
    try:
        # aclosing: the turn's task group must be closed in this task, not
        # by the garbage collector in another one.
        async with aclosing(events):
            async for event in events:
                if isinstance(event, TextDelta | ThinkingDelta) and event.model is not None:
                    shown[0] = event.model
                if isinstance(event, TextDelta):
                    streamed_text = True
                    fresh = text.fresh(event.text)
                    if fresh:
                        yield make({"content": fresh})
                elif isinstance(event, TurnRetry):
                    text.retried()
                elif isinstance(event, ThinkingDelta):
                    # The name DeepSeek, vLLM and llama.cpp use for reasoning deltas.
                    yield make({"reasoning_content": event.text})
                elif isinstance(event, TurnFinished):
                    finished = event.result
                    shown[0] = model_that_ran(finished, turn.model)
    except PilothouseError as error:
        # A new conversation's catalog check runs as its turn starts, so a
        # target deactivated since the request was checked is refused here,
        # in the stream, rather than with an error status.
        failure = _from_pilothouse(error)
        body = error_body(failure.message, failure.type, failure.param, failure.code)
        yield opening() + _sse(body)
    if finished is not None and text.diverged is not None:
        # The retried attempt wrote something else than the client already
        # has: say so instead of ending "stop" (after the turn, never
        # inside it: a client that closes on the error must not close it).
        diverged = OpenAIError(
            502,
            "the provider failed mid-answer and its retried answer differs from the text "
            f"already sent; the recorded answer is in conversation {turn.uuid}",
            type="api_error",
            code="stream_diverged",
        )
        yield _sse(error_body(diverged.message, diverged.type, diverged.param, diverged.code))
    elif finished is not None:
        for data in _finish(finished, streamed_text, make, include_usage):
            yield data
    yield opening() + b"data: [DONE]\n\n"


class _SentText:
    """The text a stream client was sent, so a retried attempt does not send it twice.

    After a model call fails mid-answer and is retried, the new attempt's
    text starts over; the part the client already has is skipped, so the
    client sees exactly the recorded answer. Should the new attempt write
    something else, :attr:`diverged` says from where.
    """

    def __init__(self) -> None:
        self.sent = ""
        self.attempt = ""
        self.replaying = False
        self.diverged: int | None = None

    def retried(self) -> None:
        """A new attempt starts: its text is checked against what was sent."""
        self.attempt = ""
        self.replaying = bool(self.sent)

    def fresh(self, delta: str) -> str:
        """Return the part of ``delta`` the client has not been sent yet."""
        if self.diverged is not None:
            return ""
        if not self.replaying:
            self.sent += delta
            return delta
        start = len(self.attempt)
        self.attempt += delta
        if len(self.attempt) <= len(self.sent):
            if not self.sent.startswith(self.attempt):
                self.diverged = start
            return ""
        if not self.attempt.startswith(self.sent):
            self.diverged = start
            return ""
        self.replaying = False
        new = self.attempt[len(self.sent) :]
        self.sent = self.attempt
        return new


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
    cited = citation_annotations(result)
    if cited:
        out.append(make({"annotations": cited}))
    # The sources ride on the last content chunk, in the member clients ignore.
    extension: dict[str, Any] | None = (
        {"sources": [source.to_dict() for source in result.sources]} if result.sources else None
    )
    if result.requested_model is not None:
        extension = {
            **(extension or {}),
            "model": result.model,
            "requested_model": result.requested_model,
        }
    out.append(make({}, finish=finish_reason(result.finish_reason), extension=extension))
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
    except PilothouseError as error:
        return _error_response(_from_pilothouse(error))
    entries = [
        _model_entry(entry.target_id, entry.updated_at.timestamp(), entry.description)
        for entry in await ph.query.list_targets()
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
    except PilothouseError as error:
        return _error_response(_from_pilothouse(error))
    return JSONResponse(_model_entry(model_id, target.updated_at.timestamp(), target.name))


_EMBEDDING_FIELDS = {"model", "input", "encoding_format", "dimensions", "user", "truncate"}
_MAX_EMBEDDING_INPUTS = 2048
"""OpenAI's own limit of inputs per request."""


def _is_tokens(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(i, int) and not isinstance(i, bool) for i in cast(list[Any], value)
    )


def _embedding_texts(body: dict[str, Any]) -> list[str | list[int]]:
    raw = body.get("input")
    if isinstance(raw, str):
        texts: list[Any] = [raw]
    elif isinstance(raw, list) and raw and _is_tokens(raw):
        texts = [raw]  # one text as token ids
    elif isinstance(raw, list):
        texts = cast(list[Any], raw)
    else:
        raise OpenAIError(
            400,
            "'input' must be a string, an array of strings, or token ids (an array of "
            "integers, or an array of such arrays)",
            param="input",
        )
    if not texts:
        raise OpenAIError(400, "'input' must not be empty", param="input")
    if len(texts) > _MAX_EMBEDDING_INPUTS:
        raise OpenAIError(
            400, f"'input' may hold at most {_MAX_EMBEDDING_INPUTS} texts", param="input"
        )
    for index, text in enumerate(texts):
        if not isinstance(text, str) and not _is_tokens(text):
            raise OpenAIError(
                400,
                f"input[{index}]: must be a string or an array of token ids (integers)",
                param="input",
            )
        if not text:
            raise OpenAIError(400, f"input[{index}] is empty", param="input")
    return cast(list[str | list[int]], texts)


@dataclass(frozen=True)
class _EmbeddingRequest:
    model: str
    texts: list[str | list[int]]
    encoding: str
    dimensions: int | None
    truncate: bool


def _parse_embeddings(raw: bytes) -> _EmbeddingRequest:
    data: Any = load_body(raw)
    if not isinstance(data, dict):
        raise OpenAIError(400, "the request body must be a JSON object")
    body = cast(dict[str, Any], data)
    unknown = sorted(set(body) - _EMBEDDING_FIELDS)
    if unknown:
        raise OpenAIError(
            400,
            f"'{unknown[0]}' is not supported (supported: {', '.join(sorted(_EMBEDDING_FIELDS))})",
            param=unknown[0],
        )
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise OpenAIError(400, "'model' must name an embedding model", param="model")
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise OpenAIError(
            400, "'encoding_format' must be 'float' or 'base64'", param="encoding_format"
        )
    dimensions = body.get("dimensions")
    if dimensions is not None and (
        isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1
    ):
        raise OpenAIError(400, "'dimensions' must be a positive integer", param="dimensions")
    user = body.get("user")
    if user is not None and (not isinstance(user, str) or len(user) > 256):
        # OpenAI's end-user id: nothing to record for an embedding, so only checked.
        raise OpenAIError(400, "'user' must be a string of 256 or fewer", param="user")
    truncate = body.get("truncate", False)
    if not isinstance(truncate, bool):
        raise OpenAIError(400, "'truncate' must be true or false", param="truncate")
    return _EmbeddingRequest(
        model, _embedding_texts(body), cast(str, encoding), dimensions, truncate
    )


def _encoded(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "float":
        return vector
    import base64
    import struct

    # OpenAI's base64 form: little-endian float32, what its client decodes.
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


@router.post(
    "/v1/embeddings",
    responses=_error_responses(400, 401, 404, 413, 429, 502),
    summary="Embed texts with a catalog embedding model (capability EM), OpenAI style",
    response_model=None,
)
async def embeddings(request: Request, state: State) -> Response:
    """Answer OpenAI's embeddings shape; ``model`` is a catalog embedding model's code."""
    try:
        ph = await _facade(request, state)
        body = _parse_embeddings(await request.body())
        model, encoding, dimensions = body.model, body.encoding, body.dimensions
        try:
            result = await ph.knowledge.embed(model, body.texts, truncate=body.truncate)
        except PilothouseError as error:
            if error.category is ErrorCategory.NOT_FOUND:
                raise OpenAIError(
                    404, error.public_message, param="model", code="model_not_found"
                ) from None
            raise
        if dimensions is not None and dimensions != result.dimension:
            raise OpenAIError(
                400,
                f"model '{model}' gives vectors of {result.dimension} dimensions; "
                f"'dimensions' {dimensions} cannot be honoured (leave it out)",
                param="dimensions",
            )
    except OpenAIError as error:
        return _error_response(error)
    except PilothouseError as error:
        return _error_response(_from_pilothouse(error))
    data = [
        {"object": "embedding", "index": index, "embedding": _encoded(vector, encoding)}
        for index, vector in enumerate(result.vectors)
    ]
    return JSONResponse(
        {
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": result.tokens, "total_tokens": result.tokens},
        }
    )
