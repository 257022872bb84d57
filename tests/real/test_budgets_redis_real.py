"""Budgets held in a real Redis (127.0.0.1:6379): 200 turns on 2 workers, and a period rollover.

With ``PILOTHOUSE_REDIS_URL`` set, holds and settles are Lua scripts on the
deployment's Redis instead of database rows. The first test drives 200
concurrent OpenAI-face requests through one ``pilothouse serve`` of two
workers against a priced loopback upstream and shows what was spent never
passes the limit, every answered turn reached the upstream once, no hold
is left behind and the database's ledger was not used. The second moves two
runtimes' clock (two processes' worth) across an hour's boundary under
concurrent load and shows the new period starts exactly once: each period
admits exactly its limit of turns. Each test has a Redis key prefix of its
own.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fault_upstream import Reply, completion, running_upstream
from live_serve import ServeProcess, prepare_database
from ports import free_port
from redis.asyncio import Redis
from sqlalchemy import select
from test_budgets_real import CATALOG, LIMIT, PER_CALL, TURNS

from pilothouse.api import Pilothouse
from pilothouse.errors import BudgetExceededError
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.store._tables import budget_usage_table
from pilothouse.testing import CatalogBuilder, ScriptedModel
from pilothouse.testing import Reply as Scripted

pytestmark = [pytest.mark.real]

REDIS_URL = "redis://127.0.0.1:6379/0"


def test_two_hundred_turns_on_two_workers_never_pass_the_limit_in_redis(
    tmp_path: Path, postgres_database_url: str
) -> None:
    prefix = f"ph-test-{uuid.uuid4().hex[:8]}:"
    with running_upstream() as upstream:
        upstream.script(Reply(body=completion("ok")))
        key = prepare_database(
            postgres_database_url, tmp_path, CATALOG.format(base_url=upstream.base_url)
        )
        env = {
            "PILOTHOUSE_EGRESS_ALLOW": "127.0.0.1",
            "PILOTHOUSE_DATABASE_POOL_SIZE": "4",
            "PILOTHOUSE_DATABASE_MAX_OVERFLOW": "2",
            "PILOTHOUSE_REDIS_URL": REDIS_URL,
            "PILOTHOUSE_REDIS_PREFIX": prefix,
        }
        serve = ServeProcess(
            postgres_database_url, tmp_path / "serve.log", free_port(), workers=2, env=env
        )
        try:
            serve.start()
            statuses = anyio.run(_drive, serve.root, key)
            status = httpx.get(
                f"{serve.root}/v1/budgets/status", headers={"Authorization": f"Bearer {key}"}
            )
        finally:
            serve.stop()
        answered_upstream = len(upstream.requests)
    row = anyio.run(_redis_row, f"{prefix}budget:default:SHARED:total:*")
    answered, refused = statuses.count(200), statuses.count(429)
    assert answered + refused == TURNS, statuses
    assert refused > 0 and answered > 0
    assert answered == answered_upstream == int(row["turns"])
    spent = Decimal(int(row["spent_money"])) / Decimal(10**9)
    assert spent == answered * PER_CALL
    assert spent <= LIMIT
    assert row["held_money"] == row["held_input"] == row["held_output"] == "0"
    assert int(row["alerted"]) >= 50 and spent > LIMIT / 2
    # The status reads the same counters from Redis.
    assert status.status_code == 200, status.text
    (shared,) = status.json()
    assert Decimal(shared["spent"]["money"]) == spent and shared["held"]["money"] == "0"
    # Nothing was held in the database.
    assert anyio.run(_database_ledger, postgres_database_url) == []


async def _drive(root: str, key: str) -> list[int | str]:
    statuses: list[int | str] = []
    headers = {"Authorization": f"Bearer {key}"}
    body = {"model": "action:BDGTALK", "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=TURNS)) as http:

        async def one() -> None:
            response = await http.post(f"{root}/v1/chat/completions", json=body, headers=headers)
            if response.status_code == 429:
                assert response.json()["error"]["code"] == "insufficient_quota"
            # Any other answer is kept with its body, for the assertion to show.
            ok = response.status_code in (200, 429)
            statuses.append(
                response.status_code if ok else f"{response.status_code}: {response.text[:300]}"
            )

        async with anyio.create_task_group() as group:
            for _ in range(TURNS):
                group.start_soon(one)
    return statuses


async def _redis_row(pattern: str) -> dict[str, str]:
    client = Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        keys = [key async for key in client.scan_iter(match=pattern)]
        assert len(keys) == 1, keys
        row = await client.hgetall(keys[0])
        await client.delete(*keys)
        return {str(name): str(value) for name, value in row.items()}
    finally:
        await client.aclose()


async def _database_ledger(database_url: str) -> list[Any]:
    database = Database(database_url)
    try:
        async with database.engine.connect() as connection:
            return list((await connection.execute(select(budget_usage_table))).all())
    finally:
        await database.dispose()


class Clock:
    """The time two runtimes' budget gates read; the test moves it."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.mark.anyio
async def test_an_hour_rolls_over_exactly_once_across_two_runtimes(tmp_path: Path) -> None:
    prefix = f"ph-test-{uuid.uuid4().hex[:8]}:"
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}",
        secrets_file=None,
        redis_url=REDIS_URL,
        redis_prefix=prefix,
    )
    catalog = (
        CatalogBuilder()
        .model("PRICED", provider="TEST", model_name="priced", input_price=1, output_price=1)
        .configuration("SMAL", max_tokens=10, retry_delay=0)
        .action("ASK", prompt="Answer.", model="PRICED", configuration="SMAL", ask_user=False)
        .add("budgets", code="HOURLY", period="hour", turns=10)
    )
    clock = Clock(datetime(2026, 12, 6, 9, 59, 59, tzinfo=UTC))
    replies = [Scripted("ok", input_tokens=5, output_tokens=5)] * 100
    async with (
        Pilothouse(settings, model=ScriptedModel(replies)) as first,
        Pilothouse(settings, model=ScriptedModel(replies)) as second,
    ):
        await catalog.import_into(first)
        for ph in (first, second):
            # Both "processes" read the test's clock.
            gate = ph._shared.runtime().loop._budgets
            assert gate is not None
            gate._clock = clock

        async def burst() -> tuple[int, int]:
            outcomes: list[bool] = []

            async def one(ph: Pilothouse) -> None:
                try:
                    await ph.command.start_and_send("Hi", action="ASK")
                    outcomes.append(True)
                except BudgetExceededError:
                    outcomes.append(False)

            async with anyio.create_task_group() as group:
                for index in range(30):
                    group.start_soon(one, (first, second)[index % 2])
            return outcomes.count(True), outcomes.count(False)

        before = await burst()
        clock.now += timedelta(seconds=2)  # 10:00:01: the next hour
        after = await burst()
    # Each hour admits exactly its ten turns, whichever runtime runs them:
    # the new hour started once, not once per process.
    assert before == (10, 20)
    assert after == (10, 20)
    nine = await _redis_row(f"{prefix}budget:default:HOURLY:2026-12-06T09:00+00:00:*")
    ten = await _redis_row(f"{prefix}budget:default:HOURLY:2026-12-06T10:00+00:00:*")
    assert nine["turns"] == ten["turns"] == "10"
    assert nine["held_input"] == ten["held_input"] == "0"
