"""Gateway tool namespaces: two backends offering one operation never share a tool name.

Two real FastAPI services on loopback both have ``getPetById``; each gateway
row's tools live in its own namespace (``petstore__getPetById``,
``zoo__getPetById``), a call reaches the backend its name says, and a
second gateway claiming a namespace already taken is refused when written,
through the facade, the HTTP catalog route and ``catalog validate``. The
client is the official ``mcp`` SDK over streamable HTTP.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import mcp_types as mt
import pytest
from fastapi import FastAPI
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server_helpers import serve_on_loopback
from typer.testing import CliRunner

from database_templates import Seed, SqliteTemplates
from pilothouse.cli import app as cli_app
from pilothouse.errors import CatalogValidationError
from pilothouse.server._state import ServerState
from pilothouse.settings import Settings

pytestmark = pytest.mark.anyio


def pets(owner: str) -> FastAPI:
    app = FastAPI()

    @app.get("/pets/{pet_id}", operation_id="getPetById", openapi_extra={"x-ai-enabled": True})
    async def get_pet(pet_id: str) -> dict[str, str]:
        return {"id": pet_id, "owner": owner}

    @app.get("/pet/findByStatus", operation_id="findPetsByStatus")
    async def find(status: str) -> list[dict[str, str]]:
        return [{"status": status, "owner": owner}]

    return app


@pytest.fixture
def server_settings(
    tmp_path: Path, sqlite_templates: SqliteTemplates, database_seed: Seed
) -> Settings:
    url = sqlite_templates.fresh(tmp_path / "server.db", database_seed)
    return Settings(database_url=url, secrets_file=None, egress_allow=["127.0.0.1"])


@pytest.fixture
async def base_url(app: FastAPI) -> AsyncIterator[str]:
    async with serve_on_loopback(app) as url:
        yield url


@pytest.fixture
async def backends() -> AsyncIterator[tuple[str, str]]:
    async with serve_on_loopback(pets("petstore")) as one, serve_on_loopback(pets("zoo")) as two:
        yield one, two


def gateway_row(code: str, name: str, url: str, **block: Any) -> dict[str, Any]:
    return {
        "code": code,
        "name": name,
        "kind": "rest",
        "implementation": f"openapi:{url}/openapi.json",
        "settings": {"gateway": {"include": ["findPetsByStatus"], **block}},
    }


@asynccontextmanager
async def connect(base_url: str, key: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"X-API-Key": key}, timeout=30) as http:
        opened = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(opened, mode="legacy") as client:
            yield client


def text(result: mt.CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, mt.TextContent)
    return first.text


async def test_each_gateway_names_its_tools_in_its_own_namespace(
    base_url: str, api_key: str, server_state: ServerState, backends: tuple[str, str]
) -> None:
    one, two = backends
    catalog = server_state.pilothouse.catalog
    await catalog.create("tools", gateway_row("PETSTORE", "petstore", one))
    await catalog.create("tools", gateway_row("ZOO", "zoo_gw", two, prefix="zoo"))
    async with connect(base_url, api_key) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        from_store = await client.call_tool("petstore__getPetById", {"pet_id": "1"})
        from_zoo = await client.call_tool("zoo__getPetById", {"pet_id": "1"})
        found = await client.call_tool("zoo__findPetsByStatus", {"status": "sold"})
    # Readable ids: the operationId, not the method and path.
    assert {
        "petstore__getPetById",
        "petstore__findPetsByStatus",
        "zoo__getPetById",
        "zoo__findPetsByStatus",
    } <= names
    assert '"owner":"petstore"' in text(from_store).replace(" ", "")
    assert '"owner":"zoo"' in text(from_zoo).replace(" ", "")
    assert not found.is_error and "sold" in text(found)


async def test_a_second_gateway_in_a_taken_namespace_is_refused_when_written(
    base_url: str,
    api_key: str,
    admin_key: str,
    server_state: ServerState,
    backends: tuple[str, str],
) -> None:
    one, two = backends
    catalog = server_state.pilothouse.catalog
    await catalog.create("tools", gateway_row("PETSTORE", "petstore", one))
    with pytest.raises(CatalogValidationError) as refused:
        await catalog.create("tools", gateway_row("ZOO", "zoo", two, prefix="petstore"))
    [issue] = refused.value.issues
    assert (issue.code, issue.field) == ("ZOO", "settings.gateway.prefix")
    assert "taken by gateway 'PETSTORE'" in issue.rule
    # Over HTTP too: 422 naming the field, nothing stored.
    async with httpx.AsyncClient(base_url=base_url, headers={"X-API-Key": admin_key}) as http:
        answer = await http.post(
            "/v1/catalog/tools", json=gateway_row("ZOO", "zoo", two, prefix="petstore")
        )
        # A catalog tool named inside a gateway's namespace is refused too.
        squatter = await http.post(
            "/v1/catalog/tools",
            json={
                "code": "SQUAT",
                "name": "petstore__getPetById",
                "kind": "schema",
                "input_schema": {"type": "object"},
            },
        )
    assert answer.status_code == 422, answer.text
    assert "settings.gateway.prefix" in answer.text
    assert squatter.status_code == 422, squatter.text
    assert "namespace of gateway 'PETSTORE'" in squatter.text
    async with connect(base_url, api_key) as client:
        result = await client.call_tool("petstore__getPetById", {"pet_id": "2"})
    assert '"owner":"petstore"' in text(result).replace(" ", "")


async def test_catalog_validate_names_a_shared_namespace_and_an_unknown_setting(
    tmp_path: Path,
) -> None:
    catalog = tmp_path / "gateways.yaml"
    catalog.write_text(
        "tools:\n"
        "  - code: ONE\n    name: pets\n    kind: rest\n"
        "    implementation: openapi:http://127.0.0.1:9/openapi.json\n"
        "    settings:\n      gateway: {include: [getPetById]}\n"
        "  - code: TWO\n    name: other\n    kind: rest\n"
        "    implementation: openapi:http://127.0.0.1:9/openapi.json\n"
        "    settings:\n      gateway: {prefix: pets, forward_headers: [x-team], colour: red}\n"
    )
    result = await anyio.to_thread.run_sync(
        lambda: CliRunner().invoke(cli_app, ["catalog", "validate", str(catalog)])
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert any("tool 'TWO': settings.gateway.colour: is not a gateway setting" in x for x in lines)
    assert any(
        "tool 'TWO': settings.gateway.prefix: the tool namespace 'pets' is taken" in x
        for x in lines
    ), lines
