"""The OpenAPI gateway's audit rows, and a catalog action's turn calling a gateway operation.

A real FastAPI service on loopback (uvicorn in this process). An MCP
client's call and a turn's call go through the same proxy and each writes
one ``gateway_call`` row: who, which operation, status, latency; never an
argument, a header value or a query string.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastapi import FastAPI, Request
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server_helpers import serve_on_loopback
from sqlalchemy import select

from database_templates import Seed, SqliteTemplates
from pilothouse.api import Caller
from pilothouse.server._state import ServerState
from pilothouse.settings import Settings
from pilothouse.store import GatewayCall
from pilothouse.testing import Reply, ScriptedModel, ToolCall

pytestmark = pytest.mark.anyio

SECRET = "s3cr3t-gateway-token"


def backend() -> tuple[FastAPI, list[dict[str, str]]]:
    app = FastAPI()
    seen: list[dict[str, str]] = []

    @app.get(
        "/customers/{id}",
        summary="Read a customer",
        operation_id="getCustomer",
        openapi_extra={"x-ai-enabled": True},
    )
    async def read_customer(id: str, request: Request, token: str | None = None) -> dict[str, Any]:
        seen.append(dict(request.headers))
        if id == "404":
            from fastapi import HTTPException

            raise HTTPException(status_code=404, detail="no such customer")
        return {"id": id, "name": "Ada"}

    return app, seen


@pytest.fixture(autouse=True)
def crm_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRM_TOKEN", SECRET)


@pytest.fixture
def server_settings(
    tmp_path: Path, sqlite_templates: SqliteTemplates, database_seed: Seed
) -> Settings:
    url = sqlite_templates.fresh(tmp_path / "server.db", database_seed)
    return Settings(
        database_url=url,
        secrets_file=None,
        secrets_env={"default": ["CRM_TOKEN"]},
        egress_allow=["127.0.0.1"],
    )


@pytest.fixture
async def service() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    app, seen = backend()
    async with serve_on_loopback(app) as url:
        yield url, seen


@pytest.fixture
async def base_url(app: FastAPI) -> AsyncIterator[str]:
    async with serve_on_loopback(app) as url:
        yield url


async def add_gateway(state: ServerState, url: str, policy: str = "allow") -> None:
    await state.pilothouse.catalog.create(
        "tools",
        {
            "policy": policy,
            "code": "CRM",
            "name": "crm",
            "kind": "rest",
            "implementation": f"openapi:{url}/openapi.json",
            "settings": {
                "headers": {"Authorization": "Bearer @secrets(CRM_TOKEN)"},
                "gateway": {},
            },
        },
    )


@asynccontextmanager
async def connect(base_url: str, key: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"X-API-Key": key}, timeout=30) as http:
        opened = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(opened, mode="legacy") as client:
            yield client


async def rows(state: ServerState) -> list[GatewayCall]:
    database = state.pilothouse.settings.open_database()
    try:
        async with database.sessions() as session:
            return list(await session.scalars(select(GatewayCall).order_by(GatewayCall.id)))
    finally:
        await database.dispose()


def no_secret_in(found: list[GatewayCall]) -> None:
    for row in found:
        values = " ".join(str(getattr(row, c.key)) for c in GatewayCall.__table__.columns)
        assert SECRET not in values
        assert "query-secret" not in values


async def test_each_mcp_gateway_call_is_an_audit_row_without_secrets(
    base_url: str,
    api_key: str,
    server_state: ServerState,
    service: tuple[str, list[dict[str, str]]],
) -> None:
    url, seen = service
    await add_gateway(server_state, url)
    async with connect(base_url, api_key) as client:
        found = await client.call_tool("crm__getCustomer", {"id": "7", "token": "query-secret"})
        missing = await client.call_tool("crm__getCustomer", {"id": "404"})
        refused = await client.call_tool("crm__getCustomer", {"id": ".."})
    assert not found.is_error and missing.is_error and refused.is_error
    # The configured credential reached the service; it never reaches a row.
    assert seen[0]["authorization"] == f"Bearer {SECRET}"
    stored = await rows(server_state)
    assert [(r.status_code, r.outcome) for r in stored] == [
        (200, "ok"),
        (404, "tool.exec.http_404"),
        (None, "gateway.path_refused"),
    ]
    prefix = api_key.split("_")[1]
    for row in stored:
        assert (row.tenant, row.gateway, row.tool, row.via, row.key_prefix) == (
            "default",
            "CRM",
            "crm__getCustomer",
            "mcp",
            prefix,
        )
        # The face and the key's name, beside its prefix.
        assert (row.face, row.key_name) == ("mcp", "test")
        # The template, never the filled-in path or its query.
        assert row.operation == "GET /customers/{id}"
        assert row.conversation_uuid is None and row.latency_ms >= 0
    no_secret_in(stored)
    listed = await server_state.pilothouse.query.list_gateway_calls(gateway="CRM")
    assert [r.outcome for r in listed] == ["gateway.path_refused", "tool.exec.http_404", "ok"]


async def test_the_gateway_calls_are_listed_over_rest_to_keys_of_the_tenant_only(
    base_url: str,
    api_key: str,
    admin_key: str,
    other_tenant_key: str,
    server_state: ServerState,
    service: tuple[str, list[dict[str, str]]],
) -> None:
    url, _ = service
    await add_gateway(server_state, url)
    async with connect(base_url, api_key) as client:
        await client.call_tool("crm__getCustomer", {"id": "7", "token": "query-secret"})
    async with httpx2.AsyncClient(base_url=base_url, timeout=30) as http:
        listed = await http.get(
            "/v1/audit/gateway-calls", params={"gateway": "CRM"}, headers={"X-API-Key": api_key}
        )
        admin = await http.get("/v1/audit/gateway-calls", headers={"X-API-Key": admin_key})
        other = await http.get("/v1/audit/gateway-calls", headers={"X-API-Key": other_tenant_key})
        bad = await http.get(
            "/v1/audit/gateway-calls", params={"limit": 0}, headers={"X-API-Key": admin_key}
        )
    assert listed.status_code == 200, listed.text
    (row,) = listed.json()
    assert (row["gateway"], row["operation"], row["status_code"], row["outcome"]) == (
        "CRM",
        "GET /customers/{id}",
        200,
        "ok",
    )
    assert SECRET not in listed.text and "query-secret" not in listed.text
    assert admin.status_code == 200 and admin.json() == listed.json()
    assert other.status_code == 200 and other.json() == []
    assert bad.status_code == 422


async def test_a_catalog_action_calls_a_gateway_operation_in_its_turn(
    server_state: ServerState, scripted: ScriptedModel, service: tuple[str, list[dict[str, str]]]
) -> None:
    url, seen = service
    await add_gateway(server_state, url)
    ph = server_state.pilothouse
    await ph.catalog.create(
        "actions",
        {
            "code": "CUSTOMER",
            "name": "Customer lookup",
            "model": "SCRIPTEDM",
            "configuration": "DFLT",
            "prompt": "Look customers up.",
            "tools": ["CRM"],
        },
    )
    scripted.script.steps.extend(
        [ToolCall("crm__getCustomer", {"id": "42"}, call_id="call_gw1"), Reply("Ada it is.")]
    )
    # Started by a REST caller: the turn's gateway row names that caller.
    caller = ph.for_tenant("default", caller=Caller("rest", "abcd1234", "ops key"))
    turn = await caller.command.start_and_send("Who is 42?", action="CUSTOMER")
    assert turn.status == "CO" and turn.text == "Ada it is."
    offered = [t.name for t in scripted.script.requests[0].info.function_tools]
    assert "crm__getCustomer" in offered
    transcript = await ph.query.get_transcript(turn.conversation_uuid)
    [call] = transcript.tool_calls
    assert (call.name, call.status) == ("crm__getCustomer", "succeeded")
    assert call.result is not None and '"Ada"' in call.result
    # The configured credential is sent; a turn has no client header to forward.
    assert seen[-1]["authorization"] == f"Bearer {SECRET}"
    [row] = await ph.query.list_gateway_calls(conversation_uuid=turn.conversation_uuid)
    assert (row.via, row.call_id, row.status_code, row.outcome) == ("turn", "call_gw1", 200, "ok")
    assert (row.face, row.key_prefix, row.key_name) == ("rest", "abcd1234", "ops key")
    no_secret_in(await rows(server_state))


async def test_a_gateway_rows_policy_governs_its_operations_in_a_turn(
    server_state: ServerState, scripted: ScriptedModel, service: tuple[str, list[dict[str, str]]]
) -> None:
    url, seen = service
    await add_gateway(server_state, url, policy="authorized")
    ph = server_state.pilothouse
    await ph.catalog.create(
        "actions",
        {
            "code": "CUSTOMER",
            "name": "Customer lookup",
            "model": "SCRIPTEDM",
            "configuration": "DFLT",
            "prompt": "Look customers up.",
            "tools": ["CRM"],
        },
    )
    scripted.script.steps.extend(
        [ToolCall("crm__getCustomer", {"id": "42"}), Reply("I may not look.")]
    )
    turn = await ph.command.start_and_send("Who is 42?", action="CUSTOMER")
    transcript = await ph.query.get_transcript(turn.conversation_uuid)
    assert [c.status for c in transcript.tool_calls] == ["denied"]
    # Denied before the proxy: nothing sent, nothing proxied to audit.
    assert seen == [] and await rows(server_state) == []


async def test_a_skills_write_link_to_a_gateway_needs_the_authorizer_in_a_turn(
    server_state: ServerState, scripted: ScriptedModel, service: tuple[str, list[dict[str, str]]]
) -> None:
    url, seen = service
    await add_gateway(server_state, url)
    ph = server_state.pilothouse
    await ph.catalog.create(
        "skills",
        {
            "code": "CRMW",
            "name": "CRM writer",
            "description": "Works on the CRM.",
            "prompt": "Use the CRM.",
            "tools": [{"tool": "CRM", "access": "write"}],
        },
    )
    await ph.catalog.create(
        "actions",
        {
            "code": "CUSTOMER",
            "name": "Customer lookup",
            "model": "SCRIPTEDM",
            "configuration": "DFLT",
            "prompt": "Look customers up.",
            "skills": ["CRMW"],
            "progressive_disclosure": True,
        },
    )
    scripted.script.steps.extend(
        [
            ToolCall("use_skill", {"skill": "CRMW"}),
            ToolCall("crm__getCustomer", {"id": "42"}),
            Reply("Not allowed."),
        ]
    )
    turn = await ph.command.start_and_send("Who is 42?", action="CUSTOMER")
    transcript = await ph.query.get_transcript(turn.conversation_uuid)
    statuses = {c.name: c.status for c in transcript.tool_calls}
    assert statuses == {"use_skill": "succeeded", "crm__getCustomer": "denied"}
    assert seen == [] and await rows(server_state) == []
