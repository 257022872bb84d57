"""Configured headers reach the server over streamable HTTP and SSE (loopback uvicorn)."""

from __future__ import annotations

import json
import socket
import warnings
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import anyio
import anyio.abc
import pytest
import uvicorn
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPDeprecationWarning
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


@asynccontextmanager
async def serving(app: App) -> AsyncIterator[int]:
    """Serve ``app`` with uvicorn on a free loopback port until the block ends; yields the port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    web = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(web.serve)
        with anyio.fail_after(5):
            while not web.started:
                await anyio.sleep(0.01)
        try:
            yield port
        finally:
            web.should_exit = True


def tenant_server(name: str, port: int) -> McpClientConfig:
    """A tenant's streamable HTTP server on ``port``, reached under the egress policy."""
    from pilothouse.providers._egress import EgressPolicy

    return McpClientConfig(
        name=name,
        transport=McpTransport.STREAMABLE_HTTP,
        url=f"http://127.0.0.1:{port}/mcp",
        egress=EgressPolicy.parse(["127.0.0.1"]),
    )


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
    async with serving(recording(app, seen)) as port:
        yield transport, f"http://127.0.0.1:{port}{path}", seen


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


async def test_a_proxy_in_the_environment_does_not_carry_a_refused_address_past_the_policy(
    http_server: tuple[McpTransport, str, list[dict[str, str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With HTTP(S)_PROXY set, a loopback MCP URL is still refused, and the proxy never hears of it.

    The proxy here is a listener that counts connections; a real one in
    front of the service would fetch the loopback URL on the service's
    behalf.
    """
    from pilothouse.mcp import McpUnavailableError
    from pilothouse.providers._egress import EgressPolicy

    transport, url, seen = http_server
    proxied: list[bytes] = []
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    proxy_port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def proxy(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            proxied.append(await stream.receive())

    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{proxy_port}")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    config = McpClientConfig(name="demo", transport=transport, url=url, egress=EgressPolicy())
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, proxy)
        async with McpClientPool(connect_timeout=5) as pool:
            with pytest.raises(McpUnavailableError, match="egress refused"):
                await pool.tool(config, "echo")
        assert seen == []
        # Where the operator allows the address, the client connects to it directly.
        allowed = replace(config, egress=EgressPolicy.parse(["127.0.0.1"]))
        async with McpClientPool(connect_timeout=5) as pool:
            echo = await pool.tool(allowed, "echo")
            assert (await echo.execute({"message": "hi"}, CONTEXT)).content == "Echo: hi"
        tg.cancel_scope.cancel()
    assert proxied == []
    assert seen


async def test_an_answer_past_the_bound_is_not_read_whole(caplog: pytest.LogCaptureFixture) -> None:
    """A tenant's server answering without end cannot fill the process's memory.

    Over streamable HTTP a result comes as one JSON body, which the SDK reads
    whole before pilothouse sees it; 40 MiB of it ends the session instead.
    """
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("big")

    @server.tool()
    def dump(mib: int) -> str:
        """Some mebibytes of text."""
        return "x" * (mib * 1024 * 1024)

    app = server.streamable_http_app()
    context = ToolContext(tenant="t", conversation_uuid="c", call_id="call-1", timeout=30)
    async with serving(app) as port:
        config = tenant_server("big", port)
        async with McpClientPool(connect_timeout=5) as pool:
            tool = await pool.tool(config, "dump")
            huge = await tool.execute({"mib": 40}, context)
            assert huge.is_error, huge.content[-200:]
            assert huge.error_code == "tool.exec.unavailable"
            assert "answered more than 16777216 bytes" in caplog.text
            # The server answers within the bound again: a new session serves it.
            small = await tool.execute({"mib": 1}, context)
            assert small.is_error is False
            assert small.content.startswith("x" * 1000)


def handshake_only(app: App, gets: anyio.Event) -> App:
    """The server as a pre-2026 one: it refuses ``server/discover``, so the client shakes hands.

    Only a handshake session has the long-lived ``GET`` stream of
    notifications; ``gets`` is set when the client has opened it.
    """

    async def wrapper(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            if scope["type"] == "http" and scope["method"] == "GET":
                gets.set()
            await app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        sent = json.loads(body) if body else None
        if isinstance(sent, dict) and sent.get("method") == "server/discover":
            refusal = {
                "jsonrpc": "2.0",
                "id": sent.get("id"),
                "error": {"code": -32601, "message": "Method not found"},
            }
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": json.dumps(refusal).encode()})
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, replay, send)

    return wrapper


async def test_notifications_past_the_bound_close_the_session(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A tenant's server sending notifications without end cannot keep the process reading.

    The notifications come on the session's long-lived ``GET`` stream, apart
    from any answer; 20 MiB of them (each event within the SDK's 1 MiB)
    close the session, and the next call gets a new one.
    """
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("chatty")

    @server.tool()
    async def flood(mib: int, ctx: Context) -> str:
        """Log half-mebibyte lines, unasked, on the notification stream."""
        line = "x" * (512 * 1024)
        # The SDK warns that 2026-07-28 replaced logging; this server speaks the handshake era.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            for _ in range(mib * 2):
                await ctx.request_context.session.send_log_message("info", line, logger="flood")
        return "sent"

    @server.tool()
    def echo(message: str) -> str:
        """Say it back."""
        return f"Echo: {message}"

    gets = anyio.Event()
    app = handshake_only(server.streamable_http_app(), gets)
    warning = "sent more than 16777216 bytes of notifications"
    async with serving(app) as port:
        config = tenant_server("chatty", port)
        async with McpClientPool(connect_timeout=5) as pool:
            tool = await pool.tool(config, "flood")
            with anyio.fail_after(5):
                await gets.wait()
            await tool.execute({"mib": 20}, CONTEXT)
            with anyio.fail_after(20):
                while warning not in caplog.text:
                    await anyio.sleep(0.01)
            assert pool.opened == 1
            # The closed session is not used again: the next call opens another.
            again = await pool.tool(config, "echo")
            assert (await again.execute({"message": "hi"}, CONTEXT)).content == "Echo: hi"
            assert pool.opened == 2


async def test_a_stream_ended_at_once_again_and_again_closes_the_session(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A server ending its notification stream at once, with ``retry: 0``, cannot make us spin.

    The SDK opens the stream again as soon as the server's ``retry:`` says,
    and such a stream carries a few bytes only: the openings are bounded per
    session in time, not only the bytes.
    """
    from mcp.server.mcpserver import MCPServer

    from pilothouse.mcp._transports import MAX_STREAM_OPENS

    server = MCPServer("restless")

    @server.tool()
    def echo(message: str) -> str:
        """Say it back."""
        return f"Echo: {message}"

    opened = 0
    unused = anyio.Event()
    inner = handshake_only(server.streamable_http_app(), unused)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal opened
        if scope["type"] == "http" and scope["method"] == "GET":
            opened += 1
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b"retry: 0\n\n"})
            return
        await inner(scope, receive, send)

    warning = f"ended its notification stream {MAX_STREAM_OPENS} times"
    async with serving(app) as port:
        config = tenant_server("restless", port)
        async with McpClientPool(connect_timeout=5) as pool:
            tool = await pool.tool(config, "echo")
            assert (await tool.execute({"message": "one"}, CONTEXT)).content == "Echo: one"
            with anyio.fail_after(10):
                while warning not in caplog.text:
                    await anyio.sleep(0.01)
            # The opening past the bound was refused before it left.
            assert opened == MAX_STREAM_OPENS
            assert pool.opened == 1
            again = await pool.tool(config, "echo")
            assert (await again.execute({"message": "two"}, CONTEXT)).content == "Echo: two"
            assert pool.opened == 2
