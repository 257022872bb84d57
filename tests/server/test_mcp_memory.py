"""Scoped memory as MCP tools, with the official ``mcp`` client over real loopback HTTP.

The same operations and tenant rules as REST's ``/v1/memory`` and JSON-RPC's
``memory.*``: the key's tenant bounds everything, a scope needs its keys, and
a key's tool allow-list hides and refuses the memory tools like any other.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import mcp_types as mt
import pytest
from fastapi import FastAPI
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server_helpers import serve_on_loopback

from pilothouse.server._state import ServerSettings, ServerState

pytestmark = pytest.mark.anyio


@pytest.fixture
def server_config() -> ServerSettings:
    return ServerSettings(host="127.0.0.1", shutdown_grace_seconds=2.0)


@pytest.fixture
async def base_url(app: FastAPI) -> AsyncIterator[str]:
    async with serve_on_loopback(app) as url:
        yield url


@asynccontextmanager
async def connect(base_url: str, key: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        opened = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(opened, mode="legacy") as client:
            yield client


def data(result: mt.CallToolResult) -> Any:
    assert not result.is_error, result.content
    first = result.content[0]
    assert isinstance(first, mt.TextContent)
    return json.loads(first.text)


def error(result: mt.CallToolResult) -> str:
    assert result.is_error
    first = result.content[0]
    assert isinstance(first, mt.TextContent)
    return first.text


ALICE = {"scope": "user", "user_id": "alice"}


async def test_memory_tools_work_in_the_keys_tenant_only(
    base_url: str, api_key: str, other_tenant_key: str
) -> None:
    async with connect(base_url, api_key) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        added = data(
            await client.call_tool(
                "pilothouse_memory_add", {**ALICE, "content": "Alice is allergic to peanuts."}
            )
        )
        memory_id = added["id"]
        found = data(
            await client.call_tool("pilothouse_memory_search", {**ALICE, "query": "food allergy"})
        )
        edited = data(
            await client.call_tool(
                "pilothouse_memory_edit",
                {**ALICE, "memory_id": memory_id, "content": "Alice is allergic to shellfish."},
            )
        )
        versions = data(
            await client.call_tool("pilothouse_memory_versions", {**ALICE, "memory_id": memory_id})
        )
        missing_key = error(await client.call_tool("pilothouse_memory_list", {"scope": "user"}))
        bad_args = error(await client.call_tool("pilothouse_memory_add", {**ALICE}))
    assert {
        "pilothouse_memory_list",
        "pilothouse_memory_get",
        "pilothouse_memory_search",
        "pilothouse_memory_add",
        "pilothouse_memory_edit",
        "pilothouse_memory_forget",
        "pilothouse_memory_versions",
    } <= names
    assert [hit["content"] for hit in found["hits"]] == ["Alice is allergic to peanuts."]
    assert edited["content"] == "Alice is allergic to shellfish."
    assert len(versions["versions"]) == 2
    assert "user_id" in missing_key
    assert "content" in bad_args

    # Another tenant's key reaches none of it: not found, nothing listed.
    async with connect(base_url, other_tenant_key) as client:
        other_get = error(
            await client.call_tool("pilothouse_memory_get", {**ALICE, "memory_id": memory_id})
        )
        other_list = data(await client.call_tool("pilothouse_memory_list", ALICE))
        other_forget = error(
            await client.call_tool("pilothouse_memory_forget", {**ALICE, "memory_id": memory_id})
        )
    assert "not found" in other_get and "not found" in other_forget
    assert other_list == {"items": []}

    async with connect(base_url, api_key) as client:
        # Another scope of the same tenant reads as missing too.
        bob = {"scope": "user", "user_id": "bob", "memory_id": memory_id}
        assert "not found" in error(await client.call_tool("pilothouse_memory_get", bob))
        forgotten = data(
            await client.call_tool("pilothouse_memory_forget", {**ALICE, "memory_id": memory_id})
        )
        after = data(await client.call_tool("pilothouse_memory_list", ALICE))
    assert forgotten == {"forgotten": memory_id}
    assert after == {"items": []}


async def test_a_keys_allow_list_hides_and_refuses_the_memory_tools(
    base_url: str, server_state: ServerState
) -> None:
    key, _ = await server_state.pilothouse.keys.create(
        name="search only", mcp_tools=["pilothouse_memory_search"]
    )
    async with connect(base_url, key) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        denied = await client.call_tool("pilothouse_memory_add", {**ALICE, "content": "x"})
    assert names == ["pilothouse_memory_search"]
    assert error(denied) == "unknown tool 'pilothouse_memory_add'"
