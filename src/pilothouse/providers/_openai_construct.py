"""The OpenAI SDK's unchecked construction of response models, with its type walk done once.

For every response and every streamed chunk, the SDK builds its models with
``BaseModel.construct`` (``openai._models``): no validation, but a walk of
each field's annotation through ``typing`` introspection on every call. On a
stream that walk is most of the client's CPU: about 150 µs a chunk here, 7 s
of 20 in a profile of 200 concurrent streams of 66 chunks, for pilothouse and
``pydantic_ai.direct.model_request`` alike.

:func:`construct` gives the same objects as the SDK's ``construct``, with the
per-class part of the walk (which field holds which model, alias, default)
worked out once per class. Only the cases whose outcome is plain are taken
here; for everything else (a value of another type than its annotation, a
union the SDK would validate, a float the SDK would coerce, a discriminated
union, a dict) the field's value goes through the SDK's own
``construct_type``, so the result is the SDK's wherever the shortcut is not
certain. ``tests/providers/test_openai_construct.py`` compares both on every
kind of payload, including malformed ones.
"""

from __future__ import annotations

__all__ = ["construct"]

import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, Union, get_args, get_origin

from openai import BaseModel
from openai._compat import field_get_default
from openai._models import (
    _get_extra_fields_type,  # pyright: ignore[reportPrivateUsage]
    construct_type,
)
from pydantic.fields import FieldInfo

_SCALARS = (str, int, bool)
"""Types whose values the SDK passes through unchanged (float it coerces from int)."""

_CALL = object()
"""A field default that must be computed at each construction (a factory, a mutable value)."""

Convert = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    alias: str | None
    info: FieldInfo
    default: Any
    convert: Convert | None  # None: the value as it is


@dataclass(frozen=True, slots=True)
class _Plan:
    fields: tuple[_Field, ...]
    names: frozenset[str]
    populate_by_name: bool
    extra_type: Any


def construct(cls: type[BaseModel], values: dict[str, Any]) -> Any:
    """``cls.construct(**values)`` as the OpenAI SDK builds it, without its per-call type walk.

    Args:
        cls: an OpenAI SDK model class (``ChatCompletion``, ``ChatCompletionChunk``...).
        values: the decoded JSON object.

    Returns:
        An instance of ``cls`` equal to the SDK's construction: the same
        field values, nested models, fields set and extra fields.
    """
    plan = _plan(cls)
    built: dict[str, Any] = {}
    given: set[str] = set()
    for field in plan.fields:
        key = field.name
        if field.alias is not None and (field.alias in values or not plan.populate_by_name):
            key = field.alias
        if key in values:
            value = values[key]
            given.add(field.name)
            if value is None:
                built[field.name] = _default(field)
            elif field.convert is None:
                built[field.name] = value
            else:
                built[field.name] = field.convert(value)
        else:
            built[field.name] = _default(field)
    extra: dict[str, Any] = {}
    for key, value in values.items():
        if key not in plan.names:
            extra[key] = (
                value
                if plan.extra_type is None
                else construct_type(value=value, type_=plan.extra_type)
            )
    instance = cls.__new__(cls)
    # What pydantic's model_construct (and the SDK's construct) set.
    object.__setattr__(instance, "__dict__", built)
    object.__setattr__(instance, "__pydantic_private__", None)
    object.__setattr__(instance, "__pydantic_extra__", extra)
    object.__setattr__(instance, "__pydantic_fields_set__", given)
    return instance


def _default(field: _Field) -> Any:
    return field_get_default(field.info) if field.default is _CALL else field.default


@cache
def _plan(cls: type[BaseModel]) -> _Plan:
    """What :func:`construct` needs to know about ``cls``, worked out once per class."""
    config = cls.model_config
    fields: list[_Field] = []
    for name, info in cls.model_fields.items():
        fields.append(
            _Field(
                name=name,
                alias=info.alias,
                info=info,
                default=_constant_default(info),
                convert=_converter(info),
            )
        )
    return _Plan(
        fields=tuple(fields),
        names=frozenset(cls.model_fields),
        populate_by_name=bool(config.get("populate_by_name")),
        extra_type=_get_extra_fields_type(cls),
    )


def _constant_default(info: FieldInfo) -> Any:
    """The field's default when it is one immutable value; ``_CALL`` otherwise."""
    if info.default_factory is not None:
        return _CALL
    default = field_get_default(info)
    if default is None or type(default) in (str, int, float, bool):
        return default
    return _CALL


def _fallback(annotation: Any, metadata: list[Any]) -> Convert:
    def convert(value: Any) -> Any:
        return construct_type(value=value, type_=annotation, metadata=metadata)

    return convert


def _converter(info: FieldInfo) -> Convert | None:
    """How the SDK's ``construct_type`` treats a value of this field, for the plain cases."""
    annotation: Any = info.annotation
    fallback = _fallback(annotation, info.metadata)
    if info.metadata:
        return fallback  # Annotated (a discriminator, a format): the SDK's own path
    origin = get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        return _union_converter(annotation, fallback)
    if annotation in _SCALARS or origin is Literal:
        return None  # construct_type returns such values unchanged, whatever they are
    if _is_model(annotation):
        model = typing.cast("type[BaseModel]", annotation)

        def convert(value: Any) -> Any:
            if type(value) is dict:
                return construct(model, typing.cast("dict[str, Any]", value))
            return fallback(value)

        return convert
    if origin is list:
        item: Any = (get_args(annotation) or (object,))[0]
        if _is_model(item):
            return _list_converter(typing.cast("type[BaseModel]", item), fallback)
    return fallback


def _union_converter(annotation: Any, fallback: Convert) -> Convert:
    """``Optional[X]``: the SDK validates unions; a value already of X validates to itself."""
    members = [m for m in get_args(annotation) if m is not type(None)]
    if len(members) == 1:
        (member,) = members
        if member in _SCALARS:
            return lambda value: value if type(value) is member else fallback(value)
        if get_origin(member) is Literal:
            allowed = frozenset(v for v in get_args(member) if type(v) is str)
            return lambda value: (
                value if type(value) is str and value in allowed else fallback(value)
            )
    return fallback


def _list_converter(item: type[BaseModel], fallback: Convert) -> Convert:
    def convert(value: Any) -> Any:
        if type(value) is list:
            entries = typing.cast("list[Any]", value)
            if all(type(entry) is dict for entry in entries):
                return [construct(item, typing.cast("dict[str, Any]", e)) for e in entries]
        return fallback(value)

    return convert


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)
