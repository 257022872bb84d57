"""Configured headers reach the server over streamable HTTP and SSE (loopback uvicorn)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest
import uvicorn
from mcp_servers import build_server

from pilothouse.catalog._enums import McpTransport
from pilothouse.mcp import McpClientConfig, McpClientPool
from pilothouse.tools import ToolContext

pytestmark = pytest.mark.anyio

CONTEXT = ToolContext(tenant="t", conversation_uuid="c", call_id="call-1", timeout=5)
App = Callable[..., Any]


def recording(app: App, seen: list[dict[str, str]]) -> App:
    async def wrapper(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await app(scope, receive, send)

    return wrapper


@pytest.fixture(params=["streamable", "sse"])
async def http_server(
    request: pytest.FixtureRequest,
) -> AsyncIterator[tuple[McpTransport, str, list[dict[str, str]]]]:
    server = build_server()
    seen: list[dict[str, str]] = []
    if request.param == "sse":
        app, transport, path = server.sse_app(), McpTransport.SSE, "/sse"
    else:
        app, transport, path = server.streamable_http_app(), McpTransport.STREAMABLE_HTTP, "/mcp"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = uvicorn.Config(recording(app, seen), host="127.0.0.1", port=port, log_level="warning")
    web = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(web.serve)
        with anyio.fail_after(5):
            while not web.started:
                await anyio.sleep(0.01)
        yield transport, f"http://127.0.0.1:{port}{path}", seen
        web.should_exit = True


async def test_configured_headers_are_sent(
    http_server: tuple[McpTransport, str, list[dict[str, str]]],
) -> None:
    transport, url, seen = http_server
    config = McpClientConfig(
        name="demo",
        transport=transport,
        url=url,
        headers={"Authorization": "Bearer t0ken", "X-Team": "sales"},
        confidential_headers=frozenset({"Authorization"}),
    )
    async with McpClientPool(connect_timeout=5) as pool:
        echo = await pool.tool(config, "echo")
        assert (await echo.execute({"message": "hi"}, CONTEXT)).content == "Echo: hi"
    assert seen
    assert all(h.get("authorization") == "Bearer t0ken" for h in seen)
    assert all(h.get("x-team") == "sales" for h in seen)
