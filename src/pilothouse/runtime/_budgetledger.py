"""The budget ledger in the database: the rules as the gate reads them, and the SQL.

A hold is one conditional ``UPDATE`` per ledger row (or, on SQLite, one for
all of a call's rows): the row changes only if spent + held + the call stays
within every limit. It is atomic on SQLite (one writer) and on PostgreSQL
(the row lock makes a concurrent ``UPDATE`` re-check its condition). A
settle turns the hold into what was spent and claims the highest threshold
the row has newly reached (``UPDATE ... WHERE alerted < threshold``), so
each is announced once per period. :mod:`pilothouse.runtime._budgets` runs
them; :mod:`pilothouse.runtime._budgetredis` is the same ledger in Redis.
"""

from __future__ import annotations

__all__ = [
    "BudgetHold",
    "BudgetRule",
    "LedgerEntry",
    "LedgerStatements",
    "Refused",
    "fits_once_settled",
    "fixed_values",
    "fraction",
    "hold_at_once",
    "hold_rows",
    "hold_update",
    "limit_crossed",
    "load_rules",
    "period_of",
    "refused_by",
    "remaining_of",
    "settle_rows",
    "settle_update",
]

import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from operator import itemgetter
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import (
    BigInteger,
    Connection,
    Executable,
    Numeric,
    String,
    and_,
    bindparam,
    cast,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter, ColumnElement

from pilothouse.catalog._tables import budget_table, model_table, provider_table
from pilothouse.store._base import utcnow
from pilothouse.store._fastsql import BoundUpdate, Query, Statement, execute, fetch
from pilothouse.store._tables import budget_usage_table

_MILLION = Decimal(1_000_000)
# Per message, as the usage estimate counts it: role and framing tokens.
_MESSAGE_OVERHEAD = 4
_LEDGER = budget_usage_table
_MONEY = Numeric(24, 12)
# How many callers' charged rows the gate keeps worked out.
_CHARGED_KEPT = 4096


@dataclass(frozen=True, slots=True)
class BudgetRule:
    """A stored budget as the gate reads it (see ``BudgetSpec`` for the fields)."""

    code: str
    scope: str
    match: str | None
    model: str | None
    provider: str | None
    period: str
    timezone: str
    money: Decimal | None
    input_tokens: int | None
    output_tokens: int | None
    turns: int | None
    on_limit: str
    thresholds: tuple[int, ...]
    downgrade_to: str | None = None

    def limits(self) -> dict[str, Decimal | int]:
        """The limits this budget sets, by name."""
        values = {
            "money": self.money,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "turns": self.turns,
        }
        return {name: value for name, value in values.items() if value is not None}


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One budget row a call holds: the rule, whose counters, which period."""

    rule: BudgetRule
    subject: str
    period: str
    resets_at: datetime | None
    enforced: bool = True
    """The limits stop the call (refuse; downgrade unless already downgraded)."""
    fixed: dict[str, Any] = field(default_factory=lambda: {})
    """The hold statement's values that stay the same call after call (key, limits)."""


@dataclass(frozen=True, slots=True)
class BudgetHold:
    """What one model call holds on its budgets until it settles.

    Attributes:
        tenant: the tenant whose ledger rows are held.
        entries: the rows (budget, subject, period).
        money: the worst-case cost held.
        input_tokens: the worst-case input tokens held.
        output_tokens: the worst-case output tokens held.
    """

    tenant: str
    entries: tuple[LedgerEntry, ...]
    money: Decimal
    input_tokens: int
    output_tokens: int


class Refused(Exception):
    """Raised inside the hold's transaction so it rolls back; carries the refusal."""

    def __init__(
        self, entry: LedgerEntry, limit: str, remaining: dict[str, str], *, in_flight: bool
    ) -> None:
        super().__init__(entry.rule.code)
        self.entry = entry
        self.limit = limit
        self.remaining = remaining
        self.in_flight = in_flight
        """Only other calls' holds stand in the way: it may fit once they settle."""


def period_of(period: str, zone: str, now: datetime) -> tuple[str, datetime | None]:
    """The period ``now`` falls in, as a ledger key, and when the next one starts.

    Args:
        period: ``hour``, ``day``, ``month`` or ``total``.
        zone: the IANA time zone the boundaries are in.
        now: an aware datetime.

    Returns:
        The key (the period's local start with its UTC offset, so the
        repeated hour of a DST change is two periods) and the next period's
        start in UTC (None for ``total``).
    """
    if period == "total":
        return "total", None
    tz = ZoneInfo(zone)
    local = now.astimezone(tz)
    if period == "hour":
        start = local.replace(minute=0, second=0, microsecond=0)
        # Hours are counted in UTC: a wall-clock hour can repeat or vanish.
        following = (start.astimezone(UTC) + timedelta(hours=1)).astimezone(tz)
        return start.isoformat(timespec="minutes"), following.astimezone(UTC)
    if period == "day":
        key = local.date().isoformat()
        next_day = local.date() + timedelta(days=1)
        return key, datetime.combine(next_day, time(0), tzinfo=tz).astimezone(UTC)
    key = f"{local.year:04d}-{local.month:02d}"
    first = date(local.year + (local.month == 12), local.month % 12 + 1, 1)
    return key, datetime.combine(first, time(0), tzinfo=tz).astimezone(UTC)


def load_rules(connection: Connection, tenant: str) -> tuple[BudgetRule, ...]:
    """The tenant's active budgets, with their model and provider filters as codes."""
    budget, model, provider = budget_table, model_table.alias("m"), provider_table.alias("p")
    target = model_table.alias("d")
    rows = connection.execute(
        select(
            budget.c.code,
            budget.c.scope,
            budget.c.match,
            model.c.code.label("model"),
            provider.c.code.label("provider"),
            budget.c.period,
            budget.c.timezone,
            budget.c.money,
            budget.c.input_tokens,
            budget.c.output_tokens,
            budget.c.turns,
            budget.c.on_limit,
            budget.c.thresholds,
            target.c.code.label("downgrade_to"),
        )
        .select_from(
            budget.outerjoin(model, model.c.id == budget.c.model_id)
            .outerjoin(provider, provider.c.id == budget.c.provider_id)
            .outerjoin(target, target.c.id == budget.c.downgrade_to_id)
        )
        .where(budget.c.tenant == tenant, budget.c.active.is_(True))
        .order_by(budget.c.code)
    ).all()
    return tuple(
        BudgetRule(
            code=row.code,
            scope=row.scope,
            match=row.match,
            model=row.model,
            provider=row.provider,
            period=row.period,
            timezone=row.timezone,
            money=None if row.money is None else Decimal(row.money),
            input_tokens=row.input_tokens,
            output_tokens=row.output_tokens,
            turns=row.turns,
            on_limit=row.on_limit,
            thresholds=tuple(int(t) for t in row.thresholds or ()),
            downgrade_to=row.downgrade_to,
        )
        for row in rows
    )


def _key_values(tenant: str, entry: LedgerEntry) -> dict[str, Any]:
    # updated_at too: statements run on the driver get no Python-side onupdate.
    return {
        "k_tenant": tenant,
        "k_budget": entry.rule.code,
        "k_subject": entry.subject,
        "k_period": entry.period,
        "updated_at": utcnow(),
    }


def fixed_values(
    tenant: str, rule: BudgetRule, subject: str, period: str, enforced: bool
) -> dict[str, Any]:
    """The hold's key and limits for one ledger row (a limit is NULL where it does not stop)."""
    return {
        "k_tenant": tenant,
        "k_budget": rule.code,
        "k_subject": subject,
        "k_period": period,
        "lim_money": rule.money if enforced else None,
        "lim_input": rule.input_tokens if enforced else None,
        "lim_output": rule.output_tokens if enforced else None,
        "lim_turns": rule.turns if enforced else None,
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


def _within(used: ColumnElement[Any], amount: BindParameter[Any], limit: str, kind: Any) -> Any:
    """``used + amount <= limit``, or true when the limit is NULL (the budget sets none)."""
    bound = bindparam(limit, type_=kind)
    return or_(bound.is_(None), used + amount <= bound)


_POSITIONAL = SQLiteDialect_pysqlite(paramstyle="qmark")
"""Compiles the ledger's statements for pysqlite with positional parameters."""

_AS_TEXT = "updated_at"
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
            if name == _AS_TEXT:
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


class LedgerStatements:
    """The ledger's statements, built and compiled once per gate (run on the driver)."""

    def __init__(self) -> None:
        c = _LEDGER.c
        money = bindparam("money", type_=_MONEY)
        held_in = bindparam("input_tokens", type_=BigInteger())
        held_out = bindparam("output_tokens", type_=BigInteger())
        turns = bindparam("turns", type_=BigInteger())
        self.hold = Statement(
            update(_LEDGER)
            .where(
                _key(),
                _within(c.spent_money + c.held_money, money, "lim_money", _MONEY),
                _within(c.spent_input + c.held_input, held_in, "lim_input", BigInteger()),
                _within(c.spent_output + c.held_output, held_out, "lim_output", BigInteger()),
                _within(c.turns, turns, "lim_turns", BigInteger()),
            )
            .values(
                held_money=c.held_money + money,
                held_input=c.held_input + held_in,
                held_output=c.held_output + held_out,
                turns=c.turns + turns,
            )
        )
        spent = bindparam("spent_money", type_=_MONEY)
        spent_in = bindparam("spent_input", type_=BigInteger())
        spent_out = bindparam("spent_output", type_=BigInteger())
        self.settle = Statement(
            update(_LEDGER)
            .where(_key())
            .values(
                held_money=c.held_money - money,
                held_input=c.held_input - held_in,
                held_output=c.held_output - held_out,
                spent_money=c.spent_money + spent,
                spent_input=c.spent_input + spent_in,
                spent_output=c.spent_output + spent_out,
            )
        )
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

    def together(self, count: int) -> tuple[_OnSqlite, _OnSqlite]:
        """The hold and the settle of ``count`` rows as one statement each (SQLite only).

        Each row's key and limits are bound with its index as a suffix
        (``k_budget_0``, ``lim_money_0``); the amounts are the same for all.
        """
        found = self._together.get(count)
        if found is not None:
            return found
        c = _LEDGER.c
        money = bindparam("money", type_=_MONEY)
        held_in = bindparam("input_tokens", type_=BigInteger())
        held_out = bindparam("output_tokens", type_=BigInteger())
        turns = bindparam("turns", type_=BigInteger())
        keys = [_key(f"_{index}") for index in range(count)]
        seen = _LEDGER.alias("seen")
        s = seen.c
        fits = [
            and_(
                _key(f"_{index}", seen),
                _within(s.spent_money + s.held_money, money, f"lim_money_{index}", _MONEY),
                _within(s.spent_input + s.held_input, held_in, f"lim_input_{index}", BigInteger()),
                _within(
                    s.spent_output + s.held_output, held_out, f"lim_output_{index}", BigInteger()
                ),
                _within(s.turns, turns, f"lim_turns_{index}", BigInteger()),
            )
            for index in range(count)
        ]
        # All rows or none: the rows that fit are counted before any changes
        # (an uncorrelated subquery runs once), and the UPDATE applies only
        # when every one does. One statement, so it commits on its own.
        fitting = select(func.count()).select_from(seen).where(or_(*fits)).scalar_subquery()
        hold = _OnSqlite(
            update(_LEDGER)
            .where(or_(*keys), fitting == count)
            .values(
                held_money=c.held_money + money,
                held_input=c.held_input + held_in,
                held_output=c.held_output + held_out,
                turns=c.turns + turns,
            )
        )
        settle = _OnSqlite(
            update(_LEDGER)
            .where(or_(*keys))
            .values(
                held_money=c.held_money - money,
                held_input=c.held_input - held_in,
                held_output=c.held_output - held_out,
                spent_money=c.spent_money + bindparam("spent_money", type_=_MONEY),
                spent_input=c.spent_input + bindparam("spent_input", type_=BigInteger()),
                spent_output=c.spent_output + bindparam("spent_output", type_=BigInteger()),
            )
        )
        self._together[count] = (hold, settle)
        return hold, settle

    def read(self, connection: Connection, tenant: str, entry: LedgerEntry) -> _LedgerRow | None:
        rows = fetch(connection, self.row, _key_values(tenant, entry))
        return rows[0] if rows else None


def _indexed(entries: Sequence[LedgerEntry], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each entry's key and limits, suffixed with its index (see ``together``)."""
    for index, entry in enumerate(entries):
        for name, value in entry.fixed.items():
            if name == "k_tenant":
                values[name] = value
            else:
                values[f"{name}_{index}"] = value
    return values


def _ensure_row(connection: Connection, tenant: str, entry: LedgerEntry) -> None:
    """Make the period's row if it is not there yet (the first call of a period)."""
    values = {
        "tenant": tenant,
        "budget": entry.rule.code,
        "subject": entry.subject,
        "period": entry.period,
    }
    dialect = connection.dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        connection.execute(pg_insert(_LEDGER).values(values).on_conflict_do_nothing())
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        connection.execute(sqlite_insert(_LEDGER).values(values).on_conflict_do_nothing())
    else:  # pragma: no cover - pilothouse stores run on SQLite or PostgreSQL
        connection.execute(insert(_LEDGER).values(values))


def remaining_of(row: Any, rule: BudgetRule) -> dict[str, str]:
    used = {
        "money": Decimal(row.spent_money) + Decimal(row.held_money),
        "input_tokens": int(row.spent_input) + int(row.held_input),
        "output_tokens": int(row.spent_output) + int(row.held_output),
        "turns": int(row.turns),
    }
    return {name: str(max(limit - used[name], 0)) for name, limit in rule.limits().items()}


def hold_rows(
    connection: Connection,
    sql: LedgerStatements,
    tenant: str,
    entries: Sequence[LedgerEntry],
    money: Decimal,
    input_tokens: int,
    output_tokens: int,
    turns: int,
) -> None:
    amounts = {
        "money": money,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "turns": turns,
        "updated_at": utcnow(),
    }
    for entry in entries:
        values = {**entry.fixed, **amounts}
        # One statement in the common case; the period's first call makes the row.
        if execute(connection, sql.hold, values):
            continue
        row = sql.read(connection, tenant, entry)
        if row is None:
            _ensure_row(connection, tenant, entry)
            if execute(connection, sql.hold, values):
                continue
            row = sql.read(connection, tenant, entry)
        assert row is not None, "the row was just made"
        raise refused_by(entry, row, money, input_tokens, output_tokens, turns)


def refused_by(
    entry: LedgerEntry,
    row: Any,
    money: Decimal,
    input_tokens: int,
    output_tokens: int,
    turns: int,
) -> Refused:
    """The refusal of a hold ``row`` did not take, with which limit and what remains."""
    rule = entry.rule
    held = limit_crossed(row, rule, money, input_tokens, output_tokens, turns, held=True)
    spent = limit_crossed(row, rule, money, input_tokens, output_tokens, turns, held=False)
    return Refused(
        entry, spent or held or "turns", remaining_of(row, rule), in_flight=spent is None
    )


def hold_at_once(
    connection: Connection,
    sql: LedgerStatements,
    tenant: str,
    entries: Sequence[LedgerEntry],
    money: Decimal,
    input_tokens: int,
    output_tokens: int,
    turns: int,
) -> bool:
    """Hold on every row with one statement, all rows or none; say whether it held.

    It does not hold when a row is missing (a period's first call) or a
    limit stands in the way; :func:`hold_rows` then goes row by row.
    """
    values: dict[str, Any] = {
        "money": money,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "turns": turns,
    }
    if connection.dialect.name != "sqlite":
        if len(entries) > 1:
            return False  # several rows in one statement on SQLite only (see settle_rows)
        values.update(entries[0].fixed, updated_at=utcnow())
        return execute(connection, sql.hold, values) == 1
    values[_AS_TEXT] = sqlite_time(datetime.now(UTC))
    if len(entries) == 1:
        values.update(entries[0].fixed)
        return sql.hold_sqlite.run(connection, values) == 1
    hold, _ = sql.together(len(entries))
    return hold.run(connection, _indexed(entries, values)) == len(entries)


def hold_update(
    sql: LedgerStatements,
    tenant: str,
    entries: Sequence[LedgerEntry],
    money: Decimal,
    input_tokens: int,
    output_tokens: int,
    turns: int,
) -> BoundUpdate:
    """The hold on one row as an UPDATE another statement can carry (PostgreSQL).

    It matches the row only if the call fits (see :func:`hold_at_once`);
    ``matched`` says whether it did once the carrying statement ran.
    """
    (entry,) = entries
    values = {
        **entry.fixed,
        "money": money,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "turns": turns,
        "updated_at": utcnow(),
    }
    return BoundUpdate(sql.hold, values)


def fits_once_settled(
    connection: Connection,
    sql: LedgerStatements,
    tenant: str,
    entries: Sequence[LedgerEntry],
    money: Decimal,
    input_tokens: int,
    output_tokens: int,
    turns: int,
) -> bool | None:
    """Read, without locking, whether the call fits now (True), only later (False) or never."""
    now_fits = True
    for entry in entries:
        if not entry.enforced:
            continue
        row = sql.read(connection, tenant, entry)
        if row is None:
            continue
        amounts = (row, entry.rule, money, input_tokens, output_tokens, turns)
        if limit_crossed(*amounts, held=False) is not None:
            return None
        if limit_crossed(*amounts, held=True) is not None:
            now_fits = False
    return now_fits


def limit_crossed(
    row: Any,
    rule: BudgetRule,
    money: Decimal,
    input_tokens: int,
    output_tokens: int,
    turns: int,
    *,
    held: bool,
) -> str | None:
    """Which limit the call would cross (the first listed), counting holds or not; None if none."""
    money_used = Decimal(row.spent_money) + (Decimal(row.held_money) if held else 0)
    if rule.money is not None and money_used + money > rule.money:
        return "money"
    input_used = row.spent_input + (row.held_input if held else 0)
    if rule.input_tokens is not None and input_used + input_tokens > rule.input_tokens:
        return "input_tokens"
    output_used = row.spent_output + (row.held_output if held else 0)
    if rule.output_tokens is not None and output_used + output_tokens > rule.output_tokens:
        return "output_tokens"
    if rule.turns is not None and row.turns + turns > rule.turns:
        return "turns"
    return None


def fraction(row: Any, rule: BudgetRule) -> float:
    """How much of its tightest limit the row has spent (held amounts not counted)."""
    shares: list[float] = []
    if rule.money:
        shares.append(float(Decimal(row.spent_money) / rule.money))
    if rule.input_tokens:
        shares.append(row.spent_input / rule.input_tokens)
    if rule.output_tokens:
        shares.append(row.spent_output / rule.output_tokens)
    if rule.turns:
        shares.append(row.turns / rule.turns)
    return max(shares, default=0.0)


def settle_rows(
    connection: Connection,
    sql: LedgerStatements,
    hold: BudgetHold,
    money: Decimal,
    input_tokens: int,
    output_tokens: int,
) -> list[tuple[LedgerEntry, int, float]]:
    """Turn the hold into what was spent; return the thresholds this settle crossed first."""
    crossed: list[tuple[LedgerEntry, int, float]] = []
    amounts: dict[str, Any] = {
        "money": hold.money,
        "input_tokens": hold.input_tokens,
        "output_tokens": hold.output_tokens,
        "spent_money": money,
        "spent_input": input_tokens,
        "spent_output": output_tokens,
    }
    entries = hold.entries
    if connection.dialect.name == "sqlite":
        # One statement for all rows: SQLite has a single writer, so the
        # order rows are locked in cannot deadlock (PostgreSQL goes row by row).
        amounts[_AS_TEXT] = sqlite_time(datetime.now(UTC))
        if len(entries) == 1:
            sql.settle_sqlite.run(connection, {**entries[0].fixed, **amounts})
        else:
            _, settle = sql.together(len(entries))
            settle.run(connection, _indexed(entries, amounts))
    else:
        for entry in entries:
            execute(connection, sql.settle, {**_key_values(hold.tenant, entry), **amounts})
    for entry in entries:
        if entry.rule.thresholds:
            crossed.extend(_announce(connection, sql, hold.tenant, entry))
    return crossed


def settle_update(
    sql: LedgerStatements,
    hold: BudgetHold,
    money: Decimal,
    input_tokens: int,
    output_tokens: int,
) -> BoundUpdate:
    """The settle of a hold on one row, as an UPDATE a step's statement can carry (PostgreSQL).

    For a row whose budget announces no thresholds: nothing is read back.
    """
    (entry,) = hold.entries
    values = {
        **_key_values(hold.tenant, entry),
        "money": hold.money,
        "input_tokens": hold.input_tokens,
        "output_tokens": hold.output_tokens,
        "spent_money": money,
        "spent_input": input_tokens,
        "spent_output": output_tokens,
    }
    return BoundUpdate(sql.settle, values)


def _announce(
    connection: Connection, sql: LedgerStatements, tenant: str, entry: LedgerEntry
) -> list[tuple[LedgerEntry, int, float]]:
    """Claim the highest threshold the row has reached and not yet announced."""
    row = sql.read(connection, tenant, entry)
    assert row is not None, "a settled row exists"
    share = fraction(row, entry.rule)
    reached = [t for t in entry.rule.thresholds if share * 100 >= t and t > row.alerted]
    if not reached:
        return []
    top = max(reached)
    claimed = execute(connection, sql.claim, {**_key_values(tenant, entry), "top": top})
    # Another process may have claimed it between the read and the update.
    return [(entry, top, share)] if claimed else []
