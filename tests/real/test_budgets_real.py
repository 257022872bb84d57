"""Budgets hold under real concurrency: 200 turns, 2 replicas x 2 workers, one PostgreSQL.

Four ``pilothouse serve`` worker processes answer 200 concurrent OpenAI-face
requests against a priced model served by a loopback upstream. Each model
call holds its worst case on the tenant's money budget in PostgreSQL before
it is sent (and, in the second run, on a tighter budget of the action's too,
both rows in one statement); the test shows that what was spent never passes
the limit, that
every answered turn reached the upstream exactly once and every refused one
never did, and that no hold is left behind.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fault_upstream import Reply, completion, running_upstream
from live_serve import ServeProcess, prepare_database
from ports import free_port
from sqlalchemy import select

from pilothouse.store import Database
from pilothouse.store._tables import budget_usage_table

pytestmark = [pytest.mark.real]

# $1,000 per million tokens: the upstream reports 5 + 3 tokens, $0.008 a call.
CATALOG = """\
providers:
  - code: BDGP
    kind: openai-compatible
    base_url: {base_url}
models:
  - code: BDGMODEL
    provider: BDGP
    model_name: mock
    capabilities: [SR]
    input_price: 1000
    output_price: 1000
configurations:
  - code: BDGC
    max_tokens: 8
    retry_count: 0
actions:
  - code: BDGTALK
    model: BDGMODEL
    configuration: BDGC
    prompt: Answer.
    ask_user: false
budgets:
  - code: SHARED
    name: The tenant's whole spend
    scope: tenant
    period: total
    money: 0.5
    thresholds: [50, 100]
"""
# A second budget, tighter, on the action: each call holds on both rows in
# one statement, which locks them in the budgets' order first.
SECOND = """\
  - code: PERACT
    name: The action's spend
    scope: action
    match: BDGTALK
    period: day
    money: 0.3
"""
LIMIT = Decimal("0.5")
PER_CALL = Decimal("0.008")
TURNS = 200


@pytest.mark.parametrize("budgets", [1, 2])
def test_two_hundred_turns_on_two_replicas_never_pass_the_limit(
    tmp_path: Path, postgres_database_url: str, budgets: int
) -> None:
    with running_upstream() as upstream:
        upstream.script(Reply(body=completion("ok")))
        catalog = CATALOG.format(base_url=upstream.base_url) + (SECOND if budgets == 2 else "")
        key = prepare_database(postgres_database_url, tmp_path, catalog)
        # Four processes on a server that allows 100 connections in all.
        env = {
            "PILOTHOUSE_EGRESS_ALLOW": "127.0.0.1",
            "PILOTHOUSE_DATABASE_POOL_SIZE": "4",
            "PILOTHOUSE_DATABASE_MAX_OVERFLOW": "2",
        }
        replicas = [
            ServeProcess(
                postgres_database_url,
                tmp_path / f"serve-{i}.log",
                free_port(),
                workers=2,
                env=env,
            )
            for i in range(2)
        ]
        try:
            for replica in replicas:
                replica.start()
            statuses = anyio.run(_drive, replicas, key)
        finally:
            for replica in replicas:
                replica.stop()
        answered_upstream = len(upstream.requests)
    rows = {row.budget: row for row in anyio.run(_ledger, postgres_database_url)}
    answered, refused = statuses.count(200), statuses.count(429)
    assert answered + refused == TURNS, statuses
    assert refused > 0 and answered > 0
    assert sorted(rows) == (["PERACT", "SHARED"] if budgets == 2 else ["SHARED"])
    for row in rows.values():
        # Every answered turn reached the model once; no refused one reached it.
        assert answered == answered_upstream == row.turns
        assert Decimal(row.spent_money) == answered * PER_CALL
        assert Decimal(row.held_money) == 0 and row.held_input == 0 and row.held_output == 0
    limit = Decimal("0.3") if budgets == 2 else LIMIT
    spent = Decimal(rows["SHARED"].spent_money)
    assert spent <= limit
    # Waiting out the burst, the calls spent up to the limit: the 50 % alert fired.
    assert spent > limit / 2
    if budgets == 1:
        assert rows["SHARED"].alerted >= 50


async def _drive(replicas: list[ServeProcess], key: str) -> list[int | str]:
    statuses: list[int | str] = []
    headers = {"Authorization": f"Bearer {key}"}
    body = {"model": "action:BDGTALK", "messages": [{"role": "user", "content": "hi"}]}
    limits = httpx.Limits(max_connections=TURNS)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:

        async def one(index: int) -> None:
            # Round robin over the replicas; each spreads over its two workers.
            root = replicas[index % len(replicas)].root
            response = await http.post(f"{root}/v1/chat/completions", json=body, headers=headers)
            if response.status_code == 429:
                assert response.json()["error"]["code"] == "insufficient_quota"
            # Any other answer is kept with its body, for the assertion to show.
            ok = response.status_code in (200, 429)
            statuses.append(
                response.status_code if ok else f"{response.status_code}: {response.text[:300]}"
            )

        async with anyio.create_task_group() as group:
            for index in range(TURNS):
                group.start_soon(one, index)
    return statuses


async def _ledger(database_url: str) -> list[Any]:
    database = Database(database_url)
    try:
        async with database.engine.connect() as connection:
            return list((await connection.execute(select(budget_usage_table))).all())
    finally:
        await database.dispose()
