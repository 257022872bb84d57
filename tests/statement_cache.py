"""One SQL statement cache for the thousands of engines the suite opens.

SQLAlchemy caches each compiled statement under a key that holds the
dialect *instance*, and every engine makes its own dialect. A process of
pilothouse opens one engine and compiles each statement once; the suite
opens a fresh engine (a fresh database) for nearly every test, so every test
compiled the same few dozen statements again: about a quarter of a store or
service test's CPU (cProfile over tests/server). Here dialects of the same
class and configuration compare equal, so the engines' caches, the ORM's
per-mapper flush caches and the types' bind-processor memos all hit across
engines, as they would inside one long-lived process.

Only the test process is changed, and only in what SQLAlchemy keeps in its
caches; the statements sent are the same. ``tests/real`` starts pilothouse
in its own processes, where none of this applies.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine.default import DefaultDialect
from sqlalchemy.util import LRUCache

# What decides how a dialect compiles and binds a statement. The server's
# version is left out: it is set on first connect, after which the hash would
# change; every engine of the suite talks to the same SQLite library and the
# same PostgreSQL server.
_CONFIGURATION = (
    "paramstyle",
    "positional",
    "label_length",
    "max_identifier_length",
    "isolation_level",
    "_json_serializer",
    "_json_deserializer",
    "compiler_linting",
)


def _configuration(dialect: DefaultDialect) -> tuple[Any, ...]:
    values: list[Any] = [type(dialect)]
    for name in _CONFIGURATION:
        value = getattr(dialect, name, None)
        # Functions (the JSON serializers) do not compare by value.
        values.append(id(value) if callable(value) else value)
    return tuple(values)


def _hash(self: DefaultDialect) -> int:
    return hash(_configuration(self))


def _eq(self: DefaultDialect, other: object) -> bool:
    if self is other:
        return True
    if not isinstance(other, DefaultDialect):
        return NotImplemented
    return _configuration(self) == _configuration(other)


def share_statement_caches() -> None:
    """Make equally configured dialects equal, and give every engine one cache.

    Dialects then hit each other's entries in the ORM's per-mapper caches and
    the types' memos; the engines' own caches (one each, by default) are
    replaced by one shared cache when an engine first connects.
    """
    DefaultDialect.__hash__ = _hash
    DefaultDialect.__eq__ = _eq
    shared: LRUCache[Any, Any] = LRUCache(5000)

    def use_shared(connection: Connection) -> None:
        engine = connection.engine
        if engine._compiled_cache is not None:
            engine._compiled_cache = shared

    event.listen(Engine, "engine_connect", use_shared)
