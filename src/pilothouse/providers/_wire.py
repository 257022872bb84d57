"""Tool calls validated and repaired on the wire, before any SDK parses them.

Seed 001 repairs the raw message a model server sends, not the typed parts a
client library builds from it: once an SDK or pydantic-ai has parsed a
malformed call, the call is gone (a flat ``{name, arguments}`` has no
``function``, so it is dropped) or the whole answer is refused (a missing
``id`` or ``type`` fails validation). ``WireRepairTransport``
(``_wire_transport``) sits under the HTTP client of every provider and
rewrites the body of each
OpenAI-compatible chat completion, whole or streamed, before anything reads
it:

- a missing ``id`` becomes ``repaired-{time}-{index}``;
- a missing ``type`` becomes ``function``;
- a flat ``{name, arguments}`` is nested under ``function``;
- arguments given as a JSON object are written as the JSON string the wire
  format carries, and missing arguments as ``{}``.

A call that cannot be repaired (no function name, arguments that are not
JSON) is passed on as the model sent it, so the run loop tells the model
what was wrong and records what it sent. An answer that cannot be read at
all (a 200 whose body is not JSON, no ``choices``, a stream cut before its
end) raises :class:`~pilothouse.errors.UnparseableResponseError`, which the
run loop retries with linear backoff.

The repairs made during a model call are collected by :func:`wire_notes`,
so the audit timeline says which call was repaired and how.
"""

from __future__ import annotations

__all__ = [
    "WireNotes",
    "repair_completion",
    "repair_message",
    "repair_message_stream",
    "repair_stream",
    "wire_notes",
]

import json
import time
from collections.abc import AsyncIterator, Generator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, cast

from pilothouse.errors import UnparseableResponseError


@dataclass
class WireNotes:
    """What the wire layer repaired during one model call.

    Attributes:
        repairs: the repairs made, by the (possibly generated) tool call id.
    """

    repairs: dict[str, list[str]] = field(default_factory=lambda: {})

    def add(self, call_id: str, repairs: list[str]) -> None:
        """Note the repairs made to one call."""
        if repairs:
            self.repairs.setdefault(call_id, []).extend(repairs)


_NOTES: ContextVar[WireNotes | None] = ContextVar("pilothouse_wire_notes", default=None)


@contextmanager
def wire_notes() -> Generator[WireNotes]:
    """Collect the repairs the wire layer makes inside the block (one model call)."""
    notes = WireNotes()
    token = _NOTES.set(notes)
    try:
        yield notes
    finally:
        _NOTES.reset(token)


def _note(call_id: str, repairs: list[str]) -> None:
    notes = _NOTES.get()
    if notes is not None:
        notes.add(call_id, repairs)


def _stamp() -> int:
    return int(time.time() * 1000)


def _repair_function(call: dict[str, Any], repairs: list[str], *, whole: bool) -> None:
    """Nest a flat call under ``function`` and write object arguments as a string."""
    function = call.get("function")
    if not isinstance(function, dict) and ("name" in call or "arguments" in call):
        nested: dict[str, Any] = {}
        for key in ("name", "arguments", "parameters"):
            if key in call:
                nested["arguments" if key == "parameters" else key] = call.pop(key)
        call["function"] = nested
        repairs.append("flat call: nested under function")
        function = nested
    if not isinstance(function, dict):
        if whole:
            call["function"] = function = {}
        else:
            return
    inner = cast("dict[str, Any]", function)
    if "arguments" not in inner and "parameters" in inner:
        inner["arguments"] = inner.pop("parameters")
    arguments = inner.get("arguments")
    if isinstance(arguments, (dict, list)):
        inner["arguments"] = json.dumps(arguments, ensure_ascii=False)
        repairs.append("arguments given as an object: sent on as a JSON string")
    elif whole and (arguments is None or (isinstance(arguments, str) and not arguments.strip())):
        inner["arguments"] = "{}"
        repairs.append("missing arguments: {}")
    elif arguments is not None and not isinstance(arguments, str):
        # A number or boolean: passed on as JSON text, which the run loop
        # reports to the model as arguments that are not an object.
        inner["arguments"] = json.dumps(arguments)
    if whole and not isinstance(inner.get("name"), str):
        # Kept with an empty name so the run loop reports it to the model
        # ("missing function name") instead of the SDK refusing the answer.
        inner["name"] = ""


def repair_calls_in_message(calls: list[Any], stamp: int) -> list[Any]:
    """Repair the ``tool_calls`` of one whole (non-streamed) message.

    Args:
        calls: the message's ``tool_calls`` as decoded JSON.
        stamp: the time part of generated ids.

    Returns:
        The repaired calls (an entry that is not an object becomes a call
        without a name, which the run loop reports to the model).
    """
    out: list[Any] = []
    for index, raw in enumerate(calls):
        repairs: list[str] = []
        if not isinstance(raw, dict):
            # Kept, as a call without a name, so the model is told about it.
            raw = {"function": {"arguments": json.dumps(raw)}}
            repairs.append("not an object: kept as a call without a name")
        call = cast("dict[str, Any]", raw)
        _repair_function(call, repairs, whole=True)
        if call.get("type") != "function":
            repairs.append("missing type: function")
            call["type"] = "function"
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            call["id"] = call_id = f"repaired-{stamp}-{index}"
            repairs.append("missing id: generated")
        _note(call_id, repairs)
        out.append(call)
    return out


def _completion_object(body: bytes, what: str) -> dict[str, Any]:
    try:
        value: object = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        preview = body[:80].decode("utf-8", "replace")
        raise UnparseableResponseError(
            f"the provider's {what} is not JSON ({exc}): {preview!r}"
        ) from exc
    if not isinstance(value, dict):
        raise UnparseableResponseError(f"the provider's {what} is not a JSON object")
    return cast("dict[str, Any]", value)


def repair_completion(body: bytes) -> bytes:
    """Repair a whole chat completion body.

    Args:
        body: the 200 answer of ``/chat/completions``.

    Returns:
        The body with every tool call in the wire format.

    Raises:
        UnparseableResponseError: the body is not a JSON object or has no choices.
    """
    data = _completion_object(body, "answer")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        error = data.get("error")
        said = f": {json.dumps(error, ensure_ascii=False)[:300]}" if error else ""
        raise UnparseableResponseError(f"the provider answered with no choices{said}")
    stamp = _stamp()
    changed = False
    for choice in cast("list[Any]", choices):
        message = (
            cast("dict[str, Any]", choice).get("message") if isinstance(choice, dict) else None
        )
        if not isinstance(message, dict):
            continue
        calls = cast("dict[str, Any]", message).get("tool_calls")
        if isinstance(calls, list) and calls:
            before = json.dumps(calls)
            repaired = repair_calls_in_message(cast("list[Any]", calls), stamp)
            cast("dict[str, Any]", message)["tool_calls"] = repaired
            changed = changed or json.dumps(repaired) != before
    return json.dumps(data, ensure_ascii=False).encode() if changed else body


@dataclass
class _StreamState:
    """What a streamed answer has said so far."""

    stamp: int = field(default_factory=_stamp)
    done: bool = False
    finished: bool = False
    answered: bool = False
    # Per choice: the tool indexes started, and the last one.
    started: dict[int, dict[int, str]] = field(default_factory=lambda: {})
    last: dict[int, int] = field(default_factory=lambda: {})

    def repair_chunk(self, chunk: dict[str, Any]) -> None:
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return
        listed = cast("list[Any]", choices)
        self.answered = self.answered or bool(listed)
        for position, raw in enumerate(listed):
            if not isinstance(raw, dict):
                continue
            choice = cast("dict[str, Any]", raw)
            if choice.get("finish_reason"):
                self.finished = True
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                continue
            calls = cast("dict[str, Any]", delta).get("tool_calls")
            if isinstance(calls, list):
                number = choice.get("index", position)
                self._repair_deltas(
                    number if isinstance(number, int) else position, cast("list[Any]", calls)
                )

    def _repair_deltas(self, choice: int, calls: list[Any]) -> None:
        started = self.started.setdefault(choice, {})
        for raw in calls:
            if not isinstance(raw, dict):
                continue
            call = cast("dict[str, Any]", raw)
            repairs: list[str] = []
            opens = "name" in call or (
                isinstance(call.get("function"), dict)
                and "name" in cast("dict[str, Any]", call["function"])
            )
            index = call.get("index")
            if not isinstance(index, int):
                # A server that sends each call whole, without an index:
                # a call that names its function starts a new one.
                last = self.last.get(choice, -1)
                index = (max(started, default=-1) + 1) if opens or last < 0 else last
                call["index"] = index
            self.last[choice] = index
            _repair_function(call, repairs, whole=False)
            if index not in started:
                function = call.get("function")
                if not isinstance(function, dict):
                    call["function"] = function = {}
                opening = cast("dict[str, Any]", function)
                if not isinstance(opening.get("name"), str):
                    # A call is parsed only once it has a name: without one
                    # it would be dropped, not reported to the model. A name
                    # sent in a later delta is appended to this one.
                    opening["name"] = ""
                if call.get("type") != "function":
                    repairs.append("missing type: function")
                    call["type"] = "function"
                call_id = call.get("id")
                if not isinstance(call_id, str) or not call_id:
                    call["id"] = call_id = f"repaired-{self.stamp}-{index}"
                    repairs.append("missing id: generated")
                started[index] = call_id
            if repairs:
                _note(started[index], repairs)


async def repair_stream(lines: AsyncIterator[str]) -> AsyncIterator[bytes]:
    """Repair a streamed chat completion (Server-Sent Events), event by event.

    Args:
        lines: the body's lines, decoded.

    Yields:
        The events, with every tool-call delta in the wire format.

    Raises:
        UnparseableResponseError: an event's data is not JSON, no event held
            a choice, or the stream ended with neither a finish reason nor
            ``[DONE]``.
    """
    state = _StreamState()
    async for line in lines:
        if not line.startswith("data:"):
            yield (line + "\n").encode()
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            state.done = True
            yield b"data: [DONE]\n"
            continue
        if not data:
            yield (line + "\n").encode()
            continue
        chunk = _completion_object(data.encode(), "streamed event")
        state.repair_chunk(chunk)
        if '"tool_calls"' in data:
            yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n".encode()
        else:
            # Nothing to repair in a text chunk: sent on as it came.
            yield (line + "\n").encode()
    if not state.done and not state.finished:
        raise UnparseableResponseError(
            "the provider's stream ended before the answer was finished "
            "(no finish reason, no [DONE])"
        )
    if not state.answered:
        raise UnparseableResponseError("the provider streamed no choices")


# -- Anthropic Messages -------------------------------------------------------


def _repair_tool_use(block: dict[str, Any], index: int, stamp: int, *, whole: bool) -> None:
    """Repair one ``tool_use`` content block: id, input as an object."""
    repairs: list[str] = []
    if "input" not in block:
        for alias in ("arguments", "parameters"):
            if alias in block:
                block["input"] = block.pop(alias)
                repairs.append(f"{alias} given for input")
                break
    value = block.get("input")
    if isinstance(value, str):
        try:
            parsed: object = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            block["input"] = parsed
            repairs.append("input given as a JSON string: parsed")
    elif value is None and whole:
        block["input"] = {}
        repairs.append("missing arguments: {}")
    call_id = block.get("id")
    if not isinstance(call_id, str) or not call_id:
        block["id"] = call_id = f"repaired-{stamp}-{index}"
        repairs.append("missing id: generated")
    _note(call_id, repairs)


def repair_message(body: bytes) -> bytes:
    """Repair a whole Anthropic Messages answer (``tool_use`` blocks).

    Args:
        body: the 200 answer of ``/v1/messages``.

    Returns:
        The body with every ``tool_use`` block carrying an id and an object input.

    Raises:
        UnparseableResponseError: the body is not a JSON object or has no content list.
    """
    data = _completion_object(body, "answer")
    content = data.get("content")
    if not isinstance(content, list):
        raise UnparseableResponseError("the provider's answer has no content list")
    stamp = _stamp()
    before = json.dumps(content)
    for index, block in enumerate(cast("list[Any]", content)):
        if isinstance(block, dict) and cast("dict[str, Any]", block).get("type") == "tool_use":
            _repair_tool_use(cast("dict[str, Any]", block), index, stamp, whole=True)
    return json.dumps(data, ensure_ascii=False).encode() if json.dumps(content) != before else body


async def repair_message_stream(lines: AsyncIterator[str]) -> AsyncIterator[bytes]:
    """Repair a streamed Anthropic Messages answer, event by event.

    Raises:
        UnparseableResponseError: an event's data is not JSON, or the stream
            ended before ``message_stop``.
    """
    stamp = _stamp()
    stopped = False
    async for line in lines:
        if not line.startswith("data:") or not line[5:].strip():
            yield (line + "\n").encode()
            continue
        event = _completion_object(line[5:].strip().encode(), "streamed event")
        kind = event.get("type")
        stopped = stopped or kind in ("message_stop", "error")
        block = event.get("content_block")
        if kind == "content_block_start" and isinstance(block, dict):
            inner = cast("dict[str, Any]", block)
            if inner.get("type") == "tool_use":
                index = event.get("index", 0)
                _repair_tool_use(inner, index if isinstance(index, int) else 0, stamp, whole=False)
        yield f"data: {json.dumps(event, ensure_ascii=False)}\n".encode()
    if not stopped:
        raise UnparseableResponseError(
            "the provider's stream ended before the answer was finished (no message_stop)"
        )
