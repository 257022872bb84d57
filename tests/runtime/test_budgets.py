"""Budgets hold each model call's worst case before it is sent, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import create_engine, insert, select

from pilothouse.api import Pilothouse
from pilothouse.errors import BudgetExceededError, CatalogValidationError
from pilothouse.runtime._budgetledger import (
    BudgetRule,
    LedgerEntry,
    LedgerStatements,
    fixed_values,
)
from pilothouse.runtime._budgetsql import sqlite_time
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.store._tables import budget_usage_table
from pilothouse.testing import CatalogBuilder, Reply, ScriptedModel
from pilothouse.types import ProcessStatus

pytestmark = pytest.mark.anyio

# $100 per million tokens each way: a call of this catalog holds its prompt
# (about 60 tokens, counted offline) plus max_tokens (10) at $0.0001 a token,
# about $0.007, and spends what the scripted model reports: 20 tokens, $0.002.
PRICE = 100
SPENT = Decimal("0.002")


def catalog(**budget: Any) -> CatalogBuilder:
    builder = (
        CatalogBuilder()
        .model(
            "PRICED", provider="TEST", model_name="priced", input_price=PRICE, output_price=PRICE
        )
        .configuration("SMAL", max_tokens=10, retry_delay=0)
        .action(
            "ASK", prompt="Answer briefly.", model="PRICED", configuration="SMAL", ask_user=False
        )
    )
    if budget:
        builder.add("budgets", **budget)
    return builder


async def ledger(database_url: str) -> list[Any]:
    db = Database(database_url)
    try:
        async with db.engine.connect() as connection:
            return list((await connection.execute(select(budget_usage_table))).all())
    finally:
        await db.dispose()


async def test_a_call_that_would_cross_the_limit_is_refused_before_it_is_sent(
    database_url: str,
) -> None:
    model = ScriptedModel([Reply("ok", input_tokens=10, output_tokens=10)] * 10)
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model) as ph:
        await catalog(code="DAILY", period="day", money="0.02").import_into(ph)
        answered = 0
        with pytest.raises(BudgetExceededError) as refused:
            for _ in range(10):
                result = await ph.command.start_and_send("Hi", action="ASK")
                assert result.status is ProcessStatus.COMPLETED, result.error
                answered += 1
        conversations = await ph.query.list_conversations()
    error = refused.value
    # Each answered call spent less than it held; the refused one would have
    # held more than was left, and was never sent.
    assert answered >= 2
    assert len(model.requests) == answered
    assert error.budget == "DAILY" and error.limit == "money"
    assert Decimal(error.remaining["money"]) == Decimal("0.02") - answered * SPENT
    assert error.resets_at is not None and error.retry_after is not None
    assert datetime.fromisoformat(error.resets_at).tzinfo is not None
    # The refused turn is on the record: failed, with the budget named.
    statuses = sorted(c.status.value for c in conversations.items)
    assert statuses == ["CO"] * answered + ["FA"]
    rows = await ledger(database_url)
    assert len(rows) == 1
    row = rows[0]
    assert Decimal(row.spent_money) == answered * SPENT
    assert Decimal(row.held_money) == 0 and row.held_input == 0 and row.held_output == 0
    # The refused turn was counted against no limit: nothing was held for it.
    assert (row.spent_input, row.spent_output, row.turns) == (
        10 * answered,
        10 * answered,
        answered,
    )


async def test_concurrent_turns_never_overshoot_by_more_than_one_hold(database_url: str) -> None:
    model = ScriptedModel([Reply("ok", input_tokens=10, output_tokens=10)] * 200)
    # Eight connections at most: the turns still hold and settle side by
    # side, and a test running beside this one keeps the server's share.
    settings = Settings(
        database_url=database_url,
        secrets_file=None,
        database_pool_size=4,
        database_max_overflow=4,
    )
    outcomes: list[str] = []
    async with Pilothouse(settings, model=model) as ph:
        await catalog(code="TOTAL", period="total", money="0.05").import_into(ph)

        async def one() -> None:
            try:
                await ph.command.start_and_send("Hi", action="ASK")
                outcomes.append("ok")
            except BudgetExceededError:
                outcomes.append("refused")

        async with anyio.create_task_group() as group:
            for _ in range(60):
                group.start_soon(one)
    (row,) = await ledger(database_url)
    spent = Decimal(row.spent_money)
    # Holds are worst cases, so concurrent turns can never spend past the limit.
    assert spent <= Decimal("0.05")
    assert spent == outcomes.count("ok") * SPENT
    assert outcomes.count("ok") == len(model.requests) == row.turns
    assert outcomes.count("refused") == 60 - outcomes.count("ok") > 0
    assert Decimal(row.held_money) == 0


async def test_turn_limits_scopes_and_filters(database_url: str) -> None:
    model = ScriptedModel([Reply("ok")] * 10)
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model) as ph:
        builder = catalog()
        builder.action(
            "OTHER", prompt="Other.", model="PRICED", configuration="SMAL", ask_user=False
        )
        builder.add("budgets", code="ASKTWO", scope="action", match="ASK", turns=2)
        # Filtered to a model the actions do not use: never applies.
        builder.add("budgets", code="SCRIPTED", model="SCRIPTED", turns=1)
        await builder.import_into(ph)
        for _ in range(2):
            await ph.command.start_and_send("Hi", action="ASK")
        with pytest.raises(BudgetExceededError, match="ASKTWO") as refused:
            await ph.command.start_and_send("Hi", action="ASK")
        other = await ph.command.start_and_send("Hi", action="OTHER")
    assert refused.value.limit == "turns"
    assert refused.value.remaining == {"turns": "0"}
    assert other.status is ProcessStatus.COMPLETED
    subjects = {(r.budget, r.subject) for r in await ledger(database_url)}
    assert subjects == {("ASKTWO", "ASK")}


async def test_alert_only_budgets_announce_each_threshold_once(database_url: str) -> None:
    model = ScriptedModel([Reply("ok", input_tokens=10, output_tokens=10)] * 6)
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model) as ph:
        await catalog(
            code="WATCH", money="0.01", on_limit="alert", thresholds=[80, 50, 100]
        ).import_into(ph)
        uuids = [(await ph.command.start_and_send("Hi", action="ASK")).conversation_uuid]
        for _ in range(5):
            result = await ph.command.start_and_send("Hi", action="ASK")
            assert result.status is ProcessStatus.COMPLETED  # alert never refuses
            uuids.append(result.conversation_uuid)
        alerts: list[int] = []
        for uuid in uuids:
            timeline = (await ph.query.get_transcript(uuid)).timeline
            alerts += [e.data["threshold"] for e in timeline if e.kind.value == "budget"]
    # $0.002 a turn against $0.01: 50 % after the 3rd, 80 % after the 4th,
    # 100 % after the 5th; the 6th (120 %) announces nothing new.
    assert alerts == [50, 80, 100]
    (row,) = await ledger(database_url)
    assert row.alerted == 100


async def test_a_downgrade_budget_switches_to_its_cheaper_model_at_the_limit(
    database_url: str,
) -> None:
    model = ScriptedModel([Reply("ok", input_tokens=10, output_tokens=10)] * 6)
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model) as ph:
        builder = catalog(
            code="CAP",
            period="day",
            money="0.01",
            on_limit="downgrade",
            downgrade_to="CHEAP",
        ).model("CHEAP", provider="TEST", model_name="cheap", input_price=1, output_price=1)
        await builder.import_into(ph)
        results = [await ph.command.start_and_send("Hi", action="ASK") for _ in range(4)]
        events = [
            [
                e.data
                for e in (await ph.query.get_transcript(r.conversation_uuid)).timeline
                if e.kind.value == "budget"
            ]
            for r in results
        ]
    # Nothing is refused: the turns past the limit ran on CHEAP, at its price.
    assert [r.status for r in results] == [ProcessStatus.COMPLETED] * 4
    assert len(model.requests) == 4
    downgraded = [bool(e) for e in events]
    assert downgraded[0] is False and downgraded[-1] is True
    first = downgraded.index(True)
    assert first == 2  # $0.002 spent each, $0.007 held: the third would pass $0.01
    for turn_events in events[first:]:
        (event,) = turn_events
        assert event["requested_model"] == "PRICED" and event["model"] == "CHEAP"
        assert event["budget"] == "CAP" and event["downgraded"] is True
    (row,) = await ledger(database_url)
    # Calls on CHEAP are counted (20 tokens at $1 per million) but never stopped.
    assert Decimal(row.spent_money) == first * SPENT + (4 - first) * Decimal("0.00002")
    assert row.turns == 4


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"code": "NOLIMIT"}, "at least one limit"),
        ({"code": "B", "turns": 1, "match": "X"}, "remove match"),
        ({"code": "B", "turns": 1, "timezone": "Mars/Olympus"}, "IANA"),
        ({"code": "B", "turns": 1, "on_limit": "downgrade"}, "needs downgrade_to"),
        ({"code": "B", "turns": 1, "downgrade_to": "PRICED"}, "applies only with"),
        (
            {"code": "B", "turns": 1, "on_limit": "downgrade", "downgrade_to": "NOPE"},
            "NOPE",
        ),
        ({"code": "B", "turns": 0}, "must be at least 1"),
        ({"code": "B", "turns": 1, "period": "week"}, "'hour', 'day', 'month' or 'total'"),
        ({"code": "B", "turns": 1, "scope": "team"}, "'api_key'"),
        ({"code": "B", "turns": 1, "limit": 3}, "limit"),
    ],
)
async def test_a_budget_that_cannot_be_honoured_is_refused(
    database_url: str, fields: dict[str, Any], message: str
) -> None:
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=ScriptedModel([])) as ph:
        with pytest.raises(CatalogValidationError) as refused:
            await catalog(**fields).import_into(ph)
    assert message in str(refused.value.issues)


def test_periods_roll_over_at_the_boundary_in_the_budget_time_zone() -> None:
    from pilothouse.runtime._budgets import period_of

    before = datetime(2026, 12, 31, 22, 59, 59, tzinfo=UTC)
    after = datetime(2026, 12, 31, 23, 0, 0, tzinfo=UTC)
    # Berlin is UTC+1 in winter: its new year starts at 23:00 UTC.
    assert period_of("month", "Europe/Berlin", before) == (
        "2026-12",
        datetime(2026, 12, 31, 23, 0, tzinfo=UTC),
    )
    assert period_of("month", "Europe/Berlin", after)[0] == "2027-01"
    assert period_of("day", "UTC", before)[0] == "2026-12-31"
    assert period_of("total", "UTC", before) == ("total", None)
    # The repeated hour of the autumn DST change is two periods, not one.
    first = datetime(2026, 10, 25, 0, 30, tzinfo=UTC)  # 02:30 CEST
    second = datetime(2026, 10, 25, 1, 30, tzinfo=UTC)  # 02:30 CET
    key1, next1 = period_of("hour", "Europe/Berlin", first)
    key2, _ = period_of("hour", "Europe/Berlin", second)
    assert key1 != key2 and next1 == datetime(2026, 10, 25, 1, 0, tzinfo=UTC)


def test_the_sqlite_ledger_statements_store_what_sqlalchemy_would(tmp_path: Path) -> None:
    """Bound by name on the driver, a hold and a settle write the bytes Core writes."""
    engine = create_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    budget_usage_table.create(engine)
    rule = BudgetRule(
        "T",
        "tenant",
        None,
        None,
        None,
        "month",
        "UTC",
        Decimal("5"),
        None,
        10**6,
        None,
        "refuse",
        (),
    )
    entries = [
        LedgerEntry(
            rule, subject, "2026-12", None, True, fixed_values("t", rule, subject, "2026-12", True)
        )
        for subject in ("core", "driver", "first", "second")
    ]
    sql = LedgerStatements()
    moment = datetime(2026, 12, 7, 1, 2, 3, 456789, tzinfo=UTC)
    held = {"money": Decimal("0.000148"), "input_tokens": 61, "output_tokens": 64, "turns": 1}
    spent = {"spent_money": Decimal("0.00004"), "spent_input": 20, "spent_output": 5}
    with engine.begin() as connection:
        for entry in entries:
            connection.execute(
                insert(budget_usage_table).values(
                    tenant="t", budget="T", subject=entry.subject, period="2026-12"
                )
            )
        core, driver, *pair_entries = entries
        for statement, extra in ((sql.hold, {}), (sql.settle, spent)):
            values = {**core.fixed, **held, **extra, "updated_at": moment}
            assert connection.execute(statement.statement, values).rowcount == 1
        raw = connection.connection.driver_connection
        assert raw is not None
        values = {**driver.fixed, **held, "updated_at": sqlite_time(moment)}
        assert sql.hold_sqlite.run(connection, dict(values)) == 1
        assert sql.settle_sqlite.run(connection, {**values, **spent}) == 1
        # The same on two rows at once, as a call charged to two budgets holds and settles.
        hold_both, settle_both = sql.together(2)
        pair: dict[str, Any] = {"k_tenant": "t", "updated_at": sqlite_time(moment)}
        for index, entry in enumerate(pair_entries):
            pair.update({f"{k}_{index}": v for k, v in entry.fixed.items() if k != "k_tenant"})
        assert hold_both.run(connection, {**pair, **held}) == 2
        assert settle_both.run(connection, {**pair, **held, **spent}) == 2
        rows = {
            row[2]: row[4:]
            for row in raw.execute("SELECT * FROM budget_usage ORDER BY subject").fetchall()
        }
    assert rows["driver"] == rows["first"] == rows["second"] == rows["core"]
    assert rows["core"][2:] == (20, 0, 5, 0, 1, 0, "2026-12-07 01:02:03.456789")
    # On the hour too: the text keeps its six digits of microseconds, as Core's does.
    assert sqlite_time(datetime(2026, 1, 2, 3, 0, tzinfo=UTC)) == "2026-01-02 03:00:00.000000"
