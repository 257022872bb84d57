"""Where a tenant's budgets stand: the ledger of the current period, per budget and subject.

Read by ``ph.query.budget_status()`` (``pilothouse budgets status``,
``GET /v1/budgets/status``); the rules and the period keys are the gate's own
(:mod:`pilothouse.runtime._budgets`), so a status never disagrees with what
the gate enforces.
"""

from __future__ import annotations

__all__ = ["BudgetStatus", "budget_status", "statuses_of"]

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, select

from pilothouse.runtime._budgetledger import BudgetRule, fraction, load_rules, period_of
from pilothouse.store._tables import budget_usage_table as _LEDGER


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """Where one budget stands for one scope in the current period.

    Attributes:
        budget: the budget's code.
        scope: ``tenant``, ``api_key``, ``agent``, ``action`` or ``user``.
        subject: whose counters (``*`` for the tenant; None when nothing was
            spent yet under a per-key, per-agent, per-action or per-user budget).
        period: the current period's key (``2026-12``, ``total``).
        resets_at: when the next period starts (ISO 8601, UTC); None for ``total``.
        limits: the limits, by name (money as a decimal string).
        spent: what was spent this period, by the same names.
        held: what calls in flight hold now.
        remaining: what is left of each limit.
        used_percent: the tightest limit's share spent, in percent.
        on_limit: ``refuse``, ``downgrade`` or ``alert``.
    """

    budget: str
    scope: str
    subject: str | None
    period: str
    resets_at: str | None
    limits: dict[str, str]
    spent: dict[str, str]
    held: dict[str, str]
    remaining: dict[str, str]
    used_percent: float
    on_limit: str


def budget_status(connection: Connection, tenant: str, now: datetime) -> list[BudgetStatus]:
    """Every active budget of the tenant, per subject, in its current period."""
    statuses: list[BudgetStatus] = []
    for rule in load_rules(connection, tenant):
        period, resets = period_of(rule.period, rule.timezone, now)
        rows = connection.execute(
            select(_LEDGER)
            .where(
                _LEDGER.c.tenant == tenant,
                _LEDGER.c.budget == rule.code,
                _LEDGER.c.period == period,
            )
            .order_by(_LEDGER.c.subject)
        ).all()
        statuses += statuses_of(rule, period, resets, rows)
    return statuses


def statuses_of(
    rule: BudgetRule, period: str, resets: datetime | None, rows: Sequence[Any]
) -> list[BudgetStatus]:
    """One budget's statuses in ``period``, one per ledger row (database or Redis)."""
    statuses: list[BudgetStatus] = []
    limits = {name: str(value) for name, value in rule.limits().items()}
    unspent_subject = "*" if rule.scope == "tenant" else None
    for row in rows or [None]:
        spent = {
            "money": Decimal(0) if row is None else Decimal(row.spent_money),
            "input_tokens": 0 if row is None else int(row.spent_input),
            "output_tokens": 0 if row is None else int(row.spent_output),
            "turns": 0 if row is None else int(row.turns),
        }
        held = {
            "money": Decimal(0) if row is None else Decimal(row.held_money),
            "input_tokens": 0 if row is None else int(row.held_input),
            "output_tokens": 0 if row is None else int(row.held_output),
        }
        statuses.append(
            BudgetStatus(
                budget=rule.code,
                scope=rule.scope,
                subject=unspent_subject if row is None else row.subject,
                period=period,
                resets_at=None if resets is None else resets.isoformat(),
                limits=limits,
                spent={name: str(spent[name]) for name in limits},
                held={name: str(held[name]) for name in limits if name in held},
                remaining={
                    name: str(max(Decimal(limits[name]) - spent[name] - held.get(name, 0), 0))
                    for name in limits
                },
                used_percent=0.0 if row is None else round(fraction(row, rule) * 100, 2),
                on_limit=rule.on_limit,
            )
        )
    return statuses
