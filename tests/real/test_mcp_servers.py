"""The MCP client pool against real servers: mcp-server-time and server-everything.

server-everything runs over all three transports (stdio, SSE, streamable
HTTP); the crash tests kill its process between two calls.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import time
from pathlib import Path

import anyio
import pytest
from mcp_fixtures import HttpServer, child_pids, everything_http, everything_js, node

from pilothouse.catalog._enums import McpTransport
from pilothouse.mcp import McpClientConfig, McpClientPool, McpUnavailableError
from pilothouse.tools import ToolContext

__all__ = ["everything_http", "everything_js", "node"]  # fixtures, used by name

pytestmark = [pytest.mark.real, pytest.mark.anyio]

CONTEXT = ToolContext(tenant="t", conversation_uuid="c", call_id="call-1", timeout=20)


def stdio_everything(node: str, script: Path, **env: str) -> McpClientConfig:
    return McpClientConfig(
        name="everything",
        transport=McpTransport.STDIO,
        command=node,
        args=(str(script), "stdio"),
        env=env,
    )


def _state(pid: int) -> str | None:
    """The process's state letter, or None once it is reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        # Reaped between two looks: the file goes, or reading it fails with
        # ESRCH when the process goes while it is open (seen in CI).
        return None
    return stat.rsplit(")", 1)[1].split()[0]


async def wait_dead(pid: int) -> None:
    # Dead means reaped by the transport, or a zombie waiting to be.
    with anyio.fail_after(10):
        while _state(pid) not in (None, "Z"):
            await anyio.sleep(0.02)


async def test_mcp_server_time_over_stdio() -> None:
    if importlib.util.find_spec("mcp_server_time") is None:
        print("skipping: mcp-server-time is not installed (pip install mcp-server-time)")
        pytest.skip("mcp-server-time is not installed")
    config = McpClientConfig(
        name="time",
        transport=McpTransport.STDIO,
        command="python",
        args=("-m", "mcp_server_time", "--local-timezone", "UTC"),
    )
    async with McpClientPool() as pool:
        tools = await pool.tools(config)
        assert {"get_current_time", "convert_time"} <= {t.definition.name for t in tools}
        get_time = await pool.tool(config, "get_current_time")
        assert "timezone" in get_time.definition.parameters["properties"]
        result = await get_time.execute({"timezone": "UTC"}, CONTEXT)
    assert result.is_error is False, result.content
    assert "UTC" in result.content
    assert str(time.gmtime().tm_year) in result.content


async def test_everything_over_stdio(node: str, everything_js: Path) -> None:
    async with McpClientPool() as pool:
        config = stdio_everything(node, everything_js)
        names = {t.definition.name for t in await pool.tools(config)}
        assert {"echo", "get-sum", "get-tiny-image"} <= names
        echo = await pool.tool(config, "echo")
        assert (await echo.execute({"message": "hi"}, CONTEXT)).content == "Echo: hi"
        total = await (await pool.tool(config, "get-sum")).execute({"a": 2, "b": 3}, CONTEXT)
        assert "5" in total.content
        image = await (await pool.tool(config, "get-tiny-image")).execute({}, CONTEXT)
        assert "[image: image/png" in image.content
        assert pool.opened == 1


async def test_stdio_servers_get_a_minimal_environment(
    node: str, everything_js: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PILOTHOUSE_PARENT_SECRET", "must-not-leak")
    async with McpClientPool() as pool:
        config = stdio_everything(node, everything_js, CONFIGURED="yes")
        result = await (await pool.tool(config, "get-env")).execute({}, CONTEXT)
    assert '"CONFIGURED": "yes"' in result.content
    assert "PILOTHOUSE_PARENT_SECRET" not in result.content
    assert "must-not-leak" not in result.content


@pytest.mark.parametrize("everything_http", ["sse", "streamableHttp"], indirect=True)
async def test_everything_over_http(everything_http: HttpServer) -> None:
    transport = (
        McpTransport.SSE if everything_http.url.endswith("/sse") else (McpTransport.STREAMABLE_HTTP)
    )
    config = McpClientConfig(
        name="everything",
        transport=transport,
        url=everything_http.url,
        headers={"Authorization": "Bearer not-checked"},
        confidential_headers=frozenset({"Authorization"}),
    )
    async with McpClientPool() as pool:
        assert "echo" in {t.definition.name for t in await pool.tools(config)}
        echo = await pool.tool(config, "echo")
        assert (await echo.execute({"message": "over http"}, CONTEXT)).content == (
            "Echo: over http"
        )
        total = await (await pool.tool(config, "get-sum")).execute({"a": 1.5, "b": 2}, CONTEXT)
        assert "3.5" in total.content


async def test_a_killed_stdio_server_is_restarted_for_the_next_call(
    node: str, everything_js: Path
) -> None:
    async with McpClientPool() as pool:
        config = stdio_everything(node, everything_js)
        echo = await pool.tool(config, "echo")
        assert (await echo.execute({"message": "one"}, CONTEXT)).content == "Echo: one"
        [pid] = child_pids(str(everything_js))
        os.kill(pid, signal.SIGKILL)
        await wait_dead(pid)
        result = await echo.execute({"message": "two"}, CONTEXT)
        assert result.is_error is False, result.content
        assert result.content == "Echo: two"
        assert pool.opened == 2
        assert child_pids(str(everything_js)) != [pid]
    # aclose stopped the restarted server too.
    assert [p for p in child_pids(str(everything_js)) if Path(f"/proc/{p}").exists()] == []


@pytest.mark.parametrize("everything_http", ["streamableHttp", "sse"], indirect=True)
async def test_a_server_that_exits_gives_an_unavailable_result(
    everything_http: HttpServer,
) -> None:
    transport = (
        McpTransport.SSE if everything_http.url.endswith("/sse") else (McpTransport.STREAMABLE_HTTP)
    )
    config = McpClientConfig(name="everything", transport=transport, url=everything_http.url)
    async with McpClientPool(connect_timeout=5) as pool:
        echo = await pool.tool(config, "echo")
        assert (await echo.execute({"message": "up"}, CONTEXT)).content == "Echo: up"
        everything_http.stop()
        with anyio.fail_after(15):
            result = await echo.execute({"message": "down"}, CONTEXT)
        assert result.is_error is True
        assert result.error_code == "tool.exec.unavailable"
        assert "everything" in result.content


async def test_a_stdio_server_that_cannot_start_is_unavailable() -> None:
    config = McpClientConfig(
        name="broken", transport=McpTransport.STDIO, command="python", args=("-c", "pass")
    )
    async with McpClientPool(connect_timeout=10) as pool:
        with anyio.fail_after(15):
            result = await pool.call_tool(config, "anything", {}, timeout=5)
            assert result.error_code == "tool.exec.unavailable"
            with pytest.raises(McpUnavailableError, match="mcp client 'broken'"):
                await pool.tools(config)
