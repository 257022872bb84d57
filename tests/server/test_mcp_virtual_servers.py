"""Virtual MCP servers: a tenant's catalog bundles served at ``/mcp/<code>``.

Written over REST like any catalog kind (members checked when written),
tried with the official ``mcp`` client on loopback: the bundle lists and
calls only its members, another tenant's bundle reads as unknown, and the
operator setting that predates the kind is refused with what to write.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp_types as mt
import pytest
from fastapi import FastAPI
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pydantic import ValidationError
from server_helpers import auth, serve_on_loopback

from pilothouse.server._state import ServerSettings

pytestmark = pytest.mark.anyio

DESK = {
    "code": "DESK",
    "name": "Echo desk",
    "actions": ["ECHO"],
    "builtins": ["pilothouse_answer", "pilothouse_memory_search"],
}


@pytest.fixture
async def base_url(app: FastAPI) -> AsyncIterator[str]:
    async with serve_on_loopback(app) as url:
        yield url


@asynccontextmanager
async def connect(
    url: str, key: str, mode: str = "legacy", **options: Any
) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        opened = streamable_http_client(url, http_client=http)
        async with Client(opened, mode=mode, **options) as client:
            yield client


async def _write(base_url: str, key: str, body: dict[str, object]) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=30) as http:
        return await http.post(
            f"{base_url}/v1/catalog/virtual_servers", json=body, headers=auth(key)
        )


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_virtual_server_serves_only_its_members(
    base_url: str, admin_key: str, api_key: str, mode: str
) -> None:
    written = await _write(base_url, admin_key, DESK)
    assert written.status_code == 201, written.text
    async with connect(f"{base_url}/mcp/DESK", api_key, mode) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        outside = await client.call_tool("action_SUMBRAND", {"message": "hi", "document": "d"})
        answered = await client.call_tool(
            "pilothouse_memory_search", {"scope": "user", "user_id": "u1", "query": "tea"}
        )
    assert names == {"action_ECHO", "pilothouse_answer", "pilothouse_memory_search"}
    assert outside.is_error and "unknown tool 'action_SUMBRAND'" in str(outside.content)
    assert not answered.is_error, answered.content
    # The whole server is still at /mcp.
    async with connect(f"{base_url}/mcp", api_key, mode) as client:
        everything = {tool.name for tool in (await client.list_tools()).tools}
    assert {"action_ECHO", "action_SUMBRAND", "pilothouse_memory_add"} <= everything


async def test_a_change_to_the_bundle_applies_to_the_next_request(
    base_url: str, admin_key: str, api_key: str
) -> None:
    assert (await _write(base_url, admin_key, DESK)).status_code == 201
    told = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mt.ToolListChangedNotification):
            told.set()

    async with connect(f"{base_url}/mcp/DESK", api_key, message_handler=on_message) as client:
        before = {tool.name for tool in (await client.list_tools()).tools}
        async with httpx2.AsyncClient(timeout=30) as http:
            changed = await http.put(
                f"{base_url}/v1/catalog/virtual_servers/DESK",
                json={**DESK, "actions": ["ECHO", "SUMBRAND"], "version": 1},
                headers=auth(admin_key),
            )
        assert changed.status_code == 200, changed.text
        after = {tool.name for tool in (await client.list_tools()).tools}
        # The session at the virtual server's path is told, like one at /mcp.
        with anyio.fail_after(20):
            await told.wait()
    assert after - before == {"action_SUMBRAND"}


async def test_unknown_members_are_refused_when_written_naming_each(
    base_url: str, admin_key: str
) -> None:
    body = {
        "code": "BAD",
        "actions": ["ECHO", "NOSUCH"],
        "tools": ["NOTOOL"],
        "operations": ["NOGW:getPet"],
    }
    refused = await _write(base_url, admin_key, body)
    assert refused.status_code == 422, refused.text
    text = refused.text
    for named in ("unknown action 'NOSUCH'", "unknown tool 'NOTOOL'", "unknown tool 'NOGW'"):
        assert named in text, text
    builtin = await _write(base_url, admin_key, {**DESK, "builtins": ["pilothouse_everything"]})
    assert builtin.status_code == 422 and "pilothouse_everything" in builtin.text, builtin.text
    empty = await _write(base_url, admin_key, {"code": "EMPTY"})
    assert empty.status_code == 422 and "at least one action" in empty.text, empty.text


async def test_a_member_cannot_be_deleted_while_a_bundle_names_it(
    base_url: str, admin_key: str
) -> None:
    assert (await _write(base_url, admin_key, DESK)).status_code == 201
    async with httpx2.AsyncClient(timeout=30) as http:
        gone = await http.delete(f"{base_url}/v1/catalog/actions/ECHO", headers=auth(admin_key))
    assert gone.status_code == 409 and "virtual server 'DESK'" in gone.text, gone.text


async def test_another_tenants_virtual_server_reads_as_unknown(
    base_url: str, admin_key: str, other_tenant_key: str
) -> None:
    assert (await _write(base_url, admin_key, DESK)).status_code == 201
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {
        **auth(other_tenant_key),
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    async with httpx2.AsyncClient(timeout=30) as http:
        theirs = await http.post(f"{base_url}/mcp/DESK", json=body, headers=headers)
        nothing = await http.post(f"{base_url}/mcp/NOSUCH", json=body, headers=headers)
    assert theirs.status_code == 404, theirs.text
    assert "no virtual MCP server 'DESK'" in theirs.text
    assert nothing.status_code == 404


async def test_an_inactive_virtual_server_is_not_served(
    base_url: str, admin_key: str, api_key: str
) -> None:
    assert (await _write(base_url, admin_key, {**DESK, "active": False})).status_code == 201
    async with httpx2.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{base_url}/mcp/DESK",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            headers={**auth(api_key), "Accept": "application/json, text/event-stream"},
        )
    assert response.status_code == 404, response.text


def test_the_operator_setting_is_refused_with_what_to_write() -> None:
    with pytest.raises(ValidationError, match="write each bundle as a virtual_servers entry"):
        ServerSettings(mcp_servers={"sales": ["action_*"]})
