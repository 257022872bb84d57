"""The gateway's audit rows (``gateway_call``, migration 0013) on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import inspect

from pilothouse.store import Database, NewGatewayCall, list_gateway_calls, record_gateway_call

pytestmark = pytest.mark.anyio


def call(**changes: object) -> NewGatewayCall:
    values: dict[str, object] = {
        "tenant": "default",
        "gateway": "CRM",
        "tool": "get_customers_by_id",
        "operation": "GET /customers/{id}",
        "via": "mcp",
        "key_prefix": "0a1b2c3d",
        "conversation_uuid": None,
        "call_id": None,
        "status_code": 200,
        "outcome": "ok",
        "latency_ms": 12.5,
    }
    values.update(changes)
    return NewGatewayCall(**values)  # type: ignore[arg-type]


async def test_rows_are_listed_per_tenant_newest_first_and_filtered(database: Database) -> None:
    await database.ensure_schema()
    await record_gateway_call(database, call())
    await record_gateway_call(database, call(status_code=None, outcome="gateway.rate_limited"))
    await record_gateway_call(
        database,
        call(via="turn", key_prefix=None, conversation_uuid="c-1", call_id="call_1"),
    )
    await record_gateway_call(database, call(tenant="other", gateway="ERP"))
    await record_gateway_call(database, call(gateway="ERP"))
    rows = await list_gateway_calls(database, "default")
    assert [(r.gateway, r.outcome, r.via) for r in rows] == [
        ("ERP", "ok", "mcp"),
        ("CRM", "ok", "turn"),
        ("CRM", "gateway.rate_limited", "mcp"),
        ("CRM", "ok", "mcp"),
    ]
    assert [
        r.call_id for r in await list_gateway_calls(database, "default", conversation_uuid="c-1")
    ] == ["call_1"]
    assert len(await list_gateway_calls(database, "default", gateway="CRM", limit=2)) == 2
    assert [r.tenant for r in await list_gateway_calls(database, "other")] == ["other"]


async def test_an_over_long_operation_is_cut_not_lost(database: Database) -> None:
    await database.ensure_schema()
    await record_gateway_call(database, call(operation="GET /" + "a" * 900, tool="t" * 300))
    [row] = await list_gateway_calls(database, "default")
    assert len(row.operation) == 512 and len(row.tool) == 128


async def test_migration_0013_goes_down_and_up(tmp_path: Path) -> None:
    from alembic import command

    from pilothouse.store._engine import _alembic_config

    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'mig.db'}")
    await db.ensure_schema()

    def tables(connection: object) -> set[str]:
        return set(inspect(connection).get_table_names())

    def migrate(connection: object, down: bool) -> None:
        config = _alembic_config()
        config.attributes["connection"] = connection
        if down:
            command.downgrade(config, "0012")
        else:
            command.upgrade(config, "head")

    async with db.engine.begin() as connection:
        assert "gateway_call" in await connection.run_sync(tables)
        await connection.run_sync(migrate, True)
        assert "gateway_call" not in await connection.run_sync(tables)
        await connection.run_sync(migrate, False)
        assert "gateway_call" in await connection.run_sync(tables)
    await db.dispose()
