"""Compare: one prompt against two or three targets or configurations, side by side.

Each column is a target of the playground (an action, an agent or a bare
model) and, optionally, a catalog configuration whose options (temperature,
top_p, max_tokens, ...) the column's turn is sent with. Every column is a
normal turn through :mod:`pilothouse.api`: a conversation of its own,
audited, priced and listed in the playground like any other.

``POST /ui/compare`` answers Server-Sent Events, each naming its column:
``column`` (the column's conversation, once known), ``delta``, ``finished``
(the turn's result with its latency) or ``error`` (the column's refusal),
then ``done``. The columns run one after another, not at once, so that one
column's latency is not another's wait for the same model server.
"""

from __future__ import annotations

__all__ = ["router"]

import json
import time
import uuid as uuids
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from pilothouse.api import Pilothouse
from pilothouse.errors import InvalidFieldError, NotFoundError, PilothouseError
from pilothouse.server._conversation_routes import event_data
from pilothouse.server._ui._base import UiFacade, render
from pilothouse.server._ui._playground import MODEL_KEY, SLIDERS
from pilothouse.server._ui._playground import (
    _targets as playground_targets,  # pyright: ignore[reportPrivateUsage]
)
from pilothouse.types import AdHocRun, ChatMemory, ModelOptions, TextDelta, TurnEvent

router = APIRouter(include_in_schema=False)

COMPARE_KEY = "playground_compare"
"""Recorded with a bare model column's system message: the configuration it was sent with."""


class Column(BaseModel):
    """One column: a target, and the configuration whose options it is sent with."""

    model_config = ConfigDict(extra="forbid")

    target: str = Field(min_length=1, max_length=80)
    configuration: str = Field(default="", max_length=64)


class CompareRequest(BaseModel):
    """The body of ``POST /ui/compare``: a prompt and two or three columns."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=100_000)
    columns: list[Column] = Field(min_length=2, max_length=3)


def _sse(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, default=str)}\n\n".encode()


async def _options(ph: Pilothouse, code: str, index: int) -> dict[str, Any]:
    """The model options of a configuration (the playground's settings), for one column."""
    if not code:
        return {}
    try:
        entry = await ph.catalog.get("configurations", code)
    except NotFoundError:
        raise InvalidFieldError(
            f"columns[{index}].configuration", f"'{code}' is not a configuration of this catalog"
        ) from None
    names = {name for name, *_ in SLIDERS}
    return {k: v for k, v in entry.document.items() if k in names and v is not None}


async def _events(
    ph: Pilothouse, text: str, column: Column, index: int
) -> tuple[str, AsyncGenerator[TurnEvent]]:
    """The column's conversation and its turn's events (refused before any event)."""
    options = await _options(ph, column.configuration, index)
    kind, _, code = column.target.partition(":")
    if kind == "model" and code:
        record: dict[str, Any] = {MODEL_KEY: code}
        if column.configuration:
            record[COMPARE_KEY] = {"configuration": column.configuration}
        run = AdHocRun(
            name="playground",
            message=text,
            model=code,
            options=ModelOptions(**options),
            memory=ChatMemory(),
            record=record,
            ask_user=False,
        )
        events = ph.command.stream_adhoc(run)
        return "", events
    found = await ph.query.find_target(column.target)
    if found is None:
        raise InvalidFieldError(
            f"columns[{index}].target", f"no active action, agent or model {column.target!r}"
        )
    uuid = str(uuids.uuid4())
    events = ph.command.start_and_stream(
        text,
        action=found.action_code,
        agent=found.agent_code,
        runtime_config=options or None,
        conversation_uuid=uuid,
    )
    return uuid, events


async def _column(ph: Pilothouse, text: str, column: Column, index: int) -> AsyncGenerator[bytes]:
    """One column's turn, its events tagged with the column's index."""
    started = time.monotonic()
    first: float | None = None
    uuid, events = await _events(ph, text, column, index)
    if uuid:
        yield _sse("column", {"index": index, "uuid": uuid})
    async with aclosing(events):
        async for event in events:
            if not uuid:
                uuid = event.conversation_uuid
                yield _sse("column", {"index": index, "uuid": uuid})
            name, data = event_data(event)
            if isinstance(event, TextDelta) and first is None:
                first = time.monotonic()
            if name == "finished":
                data["latency_ms"] = round((time.monotonic() - started) * 1000)
                data["first_token_ms"] = (
                    round((first - started) * 1000) if first is not None else None
                )
            if name in ("delta", "finished", "tool_call", "retry"):
                yield _sse(name, {**data, "index": index})
    if uuid:
        named = await ph.history.name_if_untitled(uuid, f"Compare: {text}")
        yield _sse("named", {"index": index, "uuid": uuid, "title": named.title})


async def _compare(ph: Pilothouse, body: CompareRequest) -> AsyncGenerator[bytes]:
    """Every column in turn; a refused column says why and the next one runs."""
    for index, column in enumerate(body.columns):
        try:
            async with aclosing(_column(ph, body.text, column, index)) as chunks:
                async for chunk in chunks:
                    yield chunk
        except PilothouseError as exc:
            yield _sse(
                "error", {"index": index, "detail": str(exc), "category": exc.category.value}
            )
    yield _sse("done", {})


@router.get("/compare")
async def compare_page(
    request: Request,
    user: UiFacade,
    target: Annotated[list[str] | None, Query()] = None,
) -> HTMLResponse:
    """The compare page: a prompt, and two or three columns to send it to."""
    targets = await playground_targets(user.ph)
    chosen = list(target or [])[:3]
    ids = [t for t, _ in targets]
    while len(chosen) < 3:
        chosen.append(ids[len(chosen) % len(ids)] if ids and len(chosen) < 2 else "")
    configurations = [
        (e.key, str(e.document.get("name") or ""))
        for e in await user.ph.catalog.list_entries("configurations", active=True)
    ]
    return render(
        request,
        "compare.html",
        user=user,
        targets=targets,
        chosen=chosen,
        configurations=configurations,
    )


@router.post("/ui/compare")
async def compare(user: UiFacade, body: CompareRequest) -> StreamingResponse:
    """Send one prompt to each column in turn, streamed as Server-Sent Events."""
    return StreamingResponse(
        _compare(user.ph, body),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
