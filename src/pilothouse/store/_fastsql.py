"""Run the statements on every turn's path straight on the driver.

SQLAlchemy Core costs about 50 µs of CPU per execution on top of SQLite's own
5–10 µs (measured: a three-statement transaction 169 µs through Core, 23 µs
on the driver). A governed turn runs a dozen such statements, which made the
store the largest cost of a turn after the model call (``docs/benchmarks.md``).
On PostgreSQL, Core and SQLAlchemy's asyncpg adapter (its DBAPI emulation,
cursor, prepared statement cache and status parsing) cost about as much again.

The statements stay SQLAlchemy constructs, wrapped in a :class:`Statement`
(or a :class:`Query`, which also builds typed rows) that its owner builds
once and keeps: it is compiled once per driver and keeps the plan, and its
parameters and results go through the column types' own bind and result
processors (``TypeEngine.bind_processor`` / ``result_processor``), so what
is stored is byte for byte what SQLAlchemy would store, and a query returns
the same rows whichever way it ran. Two drivers take this path: pysqlite (its cursor) and asyncpg
(the driver connection, awaited from inside SQLAlchemy's greenlet), the
latter only inside a transaction the driver already runs, which is what
``Database.transaction`` begins; elsewhere the same calls run through
``Connection.execute``.
"""

from __future__ import annotations

__all__ = ["BoundUpdate", "Query", "Statement", "execute", "executemany", "fetch", "insert_one"]

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Generic, TypeVar, cast

from sqlalchemy import ColumnElement, Connection, CursorResult, Executable, Select
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.util import await_

Processor = Callable[[Any], Any]
R = TypeVar("R")

_MISSING = object()


@dataclass(frozen=True)
class _Plan:
    """A statement compiled for one driver, with its processors in parameter order."""

    sql: str
    names: tuple[str, ...]
    results: tuple[Processor | None, ...]
    picked: Callable[[Mapping[str, Any]], tuple[Any, ...]]
    """The values in parameter order, in one C call (see :meth:`Statement.plan`)."""
    processed: tuple[tuple[int, Processor], ...] = ()
    """The positions whose type has a bind processor, with it."""

    def parameters(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        try:
            raw = self.picked(values)
        except KeyError as missing:
            raise KeyError(f"no value for parameter {missing} of: {self.sql}") from None
        if not self.processed:
            return raw
        # None goes through the processor too, as in SQLAlchemy: a JSON
        # column stores None as the JSON text 'null', not as SQL NULL.
        out = list(raw)
        for index, process in self.processed:
            out[index] = process(out[index])
        return tuple(out)

    def values(self, raw: Sequence[Any]) -> tuple[Any, ...]:
        """A result row's values through the columns' result processors."""
        return tuple(
            process(value) if process is not None else value
            for process, value in zip(self.results, raw, strict=True)
        )


class Statement:
    """An INSERT, UPDATE or DELETE that keeps its compiled plans.

    Build it once and keep it (its owner does: a store, a compiler); the
    plans live on it, one per driver and set of named columns.

    Args:
        statement: the SQLAlchemy statement.
    """

    def __init__(self, statement: Executable) -> None:
        self.statement = statement
        self._plans: dict[tuple[str, tuple[str, ...], bool], _Plan] = {}

    def plan(self, connection: Connection, keys: tuple[str, ...], many: bool = False) -> _Plan:
        """The statement compiled for the connection's driver."""
        dialect = connection.dialect
        key = (dialect.driver, keys, many)
        found = self._plans.get(key)
        if found is not None:
            return found
        # ``for_executemany`` as SQLAlchemy compiles an executemany: without the
        # RETURNING of the new key that PostgreSQL's single INSERT gets.
        compiled = cast(
            SQLCompiler,
            self.statement.compile(  # type: ignore[attr-defined]
                dialect=dialect, column_keys=list(keys) if keys else None, for_executemany=many
            ),
        )
        names = tuple(compiled.positiontup or ())
        binds = tuple(
            compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect)
            for name in names
        )
        defaults = tuple(
            _MISSING if compiled.binds[name].required else compiled.binds[name].effective_value
            for name in names
        )
        results: tuple[Processor | None, ...] = ()
        selected = _selected(self.statement)
        if selected is not None:
            results = tuple(
                column.type.dialect_impl(dialect).result_processor(dialect, None)
                for column in selected
            )
        # One value per name in order, built in C rather than a Python loop:
        # the loop cost as much CPU as SQLite's own work on a short
        # statement. (itemgetter of one name returns the value, not a tuple.)
        picked: Callable[[Mapping[str, Any]], tuple[Any, ...]]
        if len(names) > 1:
            picked = itemgetter(*names)
        elif names:
            only = names[0]
            picked = lambda values: (values[only],)  # noqa: E731
        else:
            picked = lambda values: ()  # noqa: E731
        own = {
            name: default
            for name, default in zip(names, defaults, strict=True)
            if default is not _MISSING
        }
        if own:
            # Values of the statement's own (``version + 1``, a fixed status)
            # under the caller's: one merge in C, then the same pick.
            pick = picked
            picked = lambda values: pick({**own, **values})  # noqa: E731
        processed = tuple(
            (index, process) for index, process in enumerate(binds) if process is not None
        )
        plan = _Plan(compiled.string, names, results, picked, processed)
        self._plans[key] = plan
        return plan


class Query(Statement, Generic[R]):
    """A SELECT that keeps its compiled plans and builds typed rows.

    Args:
        statement: the SELECT.
        row: builds one row from the selected columns' values, in order;
            the same rows come back whatever the driver.
    """

    def __init__(self, statement: Select[*tuple[Any, ...]], row: Callable[..., R]) -> None:
        super().__init__(statement)
        self.row = row


def _selected(statement: Executable) -> list[ColumnElement[Any]] | None:
    if not isinstance(statement, Select):
        return None
    return list(cast("Select[Any]", statement).selected_columns)


def _cursor(connection: Connection) -> Any:
    return connection.connection.driver_connection.cursor()  # type: ignore[union-attr]


def _asyncpg(connection: Connection) -> Any | None:
    """The asyncpg connection, when the statements may run on it directly.

    Inside a transaction the driver runs, or on a connection in AUTOCOMMIT
    mode (where each statement commits on its own either way). Otherwise
    SQLAlchemy's adapter begins its transaction at its first statement, and a
    statement sent past it would commit on its own.
    """
    if connection.dialect.driver != "asyncpg":
        return None
    driver = connection.connection.driver_connection
    if driver is None:
        return None
    if driver.is_in_transaction():
        return driver
    # SQLAlchemy's AUTOCOMMIT isolation level sets the adapter's flag too.
    autocommit = connection.connection.dbapi_connection.autocommit  # type: ignore[union-attr]
    return driver if autocommit else None


def fetch(connection: Connection, query: Query[R], values: Mapping[str, Any]) -> list[R]:
    """Return every row of a SELECT, as the query's rows."""
    row = query.row
    if connection.dialect.name != "sqlite":
        driver = _asyncpg(connection)
        if driver is None:
            # SQLAlchemy's own result processing, then the same rows.
            result = connection.execute(query.statement, dict(values))
            return [row(*item) for item in result.all()]
        plan = query.plan(connection, ())
        raw = await_(driver.fetch(plan.sql, *plan.parameters(values)))
        return [row(*plan.values(item)) for item in raw]
    plan = query.plan(connection, ())
    cursor = _cursor(connection)
    try:
        raw = cursor.execute(plan.sql, plan.parameters(values)).fetchall()
    finally:
        cursor.close()
    return [row(*plan.values(item)) for item in raw]


def execute(connection: Connection, statement: Statement, values: Mapping[str, Any]) -> int:
    """Run an UPDATE (or DELETE) with named ``values``; return the rows it matched."""
    if connection.dialect.name != "sqlite":
        driver = _asyncpg(connection)
        if driver is None:
            result = connection.execute(statement.statement, dict(values))
            return cast(CursorResult[Any], result).rowcount
        plan = statement.plan(connection, ())
        # asyncpg returns the command tag, "UPDATE <rows>".
        status: str = await_(driver.execute(plan.sql, *plan.parameters(values)))
        return int(status.rsplit(" ", 1)[-1])
    plan = statement.plan(connection, ())
    cursor = _cursor(connection)
    try:
        return int(cursor.execute(plan.sql, plan.parameters(values)).rowcount)
    finally:
        cursor.close()


@dataclass(frozen=True)
class BoundUpdate:
    """An UPDATE with its values: run on its own, or folded into another statement.

    Called with a connection it runs as :func:`execute` would. A store that
    writes a step as one statement (PostgreSQL) may instead put
    :attr:`statement` in that statement's ``WITH`` clause, saving the round
    trips of a transaction around the two; its parameter names must then
    differ from the step's (``b_...``, ``<part><n>_...``).

    Attributes:
        statement: the UPDATE.
        values: its parameters by name.
        matched: the rows it matched, once it ran (left empty when the
            statement carrying it wrote nothing).
    """

    statement: Statement
    values: Mapping[str, Any]
    matched: list[int] = field(default_factory=lambda: [])

    def __call__(self, connection: Connection) -> None:
        self.matched.append(execute(connection, self.statement, self.values))


def insert_one(connection: Connection, statement: Statement, values: Mapping[str, Any]) -> int:
    """Run an INSERT of one row given column by column; return its integer key."""
    if connection.dialect.name != "sqlite":
        driver = _asyncpg(connection)
        if driver is None:
            key = connection.execute(statement.statement, dict(values)).inserted_primary_key
            if key is None:  # pragma: no cover - an INSERT always reports its key
                raise RuntimeError("the database did not report the new row's key")
            return int(key[0])
        # Compiled for PostgreSQL, a single INSERT ends in RETURNING its key.
        plan = statement.plan(connection, tuple(values))
        return int(await_(driver.fetchval(plan.sql, *plan.parameters(values))))
    plan = statement.plan(connection, tuple(values))
    cursor = _cursor(connection)
    try:
        cursor.execute(plan.sql, plan.parameters(values))
        return int(cursor.lastrowid)
    finally:
        cursor.close()


def executemany(
    connection: Connection, statement: Statement, rows: Sequence[Mapping[str, Any]]
) -> None:
    """Run an INSERT once per row; every row names the same columns."""
    if not rows:
        return
    if connection.dialect.name != "sqlite":
        driver = _asyncpg(connection)
        if driver is None:
            connection.execute(statement.statement, [dict(row) for row in rows])
            return
        plan = statement.plan(connection, tuple(rows[0]), many=True)
        # asyncpg pipelines the rows: one round trip for all of them.
        await_(driver.executemany(plan.sql, [plan.parameters(row) for row in rows]))
        return
    plan = statement.plan(connection, tuple(rows[0]), many=True)
    cursor = _cursor(connection)
    try:
        cursor.executemany(plan.sql, [plan.parameters(row) for row in rows])
    finally:
        cursor.close()
