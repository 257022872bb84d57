"""Catalog tools offered directly over MCP: governed like a turn's call, recorded like one.

The official ``mcp`` client over real loopback HTTP (the app under uvicorn in
this process). A catalog tool ``add`` (a Python function) is the MCP tool
``tool_add``; each call runs through ``ph.command.call_tool`` and is a
conversation of its own (action code ``TOOLCALL``) with the tool call row.
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
from sqlalchemy import func, select

from pilothouse.errors import InvalidFieldError, NotFoundError
from pilothouse.server._state import ServerState
from pilothouse.settings import Settings
from pilothouse.store import Conversation

pytestmark = pytest.mark.anyio

ADD = {
    "code": "ADD",
    "name": "add",
    "kind": "python",
    "implementation": "mcp_tool_helpers:add",
    "description": "Add two numbers.",
}


@pytest.fixture
def server_settings(server_settings: Settings) -> Settings:
    # The operator grants the helper module's functions to tenants' catalogs.
    return server_settings.model_copy(update={"catalog_code": ["mcp_tool_helpers"]})


@pytest.fixture
async def base_url(app: FastAPI) -> AsyncIterator[str]:
    async with serve_on_loopback(app) as url:
        yield url


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


async def conversations(state: ServerState) -> int:
    database = state.pilothouse.settings.open_database()
    try:
        async with database.sessions() as session:
            return int(await session.scalar(select(func.count()).select_from(Conversation)) or 0)
    finally:
        await database.dispose()


async def add_tool(state: ServerState, **extra: Any) -> None:
    await state.pilothouse.catalog.create("tools", {**ADD, **extra})


async def test_a_catalog_tool_is_an_mcp_tool_and_each_call_a_recorded_conversation(
    base_url: str, api_key: str, server_state: ServerState
) -> None:
    await add_tool(server_state)
    async with connect(base_url, api_key) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        result = await client.call_tool("tool_add", {"a": 2, "b": 3})
    offered = listed["tool_add"]
    assert offered.description == "Add two numbers."
    # The schema the function's signature gives (the row declares none).
    assert offered.input_schema["required"] == ["a", "b"]
    assert not result.is_error
    assert result.structured_content == {"sum": 5}
    assert result.meta is not None
    uuid = result.meta["pilothouse/conversation_uuid"]
    transcript = await server_state.pilothouse.query.get_transcript(uuid)
    assert transcript.action_code == "TOOLCALL"
    assert transcript.status == "CO"
    [call] = transcript.tool_calls
    assert (call.name, call.arguments, call.status) == ("add", {"a": 2, "b": 3}, "succeeded")
    assert call.result is not None and json.loads(call.result) == {"sum": 5}
    opening = transcript.messages[0]
    assert opening.data is not None
    # Who called, for the audit: the MCP key (its prefix), not pilothouse's model.
    assert opening.data["direct_call"]["via"] == "mcp"
    assert api_key.startswith(f"ph_{opening.data['direct_call']['key_prefix']}_")
    assert "ai" not in opening.data
    [executed] = [e for e in transcript.timeline if e.kind == "tool_execution"]
    assert executed.data["tool"] == "add" and executed.data["status"] == "succeeded"
    assert [e.data["to"] for e in transcript.timeline if e.kind == "status_change"][-1] == "CO"


async def test_an_authorized_tool_without_authorizer_is_denied_and_recorded_failed(
    base_url: str, api_key: str, server_state: ServerState
) -> None:
    await add_tool(server_state, policy="authorized")
    async with connect(base_url, api_key) as client:
        result = await client.call_tool("tool_add", {"a": 1, "b": 1})
    assert result.is_error
    assert "needs an authorizer" in text(result)
    assert result.meta is not None
    transcript = await server_state.pilothouse.query.get_transcript(
        result.meta["pilothouse/conversation_uuid"]
    )
    assert transcript.status == "FA"
    assert [c.status for c in transcript.tool_calls] == ["denied"]


async def test_a_write_link_of_a_skill_makes_the_tool_need_the_authorizer(
    server_state: ServerState,
) -> None:
    ph = server_state.pilothouse
    await add_tool(server_state)
    allowed = await ph.command.call_tool("add", {"a": 1, "b": 2})
    await ph.catalog.create(
        "skills",
        {
            "code": "MATH",
            "name": "Math",
            "prompt": "Do maths.",
            "tools": [{"tool": "ADD", "access": "write"}],
        },
    )
    denied = await ph.command.call_tool("add", {"a": 1, "b": 2})
    assert (allowed.status, allowed.data) == ("succeeded", {"sum": 3})
    assert denied.status == "denied"
    assert denied.error_code == "tool.exec.denied"
    transcript = await ph.query.get_transcript(denied.conversation_uuid)
    assert transcript.error_detail is not None and "authorizer" in transcript.error_detail


async def test_bad_arguments_and_unknown_tools_write_nothing(
    base_url: str, api_key: str, server_state: ServerState
) -> None:
    await add_tool(server_state)
    before = await conversations(server_state)
    async with connect(base_url, api_key) as client:
        bad = await client.call_tool("tool_add", {"a": "two", "b": 3})
        unknown = await client.call_tool("tool_nothing", {})
    assert bad.is_error and "arguments.a" in text(bad)
    assert unknown.is_error and text(unknown) == "unknown tool 'tool_nothing'"
    with pytest.raises(NotFoundError):
        await server_state.pilothouse.command.call_tool("nothing", {})
    with pytest.raises(InvalidFieldError, match="arguments"):
        await server_state.pilothouse.command.call_tool("add", {"a": 1})
    assert await conversations(server_state) == before


async def test_a_key_restricted_to_actions_never_sees_or_calls_catalog_tools(
    base_url: str, server_state: ServerState
) -> None:
    await add_tool(server_state)
    key, _ = await server_state.pilothouse.keys.create(name="actions", mcp_tools=["action_*"])
    async with connect(base_url, key) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        called = await client.call_tool("tool_add", {"a": 1, "b": 2})
    assert names and all(name.startswith("action_") for name in names)
    assert called.is_error and text(called) == "unknown tool 'tool_add'"


async def test_past_max_tools_catalog_tools_are_disclosed_and_run_on_demand(
    server_state: ServerState,
) -> None:
    from pilothouse._facade.mcptools import McpToolbox
    from pilothouse.types import McpCaller

    await add_tool(server_state)
    toolbox = McpToolbox(server_state.pilothouse, max_tools=1)
    caller = McpCaller("default", "abcd1234")
    listed = [tool.name for tool in await toolbox.list_tools(caller)]
    found = await toolbox.call_tool(caller, "pilothouse_find_actions", {"query": "add two numbers"})
    run = await toolbox.call_tool(
        caller, "pilothouse_run_action", {"tool": "tool_add", "arguments": {"a": 4, "b": 5}}
    )
    assert "tool_add" not in listed and "pilothouse_find_actions" in listed
    assert found.structured_content is not None
    assert "tool_add" in [item["tool"] for item in found.structured_content["actions"]]
    assert run.structured_content == {"sum": 9}


async def test_json_rpc_lists_and_calls_a_catalog_tool_recorded_as_its_own_conversation(
    base_url: str, api_key: str, server_state: ServerState
) -> None:
    await add_tool(server_state)

    def rpc(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
        if params is not None:
            body["params"] = params
        return body

    async with httpx2.AsyncClient(
        base_url=base_url, headers={"X-API-Key": api_key}, timeout=30
    ) as http:
        listed = (
            await http.post("/jsonrpc", json=rpc("pilothouse/command/callableTools/v1"))
        ).json()
        called = (
            await http.post(
                "/jsonrpc",
                json=rpc(
                    "pilothouse/command/callTool/v1", {"name": "add", "arguments": {"a": 2, "b": 3}}
                ),
            )
        ).json()
        unknown = (
            await http.post(
                "/jsonrpc", json=rpc("pilothouse/command/callTool/v1", {"name": "nope"})
            )
        ).json()
    assert [tool["name"] for tool in listed["result"]] == ["add"]
    result = called["result"]
    assert (result["tool"], result["status"], result["error_code"]) == ("add", "succeeded", None)
    assert json.loads(result["content"]) == {"sum": 5}
    assert result["conversation_uuid"]
    assert unknown["error"]["code"] == -32001 and "nope" in str(unknown["error"]["data"])
    assert await conversations(server_state) == 1
