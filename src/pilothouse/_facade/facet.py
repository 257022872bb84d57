"""What every half of the facade shares: the database, the tenant, and the input rules.

Every public coroutine (and async generator) of a half checks its arguments
against the input rules (:func:`pilothouse.store._text.check_input`) before
it runs: a parameter annotated ``str``, ``int``, ``float`` or ``bool``
(optionally ``| None``) given a value of another type, a NUL character or a
lone surrogate in any text, an integer beyond 64 bits or a number that is
not finite is refused with
:class:`~pilothouse.errors.InvalidFieldError` naming the parameter (and the
path inside it), before anything is read or written. Every face (REST,
OpenAI, /v1/invoke, JSON-RPC, MCP, the CLI, the sync facade, the event
worker) calls these halves, so the same input gets the same answer
whichever face sent it and whichever database is behind it: PostgreSQL
would otherwise fail on a NUL in a lookup key where SQLite finds nothing.
"""

from __future__ import annotations

__all__ = ["Facet", "checks_own_input"]

import functools
import inspect
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import aclosing
from typing import Any, TypeVar

from pilothouse.errors import InvalidFieldError
from pilothouse.store import Database
from pilothouse.store._text import check_input

F = TypeVar("F", bound=Callable[..., Any])

_OWN_CHECK = "__pilothouse_checks_own_input__"


def checks_own_input(*names: str) -> Callable[[F], F]:
    """Mark parameters a method holds to the input rules itself, in its own way.

    Knowledge ingestion reports a bad document and goes on with the others;
    the catalog's validation names an entity's field and line. The other
    parameters are still checked.
    """

    def mark(method: F) -> F:
        setattr(method, _OWN_CHECK, frozenset(names))
        return method

    return mark


# The scalar annotations checked at the door, and how a refusal names each.
_SCALARS: dict[str, tuple[tuple[type, ...], str]] = {
    "str": ((str,), "a string"),
    "int": ((int,), "an integer"),
    "float": ((int, float), "a number"),
    "bool": ((bool,), "true or false"),
}


def _scalar(parameter: inspect.Parameter) -> tuple[tuple[type, ...], str, bool] | None:
    """The types a scalar parameter takes, their name and whether None is allowed; else None."""
    annotation = parameter.annotation
    if annotation is inspect.Parameter.empty:
        return None
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    parts = [part.strip() for part in text.split("|")]
    named = [part for part in parts if part != "None"]
    if len(named) != 1 or named[0] not in _SCALARS:
        return None
    types, name = _SCALARS[named[0]]
    return types, name, len(named) < len(parts)


def _check_type(value: Any, name: str, expected: tuple[tuple[type, ...], str, bool]) -> None:
    types, described, optional = expected
    if value is None and optional:
        return
    # A bool is an int to Python, never to a caller who meant a number.
    wrong = not isinstance(value, types) or (isinstance(value, bool) and bool not in types)
    if wrong:
        nothing = " or None" if optional else ""
        raise InvalidFieldError(name, f"must be {described}{nothing}, not {type(value).__name__}")


def _checker(method: Callable[..., Any]) -> Callable[[Sequence[Any], Mapping[str, Any]], None]:
    """A function checking a call's arguments by the method's parameter names and types."""
    parameters = list(inspect.signature(method).parameters.values())[1:]  # not self
    skipped: frozenset[str] = getattr(method, _OWN_CHECK, frozenset())
    positional = [p.name for p in parameters if p.kind is not p.KEYWORD_ONLY]
    # A Python caller's wrong type would otherwise reach the database, which
    # PostgreSQL refuses and SQLite stores (a bool as a conversation's uuid).
    scalars = {p.name: expected for p in parameters if (expected := _scalar(p)) is not None}

    def check(args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        for index, value in enumerate(args):
            name = positional[index] if index < len(positional) else f"args[{index}]"
            if name in scalars:
                _check_type(value, name, scalars[name])
            if name not in skipped:
                check_input(value, name)
        for name, value in kwargs.items():
            if name in scalars:
                _check_type(value, name, scalars[name])
            if name not in skipped:
                check_input(value, name)

    return check


def _checked(method: Callable[..., Any]) -> Callable[..., Any]:
    check = _checker(method)
    if inspect.isasyncgenfunction(method):

        @functools.wraps(method)
        async def relay(self: Any, *args: Any, **kwargs: Any) -> AsyncGenerator[Any]:
            # Checked on the first iteration, where the method's own errors come.
            check(args, kwargs)
            async with aclosing(method(self, *args, **kwargs)) as events:
                async for event in events:
                    yield event

        return relay

    @functools.wraps(method)
    async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        check(args, kwargs)
        return await method(self, *args, **kwargs)

    return call


class Facet:
    """What the halves of the facade share: the database and the tenant.

    A subclass's public coroutines check their arguments against the input
    rules before they run (see the module's description).

    Args:
        database: returns the database, opened on first use (a facade that
            only validates files never opens it).
        tenant: the tenant every call acts for.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, member in list(vars(cls).items()):
            if name.startswith("_"):
                continue
            if inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member):
                setattr(cls, name, _checked(member))

    def __init__(self, database: Callable[[], Database], tenant: str) -> None:
        self._database_of = database
        self.tenant = tenant

    @property
    def _database(self) -> Database:
        return self._database_of()

    async def _ready(self) -> Database:
        # A no-op after the first call; makes a fresh database usable with
        # no setup step.
        await self._database.ensure_schema()
        return self._database

    async def _readable(self) -> Database:
        # For reads that must work on a database the key-length migration
        # refused (every other migration is done): export, list.
        await self._database.ensure_readable()
        return self._database
