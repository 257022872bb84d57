"""The OpenAPI → MCP gateway in front of a real FastAPI service on loopback.

The service and pilothouse both run in this process under uvicorn; the
client is the official ``mcp`` client. Kong's AI MCP proxy changelog is the
list of what must hold: ACL-denied tools are never listed, client headers
are not forwarded unless enabled, trusted-IP headers are stripped, a
malformed ``tools/call`` is rejected (see ``test_mcp_server.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as mt
import pytest
from fastapi import FastAPI, Request
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pydantic import BaseModel
from server_helpers import serve_on_loopback

from database_templates import Seed, SqliteTemplates
from pilothouse.api import Pilothouse
from pilothouse.errors import CatalogValidationError
from pilothouse.server._state import ServerState
from pilothouse.settings import Settings

pytestmark = pytest.mark.anyio


class Order(BaseModel):
    customer: str
    amount: int


def backend() -> tuple[FastAPI, list[dict[str, str]]]:
    app = FastAPI()
    seen: list[dict[str, str]] = []

    @app.get(
        "/customers/{id}",
        summary="Read a customer",
        operation_id="getCustomer",
        openapi_extra={"x-ai-enabled": True},
    )
    async def read_customer(id: str, request: Request) -> dict[str, Any]:
        seen.append(dict(request.headers))
        return {"id": id, "name": "Ada"}

    @app.post("/orders", operation_id="createOrder", description="Place an order.")
    async def create_order(order: Order, request: Request) -> dict[str, Any]:
        seen.append(dict(request.headers))
        return {"customer": order.customer, "amount": order.amount, "status": "placed"}

    @app.delete("/customers/{id}")
    async def delete_customer(id: str) -> None:
        raise AssertionError("not AI-enabled")

    return app, seen


@pytest.fixture(autouse=True)
def crm_token(monkeypatch: pytest.MonkeyPatch) -> None:
    # Read when the app is built (an autouse fixture runs before it).
    monkeypatch.setenv("CRM_TOKEN", "configured")


@pytest.fixture
def server_settings(
    tmp_path: Path, sqlite_templates: SqliteTemplates, database_seed: Seed
) -> Settings:
    url = sqlite_templates.fresh(tmp_path / "server.db", database_seed)
    # The operator grants this module's token exchange hooks to tenants' catalogs.
    return Settings(
        database_url=url,
        secrets_file=None,
        secrets_env={"default": ["CRM_TOKEN"]},
        egress_allow=["127.0.0.1"],
        catalog_code=["test_mcp_gateway", "no_such_module"],
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


def gateway_document(service_url: str, **settings: Any) -> dict[str, Any]:
    block = settings.pop("gateway", {})
    return {
        "code": "CRM",
        "name": "crm",
        "kind": "rest",
        "implementation": f"openapi:{service_url}/openapi.json",
        "settings": {**settings, "gateway": {"include": ["createOrder"], **block}},
    }


async def gateway(state: ServerState, service_url: str, **settings: Any) -> None:
    await state.pilothouse.catalog.create("tools", gateway_document(service_url, **settings))


@asynccontextmanager
async def connect(base_url: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        opened = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(opened, mode="legacy") as client:
            yield client


def text(result: mt.CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, mt.TextContent)
    return first.text


async def test_ai_enabled_and_included_operations_are_tools_and_calls_are_proxied(
    base_url: str,
    api_key: str,
    server_state: ServerState,
    service: tuple[str, list[dict[str, str]]],
) -> None:
    url, seen = service
    await gateway(server_state, url)
    async with connect(base_url, {"X-API-Key": api_key}) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        got = await client.call_tool("crm__getCustomer", {"id": "42"})
        placed = await client.call_tool("crm__createOrder", {"customer": "42", "amount": 3})
    assert "delete_customers_by_id" not in tools
    assert tools["crm__getCustomer"].description == "Read a customer"
    assert tools["crm__getCustomer"].input_schema["required"] == ["id"]
    assert (tools["crm__createOrder"].description or "").endswith("Place an order.")
    assert not got.is_error, text(got)
    assert got.structured_content == {"id": "42", "name": "Ada"}
    assert placed.structured_content == {"customer": "42", "amount": 3, "status": "placed"}
    assert len(seen) == 2


async def test_client_headers_pass_only_when_enabled_and_never_over_a_configured_credential(
    base_url: str,
    api_key: str,
    server_state: ServerState,
    service: tuple[str, list[dict[str, str]]],
) -> None:
    url, seen = service
    await gateway(
        server_state, url, gateway={"forward_authorization": True, "forward_headers": ["x-team"]}
    )
    caller = {
        "X-API-Key": api_key,
        "Authorization": "Bearer user-token",
        "X-Team": "sales",
        "X-Other": "private",
        "X-Forwarded-For": "10.9.9.9",
        "X-Real-IP": "10.9.9.9",
    }
    async with connect(base_url, caller) as client:
        await client.call_tool("crm__getCustomer", {"id": "1"})
    got = seen[-1]
    assert got["authorization"] == "Bearer user-token"
    assert got["x-team"] == "sales"
    assert "x-other" not in got
    assert "x-forwarded-for" not in got and "x-real-ip" not in got
    assert api_key not in str(got)


async def test_a_configured_credential_wins_and_the_pilothouse_key_never_leaks(
    base_url: str,
    api_key: str,
    server_state: ServerState,
    service: tuple[str, list[dict[str, str]]],
) -> None:
    url, seen = service
    await gateway(
        server_state,
        url,
        headers={"Authorization": "Bearer @secrets(CRM_TOKEN)"},
        gateway={"forward_authorization": True},
    )
    async with connect(base_url, {"X-API-Key": api_key, "Authorization": "Bearer user"}) as client:
        await client.call_tool("crm__getCustomer", {"id": "1"})
    assert seen[-1]["authorization"] == "Bearer configured"
    # Authenticated by the bearer token: that token is pilothouse's key,
    # never passed on, even with forwarding on and no configured credential.
    await server_state.pilothouse.catalog.update(
        "tools",
        "CRM",
        {
            "code": "CRM",
            "name": "crm",
            "kind": "rest",
            "implementation": f"openapi:{url}/openapi.json",
            "settings": {"gateway": {"forward_authorization": True}},
        },
        expected_version=1,
    )
    async with connect(base_url, {"Authorization": f"Bearer {api_key}"}) as client:
        await client.call_tool("crm__getCustomer", {"id": "1"})
    assert "authorization" not in seen[-1]


async def test_without_forwarding_no_client_header_passes(
    base_url: str,
    api_key: str,
    server_state: ServerState,
    service: tuple[str, list[dict[str, str]]],
) -> None:
    url, seen = service
    await gateway(server_state, url)
    async with connect(
        base_url, {"X-API-Key": api_key, "Authorization": "Bearer u", "X-Team": "s"}
    ) as client:
        await client.call_tool("crm__getCustomer", {"id": "1"})
    assert "authorization" not in seen[-1] and "x-team" not in seen[-1]


@pytest.mark.parametrize("bad", ["..", ".", "../admin", "a/b", "%2e%2e", "a\\b"])
async def test_path_parameters_that_could_walk_the_path_are_refused(
    base_url: str,
    api_key: str,
    server_state: ServerState,
    service: tuple[str, list[dict[str, str]]],
    bad: str,
) -> None:
    url, seen = service
    await gateway(server_state, url)
    async with connect(base_url, {"X-API-Key": api_key}) as client:
        refused = await client.call_tool("crm__getCustomer", {"id": bad})
    assert refused.is_error and "path parameter" in text(refused)
    assert seen == []


async def test_acl_denied_gateway_tools_are_never_listed_nor_callable(
    base_url: str, server_state: ServerState, service: tuple[str, list[dict[str, str]]]
) -> None:
    url, seen = service
    await gateway(server_state, url)
    key, _ = await server_state.pilothouse.keys.create(name="reads", mcp_tools=["crm__get*"])
    async with connect(base_url, {"X-API-Key": key}) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        denied = await client.call_tool("crm__createOrder", {"customer": "1", "amount": 1})
    assert names == ["crm__getCustomer"]
    assert denied.is_error and seen == []


async def test_each_key_has_a_rate_limit_per_gateway(
    base_url: str,
    api_key: str,
    server_state: ServerState,
    service: tuple[str, list[dict[str, str]]],
) -> None:
    url, _ = service
    await gateway(server_state, url, gateway={"rate_limit_per_minute": 1})
    async with connect(base_url, {"X-API-Key": api_key}) as client:
        first = await client.call_tool("crm__getCustomer", {"id": "1"})
        second = await client.call_tool("crm__getCustomer", {"id": "2"})
    assert not first.is_error
    assert second.is_error and "rate limit of 1 calls a minute" in text(second)


@pytest.mark.parametrize(
    ("block", "field", "message"),
    [
        (
            {"forward_headers": ["X-Forwarded-For"]},
            "settings.gateway.forward_headers",
            "x-forwarded-for cannot be forwarded",
        ),
        ({"colour": "red"}, "settings.gateway.colour", "is not a gateway setting"),
        ({"rate_limit_per_minute": -1}, "settings.gateway.rate_limit_per_minute", "whole number"),
        (
            {"token_exchange": "test_mcp_gateway:exchange", "forward_authorization": True},
            "settings.gateway.token_exchange",
            "a token exchange makes the Authorization header",
        ),
    ],
)
async def test_a_misconfigured_gateway_is_refused_when_written(
    server_state: ServerState,
    service: tuple[str, list[dict[str, str]]],
    block: dict[str, Any],
    field: str,
    message: str,
) -> None:
    url, _ = service
    with pytest.raises(CatalogValidationError) as refused:
        await gateway(server_state, url, gateway=block)
    [issue] = refused.value.issues
    assert (issue.code, issue.field) == ("CRM", field)
    assert message in issue.rule


async def test_a_gateway_naming_code_that_cannot_load_offers_no_tools_and_says_why(
    base_url: str,
    api_key: str,
    server_state: ServerState,
    service: tuple[str, list[dict[str, str]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Granted by the operator, so the write passes; the import fails later.
    url, _ = service
    await gateway(server_state, url, gateway={"token_exchange": "no_such_module:f"})
    async with connect(base_url, {"X-API-Key": api_key}) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
    assert "crm__getCustomer" not in names
    assert "cannot import" in caplog.text


async def test_outside_the_egress_policy_a_gateway_offers_no_tools(
    tmp_path: Path,
    sqlite_templates: SqliteTemplates,
    database_seed: Seed,
    service: tuple[str, list[dict[str, str]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    from pilothouse.server._app import create_app

    url, _ = service
    settings = Settings(
        database_url=sqlite_templates.fresh(tmp_path / "strict.db", database_seed),
        secrets_file=None,
        secrets_env={"default": ["CRM_TOKEN"]},
    )
    state = ServerState(settings)
    app = create_app(settings, state=state)
    key, _ = await state.pilothouse.keys.create(name="k")
    # A tenant's write through the service is refused, naming the field...
    with pytest.raises(CatalogValidationError, match="implementation: 127.0.0.1 is a private"):
        await gateway(state, url)
    # ...and one the operator wrote (the CLI trusts its catalog) is refused when loaded.
    async with Pilothouse(settings) as operator:
        await operator.catalog.create("tools", gateway_document(url))
    async with serve_on_loopback(app) as base, connect(base, {"X-API-Key": key}) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
    assert "crm__getCustomer" not in names
    assert "egress" in caplog.text.lower() or "not allowed" in caplog.text.lower()


def exchange(authorization: str | None, gateway: str, tenant: str) -> str | None:
    """A token exchange: the caller's token for one the backend accepts."""
    if authorization is None:
        return None
    return f"Bearer {gateway}-{tenant}-for-{authorization.split()[-1]}"


def broken_exchange(authorization: str | None, gateway: str, tenant: str) -> str | None:
    raise RuntimeError(f"token endpoint refused {authorization}")


async def test_a_token_exchange_hook_makes_the_backends_authorization(
    base_url: str,
    api_key: str,
    server_state: ServerState,
    service: tuple[str, list[dict[str, str]]],
) -> None:
    url, seen = service
    await gateway(server_state, url, gateway={"token_exchange": "test_mcp_gateway:exchange"})
    async with connect(base_url, {"X-API-Key": api_key, "Authorization": "Bearer u1"}) as client:
        await client.call_tool("crm__getCustomer", {"id": "1"})
    assert seen[-1]["authorization"] == "Bearer CRM-default-for-u1"


async def test_a_failing_token_exchange_sends_nothing(
    base_url: str,
    api_key: str,
    server_state: ServerState,
    service: tuple[str, list[dict[str, str]]],
) -> None:
    url, seen = service
    await gateway(server_state, url, gateway={"token_exchange": "test_mcp_gateway:broken_exchange"})
    async with connect(base_url, {"X-API-Key": api_key, "Authorization": "Bearer u1"}) as client:
        failed = await client.call_tool("crm__getCustomer", {"id": "1"})
    assert failed.is_error and text(failed) == "the token exchange failed; the call was not sent"
    assert seen == []
