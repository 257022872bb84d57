"""Validate and repair the tool calls a model makes before anything runs.

Models, small local ones above all, make malformed calls: no id, arguments
as a JSON string (sometimes encoded twice), no arguments at all, the call
written as JSON inside the text instead of as a tool call, flat
``{name, arguments}`` where the wire format nests ``function``, or a tool
name that is almost right. Each is repaired when the intent is clear;
what cannot be repaired becomes a :class:`CallProblem` the model is told
about, never an exception.
"""

from __future__ import annotations

__all__ = [
    "EXPECTED_FORMAT",
    "CallProblem",
    "RepairedCall",
    "as_sent",
    "extract_text_calls",
    "repair_calls",
    "used_call_ids",
]

import copy
import difflib
import json
import re
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic_ai.messages import ToolCallPart


@dataclass
class RepairedCall:
    """A call ready for policy and execution.

    Attributes:
        call_id: the model's id, or a generated one.
        name: the tool name.
        arguments: validated arguments.
        repairs: what was repaired, for the audit timeline.
        from_text: the call was found in the answer's text.
    """

    call_id: str
    name: str
    arguments: dict[str, Any]
    repairs: list[str] = field(default_factory=lambda: [])
    from_text: bool = False


@dataclass(frozen=True)
class CallProblem:
    """A call that cannot run, with what the model should be told.

    Attributes:
        call_id: the model's id, or a generated one.
        name: the tool name as the model wrote it (may be empty).
        message: what is wrong, one line.
        from_text: the call was found in the answer's text.
        arguments: the arguments exactly as the model sent them, for the
            record (an object; anything else as ``{"raw": ...}``).
        index: the call's position in the response.
    """

    call_id: str
    name: str
    message: str
    from_text: bool = False
    arguments: dict[str, Any] = field(default_factory=lambda: {})
    index: int = 0


EXPECTED_FORMAT = (
    '{"id": "<call id>", "type": "function", "function": {"name": "<one of the offered tools>", '
    '"arguments": {<a JSON object matching the tool\'s parameters>}}}'
)
"""The shape of a tool call, told to a model whose call could not be used (seed 001)."""


def as_sent(raw: Any) -> dict[str, Any]:
    """The arguments a model sent, as an object for the record."""
    if isinstance(raw, dict):
        return cast("dict[str, Any]", raw)
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            return {"raw": raw}
        if isinstance(value, dict):
            return cast("dict[str, Any]", value)
    return {} if raw is None else {"raw": raw}


_Shaped = tuple[str, Any, str | None, list[str]]
"""A call found in text: name, raw arguments, id, repairs made."""

_JSON_BLOCK = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def _new_id() -> str:
    return f"call_{uuid.uuid4().hex[:12]}"


def _decode_arguments(raw: Any) -> tuple[dict[str, Any] | None, list[str], str | None]:
    """Return arguments as a dict, the repairs made, or an error."""
    repairs: list[str] = []
    value = raw
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}, ["missing arguments: {}"], None
    for decoded in range(2):
        if not isinstance(value, str):
            break
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            return None, repairs, f"arguments are not valid JSON ({exc.msg} at position {exc.pos})"
        # One JSON string is how the OpenAI wire carries arguments: only a
        # string inside that string is a repair.
        if decoded:
            repairs.append("arguments encoded twice as a JSON string")
    if isinstance(value, dict):
        return cast("dict[str, Any]", value), repairs, None
    return None, repairs, f"arguments must be a JSON object, not {type(value).__name__}"


def _shape(candidate: Any) -> _Shaped | None:
    """Recognise one call written as JSON: flat, nested or OpenAI-shaped."""
    if not isinstance(candidate, dict):
        return None
    item = cast("dict[str, Any]", candidate)
    repairs: list[str] = []
    call_id = item.get("id") if isinstance(item.get("id"), str) else None
    function = item.get("function")
    if isinstance(function, dict):
        nested = cast("dict[str, Any]", function)
        if item.get("type") != "function":
            repairs.append("missing type: function")
        name = nested.get("name")
        arguments = nested.get("arguments", nested.get("parameters"))
    else:
        name = item.get("name") or item.get("tool") or item.get("tool_name")
        arguments = item.get("arguments", item.get("parameters", item.get("args")))
        repairs.append("flat call: nested under function")
    if not isinstance(name, str) or not name:
        return None
    return name, arguments, call_id, repairs


def extract_text_calls(
    text: str, known: Callable[[str], bool]
) -> list[tuple[str, Any, str | None, list[str]]]:
    """Find tool calls written as JSON inside an answer's text.

    Only calls naming a known tool (or close to one) count, so an ordinary
    JSON answer is never mistaken for a call.
    """
    sources = [m.group(1) for m in _JSON_BLOCK.finditer(text)] or [text]
    found: list[_Shaped] = []
    for source in sources:
        start = min((i for i in (source.find("{"), source.find("[")) if i >= 0), default=-1)
        if start < 0:
            continue
        try:
            value, _ = json.JSONDecoder().raw_decode(source[start:])
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and "tool_calls" in value:
            value = cast("dict[str, Any]", value)["tool_calls"]
        items: list[Any] = cast("list[Any]", value) if isinstance(value, list) else [value]
        for item in items:
            shaped = _shape(item)
            if shaped is not None and known(shaped[0]):
                found.append(shaped)
    return found


def used_call_ids(history: Sequence[Any], memory: Sequence[Any]) -> set[str]:
    """The call ids a conversation already holds.

    Args:
        history: the model messages of the turn so far.
        memory: the stored messages the turn began with (``tool_call_id``).

    Returns:
        Every id found.
    """
    used = {m.tool_call_id for m in memory if getattr(m, "tool_call_id", None)}
    for message in history:
        for part in getattr(message, "parts", ()):
            call_id = getattr(part, "tool_call_id", None)
            if isinstance(call_id, str) and call_id:
                used.add(call_id)
    return used


def with_defaults(arguments: dict[str, Any], schema: Any) -> dict[str, Any]:
    """Return ``arguments`` with the defaults its object schema declares filled in.

    Only absent properties get their ``default`` (a copy); nested objects
    given by the caller get theirs too. Arguments are never removed or changed.
    """
    if not isinstance(schema, Mapping):
        return arguments
    properties = cast("Mapping[str, Any]", schema).get("properties")
    if not isinstance(properties, Mapping):
        return arguments
    filled = dict(arguments)
    for key, sub in cast("Mapping[str, Any]", properties).items():
        if not isinstance(sub, Mapping):
            continue
        sub_schema = cast("Mapping[str, Any]", sub)
        if key not in filled and "default" in sub_schema:
            filled[key] = copy.deepcopy(sub_schema["default"])
        elif isinstance(filled.get(key), dict):
            filled[key] = with_defaults(cast("dict[str, Any]", filled[key]), sub_schema)
    return filled


def repair_calls(
    parts: Sequence[ToolCallPart],
    text: str,
    schemas: Mapping[str, Any],
    *,
    look_in_text: bool,
    wire_repairs: Mapping[str, Sequence[str]] | None = None,
    used_ids: Collection[str] = (),
) -> tuple[list[RepairedCall], list[CallProblem]]:
    """Repair and validate the calls of one model response.

    Args:
        parts: the tool calls the provider reported.
        text: the response text (searched for JSON calls when ``look_in_text``).
        schemas: compiled validators (``iter_errors``) by tool name; the keys
            are the known tool names.
        look_in_text: search the text for calls when no call was reported.
        wire_repairs: repairs made on the wire before parsing, by call id.
        used_ids: call ids the conversation already holds; an upstream that
            numbers its calls afresh each round (``call_0`` every time) gets
            a new id for the record, or the second round could not be stored.

    Returns:
        The calls that may run, and the problems to report to the model.
    """
    names = list(schemas)
    raw: list[tuple[str, Any, str | None, list[str], bool]] = [
        (part.tool_name, part.args, part.tool_call_id or None, [], False) for part in parts
    ]
    if not raw and look_in_text and text.strip():

        def known(name: str) -> bool:
            return name in schemas or bool(difflib.get_close_matches(name, names, n=1))

        raw = [(n, a, i, r, True) for n, a, i, r in extract_text_calls(text, known)]
    calls: list[RepairedCall] = []
    problems: list[CallProblem] = []
    seen: set[str] = set()
    for index, (name, raw_args, call_id, repairs, from_text) in enumerate(raw):
        if call_id and wire_repairs and call_id in wire_repairs:
            repairs = [*wire_repairs[call_id], *repairs]
        if not call_id or call_id in seen or call_id in used_ids:
            if call_id:
                repairs = [*repairs, f"duplicate id: {call_id} recorded as a new one"]
            else:
                repairs = [*repairs, "missing id: generated"]
            call_id = _new_id()
        seen.add(call_id)
        sent = as_sent(raw_args)
        if not name:
            problems.append(
                CallProblem(call_id, "", "missing function name", from_text, sent, index)
            )
            continue
        if name not in schemas:
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            available = ", ".join(sorted(names)) or "none"
            problems.append(
                CallProblem(
                    call_id,
                    name,
                    f"unknown tool '{name}'{hint} (available: {available})",
                    from_text,
                    sent,
                    index,
                )
            )
            continue
        arguments, decoded, error = _decode_arguments(raw_args)
        if arguments is None:
            problems.append(
                CallProblem(call_id, name, error or "bad arguments", from_text, sent, index)
            )
            continue
        validator = schemas[name]
        # genai-4j: defaults declared in the tool's input schema are applied
        # (a script tool received {} where its schema said what to assume).
        arguments = with_defaults(arguments, getattr(validator, "schema", None))
        errors = [
            f"{'/'.join(str(p) for p in e.path) or '(arguments)'}: {e.message}"
            for e in sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
        ]
        if errors:
            problems.append(
                CallProblem(
                    call_id,
                    name,
                    "invalid arguments: " + "; ".join(errors),
                    from_text,
                    sent,
                    index,
                )
            )
            continue
        calls.append(RepairedCall(call_id, name, arguments, [*repairs, *decoded], from_text))
    return calls, problems
