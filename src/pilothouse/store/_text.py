r"""The input rules: text and numbers every database keeps the same way.

PostgreSQL's text types refuse U+0000, and neither database (nor UTF-8)
can hold a lone surrogate (U+D800..U+DFFF without its pair, which JSON's
``\ud800`` escape can produce). Such text is refused where it is a
caller's input (:func:`check_input`: a 4xx naming the field, nothing
written) and escaped where it is a model's or a tool's output
(:func:`storable`: the character becomes its ``\uXXXX`` escape, and the
message records which were escaped), so an answer is never lost. JSON
columns need neither: their serializer escapes every such character.

Numbers follow one rule too: an integer must fit in 64 bits (SQLite's
integers, PostgreSQL's ``bigint``; a JSON column of PostgreSQL would keep a
larger one, SQLite's would not compare it the same) and a number must be
finite (PostgreSQL's ``jsonb`` refuses NaN and Infinity, SQLite keeps them).
:func:`loads_json` reads a request body without failing on an integer of
thousands of digits (Python refuses to convert one), so the rule can name
the field that holds it.
"""

from __future__ import annotations

__all__ = [
    "INT_MAX",
    "INT_MIN",
    "OversizedInt",
    "check_input",
    "check_json",
    "check_length",
    "check_uuid",
    "input_problem",
    "loads_json",
    "read_int",
    "storable",
    "storable_value",
    "unstorable",
]

import dataclasses
import json
import math
import re
import uuid
from collections.abc import Mapping
from typing import Any, cast

from pilothouse.errors import InvalidFieldError

_BAD = re.compile("[\x00\ud800-\udfff]")

INT_MAX = 2**63 - 1
"""The largest integer an input may hold (64-bit signed)."""
INT_MIN = -(2**63)
"""The smallest integer an input may hold (64-bit signed)."""

# Python refuses to read an integer of more than 4,300 digits from text (the
# conversion takes quadratic time); a longer one is not converted at all.
_LONGEST_READ = 4_300


class OversizedInt(int):
    """Stands for an integer too long to convert (its value is 2**64, its sign kept).

    Every such integer is far outside the 64-bit range, so :func:`check_input`
    refuses it naming its field and the digits it had; the stand-in value
    itself is never kept (building the real one would take the quadratic time
    Python's limit avoids).

    Attributes:
        digits: how many digits the input's integer had.
    """

    digits: int

    def __new__(cls, text: str) -> OversizedInt:
        """Stand for the integer written as ``text`` (digits, maybe signed)."""
        digits = len(text.lstrip("+-").replace("_", ""))
        sign = -1 if text.startswith("-") else 1
        made = super().__new__(cls, sign * 2**64)
        made.digits = digits
        return made


def _digits(value: int) -> int:
    if isinstance(value, OversizedInt):
        return value.digits
    # Not len(str(value)): Python refuses to write an integer of thousands of digits.
    size = abs(value)
    digits = max(1, int(size.bit_length() * math.log10(2)))
    while 10**digits <= size:
        digits += 1
    while digits > 1 and 10 ** (digits - 1) > size:
        digits -= 1
    return digits


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


def input_problem(value: Any) -> str | None:
    """What about one text or number no database keeps the same way (described), or None.

    Containers are not walked (see :func:`check_input`); a ``bool`` is fine.
    """
    if isinstance(value, str):
        what = unstorable(value)
        return (
            None
            if what is None
            else f"contains {what}, which cannot be stored; remove or replace it"
        )
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        if INT_MIN <= value <= INT_MAX:
            return None
        return (
            f"is an integer of {_digits(value):,} digits; integers must be between "
            f"{INT_MIN} and {INT_MAX}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        return "is not a finite number (NaN and Infinity are not accepted)"
    return None


def _key(field: str, key: object) -> str:
    return f"{field}.{key}" if field else str(key)


def check_input(value: Any, field: str) -> None:
    """Refuse caller input no database keeps the same way, naming the field.

    Walks strings and numbers inside mappings, sequences and dataclasses
    (``input_data``, runtime config, history, a memory scope); keys are
    checked too. Bytes are not text and pass.

    Args:
        value: the input.
        field: its name, e.g. ``input_data``; ``""`` for a whole request
            body (its fields are then named bare, ``messages[0].content``).

    Raises:
        InvalidFieldError: the first offending field, e.g. ``input_data.city``.
    """
    if isinstance(value, str | int | float):
        problem = input_problem(value)
        if problem is not None:
            raise InvalidFieldError(field or "body", problem)
    elif isinstance(value, Mapping):
        for key, item in value.items():  # pyright: ignore[reportUnknownVariableType]
            if isinstance(key, str) and unstorable(key) is not None:
                check_input(key, f"{field or 'body'} (a key)")
            check_input(item, _key(field, key))  # pyright: ignore[reportUnknownArgumentType]
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
            check_input(item, f"{field}[{index}]")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for spec in dataclasses.fields(value):
            check_input(getattr(value, spec.name), _key(field, spec.name))


def check_json(value: Any, field: str) -> None:
    """Refuse a value JSON cannot carry (bytes, a set, an object), naming where it is.

    Input data is filled into prompts and stored as JSON; a value
    :func:`json.dumps` cannot write would otherwise fail deep in a turn.

    Raises:
        InvalidFieldError: the first value, or mapping key, that is not JSON.
    """
    if value is None or isinstance(value, str | int | float):
        return
    if isinstance(value, Mapping):
        for key, item in cast("Mapping[Any, Any]", value).items():
            if not isinstance(key, str):
                raise InvalidFieldError(
                    f"{field} (a key)", f"must be a string, not {type(key).__name__}"
                )
            check_json(item, _key(field, key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(cast("list[Any] | tuple[Any, ...]", value)):
            check_json(item, f"{field}[{index}]")
    else:
        raise InvalidFieldError(
            field,
            "must be a JSON value (text, a number, true/false, null, a list or an "
            f"object), not {type(value).__name__}",
        )


def check_length(value: str | None, field: str, limit: int) -> None:
    """Refuse text longer than the column that keeps it, naming the field.

    PostgreSQL refuses text longer than a ``varchar(n)`` (the whole write
    fails); SQLite keeps it: refused here, both answer the same.

    Raises:
        InvalidFieldError: ``value`` has more than ``limit`` characters.
    """
    if value is not None and len(value) > limit:
        raise InvalidFieldError(
            field, f"is {len(value):,} characters long; at most {limit} are accepted"
        )


def check_uuid(value: str, field: str) -> None:
    """Refuse a caller-chosen id that is not a UUID as pilothouse writes them.

    Conversation uuids are kept in a ``varchar(36)`` and looked up by their
    text: another spelling of the same UUID (capitals, no hyphens) would be
    a second id, and a longer text fails PostgreSQL's write where SQLite
    keeps it.

    Raises:
        InvalidFieldError: ``value`` is not a lowercase hyphenated UUID.
    """
    try:
        canonical = str(uuid.UUID(value))
    except ValueError:
        canonical = None
    if canonical != value:
        raise InvalidFieldError(
            field,
            "is not a UUID in its usual form (32 lowercase hex digits in groups "
            "of 8-4-4-4-12, e.g. 123e4567-e89b-12d3-a456-426614174000)",
        )


def read_int(text: str) -> int:
    """Read a decimal integer of any length: an :class:`OversizedInt` past Python's limit."""
    return int(text) if len(text) <= _LONGEST_READ else OversizedInt(text)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def loads_json(raw: str | bytes, *, check: bool = True, constants: bool = True) -> Any:
    """Parse a JSON request body, then hold it to :func:`check_input`'s rules.

    An integer of any length is read (Python's own limit would raise a bare
    ``ValueError``), NaN and Infinity too, so the rules name the field.

    Args:
        raw: the body.
        check: apply the rules to the whole document; False leaves them to
            a later step that knows the fields (a request model, the facade).
        constants: read NaN and Infinity (which JSON does not have) as
            numbers, for the rules to name; False refuses them as not JSON.

    Raises:
        json.JSONDecodeError: not JSON.
        ValueError: NaN or Infinity, when ``constants`` is False.
        UnicodeDecodeError: not UTF-8.
        RecursionError: nested too deeply.
        InvalidFieldError: a value the rules refuse, named by its path
            (``messages[0].content``).
    """
    document = json.loads(
        raw, parse_int=read_int, parse_constant=None if constants else _no_constant
    )
    if check:
        check_input(document, "")
    return document


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
