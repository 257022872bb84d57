r"""Text a database can keep: no NUL character, no lone surrogate.

PostgreSQL's text types refuse U+0000, and neither database (nor UTF-8)
can hold a lone surrogate (U+D800..U+DFFF without its pair, which JSON's
``\ud800`` escape can produce). Such text is refused where it is a
caller's input (:func:`check_storable`: a 4xx naming the field, nothing
written) and escaped where it is a model's or a tool's output
(:func:`storable`: the character becomes its ``\uXXXX`` escape, and the
message records which were escaped), so an answer is never lost. JSON
columns need neither: their serializer escapes every such character.
"""

from __future__ import annotations

__all__ = ["check_storable", "storable", "storable_value", "unstorable"]

import re
from collections.abc import Mapping
from typing import Any, cast

from pilothouse.errors import InvalidFieldError

_BAD = re.compile("[\x00\ud800-\udfff]")


def unstorable(text: str) -> str | None:
    """What in ``text`` no database can keep (described), or None when it is fine."""
    if "\x00" in text:
        return "a NUL character (U+0000)"
    if text.isascii():
        return None
    found = _BAD.search(text)
    if found is None:
        return None
    return f"a lone surrogate (U+{ord(found.group()):04X})"


def check_storable(value: Any, field: str) -> None:
    """Refuse caller input holding text no database can keep, naming the field.

    Walks strings inside mappings and sequences (``input_data``, runtime
    config, history); keys are checked too.

    Raises:
        InvalidFieldError: the first offending field, e.g. ``input_data.city``.
    """
    if isinstance(value, str):
        what = unstorable(value)
        if what is not None:
            raise InvalidFieldError(
                field, f"contains {what}, which cannot be stored; remove or replace it"
            )
    elif isinstance(value, Mapping):
        for key, item in value.items():  # pyright: ignore[reportUnknownVariableType]
            name = f"{field}.{key}"
            check_storable(key, f"{field} (a key)")
            check_storable(item, name)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
            check_storable(item, f"{field}[{index}]")


def storable(text: str) -> tuple[str, bool]:
    r"""``text`` with each NUL and lone surrogate replaced by its ``\uXXXX`` escape.

    Returns:
        The text to store, and whether anything was escaped.
    """
    if unstorable(text) is None:
        return text, False
    return _BAD.sub(lambda found: f"\\u{ord(found.group()):04x}", text), True


def storable_value(value: Any) -> tuple[Any, bool]:
    r"""A JSON value (a model's structured answer) with every string made storable.

    Strings inside mappings and lists, keys too, get :func:`storable`'s
    ``\uXXXX`` escapes, so the value can be stored, serialized to the caller
    and read back equal: a lone surrogate cannot even be encoded as UTF-8.

    Returns:
        The value (the same object when nothing needed escaping), and
        whether anything was escaped.
    """
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, Mapping):
        mapping = cast("Mapping[Any, Any]", value)
        changed = False
        items: dict[Any, Any] = {}
        for key, item in mapping.items():
            new_key, key_escaped = storable(key) if isinstance(key, str) else (key, False)
            new_item, item_escaped = storable_value(item)
            changed = changed or key_escaped or item_escaped
            items[new_key] = new_item
        return (items, True) if changed else (mapping, False)
    if isinstance(value, list):
        sequence = cast("list[Any]", value)
        pairs = [storable_value(item) for item in sequence]
        if any(escaped for _, escaped in pairs):
            return [item for item, _ in pairs], True
        return sequence, False
    return value, False
