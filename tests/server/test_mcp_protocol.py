"""Protocol details of the MCP server, tried with the official ``mcp`` client on loopback.

The handshake advertises the list changes the server sends; a body that is
not one JSON-RPC message is -32600 in plain words; an oversize call is a
413 the client reports; a key's sessions are bounded and their idle time
is a setting.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from fastapi import FastAPI
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from server_helpers import serve_on_loopback

from pilothouse.server._state import ServerSettings, ServerState

pytestmark = pytest.mark.anyio

LEGACY = "2025-11-25"
MODERN = "2026-07-28"


@pytest.fixture
def server_config() -> ServerSettings:
    return ServerSettings(host="127.0.0.1", shutdown_grace_seconds=2.0)


@pytest.fixture
async def base_url(app: FastAPI) -> AsyncIterator[str]:
    async with serve_on_loopback(app) as url:
        yield url


@asynccontextmanager
async def connect(base_url: str, key: str, *, transport: str = "http") -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"}
    if transport == "sse":
        async with Client(sse_client(f"{base_url}/sse", headers=headers), mode="legacy") as client:
            yield client
        return
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        opened = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(opened, mode="legacy") as client:
            yield client


@pytest.mark.parametrize("transport", ["http", "sse"])
async def test_the_handshake_advertises_the_list_changes_it_sends(
    base_url: str, api_key: str, transport: str
) -> None:
    async with connect(base_url, api_key, transport=transport) as client:
        capabilities = client.server_capabilities
    assert capabilities.tools is not None and capabilities.tools.list_changed is True
    assert capabilities.prompts is not None and capabilities.prompts.list_changed is True


def rpc_headers(key: str, version: str | None = LEGACY) -> dict[str, str]:
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
    }
    if version is not None:
        headers["MCP-Protocol-Version"] = version
    return headers


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"jsonrpc": "2.0", "id": 7, "method": 5}, "method must be a string"),
        ({"jsonrpc": "1.0", "id": 7, "method": "tools/list"}, 'jsonrpc must be "2.0"'),
        ({"jsonrpc": "2.0", "id": 7}, "method is required"),
        ([{"jsonrpc": "2.0", "id": 7, "method": "tools/list"}], "one JSON-RPC message"),
        ({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": [1]}, "params must be"),
    ],
)
async def test_a_bad_envelope_is_invalid_request_in_plain_words(
    base_url: str, api_key: str, body: Any, words: str
) -> None:
    async with httpx.AsyncClient(base_url=base_url) as http:
        answer = await http.post("/mcp", json=body, headers=rpc_headers(api_key, None))
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == -32600, error
    assert words in error["message"]
    assert "validation error" not in error["message"].lower()
    assert "pydantic" not in answer.text


async def test_a_body_that_is_not_json_is_a_parse_error_without_parser_text(
    base_url: str, api_key: str
) -> None:
    async with httpx.AsyncClient(base_url=base_url) as http:
        answer = await http.post("/mcp", content=b"{nope", headers=rpc_headers(api_key, None))
    assert answer.status_code == 400
    assert answer.json()["error"] == {
        "code": -32700,
        "message": "Parse error: the body is not JSON",
    }


async def test_an_oversize_call_is_a_413_the_client_reports(base_url: str, api_key: str) -> None:
    big = "x" * (5 * 1024 * 1024)
    async with connect(base_url, api_key) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("action_ECHO", {"message": big})
        # The session survives: the next call is answered.
        listed = await client.list_tools()
    assert "413" in str(refused.value) and "exceeds the limit" in str(refused.value)
    assert listed.tools


@pytest.mark.parametrize(
    "server_config",
    [ServerSettings(host="127.0.0.1", mcp_max_sessions_per_key=2, mcp_session_idle_seconds=60)],
)
async def test_a_key_holds_at_most_its_sessions(
    base_url: str, api_key: str, server_state: ServerState
) -> None:
    other, _ = await server_state.pilothouse.keys.create(name="other")
    async with connect(base_url, api_key), connect(base_url, api_key):
        with pytest.raises(Exception) as refused:
            async with connect(base_url, api_key):
                pass
        # Another key is not held back by this one's sessions.
        async with connect(base_url, other) as client:
            assert (await client.list_tools()).tools
    assert "open MCP sessions" in repr(refused.value) or "429" in repr(refused.value)
    # Closed sessions free their places.
    async with connect(base_url, api_key) as client:
        assert (await client.list_tools()).tools
    assert server_state.server.mcp_session_idle_seconds == 60


def test_the_idle_time_and_the_bound_are_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PILOTHOUSE_SERVER_MCP_SESSION_IDLE_SECONDS", "120")
    monkeypatch.setenv("PILOTHOUSE_SERVER_MCP_MAX_SESSIONS_PER_KEY", "5")
    settings = ServerSettings()
    assert (settings.mcp_session_idle_seconds, settings.mcp_max_sessions_per_key) == (120, 5)
    monkeypatch.setenv("PILOTHOUSE_SERVER_MCP_MAX_SESSIONS_PER_KEY", "0")
    with pytest.raises(ValidationError, match="mcp_max_sessions_per_key"):
        ServerSettings()
