"""Tool calls that a model wrote as text, read back into structured calls.

Small local models call tools in their own chat template's syntax (Qwen and
Hermes: ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``), and
sometimes answer a tool-offering request with the call as bare JSON. This
module turns both into :class:`TextCall` objects, normalizing the shapes seen
in the wild the way seed 001 repairs them: a flat ``{name, arguments}`` or a
nested ``{function: {name, arguments}}``, ``parameters`` for ``arguments``,
arguments as a JSON string or an object, missing arguments as ``{}``.

It has no llama.cpp dependency, so the parsing is tested without a model.
"""

from __future__ import annotations

__all__ = [
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "TextCall",
    "calls_in_text",
    "json_call",
    "key_of",
    "marked_calls",
    "opening_name",
    "written_call",
]

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, cast

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_FENCE = re.compile(r"^```[a-zA-Z]*\s*(.*?)\s*```$", re.DOTALL)
_OPENING_NAME = re.compile(
    r'^\s*(?:```[a-zA-Z]*\s*)?\[?\s*\{\s*(?:"type"\s*:\s*"function"\s*,\s*)?'
    r'(?:"function"\s*:\s*\{\s*)?"name"\s*:\s*"([^"]*)"'
)


def key_of(value: object, key: str) -> Any:
    """Return ``value[key]`` if ``value`` is a JSON object (a dict), else ``None``."""
    return cast("dict[str, Any]", value).get(key) if isinstance(value, dict) else None


@dataclass(frozen=True)
class TextCall:
    """One tool call read from a model's text.

    Attributes:
        name: the tool's name.
        arguments: its arguments, always a JSON object.
    """

    name: str
    arguments: dict[str, Any]

    def arguments_json(self) -> str:
        """Return the arguments as the JSON string OpenAI's ``tool_calls`` carry."""
        return json.dumps(self.arguments, ensure_ascii=False)


def json_call(value: object) -> TextCall | None:
    """Read one call from a decoded JSON value, whatever its common shape.

    Args:
        value: e.g. ``{"name": "f", "arguments": {...}}``,
            ``{"type": "function", "function": {"name": "f", "arguments": "{...}"}}``
            or ``{"name": "f", "parameters": {...}}``.

    Returns:
        The call, or ``None`` when the value is not a call (no string name,
        or arguments that are neither an object nor a JSON object string).
    """
    if not isinstance(value, dict):
        return None
    entry = cast("dict[str, Any]", value)
    inner = entry.get("function")
    if isinstance(inner, dict):
        entry = cast("dict[str, Any]", inner)
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        return None
    arguments: object = entry.get("arguments", entry.get("parameters"))
    if arguments is None:
        return TextCall(name, {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return TextCall(name, cast("dict[str, Any]", arguments))


def _json_calls(text: str) -> list[TextCall] | None:
    try:
        value: object = json.loads(text)
    except json.JSONDecodeError:
        return None
    items = cast("list[object]", value) if isinstance(value, list) else [value]
    calls = [json_call(item) for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]


def calls_in_text(text: str, names: Collection[str]) -> list[TextCall] | None:
    """Read an answer that is nothing but tool calls written as JSON.

    The whole text (optionally in a Markdown code fence) must be one call
    object or a list of them, each naming an offered tool; anything else is
    an ordinary answer (a JSON answer about something else stays text).

    Args:
        text: the model's answer.
        names: the names of the tools offered.

    Returns:
        The calls, or ``None`` when the text is not calls.
    """
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1)
    if not body.startswith(("{", "[")):
        return None
    calls = _json_calls(body)
    if calls is None or any(c.name not in names for c in calls):
        return None
    return calls


def written_call(text: str) -> TextCall | None:
    """Read the call a text opens with, whatever follows it and whatever it names.

    Tells an answer that *tries* to call a tool (perhaps one that does not
    exist, perhaps followed by more text) from an ordinary answer.

    Args:
        text: the model's answer.

    Returns:
        The first call written as JSON at the start of the text, or ``None``.
    """
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1)
    try:
        value: object = json.JSONDecoder().raw_decode(body)[0]
    except json.JSONDecodeError:
        return None
    if isinstance(value, list):
        items = cast("list[object]", value)
        return json_call(items[0]) if items else None
    return json_call(value)


def opening_name(text: str) -> str | None:
    """Return the tool name an answer being written as a JSON call opens with.

    Works on the first few tokens of an answer, before its JSON is complete,
    so a call to a tool that does not exist can be stopped early.

    Args:
        text: the beginning of the model's answer.

    Returns:
        The name once ``{"name": "..."`` (or the nested form) is written, else ``None``.
    """
    match = _OPENING_NAME.match(text)
    return match.group(1) if match else None


def marked_calls(text: str) -> tuple[list[TextCall], list[str]]:
    """Read the ``<tool_call>...</tool_call>`` blocks of a model's text.

    A missing closing tag at the very end is accepted (the model stopped
    there), as is a block holding a list of calls.

    Args:
        text: the text from the first ``<tool_call>`` on.

    Returns:
        The calls read, and the raw blocks that are not valid calls.
    """
    calls: list[TextCall] = []
    invalid: list[str] = []
    for chunk in text.split(TOOL_CALL_OPEN)[1:]:
        block = chunk.split(TOOL_CALL_CLOSE, 1)[0].strip()
        found = _json_calls(block)
        if found is None:
            invalid.append(block)
        else:
            calls.extend(found)
    return calls, invalid
