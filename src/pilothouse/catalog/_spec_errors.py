"""Pydantic validation errors turned into one-line catalog rules.

A spec that fails its pydantic model yields errors meant for programmers
(``string_too_long``, ``extra_forbidden``...); this module words each as
the rule the user broke (``at most 64 characters (got 70)``, ``unknown
field, did you mean ...``), never repeating a value that may be secret
beyond its length. Separate because it knows pydantic's error types, not
the catalog's rules.
"""

from __future__ import annotations

__all__ = ["spec_issues"]

import typing
from collections.abc import Sequence
from typing import Any, cast

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from pilothouse.catalog._kinds import CatalogKind, Location, suggest
from pilothouse.catalog._vantiq import SettingsIssues


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _nested_model(arg)
        if found is not None:
            return found
    return None


def _fields_at(model: type[BaseModel], location: Sequence[str | int]) -> list[str]:
    """The field names (aliases where set) valid at ``location`` inside ``model``."""
    current: type[BaseModel] | None = model
    for part in location:
        if current is None:
            return []
        if isinstance(part, int):
            continue
        info = next(
            (f for n, f in current.model_fields.items() if part in (n, f.alias)),
            None,
        )
        current = None if info is None else _nested_model(info.annotation)
    if current is None:
        return []
    return [f.alias or n for n, f in current.model_fields.items()]


def _number(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _rule(model: type[BaseModel], error: ErrorDetails) -> str:
    kind = error["type"]
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    value = error["input"]
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        name = str(error["loc"][-1])
        return "unknown field" + suggest(name, _fields_at(model, error["loc"][:-1]))
    if kind == "string_too_long":
        return f"at most {ctx['max_length']} characters (got {len(cast(str, value))})"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "string_pattern_mismatch":
        return f"must match {ctx['pattern']}"
    bounds = {
        "greater_than_equal": ("at least", "ge"),
        "less_than_equal": ("at most", "le"),
        "greater_than": ("greater than", "gt"),
        "less_than": ("less than", "lt"),
    }
    if kind in bounds:
        words, key = bounds[kind]
        return f"must be {words} {_number(ctx[key])} (got {_number(value)})"
    if kind == "value_error":
        return error["msg"].removeprefix("Value error, ")
    prefixes = {
        "int_": "must be an integer",
        "float_": "must be a number",
        "decimal_type": "must be a number",
        "decimal_parsing": "must be a number",
        "bool_": "must be true or false",
        "string_": "must be a string",
        "list_": "must be a list",
        "dict_": "must be a mapping",
        "model_": "must be a mapping",
        "date_": "must be a date (YYYY-MM-DD)",
    }
    for prefix, rule in prefixes.items():
        if kind.startswith(prefix):
            return rule
    message = error["msg"]
    return message[:1].lower() + message[1:]


def spec_issues(kind: CatalogKind, exc: ValidationError) -> list[tuple[Location, str]]:
    """Each pydantic error as ``(location, rule)``; a provider's settings issues one by one."""
    found: list[tuple[Location, str]] = []
    for error in exc.errors():
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, SettingsIssues):
            found += [((*error["loc"], *loc), rule) for loc, rule in cause.issues]
        else:
            found.append((tuple(error["loc"]), _rule(kind.spec, error)))
    return found
