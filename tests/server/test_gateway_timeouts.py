"""A gateway row's timeout holds on every path, and every call leaves its audit row.

A real FastAPI service on loopback whose operation answers after 8 s; the
gateway row says ``timeout: 2``. Over MCP and in a catalog action's turn the
call ends as timed out at about 2 s and writes its ``gateway_call`` row, and
a call whose arguments break the operation's schema is refused with a row
too.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as mt
import pytest
from fastapi import FastAPI
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server_helpers import serve_on_loopback

from database_templates import Seed, SqliteTemplates
from pilothouse.server._state import ServerState
from pilothouse.settings import Settings
from pilothouse.testing import Reply, ScriptedModel, ToolCall
from pilothouse.types import GatewayCallRecord, ToolCallStatus

pytestmark = pytest.mark.anyio

SLOW_SECONDS = 8.0
TIMEOUT = 2
# Well under the service's 8 s: tells a 2 s deadline from none, on a busy machine.
BOUND = 6.0


@pytest.fixture
def server_settings(
    tmp_path: Path, sqlite_templates: SqliteTemplates, database_seed: Seed
) -> Settings:
    url = sqlite_templates.fresh(tmp_path / "server.db", database_seed)
    return Settings(database_url=url, secrets_file=None, egress_allow=["127.0.0.1"])


@pytest.fixture
async def service() -> AsyncIterator[str]:
    app = FastAPI()
    release = anyio.Event()

    @app.get(
        "/reports/{id}",
        summary="Build a report",
        operation_id="getReport",
        openapi_extra={"x-ai-enabled": True},
    )
    async def slow_report(id: str) -> dict[str, Any]:
        # Answers after 8 s, or when the test ends (so the server stops at once).
        with anyio.move_on_after(SLOW_SECONDS):
            await release.wait()
        return {"id": id, "report": "done"}

    async with serve_on_loopback(app) as url:
        try:
            yield url
        finally:
            release.set()


@pytest.fixture
async def base_url(app: FastAPI) -> AsyncIterator[str]:
    async with serve_on_loopback(app) as url:
        yield url


async def add_gateway(state: ServerState, url: str) -> None:
    await state.pilothouse.catalog.create(
        "tools",
        {
            "code": "REPORTS",
            "name": "reports",
            "kind": "rest",
            "implementation": f"openapi:{url}/openapi.json",
            "settings": {"timeout": TIMEOUT, "gateway": {}},
        },
    )


async def gateway_rows(state: ServerState) -> list[GatewayCallRecord]:
    return list(reversed(await state.pilothouse.query.list_gateway_calls(gateway="REPORTS")))


def text(result: mt.CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, mt.TextContent)
    return first.text


async def call_over_mcp(base_url: str, key: str, arguments: dict[str, Any]) -> mt.CallToolResult:
    async with httpx2.AsyncClient(headers={"X-API-Key": key}, timeout=30) as http:
        opened = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(opened, mode="legacy") as client:
            return await client.call_tool("reports__getReport", arguments)


async def test_over_mcp_the_rows_timeout_ends_the_call_and_the_row_says_so(
    base_url: str, api_key: str, server_state: ServerState, service: str
) -> None:
    await add_gateway(server_state, service)
    started = time.perf_counter()
    result = await call_over_mcp(base_url, api_key, {"id": "7"})
    elapsed = time.perf_counter() - started
    assert result.is_error
    assert "timed out after 2 s" in text(result)
    assert elapsed < BOUND, f"the call took {elapsed:.1f} s: the 2 s timeout was not honoured"
    (row,) = await gateway_rows(server_state)
    assert (row.via, row.face, row.outcome, row.status_code) == (
        "mcp",
        "mcp",
        "tool.exec.timeout",
        None,
    )
    assert row.latency_ms >= TIMEOUT * 1000 * 0.9


async def test_over_mcp_a_call_off_the_schema_is_refused_with_its_row(
    base_url: str, api_key: str, server_state: ServerState, service: str
) -> None:
    await add_gateway(server_state, service)
    result = await call_over_mcp(base_url, api_key, {"ident": "7"})
    assert result.is_error
    assert "id" in text(result)
    (row,) = await gateway_rows(server_state)
    assert (row.via, row.face, row.outcome, row.status_code) == (
        "mcp",
        "mcp",
        "gateway.schema_refused",
        None,
    )
    assert row.key_prefix is not None and api_key.startswith(f"ph_{row.key_prefix}_")


async def add_action(state: ServerState) -> None:
    await state.pilothouse.catalog.create(
        "actions",
        {
            "code": "REPORT",
            "name": "Report",
            "model": "SCRIPTEDM",
            "configuration": "DFLT",
            "prompt": "Build reports.",
            "tools": ["REPORTS"],
        },
    )


async def test_in_a_turn_the_rows_timeout_ends_the_call_and_the_row_is_written(
    server_state: ServerState, scripted: ScriptedModel, service: str
) -> None:
    await add_gateway(server_state, service)
    await add_action(server_state)
    scripted.script.steps.extend(
        [ToolCall("reports__getReport", {"id": "7"}, call_id="call_slow"), Reply("Too slow.")]
    )
    started = time.perf_counter()
    turn = await server_state.pilothouse.command.start_and_send("Report 7", action="REPORT")
    elapsed = time.perf_counter() - started
    assert turn.status == "CO", turn.error
    assert elapsed < BOUND, f"the turn took {elapsed:.1f} s: the 2 s timeout was not honoured"
    (call,) = turn.call_records
    assert call.status is ToolCallStatus.FAILED
    # The turn's deadline or the gateway's own, whichever fired first: the same 2 s.
    assert call.result is not None
    assert "tool.exec.timeout" in call.result or "timed out after 2 s" in call.result
    (row,) = await gateway_rows(server_state)
    assert (row.via, row.call_id, row.outcome, row.conversation_uuid) == (
        "turn",
        "call_slow",
        "tool.exec.timeout",
        turn.conversation_uuid,
    )


async def test_in_a_turn_a_call_off_the_schema_is_refused_with_its_row(
    server_state: ServerState, scripted: ScriptedModel, service: str
) -> None:
    await add_gateway(server_state, service)
    await add_action(server_state)
    scripted.script.steps.extend(
        [
            ToolCall("reports__getReport", {"ident": 7}, call_id="call_bad"),
            Reply("I could not."),
        ]
    )
    turn = await server_state.pilothouse.command.start_and_send("Report 7", action="REPORT")
    assert turn.status == "CO", turn.error
    (row,) = await gateway_rows(server_state)
    assert (row.via, row.call_id, row.outcome, row.status_code) == (
        "turn",
        "call_bad",
        "gateway.schema_refused",
        None,
    )
