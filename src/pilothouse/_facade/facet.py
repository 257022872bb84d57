"""What every half of the facade shares: the database, the tenant, and the input rules.

Every public coroutine (and async generator) of a half checks its arguments
against the input rules (:func:`pilothouse.store._text.check_input`) before
it runs: a NUL character or a lone surrogate in any text, an integer beyond
64 bits or a number that is not finite is refused with
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


def _checker(method: Callable[..., Any]) -> Callable[[Sequence[Any], Mapping[str, Any]], None]:
    """A function checking a call's arguments by the method's parameter names."""
    parameters = list(inspect.signature(method).parameters.values())[1:]  # not self
    skipped: frozenset[str] = getattr(method, _OWN_CHECK, frozenset())
    positional = [p.name for p in parameters if p.kind is not p.KEYWORD_ONLY]

    def check(args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        for index, value in enumerate(args):
            name = positional[index] if index < len(positional) else f"args[{index}]"
            if name not in skipped:
                check_input(value, name)
        for name, value in kwargs.items():
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
