"""A call charged to several budgets holds on all of them or none, in one statement.

On PostgreSQL the hold and the settle of several ledger rows are each one
statement that locks the rows first, in the order of the budgets' codes
(``LedgerStatements.together_pg``); on SQLite, one statement under the
single writer. Both stores run every test here.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import anyio
import pytest
from sqlalchemy import insert, select, update
from test_budgets import SPENT, catalog, ledger

from pilothouse.api import Caller, Pilothouse
from pilothouse.errors import BudgetExceededError
from pilothouse.runtime._budgetledger import (
    BudgetRule,
    LedgerEntry,
    LedgerStatements,
    fixed_values,
    hold_at_once,
    settle_rows,
)
from pilothouse.runtime._budgets import BudgetHold
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.store._tables import budget_usage_table
from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio


def _entries(codes: tuple[str, ...], money: str) -> list[LedgerEntry]:
    entries: list[LedgerEntry] = []
    for code in codes:
        rule = BudgetRule(
            code, "tenant", None, None, None, "total", "UTC", Decimal(money), None, None, 100,
            "refuse", (),
        )  # fmt: skip
        fixed = fixed_values("t", rule, "*", "total", True)
        entries.append(LedgerEntry(rule, "*", "total", None, True, fixed))
    return entries


async def _rows(database: Database) -> dict[str, tuple[Any, ...]]:
    async with database.engine.connect() as connection:
        rows = (await connection.execute(select(budget_usage_table))).all()
    return {
        row.budget: (Decimal(row.held_money), Decimal(row.spent_money), row.turns) for row in rows
    }


async def test_the_ledger_holds_and_settles_several_rows_in_one_statement(
    database: Database,
) -> None:
    """Every row changes, or none: a missing row or one without room stops them all."""
    sql = LedgerStatements()
    entries = _entries(("A1", "B2", "C3"), "1")
    async with database.engine.begin() as connection:
        for entry in entries[:2]:
            await connection.execute(
                insert(budget_usage_table).values(
                    tenant="t", budget=entry.rule.code, subject="*", period="total"
                )
            )
    amounts = (sql, "t", entries, Decimal("0.4"), 10, 10, 1)
    # The third row is missing (its period's first call): nothing is held.
    assert not await database.statement(hold_at_once, *amounts)
    async with database.engine.begin() as connection:
        await connection.execute(
            insert(budget_usage_table).values(tenant="t", budget="C3", subject="*", period="total")
        )
    assert await database.statement(hold_at_once, *amounts)
    assert await database.statement(hold_at_once, *amounts)
    held = (Decimal("0.8"), Decimal(0), 2)
    assert await _rows(database) == {"A1": held, "B2": held, "C3": held}
    # The second row has no room for a third call: none of the three changes.
    async with database.engine.begin() as connection:
        await connection.execute(
            update(budget_usage_table)
            .where(budget_usage_table.c.budget == "B2")
            .values(spent_money=Decimal("0.1"))
        )
    assert not await database.statement(hold_at_once, *amounts)
    rows = await _rows(database)
    assert rows["A1"] == rows["C3"] == held and rows["B2"] == (Decimal("0.8"), Decimal("0.1"), 2)
    hold = BudgetHold("t", tuple(entries), Decimal("0.4"), 10, 10)
    await database.transaction(settle_rows, sql, hold, Decimal("0.05"), 5, 5)
    rows = await _rows(database)
    assert rows["A1"] == rows["C3"] == (Decimal("0.4"), Decimal("0.05"), 2)
    assert rows["B2"] == (Decimal("0.4"), Decimal("0.15"), 2)


@pytest.mark.parametrize("thresholds", [False, True])
async def test_concurrent_turns_on_three_budgets_stay_within_each(
    database_url: str, thresholds: bool
) -> None:
    """Sixty turns at once on three budgets: no overshoot, no deadlock, every hold settled.

    With thresholds the settles run in the ending's transaction (they read
    the row back); without, they ride in its statement.
    """
    model = ScriptedModel([Reply("ok", input_tokens=10, output_tokens=10)] * 60)
    # Eight connections at most: the turns still hold and settle side by
    # side, and a test running beside this one keeps the server's share.
    settings = Settings(
        database_url=database_url,
        secrets_file=None,
        database_pool_size=4,
        database_max_overflow=4,
    )
    outcomes: list[str] = []
    alerts = {"thresholds": [50]} if thresholds else {}
    async with Pilothouse(settings, model=model) as ph:
        builder = catalog(code="AAA", period="total", money="0.10", **alerts)
        builder.add("budgets", code="BBB", scope="action", match="ASK", turns=1000)
        builder.add("budgets", code="CCC", period="day", money="0.04")
        await builder.import_into(ph)

        async def one() -> None:
            try:
                await ph.command.start_and_send("Hi", action="ASK")
                outcomes.append("ok")
            except BudgetExceededError as refused:
                assert refused.budget == "CCC"
                outcomes.append("refused")

        async with anyio.create_task_group() as group:
            for _ in range(60):
                group.start_soon(one)
    rows = {row.budget: row for row in await ledger(database_url)}
    answered = outcomes.count("ok")
    assert 0 < answered < 60 and len(model.requests) == answered
    for code, row in rows.items():
        assert (Decimal(row.spent_money), row.turns) == (answered * SPENT, answered), code
        assert Decimal(row.held_money) == 0 and row.held_input == row.held_output == 0, code
    # The tightest limit is never passed: holds are worst cases.
    assert Decimal(rows["CCC"].spent_money) <= Decimal("0.04")
    assert sorted(rows) == ["AAA", "BBB", "CCC"]


async def test_a_later_turn_without_a_key_is_charged_to_the_key_that_started_it(
    database_url: str,
) -> None:
    """A budget per API key: a turn sent with no key reads the conversation's own."""
    model = ScriptedModel([Reply("ok", input_tokens=10, output_tokens=10)] * 3)
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model) as ph:
        builder = catalog(code="PERKEY", scope="api_key", turns=100)
        await builder.import_into(ph)
        keyed = ph.for_tenant("default", caller=Caller("rest", "abc12345"))
        first = await keyed.command.start_and_send("Hi", action="ASK")
        # Sent by the library with no key: charged to the key that started it.
        await ph.command.send_message(first.conversation_uuid, "Again")
    (row,) = await ledger(database_url)
    assert (row.budget, row.subject, row.turns) == ("PERKEY", "abc12345", 2)


@pytest.mark.parametrize("count", [1, 3])
async def test_limits_a_budget_does_not_set_never_stop_a_hold_and_bind_no_null(
    database: Database, count: int
) -> None:
    """Absent limits (here input and output tokens) let any amount through.

    They are bound as a negative number, not NULL: pysqlite adapts a NULL
    parameter through a failed attribute lookup, the dearest bind there is.
    """
    sql = LedgerStatements()
    entries = _entries(("A1", "B2", "C3")[:count], "1")
    async with database.engine.begin() as connection:
        for entry in entries:
            await connection.execute(
                insert(budget_usage_table).values(
                    tenant="t", budget=entry.rule.code, subject="*", period="total"
                )
            )
    traced: list[str] = []

    def hold(connection: Any, *amounts: Any) -> bool:
        if database.is_sqlite:
            # The statements as SQLite ran them, each parameter's value in place.
            connection.connection.driver_connection.set_trace_callback(traced.append)
        try:
            return hold_at_once(connection, *amounts)
        finally:
            if database.is_sqlite:
                connection.connection.driver_connection.set_trace_callback(None)

    huge = 10**15  # tokens no budget here limits
    assert await database.statement(hold, sql, "t", entries, Decimal("0.4"), huge, huge, 1)
    rows = await _rows(database)
    assert rows == {entry.rule.code: (Decimal("0.4"), Decimal(0), 1) for entry in entries}
    # The money limit still stops a call that does not fit.
    assert not await database.statement(hold, sql, "t", entries, Decimal("0.7"), 1, 1, 1)
    if database.is_sqlite:
        updates = [statement for statement in traced if statement.startswith("UPDATE")]
        assert len(updates) == 2
        assert all("NULL" not in statement for statement in updates), updates
