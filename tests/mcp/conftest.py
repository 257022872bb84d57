"""Fixtures of the MCP client tests: an in-process server and a pool on it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from mcp_servers import build_server

from pilothouse.mcp import InMemoryMcpServer, McpClientPool, in_memory_transports


@pytest.fixture
def demo_server() -> InMemoryMcpServer:
    return InMemoryMcpServer(build_server())


@pytest.fixture
async def pool(demo_server: InMemoryMcpServer) -> AsyncIterator[McpClientPool]:
    factory = in_memory_transports({"demo": demo_server})
    async with McpClientPool(transport_factory=factory, connect_timeout=5) as pool:
        yield pool
