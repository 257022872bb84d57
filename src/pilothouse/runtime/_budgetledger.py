"""The budget ledger in the database: the rules as the gate reads them, and the hold and settle.

A hold is one conditional ``UPDATE`` of all of a call's ledger rows: the
rows change only if spent + held + the call stays within every limit of
every row. It is atomic on SQLite (one writer) and on PostgreSQL (the rows
are locked first, in one order, and their room worked out on the versions
locked). A settle turns the hold into what was spent and claims the
highest threshold the row has newly reached (``UPDATE ... WHERE alerted <
threshold``), so each is announced once per period. The statements are in
:mod:`pilothouse.runtime._budgetsql`; :mod:`pilothouse.runtime._budgets`
runs them; :mod:`pilothouse.runtime._budgetredis` is the same ledger in
Redis.
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

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, insert, select

from pilothouse.catalog._tables import budget_table, model_table, provider_table
from pilothouse.runtime._budgetsql import (
    AS_TEXT,
    NO_LIMIT,
    LedgerStatements,
    key_values,
    sqlite_time,
)
from pilothouse.store._base import utcnow
from pilothouse.store._fastsql import BoundUpdate, execute
from pilothouse.store._tables import budget_usage_table

_LEDGER = budget_usage_table
# How many tuples of entries a gate keeps suffixed (see _indexed).
_INDEXED_KEPT = 4096


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


def fixed_values(
    tenant: str, rule: BudgetRule, subject: str, period: str, enforced: bool
) -> dict[str, Any]:
    """The hold's key and limits for one ledger row (:data:`NO_LIMIT` where one does not stop)."""

    def limit(value: Decimal | int | None) -> Decimal | int:
        return value if enforced and value is not None else NO_LIMIT

    return {
        "k_tenant": tenant,
        "k_budget": rule.code,
        "k_subject": subject,
        "k_period": period,
        "lim_money": limit(rule.money),
        "lim_input": limit(rule.input_tokens),
        "lim_output": limit(rule.output_tokens),
        "lim_turns": limit(rule.turns),
    }


def _indexed(
    sql: LedgerStatements, entries: Sequence[LedgerEntry], values: dict[str, Any]
) -> dict[str, Any]:
    """``values`` with each entry's key and limits, suffixed with its index (see ``together``).

    Worked out once per tuple of entries: the gate keeps one per caller and
    period, so a call charged to several budgets only copies it.
    """
    if not isinstance(entries, tuple):
        values.update(_suffixed(entries))
        return values
    kept = sql.indexed.get(id(entries))
    if kept is None or kept[0] is not entries:
        if len(sql.indexed) >= _INDEXED_KEPT:
            sql.indexed.clear()
        kept = sql.indexed[id(entries)] = (entries, _suffixed(entries))
    values.update(kept[1])
    return values


def _suffixed(entries: Sequence[LedgerEntry]) -> dict[str, Any]:
    suffixed: dict[str, Any] = {}
    for index, entry in enumerate(entries):
        for name, value in entry.fixed.items():
            if name == "k_tenant":
                suffixed[name] = value
            else:
                suffixed[f"{name}_{index}"] = value
    return suffixed


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
        values["updated_at"] = utcnow()
        if len(entries) == 1:
            values.update(entries[0].fixed)
            return execute(connection, sql.hold, values) == 1
        hold, _ = sql.together_pg(len(entries))
        return execute(connection, hold, _indexed(sql, entries, values)) == len(entries)
    values[AS_TEXT] = sqlite_time(datetime.now(UTC))
    if len(entries) == 1:
        values.update(entries[0].fixed)
        return sql.hold_sqlite.run(connection, values) == 1
    hold, _ = sql.together(len(entries))
    return hold.run(connection, _indexed(sql, entries, values)) == len(entries)


def hold_update(
    sql: LedgerStatements,
    tenant: str,
    entries: Sequence[LedgerEntry],
    money: Decimal,
    input_tokens: int,
    output_tokens: int,
    turns: int,
) -> BoundUpdate:
    """The hold as one UPDATE another statement can carry (PostgreSQL).

    It matches the rows only if the call fits on every one (see
    :func:`hold_at_once`); ``matched`` says how many it matched once the
    carrying statement ran: all of them, or none.
    """
    values: dict[str, Any] = {
        "money": money,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "turns": turns,
        "updated_at": utcnow(),
    }
    if len(entries) == 1:
        return BoundUpdate(sql.hold, {**entries[0].fixed, **values})
    hold, _ = sql.together_pg(len(entries))
    return BoundUpdate(hold, _indexed(sql, entries, values))


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
        # order rows are locked in cannot deadlock (PostgreSQL's statement
        # locks them in order first; see LedgerStatements.together_pg).
        amounts[AS_TEXT] = sqlite_time(datetime.now(UTC))
        if len(entries) == 1:
            sql.settle_sqlite.run(connection, {**entries[0].fixed, **amounts})
        else:
            _, settle = sql.together(len(entries))
            settle.run(connection, _indexed(sql, entries, amounts))
    elif len(entries) == 1:
        execute(connection, sql.settle, {**key_values(hold.tenant, entries[0]), **amounts})
    else:
        _, settle = sql.together_pg(len(entries))
        execute(connection, settle, _indexed(sql, entries, {**amounts, "updated_at": utcnow()}))
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
    """The settle of a hold as one UPDATE a step's statement can carry (PostgreSQL).

    For rows whose budgets announce no thresholds: nothing is read back.
    """
    values: dict[str, Any] = {
        "money": hold.money,
        "input_tokens": hold.input_tokens,
        "output_tokens": hold.output_tokens,
        "spent_money": money,
        "spent_input": input_tokens,
        "spent_output": output_tokens,
    }
    entries = hold.entries
    if len(entries) == 1:
        return BoundUpdate(sql.settle, {**key_values(hold.tenant, entries[0]), **values})
    _, settle = sql.together_pg(len(entries))
    return BoundUpdate(settle, _indexed(sql, entries, {**values, "updated_at": utcnow()}))


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
    claimed = execute(connection, sql.claim, {**key_values(tenant, entry), "top": top})
    # Another process may have claimed it between the read and the update.
    return [(entry, top, share)] if claimed else []
