"""MCP client side: shared sessions to MCP servers and their tools.

An MCP client in the catalog becomes a :class:`McpClientConfig` (secrets
resolved); :class:`McpClientPool` opens one session per config on first use
and offers the server's tools as :class:`~pilothouse.tools.ExecutableTool`
objects of kind ``mcp``. :class:`InMemoryMcpServer` serves an in-process
server to the pool, for tests.
"""

from __future__ import annotations

__all__ = [
    "InMemoryMcpServer",
    "McpClientConfig",
    "McpClientPool",
    "McpTool",
    "McpUnavailableError",
    "TransportFactory",
    "in_memory_transports",
]

from pilothouse.mcp._config import McpClientConfig
from pilothouse.mcp._memory import InMemoryMcpServer, in_memory_transports
from pilothouse.mcp._pool import McpClientPool, McpUnavailableError
from pilothouse.mcp._tool import McpTool
from pilothouse.mcp._transports import TransportFactory
