"""An in-memory MCP transport for tests: a server in the same process.

:class:`InMemoryMcpServer` serves an ``MCPServer`` (or a low-level
``Server``) to :class:`~pilothouse.mcp.McpClientPool` over memory streams,
with no process or socket, and can end every live connection from the server
side (:meth:`InMemoryMcpServer.crash`), as a server that crashed would.
"""

from __future__ import annotations

__all__ = ["InMemoryMcpServer", "in_memory_transports"]

from collections.abc import AsyncGenerator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
from mcp.client._transport import TransportStreams
from mcp.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.shared.memory import create_client_server_memory_streams

from pilothouse.mcp._config import McpClientConfig
from pilothouse.mcp._transports import TransportFactory

_SHUTDOWN_GRACE = 2.0


class InMemoryMcpServer:
    """Serves one MCP server in-process; every transport is a new connection.

    Args:
        server: the server to serve, e.g. an ``MCPServer`` with tools.
    """

    def __init__(self, server: MCPServer | Server[Any]) -> None:
        if isinstance(server, MCPServer):
            # The high-level server wraps the low-level one that runs a
            # connection over streams; the SDK's own in-memory transport
            # reaches it the same way.
            self._server: Server[Any] = server._lowlevel_server  # pyright: ignore[reportPrivateUsage]
        else:
            self._server = server
        self._live: set[anyio.CancelScope] = set()
        self.connections = 0
        """How many connections were opened so far."""

    @property
    def live(self) -> int:
        """How many connections are open now."""
        return len(self._live)

    def transport(self) -> AbstractAsyncContextManager[TransportStreams]:
        """Open a new connection to the server.

        Returns:
            An async context manager yielding the client's read and write
            streams; leaving it stops the server side of the connection.
        """
        return self._connect()

    def factory(self) -> TransportFactory:
        """A transport factory for the pool that ignores the config and connects here."""
        return lambda _config: self.transport()

    async def crash(self) -> None:
        """End every live connection from the server side, like a server exit."""
        crashed = set(self._live)
        for scope in crashed:
            scope.cancel()
        # Let the cancelled servers run their teardown, so the clients see
        # the end of their streams before the caller goes on. Only those:
        # a client may already be reconnecting.
        with anyio.move_on_after(_SHUTDOWN_GRACE):
            while crashed & self._live:
                await anyio.sleep(0.005)

    @asynccontextmanager
    async def _connect(self) -> AsyncGenerator[TransportStreams, None]:
        self.connections += 1
        async with create_client_server_memory_streams() as (client_streams, server_streams):
            client_read, client_write = client_streams
            server_read, server_write = server_streams
            done = anyio.Event()
            scope = anyio.CancelScope()

            async def serve() -> None:
                self._live.add(scope)
                try:
                    with scope:
                        await self._server.run(
                            server_read, server_write, self._server.create_initialization_options()
                        )
                finally:
                    self._live.discard(scope)
                    # Closing the server's ends is what the client notices:
                    # its reads end and its writes fail, as with a dead pipe.
                    await server_write.aclose()
                    await server_read.aclose()
                    done.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(serve)
                try:
                    yield client_read, client_write
                finally:
                    # End of input lets a healthy server leave on its own; a
                    # stuck one is cancelled after a grace period.
                    await client_write.aclose()
                    with anyio.move_on_after(_SHUTDOWN_GRACE):
                        await done.wait()
                    scope.cancel()


def in_memory_transports(servers: Mapping[str, InMemoryMcpServer]) -> TransportFactory:
    """A transport factory that connects each client name to its in-memory server.

    Args:
        servers: the server of each MCP client name.

    Returns:
        A factory for :class:`~pilothouse.mcp.McpClientPool`; a name without a
        server raises ``LookupError``, which the pool reports as unavailable.
    """

    def open_transport(config: McpClientConfig) -> AbstractAsyncContextManager[TransportStreams]:
        server = servers.get(config.name)
        if server is None:
            raise LookupError(f"no in-memory MCP server named '{config.name}'")
        return server.transport()

    return open_transport
