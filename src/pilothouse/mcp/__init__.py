"""MCP client side: shared sessions to MCP servers and their tools.

An MCP client in the catalog becomes a :class:`McpClientConfig` (secrets
resolved); :class:`McpClientPool` opens one session per config on first use
and offers the server's tools as :class:`~pilothouse.tools.ExecutableTool`
objects of kind ``mcp``. :class:`InMemoryMcpServer` serves an in-process
server to the pool, for tests.

Each name is imported on first use: the MCP SDK loads only when a pool,
a transport or a tool is needed, and its server side only for
:class:`InMemoryMcpServer`.
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

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pilothouse.mcp._config import McpClientConfig
    from pilothouse.mcp._memory import InMemoryMcpServer, in_memory_transports
    from pilothouse.mcp._pool import McpClientPool, McpUnavailableError
    from pilothouse.mcp._tool import McpTool
    from pilothouse.mcp._transports import TransportFactory

_LAZY: dict[str, tuple[str, ...]] = {
    "_config": ("McpClientConfig",),
    "_memory": ("InMemoryMcpServer", "in_memory_transports"),
    "_pool": ("McpClientPool", "McpUnavailableError"),
    "_tool": ("McpTool",),
    "_transports": ("TransportFactory",),
}
"""The names imported on first use, by the private module that defines them."""

_MODULE_OF = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
