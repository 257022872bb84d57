"""The budget ledger's statements, built once per gate and compiled once per driver.

:class:`LedgerStatements` holds them: the hold (a conditional ``UPDATE``:
the row changes only if spent + held + the call stays within every limit),
the settle, the threshold's claim and the row's read, each for one row and,
for a call charged to several budgets, for all of its rows at once (on
SQLite under its single writer; on PostgreSQL locking the rows in one order
first). :mod:`pilothouse.runtime._budgetledger` runs them.
"""

from __future__ import annotations

__all__ = ["AS_TEXT", "NO_LIMIT", "LedgerStatements", "key_values", "sqlite_time"]

import typing
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Executable,
    Integer,
    Numeric,
    Select,
    String,
    and_,
    bindparam,
    cast,
    func,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter, ColumnElement

from pilothouse.store._base import utcnow
from pilothouse.store._fastsql import Query, Statement, fetch
from pilothouse.store._tables import budget_usage_table

if TYPE_CHECKING:
    from pilothouse.runtime._budgetledger import LedgerEntry

_LEDGER = budget_usage_table
_MONEY = Numeric(24, 12)


def key_values(tenant: str, entry: LedgerEntry) -> dict[str, Any]:
    # updated_at too: statements run on the driver get no Python-side onupdate.
    return {
        "k_tenant": tenant,
        "k_budget": entry.rule.code,
        "k_subject": entry.subject,
        "k_period": entry.period,
        "updated_at": utcnow(),
    }


def _key(suffix: str = "", table: Any = _LEDGER) -> ColumnElement[bool]:
    c = table.c
    return and_(
        c.tenant == bindparam("k_tenant"),
        c.budget == bindparam(f"k_budget{suffix}"),
        c.subject == bindparam(f"k_subject{suffix}"),
        c.period == bindparam(f"k_period{suffix}"),
    )


@dataclass(frozen=True, slots=True)
class _LedgerRow:
    """A ledger row, in the table's column order."""

    tenant: str
    budget: str
    subject: str
    period: str
    spent_money: Decimal
    held_money: Decimal
    spent_input: int
    held_input: int
    spent_output: int
    held_output: int
    turns: int
    alerted: int
    updated_at: datetime


def _ledger_row(*values: Any) -> _LedgerRow:
    row = _LedgerRow(*values)
    return replace(
        row, spent_money=Decimal(str(row.spent_money)), held_money=Decimal(str(row.held_money))
    )


NO_LIMIT = -1
"""A limit the hold does not check (the budget sets none, or does not stop this call).

Negative, so no real limit is taken for it (every limit is at least 0), and
bound as a number rather than NULL: pysqlite adapts each NULL parameter
through an attribute lookup that fails, formatting an error message it then
discards (about 0.4 us more than an integer's bind, measured here), and a
hold binds each limit twice.
"""


def _within(used: ColumnElement[Any], amount: BindParameter[Any], limit: str, kind: Any) -> Any:
    """``used + amount <= limit``, or true when the limit is :data:`NO_LIMIT`."""
    bound = bindparam(limit, type_=kind)
    # Inlined: a bound 0 would be one more parameter on every hold.
    return or_(bound < literal_column("0"), used + amount <= bound)


_POSITIONAL = SQLiteDialect_pysqlite(paramstyle="qmark")
"""Compiles the ledger's statements for pysqlite with positional parameters."""

AS_TEXT = "updated_at"
"""The parameter :class:`_OnSqlite` takes as text already (see :func:`sqlite_time`)."""


def sqlite_time(moment: datetime) -> str:
    """``moment`` (aware, UTC) as SQLAlchemy stores a ``DateTime`` on SQLite.

    One C call: through the column type's bind processor (its UTC check, then
    SQLite's formatting) the timestamp cost more than the rest of the bind.
    """
    return moment.isoformat(" ", "microseconds")[:26]


class _OnSqlite:
    """A ledger statement as pysqlite runs it: its values go to the driver as one tuple.

    The generic plans of :mod:`pilothouse.store._fastsql` bind positionally,
    each value looked up and processed in a Python loop: the hold names 21
    parameters, and that loop cost about as much CPU as SQLite's own work on
    the statement. Here the tuple is built from the values' dict by one
    ``operator.itemgetter`` call (in C), and the driver binds it by position
    (a named bind costs the driver a new string and a hash per parameter);
    only the values whose type has a bind processor on SQLite (money, as a
    float) go through it, in Python, so what is stored is what SQLAlchemy
    would store. ``updated_at`` is given as its text already
    (:func:`sqlite_time`).

    Args:
        statement: the SQLAlchemy statement (the same the other stores run).
    """

    __slots__ = ("_literals", "_processed", "_sql", "_statement", "_values")

    def __init__(self, statement: Executable) -> None:
        self._statement = statement
        self._sql = ""
        self._processed: tuple[tuple[str, Callable[[Any], Any]], ...] = ()
        self._literals: dict[str, Any] = {}
        self._values: Callable[[dict[str, Any]], tuple[Any, ...]] = tuple

    def _compile(self, connection: Connection) -> None:
        compiled = typing.cast(
            SQLCompiler,
            self._statement.compile(dialect=_POSITIONAL),  # type: ignore[attr-defined]
        )
        dialect = connection.dialect
        processed: list[tuple[str, Callable[[Any], Any]]] = []
        for name, bind in compiled.binds.items():
            if name == AS_TEXT:
                continue
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if process is not None:
                processed.append((name, process))
            if not bind.required:
                # A value of the statement's own (the row count of a hold on
                # several rows), bound when the caller names none, as the
                # generic plans do: before processing, like a caller's value.
                self._literals[name] = bind.effective_value
        self._processed = tuple(processed)
        # Each parameter's name in the statement's order, a name used twice
        # (an amount in the update and in the limit's check) twice.
        names = tuple(compiled.positiontup or ())
        assert len(names) > 1, "every ledger statement binds a key and amounts"
        self._values = itemgetter(*names)
        self._sql = compiled.string

    def run(self, connection: Connection, values: dict[str, Any]) -> int:
        """Run it with ``values`` (processed in place); return the rows it matched."""
        if not self._sql:
            self._compile(connection)
        for name, value in self._literals.items():
            values.setdefault(name, value)
        for name, process in self._processed:
            values[name] = process(values[name])
        driver = connection.connection.driver_connection
        return int(driver.execute(self._sql, self._values(values)).rowcount)  # type: ignore[union-attr]


def _fits(table: Any, suffix: str = "") -> ColumnElement[bool]:
    """The call fits on ``table``'s row: spent + held + the call within each limit it has."""
    c = table.c
    return and_(
        _within(c.spent_money + c.held_money, _held_money(), f"lim_money{suffix}", _MONEY),
        _within(c.spent_input + c.held_input, _held_input(), f"lim_input{suffix}", BigInteger()),
        _within(
            c.spent_output + c.held_output, _held_output(), f"lim_output{suffix}", BigInteger()
        ),
        _within(c.turns, _turns(), f"lim_turns{suffix}", BigInteger()),
    )


def _held_money() -> BindParameter[Any]:
    return bindparam("money", type_=_MONEY)


def _held_input() -> BindParameter[Any]:
    return bindparam("input_tokens", type_=BigInteger())


def _held_output() -> BindParameter[Any]:
    return bindparam("output_tokens", type_=BigInteger())


def _turns() -> BindParameter[Any]:
    return bindparam("turns", type_=BigInteger())


def _hold_values() -> dict[str, Any]:
    """What a hold adds to a row: the call's worst case, and its turn."""
    c = _LEDGER.c
    return {
        "held_money": c.held_money + _held_money(),
        "held_input": c.held_input + _held_input(),
        "held_output": c.held_output + _held_output(),
        "turns": c.turns + _turns(),
    }


def _settle_values() -> dict[str, Any]:
    """What a settle changes on a row: the hold taken off, what was spent added."""
    c = _LEDGER.c
    return {
        "held_money": c.held_money - _held_money(),
        "held_input": c.held_input - _held_input(),
        "held_output": c.held_output - _held_output(),
        "spent_money": c.spent_money + bindparam("spent_money", type_=_MONEY),
        "spent_input": c.spent_input + bindparam("spent_input", type_=BigInteger()),
        "spent_output": c.spent_output + bindparam("spent_output", type_=BigInteger()),
    }


def _locked(keys: list[ColumnElement[bool]], seen: Any, *columns: Any) -> Select[*tuple[Any, ...]]:
    """The rows of ``keys``, locked in the budgets' order (see ``together_pg``)."""
    s = seen.c
    return (
        select(s.budget, s.subject, s.period, *columns)
        .where(or_(*keys))
        .order_by(s.budget, s.subject, s.period)
        .with_for_update(of=seen)
    )


def _matching(table: Any) -> list[ColumnElement[bool]]:
    """The ledger's row of the tenant (``k_tenant``) with ``table``'s budget, subject and period."""
    c = _LEDGER.c
    return [
        c.tenant == bindparam("k_tenant"),
        c.budget == table.c.budget,
        c.subject == table.c.subject,
        c.period == table.c.period,
    ]


class LedgerStatements:
    """The ledger's statements, built and compiled once per gate (run on the driver)."""

    def __init__(self) -> None:
        c = _LEDGER.c
        self.hold = Statement(update(_LEDGER).where(_key(), _fits(_LEDGER)).values(_hold_values()))
        self.settle = Statement(update(_LEDGER).where(_key()).values(_settle_values()))
        top = bindparam("top", type_=BigInteger())
        self.claim = Statement(update(_LEDGER).where(_key(), c.alerted < top).values(alerted=top))
        # Money is read as text: the driver path has no result processor for
        # NUMERIC on asyncpg, and a decimal string is exact on both stores.
        columns = [
            cast(column, String) if column.name in ("spent_money", "held_money") else column
            for column in _LEDGER.c
        ]
        self.row = Query(select(*columns).where(_key()), _ledger_row)
        self.hold_sqlite = _OnSqlite(self.hold.statement)
        self.settle_sqlite = _OnSqlite(self.settle.statement)

        self._together: dict[int, tuple[_OnSqlite, _OnSqlite]] = {}
        self.indexed: dict[int, tuple[tuple[LedgerEntry, ...], dict[str, Any]]] = {}
        """Each tuple of entries' suffixed keys and limits, by the tuple's id (kept with it)."""
        self._together_pg: dict[int, tuple[Statement, Statement]] = {}

    def together(self, count: int) -> tuple[_OnSqlite, _OnSqlite]:
        """The hold and the settle of ``count`` rows as one statement each (SQLite only).

        Each row's key and limits are bound with its index as a suffix
        (``k_budget_0``, ``lim_money_0``); the amounts are the same for all.
        """
        found = self._together.get(count)
        if found is not None:
            return found
        keys = [_key(f"_{index}") for index in range(count)]
        seen = _LEDGER.alias("seen")
        fits = [and_(_key(f"_{i}", seen), _fits(seen, f"_{i}")) for i in range(count)]
        # All rows or none: the rows that fit are counted before any changes
        # (an uncorrelated subquery runs once), and the UPDATE applies only
        # when every one does. One statement, so it commits on its own.
        fitting = select(func.count()).select_from(seen).where(or_(*fits)).scalar_subquery()
        hold = _OnSqlite(update(_LEDGER).where(or_(*keys), fitting == count).values(_hold_values()))
        settle = _OnSqlite(update(_LEDGER).where(or_(*keys)).values(_settle_values()))
        self._together[count] = (hold, settle)
        return hold, settle

    def together_pg(self, count: int) -> tuple[Statement, Statement]:
        """The hold and the settle of ``count`` rows as one statement each (PostgreSQL).

        Parameters as for :meth:`together`. Both lock the rows first, in the
        order of the budgets' codes: the order the gate lists them in, which
        a hold or a settle going row by row in a transaction follows too, so
        no two of these can wait on each other's rows (a deadlock, which
        PostgreSQL would end by failing one of them). The hold then changes
        every row or none: each row's room is worked out on the version it
        locked, and the rows that fit are counted over all of them (a window
        over every locked row, which needs them all before it yields one)
        before any changes.
        """
        found = self._together_pg.get(count)
        if found is not None:
            return found
        seen = _LEDGER.alias("seen")
        keys = [_key(f"_{index}", seen) for index in range(count)]
        fits = or_(*(and_(keys[i], _fits(seen, f"_{i}")) for i in range(count)))
        locked = _locked(keys, seen, fits.label("fits")).subquery("locked")
        # Materialized: a join may scan its inner side again, and a second
        # scan would skip the rows this statement has already changed.
        counted = (
            select(
                locked.c.budget,
                locked.c.subject,
                locked.c.period,
                func.count().over().label("found"),
                func.count().filter(locked.c.fits).over().label("fitting"),
            )
            .cte("w_ledger_held")
            .prefix_with("MATERIALIZED")
        )
        # Inlined: a value of the statement's own costs every run a lookup.
        every = literal_column(str(count), type_=Integer())
        hold = Statement(
            update(_LEDGER)
            .where(*_matching(counted), counted.c.found == every, counted.c.fitting == every)
            .values({**_hold_values(), "updated_at": bindparam("updated_at")})
        )
        rows = _locked(keys, seen).cte("w_ledger_settled").prefix_with("MATERIALIZED")
        settle = Statement(
            update(_LEDGER)
            .where(*_matching(rows))
            .values({**_settle_values(), "updated_at": bindparam("updated_at")})
        )
        self._together_pg[count] = (hold, settle)
        return hold, settle

    def read(self, connection: Connection, tenant: str, entry: LedgerEntry) -> _LedgerRow | None:
        rows = fetch(connection, self.row, key_values(tenant, entry))
        return rows[0] if rows else None
