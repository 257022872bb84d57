"""Catalog kinds as forms: what a UI shows for each field, and a form's values as a document.

A form is derived from the kind's spec (the model the YAML importer reads)
and its references, so the UI can never offer a field the importer does
not know, and a reference is always a picker of the target kind's keys.
The document a form becomes is validated by the same code as an import.
"""

from __future__ import annotations

__all__ = ["describe_kind", "document_from_form"]

import json
import types
import typing
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from enum import Enum
from typing import Any, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from pilothouse.errors import InvalidFieldError
from pilothouse.types import FormField, KindForm

_LONG_TEXT = ("prompt", "description", "instructions", "script", "goal")


def _unwrapped(annotation: Any) -> tuple[Any, bool]:
    """The annotation without ``Annotated`` and ``None``; whether None was allowed."""
    optional = False
    while True:
        origin = get_origin(annotation)
        if origin is typing.Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            members = [a for a in get_args(annotation) if a is not type(None)]
            optional = optional or len(members) < len(get_args(annotation))
            if len(members) != 1:
                return annotation, optional
            annotation = members[0]
        else:
            return annotation, optional


def _limits(annotation: Any, metadata: Sequence[Any]) -> dict[str, Any]:
    """The length and range limits a field's annotation and metadata declare."""
    found: list[Any] = list(metadata)
    stack = [annotation]
    while stack:
        current = stack.pop()
        if get_origin(current) is typing.Annotated:
            args = get_args(current)
            stack.append(args[0])
            for extra in args[1:]:
                found.extend(getattr(extra, "metadata", None) or [extra])
        elif get_origin(current) in (typing.Union, types.UnionType):
            stack.extend(get_args(current))
    limits: dict[str, Any] = {}
    for item in found:
        if isinstance(getattr(item, "max_length", None), int):
            limits["max_length"] = item.max_length
        for attribute, key in (("ge", "minimum"), ("le", "maximum")):
            value = getattr(item, attribute, None)
            if isinstance(value, int | float) and not isinstance(value, bool):
                limits[key] = float(value)
    return limits


def _widget(name: str, annotation: Any) -> tuple[str, tuple[str, ...]]:
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "select", tuple(str(m.value) for m in annotation)
    if get_origin(annotation) is typing.Literal:
        return "select", tuple(str(a) for a in get_args(annotation))
    if annotation is bool:
        return "checkbox", ()
    if annotation in (int, float, Decimal):
        return "number", ()
    if annotation is str:
        return ("textarea" if any(w in name for w in _LONG_TEXT) else "text"), ()
    if annotation in (date, datetime):
        # Written as in YAML (2024-10-01): a text the importer parses, not a JSON value.
        return "text", ()
    if get_origin(annotation) is list:
        (item,) = get_args(annotation) or (Any,)
        item, _ = _unwrapped(item)
        if isinstance(item, type) and issubclass(item, Enum):
            return "multiselect", tuple(str(m.value) for m in item)
    return "json", ()


def describe_kind(kind_name: str) -> KindForm:
    """Return the form of a catalog kind (its plural name, e.g. ``actions``).

    Raises:
        KeyError: an unknown kind.
    """
    from pilothouse.catalog import catalog_kind

    kind = catalog_kind(kind_name)
    refs = {r.field: r.target for r in kind.refs}
    links = {lk.field: lk.target for lk in kind.links if not lk.with_order}
    fields: list[FormField] = []
    for name, info in kind.spec.model_fields.items():
        annotation, optional = _unwrapped(info.annotation)
        required = info.is_required()
        if name in refs:
            widget, choices, target = "ref", (), refs[name]
        elif name in links:
            widget, choices, target = "refs", (), links[name]
        elif annotation is bool and optional:
            # Unset means "follow the default" (e.g. the deployment's audit switch).
            widget, choices, target = "select", ("true", "false"), None
        else:
            (widget, choices), target = _widget(name, annotation), None
        default: Any = None if required else info.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            default = default.model_dump(mode="json", exclude_defaults=True)
        default = to_jsonable_python(default)
        fields.append(
            FormField(
                name=name,
                widget=widget,
                required=required,
                optional=optional,
                choices=choices,
                target=target,
                default=default,
                description=info.description or "",
                **_limits(info.annotation, info.metadata),
            )
        )
    return KindForm(
        kind=kind.name,
        entity_name=kind.entity_name,
        key_field=kind.key_field,
        fields=tuple(fields),
    )


def _value(form_field: FormField, raw: str | Sequence[str]) -> Any:
    if form_field.widget in ("refs", "multiselect"):
        items = [raw] if isinstance(raw, str) else list(raw)
        return [i for i in items if i]
    text = raw if isinstance(raw, str) else (raw[-1] if raw else "")
    if form_field.widget == "checkbox":
        return text.lower() in ("on", "true", "1", "yes")
    if text.strip() == "":
        return None
    if form_field.widget == "number":
        try:
            number = float(text)
        except ValueError:
            raise InvalidFieldError(form_field.name, "must be a number") from None
        return int(number) if number.is_integer() and "." not in text else number
    if form_field.widget == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidFieldError(form_field.name, f"is not valid JSON: {exc.msg}") from None
    return text


def document_from_form(form: KindForm, values: Mapping[str, str | Sequence[str]]) -> dict[str, Any]:
    """Turn a submitted form into the entity's document (as in catalog YAML).

    Empty fields are left out, so the importer's defaults and its "required"
    messages apply exactly as for a YAML file. A checkbox not submitted is
    false. Names that are no field of the kind are refused.

    Raises:
        InvalidFieldError: an unknown field, a number or JSON that does not parse.
    """
    known = {f.name: f for f in form.fields}
    for name in values:
        if name not in known:
            raise InvalidFieldError(name, f"is no field of {form.entity_name}")
    document: dict[str, Any] = {}
    for form_field in form.fields:
        if form_field.widget == "checkbox":
            document[form_field.name] = _value(form_field, values.get(form_field.name, ""))
            continue
        raw = values.get(form_field.name)
        if raw is None:
            continue
        value = _value(form_field, raw)
        if value is None or value == []:
            continue
        document[form_field.name] = value
    return document
