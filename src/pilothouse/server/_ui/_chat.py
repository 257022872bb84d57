"""The playground's chat: a streamed turn, per-prompt edits (forks), answers, tool results.

``POST /ui/chat`` answers Server-Sent Events, the REST stream's events
(``delta``, ``tool_call``, ``status``, ``retry``, ``finished``) framed by
two of the playground's own: ``conversation`` first (the uuid, before the
model answers) and ``named`` last (the title the first prompt gave). A
refused turn is an ``error`` event with the one-line reason.

An edit never changes a recorded message: it forks the conversation
(``ph.history.fork``) and, to resubmit, the browser then streams the prompt
into the fork.
"""

from __future__ import annotations

__all__ = ["router"]

import json
import uuid as uuids
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Form, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from pilothouse.api import Pilothouse, loads_json
from pilothouse.errors import InvalidFieldError, NotFoundError, PilothouseError
from pilothouse.server._conversation_routes import event_data
from pilothouse.server._ui._base import UiFacade
from pilothouse.server._ui._playground import ADHOC, MODEL_KEY, RAG_KEY, SLIDERS
from pilothouse.types import AdHocRun, ChatMemory, ModelOptions, TurnEvent

router = APIRouter(include_in_schema=False)


class RagChoice(BaseModel):
    """The settings panel's RAG toggle: a collection, and who answers from it.

    ``answer_with`` is ``playground`` (the chosen target with the panel's
    settings, searching ``collection``) or ``collection`` (the collection's
    own ``qa_model`` answers, and none of the panel's settings are used).
    """

    model_config = ConfigDict(extra="forbid")

    collection: str = Field(min_length=1, max_length=64)
    answer_with: Literal["playground", "collection"] = "playground"


class ChatRequest(BaseModel):
    """The body of ``POST /ui/chat``."""

    model_config = ConfigDict(extra="forbid")

    conversation: str | None = Field(default=None, max_length=36)
    target: str = Field(min_length=1, max_length=80)
    text: str = Field(min_length=1, max_length=100_000)
    input: dict[str, str] = Field(default_factory=dict[str, str])
    options: dict[str, float] = Field(default_factory=dict[str, float])
    instruction: str = Field(default="", max_length=20_000)
    rag: RagChoice | None = None


def _sse(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, default=str)}\n\n".encode()


def _runtime_config(body: ChatRequest) -> dict[str, Any]:
    known = {name: step for name, _, _, _, step in SLIDERS}
    config: dict[str, Any] = {}
    for name, value in body.options.items():
        if name not in known:
            raise InvalidFieldError(f"options.{name}", f"must be one of {sorted(known)}")
        config[name] = int(value) if known[name] >= 1 else value
    if body.instruction.strip():
        config["instruction"] = body.instruction
        config["instructionMode"] = "append"
    return config


async def _qa_model(ph: Pilothouse, code: str) -> str:
    """The collection's own answering model; refused by name when it has none or cannot chat."""
    try:
        entry = await ph.catalog.get("document_collections", code)
    except NotFoundError:
        raise InvalidFieldError(
            "rag.collection", f"'{code}' is not a document collection of this catalog"
        ) from None
    if not entry.active:
        raise InvalidFieldError("rag.collection", f"document collection '{code}' is inactive")
    model = entry.document.get("qa_model")
    if not model:
        raise InvalidFieldError(
            "rag.answer_with",
            f"document collection '{code}' has no qa_model: choose \"Playground settings\" "
            "or give the collection a qa_model in the catalog",
        )
    found = await ph.catalog.get("models", str(model))
    if not found.active or "EM" in (found.document.get("capabilities") or []):
        raise InvalidFieldError(
            "rag.answer_with",
            f"the qa_model '{model}' of collection '{code}' is inactive or no chat model",
        )
    return str(model)


async def _adhoc(
    ph: Pilothouse, body: ChatRequest, model: str, *, continue_memory: bool = True
) -> AsyncGenerator[bytes]:
    """A bare model: one ad-hoc turn, streamed as a governed turn is (``stream_adhoc``).

    With RAG on it searches the chosen collection; when the collection's own
    model answers (``model`` is its ``qa_model``), the panel's settings are
    not sent.
    """
    rag = body.rag
    own = rag is not None and rag.answer_with == "collection"
    memory_id = None
    if body.conversation and continue_memory:
        memory_id = (await ph.query.get_conversation(body.conversation)).memory_id
    options = {} if own else _runtime_config(body)
    record: dict[str, Any] = {MODEL_KEY: model}
    if rag is not None:
        record[RAG_KEY] = {"collection": rag.collection, "answer_with": rag.answer_with}
    run = AdHocRun(
        name="playground",
        message=body.text,
        model=model,
        instruction=options.pop("instruction", None),
        options=ModelOptions(**{k: v for k, v in options.items() if k != "instructionMode"}),
        memory=ChatMemory(memory_id=memory_id),
        record=record,
        collection=rag.collection if rag is not None else None,
        # Just the model: no AskUserQuestion, which would also keep a local
        # model (llama.cpp streams only without tools) from streaming.
        ask_user=False,
    )
    uuid: str | None = None
    async with aclosing(ph.command.stream_adhoc(run)) as events:
        async for event in events:
            if uuid is None:
                # Every event names the conversation: the first tells the
                # browser which one it is before the model has answered.
                uuid = event.conversation_uuid
                yield _sse("conversation", {"uuid": uuid})
            yield _sse(*event_data(event))
    if uuid is not None:
        named = await ph.history.name_if_untitled(uuid, body.text)
        yield _sse("named", {"uuid": uuid, "title": named.title})


def _rag_event(body: ChatRequest, model: str | None) -> bytes:
    assert body.rag is not None
    return _sse(
        "rag",
        {
            "collection": body.rag.collection,
            "answer_with": body.rag.answer_with,
            "model": model,
        },
    )


async def _collection_answers(ph: Pilothouse, body: ChatRequest) -> AsyncGenerator[bytes]:
    """RAG with "Collection's model": an ad-hoc run on the collection's qa_model, no sliders."""
    assert body.rag is not None
    given = [name for name in ("options", "instruction", "input") if getattr(body, name)]
    if given:
        raise InvalidFieldError(
            given[0],
            'not used when the collection\'s model answers: choose "Playground settings" '
            "to send the panel's settings",
        )
    model = await _qa_model(ph, body.rag.collection)
    yield _rag_event(body, model)
    # Only an ad-hoc conversation is continued: an action's stays with its action.
    current = None
    if body.conversation:
        current = await ph.query.get_conversation(body.conversation)
    chunks = _adhoc(
        ph, body, model, continue_memory=current is not None and current.action_code == ADHOC
    )
    async with aclosing(chunks):
        async for chunk in chunks:
            yield chunk


async def _turn(ph: Pilothouse, body: ChatRequest) -> AsyncGenerator[bytes]:
    kind, _, code = body.target.partition(":")
    if body.rag is not None and body.rag.answer_with == "collection":
        async with aclosing(_collection_answers(ph, body)) as answers:
            async for chunk in answers:
                yield chunk
        return
    if body.rag is not None:
        yield _rag_event(body, code if kind == "model" else None)
    if kind == "model":
        async with aclosing(_adhoc(ph, body, code)) as chunks:
            async for chunk in chunks:
                yield chunk
        return
    config = _runtime_config(body)
    if body.rag is not None:
        config["retrieval"] = {"collections": [body.rag.collection]}
    events: AsyncGenerator[TurnEvent]
    if body.conversation:
        uuid = body.conversation
        current = await ph.query.get_conversation(uuid)
        if current.action_code == ADHOC:
            model = body.target.partition(":")[2]
            async with aclosing(_adhoc(ph, body, model)) as chunks:
                async for chunk in chunks:
                    yield chunk
            return
        events = ph.command.stream_message(
            uuid, body.text, input_data=body.input or None, runtime_config=config
        )
    else:
        found = await ph.query.find_target(body.target)
        if found is None:
            raise InvalidFieldError("target", f"no active action or agent {body.target!r}")
        uuid = str(uuids.uuid4())
        events = ph.command.start_and_stream(
            body.text,
            action=found.action_code,
            agent=found.agent_code,
            input_data=body.input or None,
            runtime_config=config,
            conversation_uuid=uuid,
        )
    yield _sse("conversation", {"uuid": uuid})
    async with aclosing(events):
        async for event in events:
            yield _sse(*event_data(event))
    named = await ph.history.name_if_untitled(uuid, body.text)
    yield _sse("named", {"uuid": uuid, "title": named.title})


async def _guarded(chunks: AsyncGenerator[bytes]) -> AsyncGenerator[bytes]:
    """End the stream with an ``error`` event when the turn is refused.

    A browser that goes away closes this generator. Every generator under it
    is read inside ``aclosing``, so each closes in turn, in this task, and
    the turn is cancelled and recorded before the close returns; left to the
    garbage collector, they were closed later from another task, which
    anyio's cancel scopes refuse.
    """
    try:
        async with aclosing(chunks):
            async for chunk in chunks:
                yield chunk
    except PilothouseError as exc:
        yield _sse("error", {"detail": str(exc), "category": exc.category.value})


@router.post("/ui/chat")
async def chat(user: UiFacade, body: ChatRequest) -> StreamingResponse:
    """Run one turn and stream it as Server-Sent Events."""
    return StreamingResponse(
        _guarded(_turn(user.ph, body)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.post("/ui/conversations/{uuid}/cancel")
async def stop(user: UiFacade, uuid: str) -> JSONResponse:
    """Stop: cancel the conversation's running turn (``ph.command.cancel``).

    The turn ends ``TE`` and keeps what the model had written so far (an
    interrupted answer); the stream that was running it ends with its result.
    """
    await user.ph.query.get_conversation(uuid)  # another tenant's uuid is not found
    return JSONResponse({"cancelled": await user.ph.command.cancel(uuid)})


Operation = Literal["save", "submit", "delete", "delete_following", "resubmit", "regenerate"]


@router.post("/ui/conversations/{uuid}/prompts/{sequence}")
async def edit_prompt(
    user: UiFacade,
    uuid: str,
    sequence: int,
    op: Annotated[Operation, Form()],
    text: Annotated[str, Form(max_length=100_000)] = "",
) -> JSONResponse:
    """Edit, delete or resubmit one prompt: a fork of the conversation.

    Answers ``{"conversation": <the fork>, "submit": <text to stream> | null}``.
    "Submit again" appends the same prompt to the conversation as it is: no fork.
    "Regenerate" forks before the prompt and sends it again: a new answer in
    the place of the old one.
    """
    ph = user.ph
    messages = await ph.query.get_conversation_messages(uuid)
    prompt = next((m for m in messages if m.sequence == sequence), None)
    if prompt is None or prompt.role.value != "US":
        raise InvalidFieldError("sequence", f"message {sequence} is no prompt of this conversation")
    if op in ("save", "submit") and not text.strip():
        raise InvalidFieldError("text", "the edited prompt is empty")
    if op == "resubmit":
        return JSONResponse({"conversation": uuid, "submit": prompt.content})
    if op == "regenerate":
        fork = await ph.history.fork(uuid, before=sequence, reason="regenerate answer")
        return JSONResponse({"conversation": fork.uuid, "submit": prompt.content})
    if op == "save":
        fork = await ph.history.fork(uuid, replace={sequence: text}, reason="edit prompt (save)")
        return JSONResponse({"conversation": fork.uuid, "submit": None})
    if op == "submit":
        fork = await ph.history.fork(uuid, before=sequence, reason="edit prompt (submit)")
        return JSONResponse({"conversation": fork.uuid, "submit": text})
    if op == "delete":
        fork = await ph.history.fork(uuid, drop_prompt=sequence, reason="delete prompt")
        return JSONResponse({"conversation": fork.uuid, "submit": None})
    fork = await ph.history.fork(
        uuid, before=sequence, reason="delete prompt and all following messages"
    )
    return JSONResponse({"conversation": fork.uuid, "submit": None})


@router.post("/ui/conversations/{uuid}/answers")
async def answer(request: Request, user: UiFacade, uuid: str) -> JSONResponse:
    """Answer the model's pending questions (fields ``answer:<question id>``) and continue."""
    form = await request.form()
    answers = {
        str(name).removeprefix("answer:"): str(value)
        for name, value in form.items()
        if str(name).startswith("answer:")
    }
    result = await user.ph.command.submit_answers(uuid, answers)
    return JSONResponse(result.as_json())


@router.post("/ui/conversations/{uuid}/tool-results")
async def tool_result(
    user: UiFacade,
    uuid: str,
    call_id: Annotated[str, Form(max_length=128)],
    result: Annotated[str, Form(max_length=1_000_000)],
) -> JSONResponse:
    """Give the result of a custom-schema tool call the model made; JSON or text."""
    value: Any
    try:
        value = loads_json(result, check=False)
    except json.JSONDecodeError:
        value = result
    done = await user.ph.command.submit_tool_result(uuid, call_id, value)
    return JSONResponse(done.as_json())
