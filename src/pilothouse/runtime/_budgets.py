"""Budgets enforced before a model call: hold the worst case, settle to what was used.

Before each model call the gate finds the tenant's budgets that apply to it
(scope, match, model and provider filters), works out the call's worst case
(the prompt's tokens counted offline, the call's ``max_tokens`` as output,
both priced with the model's prices) and holds it on each budget's ledger row
for the current period with one conditional ``UPDATE``: the row changes only
if spent + held + this call stays within every limit. A refused hold rolls
back every hold of the call and raises :class:`~pilothouse.errors.BudgetExceededError`
before any request leaves (a ``downgrade`` budget raises :class:`BudgetDowngrade`
instead, and the turn switches to the budget's cheaper model, on which that
budget never stops it). After the call the hold is settled to the usage
the turn recorded (a cancelled call at what it consumed), so a limit is
overshot by at most what one in-flight call used beyond its own estimate.

Because the hold is a single statement on one row, it is atomic on SQLite
(one writer) and on PostgreSQL (the row lock makes a concurrent ``UPDATE``
re-check its condition), across workers and replicas alike. A period is a
key computed from the clock in the budget's time zone (``2026-12`` for a
month), so every process moves to the next period's row at the same boundary
and the old row is simply no longer written.

Each threshold crossing is announced once per period: the process whose
``UPDATE ... WHERE alerted < threshold`` changes the row logs a warning and
adds a ``budget`` event to the turn's timeline.
"""

from __future__ import annotations

__all__ = [
    "BudgetDowngrade",
    "BudgetGate",
    "BudgetHold",
    "BudgetRule",
    "fraction",
    "load_rules",
    "period_of",
]

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from time import monotonic
from typing import Any
from zoneinfo import ZoneInfo

import anyio
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import ModelRequestParameters
from sqlalchemy import (
    BigInteger,
    Connection,
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
from sqlalchemy.sql.elements import BindParameter, ColumnElement

from pilothouse.catalog._enums import TimelineKind
from pilothouse.catalog._tables import budget_table, model_table, provider_table
from pilothouse.errors import BudgetExceededError
from pilothouse.memory import counter_for
from pilothouse.runtime._budgetalerts import AlertWebhook
from pilothouse.runtime._budgetredis import RedisLedger
from pilothouse.runtime._meter import Meter
from pilothouse.runtime._turn import Turn
from pilothouse.store import NewEvent
from pilothouse.store._base import utcnow
from pilothouse.store._engine import Database
from pilothouse.store._fastsql import Query, Statement, execute, fetch
from pilothouse.store._tables import budget_usage_table, conversation_table

logger = logging.getLogger(__name__)

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
class _Entry:
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
    entries: tuple[_Entry, ...]
    money: Decimal
    input_tokens: int
    output_tokens: int


class BudgetDowngrade(Exception):
    """A ``downgrade`` budget is at its limit: the call goes to ``model`` instead.

    Raised by :meth:`BudgetGate.hold` before anything was held or sent.

    Attributes:
        budget: the budget's code.
        model: the code of the model to use instead.
        scope: the budget's scope.
        subject: whose counters reached the limit.
        period: the period key.
        limit: the limit that would be crossed.
    """

    def __init__(
        self, budget: str, model: str, scope: str, subject: str, period: str, limit: str
    ) -> None:
        super().__init__(f"budget {budget} reached its {limit} limit: downgrade to {model}")
        self.budget = budget
        self.model = model
        self.scope = scope
        self.subject = subject
        self.period = period
        self.limit = limit


class _Refused(Exception):
    """Raised inside the hold's transaction so it rolls back; carries the refusal."""

    def __init__(
        self, entry: _Entry, limit: str, remaining: dict[str, str], *, in_flight: bool
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


def _key_values(tenant: str, entry: _Entry) -> dict[str, Any]:
    # updated_at too: statements run on the driver get no Python-side onupdate.
    return {
        "k_tenant": tenant,
        "k_budget": entry.rule.code,
        "k_subject": entry.subject,
        "k_period": entry.period,
        "updated_at": utcnow(),
    }


def _fixed_values(
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


class _Statements:
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

        self._together: dict[int, tuple[Statement, Statement]] = {}

    def together(self, count: int) -> tuple[Statement, Statement]:
        """The hold and the settle of ``count`` rows as one statement each (SQLite).

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
        hold = Statement(
            update(_LEDGER)
            .where(or_(*keys), fitting == count)
            .values(
                held_money=c.held_money + money,
                held_input=c.held_input + held_in,
                held_output=c.held_output + held_out,
                turns=c.turns + turns,
            )
        )
        settle = Statement(
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

    def read(self, connection: Connection, tenant: str, entry: _Entry) -> _LedgerRow | None:
        rows = fetch(connection, self.row, _key_values(tenant, entry))
        return rows[0] if rows else None


def _indexed(entries: Sequence[_Entry], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each entry's key and limits, suffixed with its index (see ``together``)."""
    for index, entry in enumerate(entries):
        for name, value in entry.fixed.items():
            if name == "k_tenant":
                values[name] = value
            else:
                values[f"{name}_{index}"] = value
    return values


def _ensure_row(connection: Connection, tenant: str, entry: _Entry) -> None:
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


def _remaining(row: Any, rule: BudgetRule) -> dict[str, str]:
    used = {
        "money": Decimal(row.spent_money) + Decimal(row.held_money),
        "input_tokens": int(row.spent_input) + int(row.held_input),
        "output_tokens": int(row.spent_output) + int(row.held_output),
        "turns": int(row.turns),
    }
    return {name: str(max(limit - used[name], 0)) for name, limit in rule.limits().items()}


def _hold_rows(
    connection: Connection,
    sql: _Statements,
    tenant: str,
    entries: Sequence[_Entry],
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
        raise _refused(entry, row, money, input_tokens, output_tokens, turns)


def _refused(
    entry: _Entry,
    row: Any,
    money: Decimal,
    input_tokens: int,
    output_tokens: int,
    turns: int,
) -> _Refused:
    """The refusal of a hold ``row`` did not take, with which limit and what remains."""
    rule = entry.rule
    held = _crossed(row, rule, money, input_tokens, output_tokens, turns, held=True)
    spent = _crossed(row, rule, money, input_tokens, output_tokens, turns, held=False)
    return _Refused(entry, spent or held or "turns", _remaining(row, rule), in_flight=spent is None)


def _hold_at_once(
    connection: Connection,
    sql: _Statements,
    tenant: str,
    entries: Sequence[_Entry],
    money: Decimal,
    input_tokens: int,
    output_tokens: int,
    turns: int,
) -> bool:
    """Hold on every row with one statement, all rows or none; say whether it held.

    It does not hold when a row is missing (a period's first call) or a
    limit stands in the way; :func:`_hold_rows` then goes row by row.
    """
    values = {
        "money": money,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "turns": turns,
        "updated_at": utcnow(),
    }
    if len(entries) == 1:
        values.update(entries[0].fixed)
        return execute(connection, sql.hold, values) == 1
    hold, _ = sql.together(len(entries))
    return execute(connection, hold, _indexed(entries, values)) == len(entries)


def _fits_once_settled(
    connection: Connection,
    sql: _Statements,
    tenant: str,
    entries: Sequence[_Entry],
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
        if _crossed(*amounts, held=False) is not None:
            return None
        if _crossed(*amounts, held=True) is not None:
            now_fits = False
    return now_fits


def _crossed(
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


def _settle_rows(
    connection: Connection,
    sql: _Statements,
    hold: BudgetHold,
    money: Decimal,
    input_tokens: int,
    output_tokens: int,
) -> list[tuple[_Entry, int, float]]:
    """Turn the hold into what was spent; return the thresholds this settle crossed first."""
    crossed: list[tuple[_Entry, int, float]] = []
    amounts = {
        "money": hold.money,
        "input_tokens": hold.input_tokens,
        "output_tokens": hold.output_tokens,
        "spent_money": money,
        "spent_input": input_tokens,
        "spent_output": output_tokens,
    }
    entries = hold.entries
    if len(entries) > 1 and connection.dialect.name == "sqlite":
        # One statement for all rows: SQLite has a single writer, so the
        # order rows are locked in cannot deadlock (PostgreSQL goes row by row).
        _, settle = sql.together(len(entries))
        execute(connection, settle, _indexed(entries, {**amounts, "updated_at": utcnow()}))
    else:
        for entry in entries:
            execute(connection, sql.settle, {**_key_values(hold.tenant, entry), **amounts})
    for entry in entries:
        if entry.rule.thresholds:
            crossed.extend(_announce(connection, sql, hold.tenant, entry))
    return crossed


def _announce(
    connection: Connection, sql: _Statements, tenant: str, entry: _Entry
) -> list[tuple[_Entry, int, float]]:
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


class BudgetGate:
    """Holds each model call's worst case on the tenant's budgets, and settles it.

    One per runtime; the budgets are read once per tenant and catalog revision.

    Args:
        database: the store the ledger is in.
        clock: the current time (aware); tests move it across a period boundary.
        wait: seconds a call waits for other calls' holds to settle when only
            they stand between it and the limit (a burst), before it is refused.
        meter: the metrics system's meter, which counts each alert.
        webhook: where each alert is also POSTed (None: nowhere).
        redis: the deployment's Redis ledger, which then holds and settles
            instead of the database (see :mod:`pilothouse.runtime._budgetredis`).
    """

    def __init__(
        self,
        database: Database,
        *,
        clock: Callable[[], datetime] | None = None,
        wait: float = 30.0,
        meter: Callable[[], Meter | None] = lambda: None,
        webhook: AlertWebhook | None = None,
        redis: RedisLedger | None = None,
    ) -> None:
        self._redis = redis
        self._meter = meter
        self._webhook = webhook
        self._database = database
        self._clock = clock or (lambda: datetime.now(UTC))
        self._wait = wait
        self._sql = _Statements()
        self._rules: dict[str, tuple[int, tuple[BudgetRule, ...]]] = {}
        self._charged: dict[tuple[Any, ...], tuple[datetime, datetime | None, list[_Entry]]] = {}
        """The rows calls are charged to, by who calls, until the first period ends."""

    def _entries(
        self, rules: Sequence[BudgetRule], turn: Turn, key_prefix: str | None, now: datetime
    ) -> list[_Entry]:
        """The ledger rows a call of ``turn`` is charged to, now (worked out once per period)."""
        compiled = turn.compiled
        who = (
            turn.tenant,
            turn.handle.catalog_revision,
            compiled.model.code,
            compiled.model.provider.code,
            key_prefix,
            compiled.agent_code,
            compiled.action_code,
            turn.handle.memory_id,
        )
        cached = self._charged.get(who)
        if cached is not None:
            since, ends, entries = cached
            if since <= now and (ends is None or now < ends):
                return entries
        entries = _entries(rules, turn, key_prefix, now)
        ends = min((e.resets_at for e in entries if e.resets_at is not None), default=None)
        if len(self._charged) >= _CHARGED_KEPT:
            # Many callers (users, keys): start again rather than grow without bound.
            self._charged.clear()
        self._charged[who] = (now, ends, entries)
        return entries

    async def rules(self, tenant: str, revision: int) -> tuple[BudgetRule, ...]:
        """The tenant's active budgets at a catalog revision."""
        cached = self._rules.get(tenant)
        if cached is not None and cached[0] == revision:
            return cached[1]
        rules = await self._database.transaction(load_rules, tenant)
        self._rules[tenant] = (revision, rules)
        return rules

    async def _hold(
        self,
        sql: _Statements,
        tenant: str,
        entries: Sequence[_Entry],
        money: Decimal,
        input_tokens: int,
        output_tokens: int,
        turns: int,
    ) -> None:
        """Hold on every row in one transaction, or raise :class:`_Refused`."""
        amounts = (sql, tenant, entries, money, input_tokens, output_tokens, turns)
        if self._redis is not None:
            refused = await self._redis.hold(
                tenant,
                [(e.rule, e.subject, e.period, e.resets_at, e.enforced) for e in entries],
                money,
                input_tokens,
                output_tokens,
                turns,
                self._clock(),
            )
            if refused is not None:
                index, row = refused
                entry = entries[index]
                raise _refused(entry, row, money, input_tokens, output_tokens, turns)
            return
        # One statement, committed on its own, in the common case. Several
        # rows at once on SQLite only (see _settle_rows on why).
        if (len(entries) == 1 or self._database.is_sqlite) and await self._database.statement(
            _hold_at_once, *amounts
        ):
            return
        await self._database.transaction(_hold_rows, *amounts)

    async def _fits_once_settled(
        self,
        sql: _Statements,
        tenant: str,
        entries: Sequence[_Entry],
        money: Decimal,
        input_tokens: int,
        output_tokens: int,
        turns: int,
    ) -> bool | None:
        """Whether the call fits now (True), only once holds settle (False), or never (None)."""
        if self._redis is None:
            return await self._database.transaction(
                _fits_once_settled, sql, tenant, entries, money, input_tokens, output_tokens, turns
            )
        now_fits = True
        for entry in entries:
            if not entry.enforced:
                continue
            row = await self._redis.read(tenant, entry.rule.code, entry.period, entry.subject)
            if row is None:
                continue
            amounts = (row, entry.rule, money, input_tokens, output_tokens, turns)
            if _crossed(*amounts, held=False) is not None:
                return None
            if _crossed(*amounts, held=True) is not None:
                now_fits = False
        return now_fits

    async def hold(
        self,
        turn: Turn,
        messages: Sequence[ModelMessage],
        params: ModelRequestParameters,
        max_tokens: int,
    ) -> BudgetHold | None:
        """Hold the call's worst case on every budget that applies, or refuse it.

        Args:
            turn: the turn about to call its model.
            messages: what the call sends.
            params: the tools the call offers (their schemas are input too).
            max_tokens: the most the call may generate.

        Returns:
            The hold to settle after the call; None when no budget applies.

        Raises:
            BudgetExceededError: a budget that refuses would be crossed.
        """
        rules = await self.rules(turn.tenant, turn.handle.catalog_revision)
        if not rules:
            return None
        key_prefix = turn.key_prefix
        if key_prefix is None and any(r.scope == "api_key" for r in rules):
            key_prefix = turn.key_prefix = await self._database.transaction(
                _conversation_key, turn.handle.conversation_id
            )
        now = self._clock()
        entries = self._entries(rules, turn, key_prefix, now)
        if not entries:
            return None
        spec = turn.compiled.model
        input_tokens = _prompt_tokens(turn, messages, params)
        money = Decimal(0)
        if spec.input_price is not None:
            money += Decimal(input_tokens) * spec.input_price / _MILLION
        if spec.output_price is not None:
            money += Decimal(max_tokens) * spec.output_price / _MILLION
        turns = 0 if turn.budget_counted else 1
        amounts = (self._sql, turn.tenant, entries, money, input_tokens, max_tokens, turns)
        deadline = monotonic() + self._wait
        pause = 0.02
        while True:
            try:
                await self._hold(*amounts)
                break
            except _Refused as refused:
                rule = refused.entry.rule
                if rule.on_limit == "downgrade" and rule.downgrade_to is not None:
                    # At (or, with calls in flight, near) the limit: switch
                    # now rather than wait for the holds to settle.
                    entry = refused.entry
                    raise BudgetDowngrade(
                        rule.code,
                        rule.downgrade_to,
                        rule.scope,
                        entry.subject,
                        entry.period,
                        refused.limit,
                    ) from None
                # A burst: the spent amount leaves room, only calls in flight
                # hold it. They settle below their holds, so wait for them;
                # a call that cannot fit on what is spent is refused at once.
                if not refused.in_flight:
                    raise _refusal(refused, now) from None
                last = refused
            # Wait with plain reads: retrying the UPDATE would queue on the
            # row's lock behind every settling call.
            while True:
                if monotonic() + pause > deadline:
                    raise _refusal(last, now)
                await anyio.sleep(pause)
                pause = min(pause * 2, 0.5)
                fits = await self._fits_once_settled(*amounts)
                if fits is None:
                    # What was spent meanwhile leaves no room: refuse with fresh figures.
                    break
                if fits:
                    break
        turn.budget_counted = True
        return BudgetHold(turn.tenant, tuple(entries), money, input_tokens, max_tokens)

    async def settle(
        self, turn: Turn, hold: BudgetHold, money: Decimal, input_tokens: int, output_tokens: int
    ) -> None:
        """Replace the hold by what the call used, with the turn's next write.

        The settle runs in the transaction of the write that records the
        call's usage (the next step, or the turn's end), not in one of its
        own; thresholds it crosses are announced once that write commits.
        Until then the hold stays on the ledger, which can only refuse more.
        With a Redis ledger it is one script, at once (not interrupted by
        cancellation).

        Args:
            turn: the turn whose next write settles, and whose timeline gets the alerts.
            hold: what :meth:`hold` returned.
            money: what the call cost.
            input_tokens: its input tokens.
            output_tokens: its output tokens.
        """
        crossed: list[tuple[_Entry, int, float]] = []
        if self._redis is not None:
            entries = hold.entries
            with anyio.CancelScope(shield=True):
                claimed = await self._redis.settle(
                    hold.tenant,
                    [(entry.rule, entry.subject, entry.period) for entry in entries],
                    (hold.money, hold.input_tokens, hold.output_tokens),
                    (money, input_tokens, output_tokens),
                )
                crossed = [(entries[index], top, share) for index, top, share in claimed]
                if crossed:
                    await self._announce(turn, hold.tenant, crossed)
            return
        sql = self._sql

        def work(connection: Connection) -> None:
            crossed[:] = _settle_rows(connection, sql, hold, money, input_tokens, output_tokens)

        turn.settles.append(work)
        if any(entry.rule.thresholds for entry in hold.entries):
            turn.after_write.append(lambda: self._announce(turn, hold.tenant, crossed))

    async def _announce(
        self, turn: Turn, tenant: str, crossed: list[tuple[_Entry, int, float]]
    ) -> None:
        """Log, count, record and send each threshold a committed settle crossed first."""
        meter = self._meter() if crossed else None
        for entry, threshold, share in crossed:
            rule = entry.rule
            if meter is not None:
                meter.budget_alert(budget=rule.code, scope=rule.scope, threshold=threshold)
            logger.warning(
                "budget %s of tenant %s reached %d%% of its limit for %s (%s: %s)",
                rule.code,
                tenant,
                threshold,
                entry.period,
                rule.scope,
                entry.subject,
            )
            alert = {
                "budget": rule.code,
                "threshold": threshold,
                "used_percent": round(share * 100, 2),
                "period": entry.period,
                "scope": rule.scope,
                "subject": entry.subject,
            }
            turn.pending.append(NewEvent(TimelineKind.BUDGET, alert))
            if self._webhook is not None:
                await self._webhook.send(
                    {
                        "type": "budget.threshold",
                        "tenant": tenant,
                        **alert,
                        "conversation_uuid": turn.uuid,
                    }
                )


def _entries(
    rules: Sequence[BudgetRule], turn: Turn, key_prefix: str | None, now: datetime
) -> list[_Entry]:
    """The ledger rows a call of ``turn`` is charged to, now."""
    entries: list[_Entry] = []
    running = turn.compiled.model.code
    for rule in rules:
        subject = _subject(rule, turn, key_prefix)
        if subject is not None:
            # A downgrade budget counts the calls on its cheaper model but
            # never stops them: they are what it switches to.
            enforced = rule.on_limit == "refuse" or (
                rule.on_limit == "downgrade" and rule.downgrade_to != running
            )
            key, resets = period_of(rule.period, rule.timezone, now)
            fixed = _fixed_values(turn.tenant, rule, subject, key, enforced)
            entries.append(_Entry(rule, subject, key, resets, enforced, fixed))
    return entries


def _conversation_key(connection: Connection, conversation_id: int) -> str | None:
    """The API key prefix the conversation was started with (a resumed turn has no request key)."""
    return connection.execute(
        select(conversation_table.c.caller_key_prefix).where(
            conversation_table.c.id == conversation_id
        )
    ).scalar()


def _subject(rule: BudgetRule, turn: Turn, key_prefix: str | None) -> str | None:
    """Whose counters the call is charged to under ``rule``; None when it does not apply."""
    spec = turn.compiled.model
    if rule.model is not None and rule.model != spec.code:
        return None
    if rule.provider is not None and rule.provider != spec.provider.code:
        return None
    match rule.scope:
        case "tenant":
            return "*"
        case "api_key":
            subject = key_prefix
        case "agent":
            subject = turn.compiled.agent_code
        case "action":
            subject = turn.compiled.action_code
        case _:
            subject = turn.handle.memory_id
    if subject is None or (rule.match is not None and subject != rule.match):
        return None
    return subject


def _prompt_tokens(
    turn: Turn, messages: Sequence[ModelMessage], params: ModelRequestParameters
) -> int:
    """The call's input tokens, counted offline with the model's counter."""
    spec = turn.compiled.model
    counter = counter_for(spec.provider.kind, spec.model_name)
    total = 0
    for message in messages:
        for part in message.parts:
            content = getattr(part, "content", None)
            if isinstance(content, str):
                total += counter.count(content) + _MESSAGE_OVERHEAD
            elif content is not None:
                total += counter.count(json.dumps(content, default=str)) + _MESSAGE_OVERHEAD
            args = getattr(part, "args", None)
            if args is not None:
                total += counter.count(args if isinstance(args, str) else json.dumps(args))
    for tool in (*params.function_tools, *params.output_tools):
        total += counter.count(
            json.dumps({"name": tool.name, "description": tool.description or ""})
        )
        total += counter.count(json.dumps(tool.parameters_json_schema))
    return total


def _refusal(refused: _Refused, now: datetime) -> BudgetExceededError:
    entry = refused.entry
    rule = entry.rule
    resets = entry.resets_at
    when = "it does not reset" if resets is None else f"it resets at {resets.isoformat()}"
    return BudgetExceededError(
        f"budget {rule.code} ({rule.scope} {entry.subject}) has too little {refused.limit} left "
        f"for this call this {rule.period}: {when}",
        budget=rule.code,
        limit=refused.limit,
        remaining=refused.remaining,
        resets_at=None if resets is None else resets.isoformat(),
        retry_after=None if resets is None else (resets - now).total_seconds(),
    )
